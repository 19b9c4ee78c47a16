package main

// cvsm login, logout and whoami: signing this machine in to a cvsm server
// with the OAuth 2.0 Device Authorization Grant (RFC 8628), and the token it
// gets.
//
// login asks the server for a code (POST /auth/device/code), prints the
// code and the page where a signed-in member confirms it ({server}/device),
// opens that page in a browser only with --open, and polls
// POST /auth/device/token every interval the server gives (5 seconds more
// after each slow_down) until the code is approved, denied or expired. The
// token it gets is narrow (one team, read-only unless the approver chose
// otherwise, never wider than the approver's role) and is never printed: it
// is stored in the OS keyring where there is one (keyring.go), else in a
// file only its owner can read. That file, <config>/cvsm/credentials.json
// (os.UserConfigDir: $XDG_CONFIG_HOME or ~/.config on Linux, ~/Library/
// Application Support on macOS, %AppData% on Windows), mode 0600 in a 0700
// folder, holds one entry per server either way: the token's name, prefix,
// team and reach, and the token itself only when no keyring took it.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/cvsm/cvsm/clients/go/cvsm"
)

const (
	apiSuffix       = "/api/v1"
	deviceGrantType = "urn:ietf:params:oauth:grant-type:device_code"
	credentialsName = "credentials.json"
)

// credentials is the file of the tokens cvsm login stored, one per server
// (keyed by the server's address without /api/v1), and the server of the
// latest login (Default), used when nothing else names one.
type credentials struct {
	Default string                 `json:"default,omitempty"`
	Servers map[string]*credential `json:"servers"`
}

// credential is one server's login: the token and what whoami shows
// without asking the server.
type credential struct {
	Token       string   `json:"token,omitempty"`   // empty when the keyring holds it
	Keyring     bool     `json:"keyring,omitempty"` // the token is in the OS keyring
	TokenID     string   `json:"token_id"`
	TokenName   string   `json:"token_name"`
	TokenPrefix string   `json:"token_prefix"`
	TeamID      string   `json:"team_id"`
	Team        string   `json:"team"` // the team's slug
	ReadOnly    bool     `json:"read_only"`
	Envs        []string `json:"environments,omitempty"`
	CreatedAt   string   `json:"created_at"`
}

// String never shows the token.
func (c credential) String() string {
	return fmt.Sprintf("credential{%s, team %s}", c.TokenPrefix, c.Team)
}

// GoString never shows the token.
func (c credential) GoString() string { return c.String() }

// configDir is cvsm's folder under the user's configuration folder.
func configDir() (string, error) {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", configErrorf("no configuration folder for the stored login: %v", err)
	}
	return filepath.Join(dir, "cvsm"), nil
}

func credentialsPath() (string, error) {
	dir, err := configDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, credentialsName), nil
}

// loadCredentials reads the stored logins; none stored is an empty set.
func loadCredentials() (*credentials, string, error) {
	path, err := credentialsPath()
	if err != nil {
		return nil, "", err
	}
	creds := &credentials{Servers: map[string]*credential{}}
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return creds, path, nil
	}
	if err != nil {
		return nil, path, configErrorf("cannot read the stored login: %v", pathError(err))
	}
	if err := json.Unmarshal(raw, creds); err != nil {
		return nil, path, configErrorf("the stored login %s is not valid JSON: remove it and run 'cvsm login' again", path)
	}
	if creds.Servers == nil {
		creds.Servers = map[string]*credential{}
	}
	return creds, path, nil
}

// save writes the logins to path, readable by its owner only: a temporary
// file made 0600, renamed over the old one (so no reader sees half a file).
func (creds *credentials) save(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return configErrorf("cannot make the folder of the stored login: %v", pathError(err))
	}
	raw, err := json.MarshalIndent(creds, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".credentials-*")
	if err != nil {
		return configErrorf("cannot store the login: %v", pathError(err))
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil && runtime.GOOS != "windows" {
		tmp.Close()
		return configErrorf("cannot store the login: %v", err)
	}
	if _, err := tmp.Write(append(raw, '\n')); err != nil {
		tmp.Close()
		return configErrorf("cannot store the login: %v", err)
	}
	if err := tmp.Close(); err != nil {
		return configErrorf("cannot store the login: %v", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return configErrorf("cannot store the login: %v", pathError(err))
	}
	return nil
}

// serverKey is a server's address as logins are stored under: scheme and
// host, any path kept, without a trailing slash or /api/v1.
func serverKey(raw string) (string, error) {
	s := strings.TrimRight(strings.TrimSpace(raw), "/")
	s = strings.TrimSuffix(s, apiSuffix)
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return "", configErrorf("the server %q must be an absolute http or https address such as https://cvsm.example.com", raw)
	}
	return strings.TrimRight(u.Scheme+"://"+u.Host+u.EscapedPath(), "/"), nil
}

