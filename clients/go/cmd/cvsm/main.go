// Command cvsm reads the secrets of a cvsm team for people and scripts:
//
//	cvsm get NAME                      print one value
//	cvsm export [--format F]           every secret as dotenv, shell or JSON
//	cvsm run [--overwrite] -- CMD ...  run CMD with every secret in its environment
//	cvsm run --watch -- CMD ...        the same, restarting CMD when the secrets change
//	cvsm login [--server URL]          sign this machine in (RFC 8628 device flow)
//	cvsm logout                        revoke and delete this machine's token
//	cvsm whoami                        show the account, token and team in use
//	cvsm setup [--team T] [-e ENV]     write .cvsm.yaml for this folder
//	cvsm version                       print the version
//
// It is built on the Go SDK (package cvsm) and configured like every cvsm
// client, by the CVSM_* environment variables, which the global flags
// override; what neither gives comes from the nearest .cvsm.yaml upward,
// then the stored login (project.go has the order). The token comes from
// CVSM_TOKEN, --token-file or the login cvsm login stored (login.go): a
// command line is visible to every user of the machine, so there is no
// --token flag.
//
// The token of an end-to-end team carries its key part (cvsm_<64 hex>.<key>):
// the package opens the team's values here, and every command works as for
// any team (export formats them locally, as the server would for a plain
// team).
//
// Exit status: 0 ok, 2 configuration or usage error, 3 authentication,
// 4 permission denied, 5 not found, 6 rate limited, 7 other API error,
// 8 network error, 9 a value of an end-to-end team that does not open;
// cvsm run exits with its command's status. Every failure is one line on
// stderr, "cvsm: <message>" (with --error-json, one JSON object), never
// holding the token or a secret value.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/cvsm/cvsm/clients/go/cvsm"
)

// Exit statuses, one per error kind, as the shell client documents them.
const (
	exitOK          = 0
	exitFailure     = 1 // anything that is none of the kinds below
	exitUsage       = 2 // configuration or usage error
	exitAuth        = 3
	exitPermission  = 4
	exitNotFound    = 5
	exitRateLimited = 6
	exitAPI         = 7
	exitNetwork     = 8
	exitDecryption  = 9
	exitCannotExec  = 126 // cvsm run: the command was found but could not be started
	exitNoCommand   = 127 // cvsm run: the command was not found
)

func main() {
	os.Exit(newCLI(os.Stdout, os.Stderr).main(os.Args[1:]))
}

// cli is one invocation: where it writes and the settings its flags set.
type cli struct {
	stdout, stderr io.Writer
	settings       settings
	sdk            *cvsm.Client // the client of this run, once made; its team key is kept (--team-key-file)

	// The folder's .cvsm.yaml (project.go), found once per run.
	projectLoaded bool
	projectCfg    projectConfig
	projectPath   string
	projectErr    error
}

func newCLI(stdout, stderr io.Writer) *cli {
	return &cli{stdout: stdout, stderr: stderr}
}

// usageError is a mistake on the command line: exit 2, with a hint to --help.
type usageError struct {
	command string // "" for the top level
	msg     string
}

func (e *usageError) Error() string {
	help := "cvsm --help"
	if e.command != "" {
		help = "cvsm " + e.command + " --help"
	}
	return e.msg + " (see '" + help + "')"
}

func usagef(command, format string, args ...any) error {
	return &usageError{command: command, msg: fmt.Sprintf(format, args...)}
}

// configError is a configuration problem found by the command itself
// (before the SDK sees it): exit 2.
type configError struct{ msg string }

func (e *configError) Error() string { return e.msg }

func configErrorf(format string, args ...any) error {
	return &configError{msg: fmt.Sprintf(format, args...)}
}

// exitError carries a status to exit with and, optionally, a message.
type exitError struct {
	code int
	msg  string // "" prints nothing
}

func (e *exitError) Error() string { return e.msg }

type command struct {
	name    string
	summary string
	help    string // the command's own help, printed before the global flags
	run     func(c *cli, args []string) error
}

