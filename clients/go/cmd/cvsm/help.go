package main

import (
	"fmt"
	"io"
	"strings"
)

const topHelp = `cvsm reads the secrets of a cvsm team: one value, all of them as a file to
source, or into the environment of a command it starts. cvsm login signs a
machine in; cvsm setup says which team and environment a folder uses.

Usage:
  cvsm [flags] COMMAND [flags] [arguments]

Commands:
`

const globalFlagsHelp = `Global flags (every command; each overrides its environment variable):
  -e, --environment ENV   environment to read: production, staging, development
                          (CVSM_ENVIRONMENT; default production)
      --team TEAM         team id or slug (CVSM_TEAM)
      --base-url URL      API root including /api/v1 (CVSM_BASE_URL)
      --timeout SECONDS   time limit of each HTTP attempt, such as 10 or 2.5
                          (CVSM_TIMEOUT; default 10)
      --max-retries N     extra attempts after a network error or a 502/503/504
                          (CVSM_MAX_RETRIES; default 2)
      --ca-file PATH      PEM bundle of CA certificates trusted instead of the
                          system's (CVSM_CA_FILE)
      --token-file PATH   read the API token from this file instead of CVSM_TOKEN
      --error-json        write a failure as one JSON object on stderr (kind,
                          message, status, retry_after, request_id, suggestion)
      --team-key-file PATH
                          keep an end-to-end team's key in PATH between runs
                          (for the shell client, in its private cache directory)
  -h, --help              show this help

The token comes from CVSM_TOKEN or --token-file, else the stored login (cvsm
login), never from a flag: a command line is visible to every user of the
machine (ps, /proc/PID/cmdline) and is kept in shell history. Server, team and
environment not given by a flag or CVSM_* variable come from the nearest
.cvsm.yaml upward (cvsm setup), then the stored login. Flags take one or two
dashes (-team or --team, --team=acme).

Exit status:
  0  success                    5  secret not found
  2  configuration or usage     6  rate limited (HTTP 429)
  3  authentication (HTTP 401)  7  other API error (after retries for 5xx)
  4  permission denied (403)    8  network error (after retries)
  9  a value of an end-to-end team that does not open (changed, or sealed
     for another environment or name)
  cvsm run exits with its command's status (128+N when a signal N killed it).
Errors are one line on stderr, "cvsm: <message>" (one JSON object with
--error-json), never the token or a value.
`

const getHelp = `Usage:
  cvsm get [flags] NAME

Prints the value of the secret NAME exactly as stored. A newline is added only
when stdout is a terminal: piped, redirected or in $(...), the output is the
value byte for byte (cvsm get TLS_KEY > key.pem). Names are case-sensitive; for
a name that exists in another case the error says "did you mean ...".

Examples:
  cvsm get DATABASE_URL
  cvsm get -e staging DATABASE_URL
  db_url=$(cvsm get DATABASE_URL)
`

const exportHelp = `Usage:
  cvsm export [flags] [--format dotenv|shell|json]

Prints every secret of the environment, sorted by name, as the server's export
of the same format writes it:
  dotenv (default)  NAME='value' or NAME="value" lines, for dotenv libraries
  shell             export NAME=$'value' lines, for bash and zsh
  json              one JSON object {"NAME": "value", ...}
Each dotenv value stays on its line: in single quotes when that reads back
exactly, otherwise in double quotes with \, ", $ and backtick escaped and a
line break written \n. Evaluating the shell lines in bash or zsh sets exactly
the values and runs nothing. dotenv and shell refuse (exit 2, nothing printed)
a name that is not a variable name or a value holding a NUL character.

Flags:
  --format FORMAT   dotenv, shell or json (default dotenv)

Examples:
  eval "$(cvsm export --format shell)"
  cvsm export > .env
  cvsm export --format json | jq -r .DATABASE_URL
`

const runHelp = `Usage:
  cvsm run [flags] [--overwrite] [--] COMMAND [ARGS...]
  cvsm run [flags] [--overwrite] --watch [--debounce D] [--grace D] [--poll D] [--] COMMAND [ARGS...]

Reads every secret of the environment and runs COMMAND with them added to ITS
environment (cvsm's own is left alone). A variable that is already set, even to
"", keeps its value unless --overwrite is given. Nothing is started when a
secret cannot be put in an environment (a name that is not a variable name, a
value holding a NUL character): exit 2.

cvsm waits for COMMAND and passes it SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1
and SIGUSR2. A Ctrl-C (or Ctrl-\) typed at a terminal already reaches COMMAND
from the terminal, so cvsm does not send it a second time. It exits with
COMMAND's status, 128+N when a signal N killed it, 127 when COMMAND is not
found and 126 when it cannot be started.

With --watch, cvsm follows the server's change stream (names and versions,
never values) and, when the secrets change, reads them once more and restarts
COMMAND with them: SIGTERM, then SIGKILL if it has not stopped within --grace.
A change reaches COMMAND within about a second; a burst of changes restarts it
once, after --debounce of quiet. A change to a secret COMMAND was not given (a
variable already set, without --overwrite) restarts nothing. Where the
server has no change stream or cannot be reached, cvsm checks every --poll
instead; while it cannot read the secrets, COMMAND keeps running with the ones
it has. SIGINT, SIGTERM and SIGQUIT end cvsm with COMMAND; when COMMAND exits
by itself, cvsm exits with its status. cvsm says on stderr what it does, never
a value.

Flags:
  --overwrite     replace variables that are already set
  --watch         restart COMMAND with the new secrets when they change
  --debounce D    quiet time after a change before restarting (default 500ms)
  --grace D       time COMMAND has to stop after SIGTERM (default 10s)
  --poll D        how often to check without a change stream (default 10s)
  --              ends cvsm's flags; everything after it is COMMAND and its ARGS
A duration D is such as 2s, 500ms or 1m, or a number of seconds.

Examples:
  CVSM_TOKEN=cvsm_... cvsm run -- ./app --port 8080
  cvsm run -e staging --overwrite -- npm start
  cvsm run --watch --grace 30s -- ./server
`