// --- login ---------------------------------------------------------------

func (c *cli) login(args []string) error {
	fs := c.newFlagSet("login")
	var serverFlag stringFlag
	fs.Var(&serverFlag, "server", "")
	open := fs.Bool("open", false, "")
	rest, err := parseInterspersed(fs, args)
	if err != nil {
		return c.flagError("login", err)
	}
	if len(rest) > 0 {
		return usagef("login", "login takes no arguments, got %q", rest[0])
	}
	raw := serverFlag.value
	if raw == "" {
		raw = c.configuredServer()
	}
	if raw == "" {
		return usagef("login", "which server? pass --server URL (such as https://cvsm.example.com), or set server in .cvsm.yaml or CVSM_BASE_URL")
	}
	server, err := serverKey(raw)
	if err != nil {
		return err
	}
	creds, path, err := loadCredentials()
	if err != nil {
		return err
	}
	hc, err := c.httpClient()
	if err != nil {
		return err
	}
	ctx := context.Background()
	hostname, _ := os.Hostname()
	var started struct {
		DeviceCode              string `json:"device_code"`
		UserCode                string `json:"user_code"`
		VerificationURI         string `json:"verification_uri"`
		VerificationURIComplete string `json:"verification_uri_complete"`
		ExpiresIn               int    `json:"expires_in"`
		Interval                int    `json:"interval"`
	}
	ask := map[string]string{}
	if name := strings.TrimSpace(cutHostname(hostname)); name != "" {
		ask["hostname"] = name // shown on the /device page and in the token's name
	}
	if err := c.post(ctx, hc, server+apiSuffix+"/auth/device/code", "", ask, &started); err != nil {
		return err
	}
	if started.DeviceCode == "" || started.UserCode == "" || started.VerificationURI == "" {
		return &cvsm.Error{Kind: cvsm.KindAPI, Message: "the server's answer to the sign-in request lacks the code: is " + server + " a cvsm server of 0.5 or later?"}
	}
	fmt.Fprintf(c.stdout, "To sign in this machine, open %s and enter the code %s\n", started.VerificationURI, started.UserCode)
	if started.VerificationURIComplete != "" {
		fmt.Fprintf(c.stdout, "(or open %s)\n", started.VerificationURIComplete)
	}
	if *open && started.VerificationURIComplete != "" {
		if err := openBrowser(started.VerificationURIComplete); err != nil {
			fmt.Fprintf(c.stdout, "Could not open a browser (%v): open the address yourself.\n", err)
		}
	}
	fmt.Fprintf(c.stdout, "Waiting for the code to be approved (it expires in %d minutes)...\n", (started.ExpiresIn+59)/60)

	interval := time.Duration(started.Interval) * time.Second
	if interval < time.Second {
		interval = 5 * time.Second
	}
	deadline := time.Now().Add(time.Duration(started.ExpiresIn) * time.Second)
	if started.ExpiresIn <= 0 {
		deadline = time.Now().Add(10 * time.Minute)
	}
	var granted struct {
		AccessToken string `json:"access_token"`
		APIToken    struct {
			ID           string   `json:"id"`
			Name         string   `json:"name"`
			TokenPrefix  string   `json:"token_prefix"`
			ReadOnly     bool     `json:"read_only"`
			Environments []string `json:"environments"`
			CreatedAt    string   `json:"created_at"`
		} `json:"api_token"`
		Team struct {
			ID   string `json:"id"`
			Slug string `json:"slug"`
			Name string `json:"name"`
		} `json:"team"`
	}
	body := map[string]string{"device_code": started.DeviceCode, "grant_type": deviceGrantType}
	for {
		time.Sleep(interval)
		err := c.post(ctx, hc, server+apiSuffix+"/auth/device/token", "", body, &granted)
		var derr *deviceError
		switch {
		case err == nil:
		case errors.As(err, &derr) && derr.code == "authorization_pending":
		case errors.As(err, &derr) && derr.code == "slow_down":
			interval += 5 * time.Second
		case errors.As(err, &derr) && derr.code == "access_denied":
			return &exitError{code: exitAuth, msg: "the sign-in was denied on the /device page: no token was made"}
		case errors.As(err, &derr) && (derr.code == "expired_token" || derr.code == "invalid_grant"):
			return &exitError{code: exitAuth, msg: "the code expired before it was approved: run 'cvsm login' again"}
		default:
			var cerr *cvsm.Error
			if errors.As(err, &cerr) && cerr.Kind == cvsm.KindRateLimited && cerr.HasRetryAfter {
				time.Sleep(cerr.RetryAfter)
				continue
			}
			return err
		}
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return &exitError{code: exitAuth, msg: "the code expired before it was approved: run 'cvsm login' again"}
		}
	}
	if !strings.HasPrefix(granted.AccessToken, "cvsm_") {
		return &cvsm.Error{Kind: cvsm.KindAPI, Message: "the server's answer lacks the token"}
	}
	// A login to a server that had one already: the old token is revoked
	// (best effort: it may be revoked or expired already).
	if oldToken, _ := storedToken(server, creds.Servers[server]); oldToken != "" && oldToken != granted.AccessToken {
		_ = c.request(ctx, hc, http.MethodDelete, server+apiSuffix+"/tokens/current", bearer(oldToken), nil, nil)
	}
	cred := &credential{
		Token: granted.AccessToken, TokenID: granted.APIToken.ID, TokenName: granted.APIToken.Name,
		TokenPrefix: granted.APIToken.TokenPrefix, TeamID: granted.Team.ID, Team: granted.Team.Slug,
		ReadOnly: granted.APIToken.ReadOnly, Envs: granted.APIToken.Environments,
		CreatedAt: granted.APIToken.CreatedAt,
	}
	if err := c.storeLogin(creds, path, server, cred); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "Signed in to %s for team %s (%s) with the token %q.\n",
		server, granted.Team.Slug, reach(granted.APIToken.ReadOnly, granted.APIToken.Environments), granted.APIToken.Name)
	return nil
}