func commands() []command {
	return []command{
		{"get", "print the value of one secret", getHelp, (*cli).get},
		{"export", "print every secret as dotenv, shell or JSON", exportHelp, (*cli).export},
		{"run", "run a command with every secret in its environment", runHelp, (*cli).run},
		{"login", "sign this machine in (a code confirmed in the browser)", loginHelp, (*cli).login},
		{"logout", "revoke and delete this machine's token", logoutHelp, (*cli).logout},
		{"whoami", "show the account, token and team in use", whoamiHelp, (*cli).whoami},
		{"setup", "write .cvsm.yaml: this folder's server, team and environment", setupHelp, (*cli).setup},
		{"version", "print the version", versionHelp, (*cli).version},
		{"help", "show the help of cvsm or of a command", helpHelp, (*cli).help},
	}
}

// commandList names the commands for a usage error.
const commandList = "get, export, run, login, logout, whoami, setup or version"

func findCommand(name string) (command, bool) {
	for _, cmd := range commands() {
		if cmd.name == name {
			return cmd, true
		}
	}
	return command{}, false
}

// main runs one invocation and returns its exit status.
func (c *cli) main(args []string) int {
	return c.report(c.dispatch(args))
}

func (c *cli) dispatch(args []string) error {
	fs := c.newFlagSet("")
	showVersion := fs.Bool("version", false, "")
	if err := fs.Parse(args); err != nil {
		return c.flagError("", err)
	}
	if *showVersion {
		return c.version(nil)
	}
	rest := fs.Args()
	if len(rest) == 0 {
		return usagef("", "no command given: use "+commandList)
	}
	cmd, ok := findCommand(rest[0])
	if !ok {
		return usagef("", "unknown command %q: use "+commandList, rest[0])
	}
	err := cmd.run(c, rest[1:])
	c.saveTeamKey(err)
	return err
}

// report prints err as one line on stderr and returns the exit status.
func (c *cli) report(err error) int {
	if err == nil {
		return exitOK
	}
	code, msg := exitFailure, err.Error()
	var (
		cerr   *cvsm.Error
		uerr   *usageError
		cfg    *configError
		xerr   *exitError
		silent bool
	)
	switch {
	case errors.As(err, &xerr):
		code, msg, silent = xerr.code, xerr.msg, xerr.msg == ""
	case errors.As(err, &uerr), errors.As(err, &cfg):
		code = exitUsage
	case errors.As(err, &cerr):
		code, msg = exitCodeOf(cerr.Kind), describe(cerr)
	}
	switch {
	case silent:
	case c.settings.errorJSON.value:
		c.reportJSON(code, msg, cerr)
	default:
		fmt.Fprintf(c.stderr, "cvsm: %s\n", oneLine(msg))
	}
	return code
}

// reportJSON writes a failure as one JSON object on stderr, for a program
// that runs cvsm (the shell client does, for an end-to-end team): the kind,
// the message and, from an SDK error, its status, Retry-After seconds,
// request id and suggestion, each null when absent.
func (c *cli) reportJSON(code int, msg string, cerr *cvsm.Error) {
	out := struct {
		Kind       string  `json:"kind"`
		Message    string  `json:"message"`
		Status     *int    `json:"status"`
		RetryAfter *int64  `json:"retry_after"`
		RequestID  *string `json:"request_id"`
		Suggestion *string `json:"suggestion"`
	}{Kind: kindOfExit(code), Message: oneLine(msg)}
	if cerr != nil {
		out.Kind, out.Message = cerr.Kind.String(), oneLine(cerr.Message)
		if cerr.Status != 0 {
			out.Status = &cerr.Status
		}
		if cerr.HasRetryAfter {
			seconds := int64(cerr.RetryAfter / time.Second)
			out.RetryAfter = &seconds
		}
		if cerr.RequestID != "" {
			out.RequestID = &cerr.RequestID
		}
		if cerr.Suggestion != "" {
			out.Suggestion = &cerr.Suggestion
		}
	}
	line, _ := json.Marshal(out)
	fmt.Fprintf(c.stderr, "%s\n", line)
}

// kindOfExit is the error kind of an exit status of cvsm's own.
func kindOfExit(code int) string {
	switch code {
	case exitUsage:
		return "configuration"
	case exitAuth:
		return "authentication"
	case exitPermission:
		return "permission_denied"
	case exitNotFound:
		return "not_found"
	case exitRateLimited:
		return "rate_limited"
	case exitAPI:
		return "api"
	case exitNetwork:
		return "network"
	case exitDecryption:
		return "decryption"
	}
	return "internal"
}

