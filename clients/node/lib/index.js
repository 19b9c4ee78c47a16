'use strict';
/**
 * The Node client of the cvsm team secrets manager (CommonJS entry): the Client, its errors
 * and the package's VERSION.
 * @module cvsm
 */

const { Client } = require('./client');
const errors = require('./errors');
const { VERSION } = require('./transport');

module.exports = { Client, VERSION, ...errors };