const versionHelp = `Usage:
  cvsm version

Prints the version of cvsm, the Go SDK it is built on, Go and the platform.
`

const helpHelp = `Usage:
  cvsm help [COMMAND]

Shows the help of cvsm, or of COMMAND (same as cvsm COMMAND --help).
`

// printHelp writes the help of command ("" for cvsm itself) to w.
func (c *cli) printHelp(w io.Writer, command string) {
	var b strings.Builder
	if cmd, ok := findCommand(command); ok {
		b.WriteString(cmd.help)
	} else {
		b.WriteString(topHelp)
		for _, cmd := range commands() {
			fmt.Fprintf(&b, "  %-8s %s\n", cmd.name, cmd.summary)
		}
		b.WriteString("\nExamples:\n" +
			"  cvsm login --server https://cvsm.example.com   # once per machine\n" +
			"  cvsm setup --team acme -e staging              # once per folder: .cvsm.yaml\n" +
			"  cvsm run -- ./app\n" +
			"Without a login (CI, servers):\n" +
			"  export CVSM_BASE_URL=https://cvsm.example.com/api/v1 CVSM_TEAM=acme\n" +
			"  CVSM_TOKEN=cvsm_... cvsm run -- ./app\n")
	}
	b.WriteString("\n")
	b.WriteString(globalFlagsHelp)
	_, _ = io.WriteString(w, b.String())
}

const loginHelp = `Usage:
  cvsm login [--server URL] [--open]

Signs this machine in to a cvsm server (OAuth 2.0 device authorization, RFC
8628): cvsm prints a code and an address ({server}/device). Open it in a browser
where you are signed in to the dashboard (on any device), check that the machine
it shows is this one, pick the team and approve. cvsm then stores a new token
for this machine only: bound to that team, read-only unless you chose
otherwise, never wider than your role. The token is never printed; it is kept
in the OS keyring where there is one (macOS Keychain, Windows Credential
Manager, the Secret Service on Linux: service "cvsm", account the server's
address), else in a file only you can read: <config>/cvsm/credentials.json
(os.UserConfigDir: $XDG_CONFIG_HOME or ~/.config on Linux), mode 0600. That
file keeps each server's login (token name, prefix, team) either way, the
token only without a keyring; login says on stderr which was used.
CVSM_KEYRING=off keeps the token in the file. get, export and run use it when
neither CVSM_TOKEN nor --token-file is given.

Flags:
  --server URL   the server's address, such as https://cvsm.example.com
                 (default: --base-url, CVSM_BASE_URL or .cvsm.yaml's server)
  --open         also open the address in the desktop's browser

Examples:
  cvsm login --server https://cvsm.example.com
  cvsm login --server http://localhost:8000 --open
`

const logoutHelp = `Usage:
  cvsm logout [--server URL]

Revokes this machine's token on the server (it stops working at once) and
deletes it from the stored login. When the server cannot be reached the token
stays stored, so that logout can be run again.
`

const whoamiHelp = `Usage:
  cvsm whoami [--server URL]

Shows the server, the account, the token in use (its name and prefix, never the
token), its team, what it may do and when it expires (a login's token lives the
server's CVSM_DEVICE_TOKEN_DAYS, 90 days by default), and the folder's
.cvsm.yaml if any.
The token is the one get would use: --token-file, CVSM_TOKEN, else the stored
login.
`

const setupHelp = `Usage:
  cvsm setup [--server URL] [--team TEAM] [-e ENV]

Writes .cvsm.yaml in the current folder: the server, team and environment that
get, export and run use here and in every folder below (the nearest
.cvsm.yaml upward wins). The server defaults to the latest login's, the team to
that login's team, the environment to production. The file holds no token:
commit it if the folder's other users share the team.

Where each setting comes from, first found wins:
  token        --token-file, CVSM_TOKEN, the stored login (cvsm login)
  server       --base-url, CVSM_BASE_URL, .cvsm.yaml, the latest login
  team         --team, CVSM_TEAM, .cvsm.yaml, the login's team
  environment  -e, CVSM_ENVIRONMENT, .cvsm.yaml, production

Example:
  cvsm setup --team acme -e staging
`