// exitCodeOf maps an SDK error kind to the exit status the shell client
// documents for it.
func exitCodeOf(kind cvsm.Kind) int {
	switch kind {
	case cvsm.KindConfiguration:
		return exitUsage
	case cvsm.KindAuthentication:
		return exitAuth
	case cvsm.KindPermissionDenied:
		return exitPermission
	case cvsm.KindNotFound:
		return exitNotFound
	case cvsm.KindRateLimited:
		return exitRateLimited
	case cvsm.KindAPI:
		return exitAPI
	case cvsm.KindNetwork:
		return exitNetwork
	case cvsm.KindDecryption:
		return exitDecryption
	}
	return exitFailure
}

// describe is the message of an SDK error (which never holds the token or
// a value) with what helps next: how long to wait, the request id to quote.
func describe(e *cvsm.Error) string {
	msg := e.Message
	if e.Kind == cvsm.KindRateLimited && e.HasRetryAfter {
		msg += fmt.Sprintf(" (retry after %ds)", int64(e.RetryAfter/time.Second))
	}
	if e.RequestID != "" && e.Kind != cvsm.KindNotFound {
		msg += " (request id " + e.RequestID + ")"
	}
	return msg
}

// oneLine keeps a message on one line whatever a server put in it.
func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, s)), " ")
}