// reach says what a token may do, in the words whoami and login print.
func reach(readOnly bool, envs []string) string {
	what := "read and write as your role allows"
	if readOnly {
		what = "read-only"
	}
	if len(envs) == 0 {
		return what + ", every environment"
	}
	return what + ", " + strings.Join(envs, " and ")
}

// cutHostname is the machine's name as the /device page shows it: at most
// 64 characters, printable ones only.
func cutHostname(name string) string {
	name = oneLine(name)
	if len(name) > 64 {
		name = name[:64]
	}
	return strings.ToValidUTF8(name, "")
}

// openBrowser opens url in the desktop's browser, where there is one.
func openBrowser(url string) error {
	var cmd *exec.Cmd
	switch runtime.GOOS {
	case "darwin":
		cmd = exec.Command("open", url)
	case "windows":
		cmd = exec.Command("rundll32", "url.dll,FileProtocolHandler", url)
	default:
		if os.Getenv("DISPLAY") == "" && os.Getenv("WAYLAND_DISPLAY") == "" {
			return errors.New("no desktop session")
		}
		cmd = exec.Command("xdg-open", url)
	}
	cmd.Stdout, cmd.Stderr = nil, nil
	return cmd.Start()
}

// --- logout and whoami --------------------------------------------------

func (c *cli) logout(args []string) error {
	server, creds, path, cred, err := c.storedLogin("logout", args)
	if err != nil {
		return err
	}
	if cred == nil {
		fmt.Fprintf(c.stdout, "Not signed in to %s: nothing to do.\n", server)
		return nil
	}
	token, err := storedToken(server, cred)
	var xerr *exitError
	if errors.As(err, &xerr) {
		// Gone from the keyring: nothing is left to revoke from here.
		if err := c.forgetLogin(creds, path, server); err != nil {
			return err
		}
		fmt.Fprintf(c.stdout, "Signed out of %s: the token was no longer in the OS keyring; its entry is deleted from this machine (revoke %q on the dashboard if it still exists).\n", server, cred.TokenName)
		return nil
	}
	if err != nil {
		return err
	}
	hc, err := c.httpClient()
	if err != nil {
		return err
	}
	err = c.request(context.Background(), hc, http.MethodDelete, server+apiSuffix+"/tokens/current", bearer(token), nil, nil)
	var cerr *cvsm.Error
	revoked := err == nil
	if err != nil && !(errors.As(err, &cerr) && cerr.Kind == cvsm.KindAuthentication) {
		// The server could not be asked: the token stays stored, so that
		// logout can be run again once it answers (a token deleted here
		// only would go on working).
		return err
	}
	if err := c.forgetLogin(creds, path, server); err != nil {
		return err
	}
	if revoked {
		fmt.Fprintf(c.stdout, "Signed out of %s: the token %q is revoked and deleted from this machine.\n", server, cred.TokenName)
	} else {
		fmt.Fprintf(c.stdout, "Signed out of %s: the token was no longer valid and is deleted from this machine.\n", server)
	}
	return nil
}

