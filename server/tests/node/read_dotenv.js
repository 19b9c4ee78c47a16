// Test helper: one JSON request per line on stdin, {"content": "<.env text>"}; one JSON answer
// per line on stdout: {"parse": dotenv.parse(content), "fast": dotenv.parse(content, {fast: true})}.
'use strict'
const readline = require('readline')
const dotenv = require('dotenv')

const lines = readline.createInterface({ input: process.stdin, crlfDelay: Infinity })
lines.on('line', (line) => {
  const { content } = JSON.parse(line)
  const answer = { parse: dotenv.parse(content), fast: dotenv.parse(content, { fast: true }) }
  process.stdout.write(JSON.stringify(answer) + '\n')
})