// newFlagSet returns a flag set for command ("" for the top level) that
// holds the global flags, prints nothing by itself and reports errors to
// its caller.
func (c *cli) newFlagSet(command string) *flag.FlagSet {
	name := "cvsm"
	if command != "" {
		name += " " + command
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	c.settings.register(fs)
	return fs
}

// flagError turns an error of flag.FlagSet.Parse into the command's answer:
// the help on -h/--help, a usage error otherwise.
func (c *cli) flagError(command string, err error) error {
	if errors.Is(err, flag.ErrHelp) {
		c.printHelp(c.stdout, command)
		return nil
	}
	return usagef(command, "%s", dashDash(err.Error()))
}

// dashDash writes the flag in a message of package flag ("invalid value
// \"x\" for flag -timeout: ...") the way this help shows it: --timeout.
func dashDash(msg string) string {
	for _, prefix := range []string{"for flag -", "not defined: -", "needs an argument: -"} {
		i := strings.Index(msg, prefix)
		if i < 0 {
			continue
		}
		rest := msg[i+len(prefix):]
		name := rest
		if j := strings.IndexAny(rest, ": "); j >= 0 {
			name = rest[:j]
		}
		if len(name) > 1 && !strings.HasPrefix(name, "-") {
			return msg[:i+len(prefix)] + "-" + rest
		}
	}
	return msg
}

// parseInterspersed parses flags that may come before, between or after the
// positional arguments (cvsm get NAME -e staging), up to a "--" after which
// everything is positional.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		consumed := len(args) - len(rest)
		if consumed > 0 && args[consumed-1] == "--" {
			return append(positional, rest...), nil
		}
		if len(rest) == 0 {
			return positional, nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// settings are the global flags; each overrides its CVSM_* variable.
type settings struct {
	tokenFile   stringFlag
	baseURL     stringFlag
	team        stringFlag
	environment stringFlag
	caFile      stringFlag
	teamKeyFile stringFlag
	timeout     secondsFlag
	maxRetries  countFlag
	errorJSON   boolFlag
}

// register adds the global flags to fs. The values are flag.Value types
// bound to c.settings, so that a flag set registered later (the command's)
// does not reset what an earlier one (cvsm's own) parsed.
func (s *settings) register(fs *flag.FlagSet) {
	fs.Var(&s.environment, "environment", "")
	fs.Var(&s.environment, "e", "")
	fs.Var(&s.team, "team", "")
	fs.Var(&s.baseURL, "base-url", "")
	fs.Var(&s.timeout, "timeout", "")
	fs.Var(&s.maxRetries, "max-retries", "")
	fs.Var(&s.caFile, "ca-file", "")
	fs.Var(&s.tokenFile, "token-file", "")
	fs.Var(&s.errorJSON, "error-json", "")
	fs.Var(&s.teamKeyFile, "team-key-file", "")
}

// boolFlag is a flag without a value (--error-json), bound to settings as
// the others are.
type boolFlag struct{ value bool }

func (f *boolFlag) String() string   { return strconv.FormatBool(f.value) }
func (f *boolFlag) IsBoolFlag() bool { return true }

func (f *boolFlag) Set(v string) error {
	b, err := strconv.ParseBool(v)
	if err != nil {
		return errors.New("takes no value")
	}
	f.value = b
	return nil
}

// stringFlag is a string option that is either unset or not blank.
type stringFlag struct {
	value string
	set   bool
}

func (f *stringFlag) String() string { return f.value }

func (f *stringFlag) Set(v string) error {
	if strings.TrimSpace(v) == "" {
		return errors.New("must not be empty")
	}
	f.value, f.set = strings.TrimSpace(v), true
	return nil
}

// secondsFlag is a positive number of seconds such as 10 or 2.5, as
// CVSM_TIMEOUT is.
type secondsFlag struct {
	value time.Duration
	set   bool
}

func (f *secondsFlag) String() string {
	if !f.set {
		return ""
	}
	return strconv.FormatFloat(f.value.Seconds(), 'f', -1, 64)
}

func (f *secondsFlag) Set(v string) error {
	s := strings.TrimSpace(v)
	seconds, err := strconv.ParseFloat(s, 64)
	if err != nil || !(seconds > 0) || seconds > 1e9 || strings.ContainsAny(s, "xXpPeEiInN_") {
		return errors.New("must be a positive number of seconds, such as 10 or 2.5")
	}
	f.value, f.set = time.Duration(seconds*float64(time.Second)), true
	return nil
}

// countFlag is a non-negative whole number, as CVSM_MAX_RETRIES is.
type countFlag struct {
	value int
	set   bool
}

func (f *countFlag) String() string {
	if !f.set {
		return ""
	}
	return strconv.Itoa(f.value)
}

func (f *countFlag) Set(v string) error {
	s := strings.TrimSpace(v)
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || strings.ContainsAny(s, "+-") {
		return errors.New("must be a non-negative whole number")
	}
	f.value, f.set = n, true
	return nil
}

// client builds the SDK client from the flags, then the CVSM_* variables.
// The checks made here name the flag as well as the variable; the SDK makes
// the rest (a token that is not visible ASCII, a CVSM_TIMEOUT that does not
// parse, an unreadable CA file).
func (c *cli) client() (*cvsm.Client, error) {
	opts, err := c.options()
	if err != nil {
		return nil, err
	}
	client, err := cvsm.NewClient(opts)
	if err != nil {
		return nil, err
	}
	c.sdk = client
	c.loadTeamKey()
	return client, nil
}

// options are the SDK options the flags, the CVSM_* variables, the
// folder's .cvsm.yaml and the stored login give, checked as client
// describes. First found wins (project.go):
//
//	token        --token-file, CVSM_TOKEN, the stored login for the server
//	server       --base-url, CVSM_BASE_URL, .cvsm.yaml, the latest login
//	team         --team, CVSM_TEAM, .cvsm.yaml, the stored login's team
//	environment  -e/--environment, CVSM_ENVIRONMENT, .cvsm.yaml, production
func (c *cli) options() (cvsm.Options, error) {
	s := &c.settings
	opts := cvsm.Options{
		BaseURL:     s.baseURL.value,
		Team:        s.team.value,
		Environment: s.environment.value,
		CAFile:      s.caFile.value,
		// One invocation makes one request: a cache would never be read.
		// (So CVSM_CACHE_TTL is ignored.)
		CacheTTL: cvsm.NoCache,
	}
	if err := c.loadProject(); err != nil {
		return cvsm.Options{}, err
	}
	project := c.projectCfg
	envToken := strings.Trim(os.Getenv(cvsm.EnvToken), " \t\r\n") != ""
	// The stored logins are read only when something is left to find.
	var creds *credentials
	stored := func() (*credentials, error) {
		if creds == nil {
			loaded, _, err := loadCredentials()
			if err != nil {
				return nil, err
			}
			creds = loaded
		}
		return creds, nil
	}
	baseURL := opts.BaseURL
	if baseURL == "" {
		baseURL = strings.TrimSpace(os.Getenv(cvsm.EnvBaseURL))
	}
	if baseURL == "" && project.Server != "" {
		key, err := serverKey(project.Server)
		if err != nil {
			return cvsm.Options{}, err
		}
		baseURL = key + apiSuffix
	}
	if baseURL == "" && !s.tokenFile.set && !envToken {
		all, err := stored()
		if err != nil {
			return cvsm.Options{}, err
		}
		if all.Default != "" {
			baseURL = all.Default + apiSuffix
		}
	}
	if baseURL == "" {
		return cvsm.Options{}, configErrorf("%s is not set: set it, pass --base-url URL (the API root, such as https://cvsm.example.com/api/v1), or run 'cvsm login --server URL'", cvsm.EnvBaseURL)
	}
	if u, err := url.Parse(baseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return cvsm.Options{}, configErrorf("the base URL (--base-url or %s) must be an absolute http or https URL such as https://cvsm.example.com/api/v1", cvsm.EnvBaseURL)
	}
	opts.BaseURL = baseURL
	// The stored login of this server, when the token or team is not given.
	var login *credential
	if !s.tokenFile.set && !envToken || opts.Team == "" && strings.TrimSpace(os.Getenv(cvsm.EnvTeam)) == "" && project.Team == "" {
		if key, err := serverKey(baseURL); err == nil {
			all, err := stored()
			if err != nil {
				return cvsm.Options{}, err
			}
			login = all.Servers[key]
		}
	}
	switch {
	case s.tokenFile.set:
		raw, err := os.ReadFile(s.tokenFile.value)
		if err != nil {
			return cvsm.Options{}, configErrorf("cannot read the token file: %v", pathError(err))
		}
		opts.Token = strings.Trim(string(raw), " \t\r\n")
		if opts.Token == "" {
			return cvsm.Options{}, configErrorf("the token file %q is empty", s.tokenFile.value)
		}
	case envToken:
	case login != nil && (login.Token != "" || login.Keyring):
		key, _ := serverKey(baseURL)
		token, err := storedToken(key, login)
		if err != nil {
			return cvsm.Options{}, err
		}
		opts.Token = token
	default:
		return cvsm.Options{}, configErrorf("%s is not set: export it, pass --token-file PATH (there is no --token flag: see 'cvsm --help'), or run 'cvsm login'", cvsm.EnvToken)
	}
	if opts.Team == "" && strings.TrimSpace(os.Getenv(cvsm.EnvTeam)) == "" {
		switch {
		case project.Team != "":
			opts.Team = project.Team
		case login != nil && login.Team != "":
			opts.Team = login.Team
		default:
			return cvsm.Options{}, configErrorf("%s is not set: set it, pass --team TEAM (the team's id or slug), or run 'cvsm setup --team TEAM' in this folder", cvsm.EnvTeam)
		}
	}
	if opts.Environment == "" && strings.TrimSpace(os.Getenv(cvsm.EnvEnvironment)) == "" {
		opts.Environment = project.Environment
	}
	if s.timeout.set {
		opts.Timeout = s.timeout.value
	}
	if s.maxRetries.set {
		opts.MaxRetries = cvsm.Int(s.maxRetries.value)
	}
	return opts, nil
}

// pathError is an *os.PathError's text ("open /x: no such file or
// directory"), the only kind of error os.ReadFile returns.
func pathError(err error) string {
	var perr *os.PathError
	if errors.As(err, &perr) {
		return perr.Op + " " + perr.Path + ": " + perr.Err.Error()
	}
	return err.Error()
}

func (c *cli) version(args []string) error {
	fs := c.newFlagSet("version")
	if err := fs.Parse(args); err != nil {
		return c.flagError("version", err)
	}
	if fs.NArg() > 0 {
		return usagef("version", "version takes no arguments")
	}
	_, err := fmt.Fprintf(c.stdout, "cvsm %s (cvsm-go/%s, %s, %s/%s)\n", cvsm.Version, cvsm.Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return err
}

func (c *cli) help(args []string) error {
	fs := c.newFlagSet("help")
	if err := fs.Parse(args); err != nil {
		return c.flagError("help", err)
	}
	switch fs.NArg() {
	case 0:
		c.printHelp(c.stdout, "")
		return nil
	case 1:
		if _, ok := findCommand(fs.Arg(0)); !ok {
			return usagef("", "unknown command %q: use "+commandList, fs.Arg(0))
		}
		c.printHelp(c.stdout, fs.Arg(0))
		return nil
	}
	return usagef("help", "help takes at most one command")
}