func (c *cli) whoami(args []string) error {
	server, _, path, cred, err := c.storedLogin("whoami", args)
	if err != nil {
		return err
	}
	// The token get would use: --token-file, CVSM_TOKEN, else the stored login.
	var token, source string
	switch {
	case c.settings.tokenFile.set:
		raw, err := os.ReadFile(c.settings.tokenFile.value)
		if err != nil {
			return configErrorf("cannot read the token file: %v", pathError(err))
		}
		token, source = strings.Trim(string(raw), " \t\r\n"), "--token-file"
	case strings.Trim(os.Getenv(cvsm.EnvToken), " \t\r\n") != "":
		token, source = strings.Trim(os.Getenv(cvsm.EnvToken), " \t\r\n"), cvsm.EnvToken
	case cred != nil:
		token, err = storedToken(server, cred)
		if err != nil {
			return err
		}
		source = path
		if cred.Keyring {
			source = "the OS keyring"
		}
	}
	if token == "" {
		return &exitError{code: exitAuth, msg: "not signed in to " + server + ": run 'cvsm login --server " + server + "'"}
	}
	// An end-to-end team's token carries its key after a dot: only the
	// bearer part goes to the server.
	token = bearer(token)
	hc, err := c.httpClient()
	if err != nil {
		return err
	}
	ctx := context.Background()
	var me struct {
		Email    string `json:"email"`
		Username string `json:"username"`
		Name     string `json:"name"`
	}
	if err := c.request(ctx, hc, http.MethodGet, server+apiSuffix+"/me", token, nil, &me); err != nil {
		return err
	}
	var current struct {
		APIToken struct {
			Name         string   `json:"name"`
			TokenPrefix  string   `json:"token_prefix"`
			ReadOnly     bool     `json:"read_only"`
			Environments []string `json:"environments"`
			ExpiresAt    *string  `json:"expires_at"`
		} `json:"api_token"`
		Team *struct {
			Slug string `json:"slug"`
			Name string `json:"name"`
		} `json:"team"`
	}
	if err := c.request(ctx, hc, http.MethodGet, server+apiSuffix+"/tokens/current", token, nil, &current); err != nil {
		return err
	}
	team := "every team of the account"
	if current.Team != nil {
		team = current.Team.Slug + " (" + current.Team.Name + ")"
	}
	fmt.Fprintf(c.stdout, "Server:  %s\nAccount: %s (%s)\nToken:   %s (%s..., from %s)\nTeam:    %s\nAccess:  %s\nExpires: %s\n",
		server, me.Email, me.Username, current.APIToken.Name, current.APIToken.TokenPrefix, source, team,
		reach(current.APIToken.ReadOnly, current.APIToken.Environments), expiry(current.APIToken.ExpiresAt))
	if project, where := c.project(); where != "" {
		fmt.Fprintf(c.stdout, "Folder:  %s (team %s, environment %s)\n", where, orNone(project.Team), orNone(project.Environment))
	}
	return nil
}

// expiry is when a token stops working, in UTC to the minute ("never" for
// a token without an expiry; a `cvsm login` token lives CVSM_DEVICE_TOKEN_DAYS).
func expiry(at *string) string {
	if at == nil || *at == "" {
		return "never"
	}
	when, err := time.Parse(time.RFC3339Nano, *at)
	if err != nil {
		return *at
	}
	return when.UTC().Format("2006-01-02 15:04") + " UTC"
}

func orNone(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// storedLogin is the server a logout or whoami is about (--server, else as
// for get) and its stored login (nil when there is none).
func (c *cli) storedLogin(command string, args []string) (string, *credentials, string, *credential, error) {
	fs := c.newFlagSet(command)
	var serverFlag stringFlag
	fs.Var(&serverFlag, "server", "")
	rest, err := parseInterspersed(fs, args)
	if err != nil {
		return "", nil, "", nil, c.flagError(command, err)
	}
	if len(rest) > 0 {
		return "", nil, "", nil, usagef(command, "%s takes no arguments, got %q", command, rest[0])
	}
	creds, path, err := loadCredentials()
	if err != nil {
		return "", nil, "", nil, err
	}
	raw := serverFlag.value
	if raw == "" {
		raw = c.configuredServer()
	}
	if raw == "" {
		raw = creds.Default
	}
	if raw == "" {
		return "", nil, "", nil, &exitError{code: exitAuth, msg: "not signed in: run 'cvsm login --server URL'"}
	}
	server, err := serverKey(raw)
	if err != nil {
		return "", nil, "", nil, err
	}
	return server, creds, path, creds.Servers[server], nil
}

// --- HTTP ------------------------------------------------------------------

// httpClient is the client of login, logout and whoami: --ca-file or
// CVSM_CA_FILE, proxies from the environment, no redirects followed.
func (c *cli) httpClient() (*http.Client, error) {
	caFile := c.settings.caFile.value
	if caFile == "" {
		caFile = strings.TrimSpace(os.Getenv(cvsm.EnvCAFile))
	}
	hc, err := watchHTTPClient(caFile)
	if err != nil {
		return nil, err
	}
	hc.Timeout = 30 * time.Second
	if c.settings.timeout.set {
		hc.Timeout = c.settings.timeout.value
	}
	return hc, nil
}

// deviceError is one of RFC 8628's answers while a code is not approved.
type deviceError struct{ code string }

func (e *deviceError) Error() string { return "the server answered " + e.code }

var deviceCodes = map[string]bool{
	"authorization_pending": true, "slow_down": true, "access_denied": true,
	"expired_token": true, "invalid_grant": true, "unsupported_grant_type": true,
}

func (c *cli) post(ctx context.Context, hc *http.Client, url, bearer string, body, out any) error {
	return c.request(ctx, hc, http.MethodPost, url, bearer, body, out)
}

// request sends one JSON request and decodes a 2xx answer into out; any
// other answer is an SDK error of the status's kind (with the server's
// message, which never holds a token), or a deviceError for RFC 8628's
// values.
func (c *cli) request(ctx context.Context, hc *http.Client, method, url, bearer string, body, out any) error {
	var reader io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return err
		}
		reader = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, reader)
	if err != nil {
		return configErrorf("bad server address: %v", err)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "cvsm-cli/"+cvsm.Version+" ("+runtime.GOOS+"/"+runtime.GOARCH+")")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return &cvsm.Error{Kind: cvsm.KindNetwork, Message: "cannot reach the server: " + redactURLError(err)}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return &cvsm.Error{Kind: cvsm.KindNetwork, Message: "the server's answer was cut off"}
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		if out == nil {
			return nil
		}
		if err := json.Unmarshal(raw, out); err != nil {
			return &cvsm.Error{Kind: cvsm.KindAPI, Status: resp.StatusCode, Message: "the server's answer is not the JSON expected"}
		}
		return nil
	}
	var answer struct {
		Error string `json:"error"`
	}
	_ = json.Unmarshal(raw, &answer)
	if resp.StatusCode == http.StatusBadRequest && deviceCodes[answer.Error] {
		return &deviceError{code: answer.Error}
	}
	msg := fmt.Sprintf("HTTP %d", resp.StatusCode)
	if answer.Error != "" {
		msg += ": " + answer.Error
	}
	e := &cvsm.Error{Kind: kindOfStatus(resp.StatusCode), Status: resp.StatusCode, Message: msg,
		RequestID: resp.Header.Get("X-Request-Id")}
	if seconds, err := time.ParseDuration(resp.Header.Get("Retry-After") + "s"); err == nil && seconds > 0 {
		e.RetryAfter, e.HasRetryAfter = seconds, true
	}
	return e
}

func kindOfStatus(status int) cvsm.Kind {
	switch {
	case status == http.StatusUnauthorized:
		return cvsm.KindAuthentication
	case status == http.StatusForbidden:
		return cvsm.KindPermissionDenied
	case status == http.StatusNotFound:
		return cvsm.KindNotFound
	case status == http.StatusTooManyRequests:
		return cvsm.KindRateLimited
	}
	return cvsm.KindAPI
}

// redactURLError is a transport error without the URL's query (there is
// none with a secret today; this keeps it so).
func redactURLError(err error) string {
	var uerr *url.Error
	if errors.As(err, &uerr) {
		return uerr.Err.Error()
	}
	return err.Error()
}
