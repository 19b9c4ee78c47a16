package main

// cvsm run --watch: the command runs with the secrets, and is restarted with
// the new ones whenever they change on the server.
//
// A watcher follows the server's change stream (GET .../secrets/changes,
// server-sent events of names and versions, never values) and says when
// something may have changed; where the server has no stream, or cannot be
// reached, every poll interval counts as such a moment. The main loop waits
// for a quiet debounce period after the last one (500 ms by default, so a
// change reaches the command within about a second), fetches every value once
// (the export, as cvsm run does at the start) and, when the environment the
// command would get differs from its own (a secret it was given changed; one
// it was not given, a variable already set without --overwrite, does not
// count), stops the command (SIGTERM, then SIGKILL after the grace
// period) and starts it again with the new environment. A fetch that fails
// leaves the command running with what it has. No value is ever printed.

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cvsm/cvsm/clients/go/cvsm"
)

const (
	defaultDebounce = 500 * time.Millisecond
	defaultGrace    = 10 * time.Second
	defaultPoll     = 10 * time.Second
	// streamIdle is how long a stream may send nothing (the server sends a
	// comment every 15 s) before it is taken for broken and opened again.
	streamIdle = 45 * time.Second
	// reconnectWait is the pause before a stream that ended is opened again,
	// doubled up to reconnectMax while streams end within reconnectLong of
	// opening; a stream that cannot be opened is tried again every poll.
	reconnectWait = time.Second
	reconnectMax  = 30 * time.Second
	reconnectLong = 30 * time.Second
)

// durationFlag is a duration such as 2s, 500ms or 1m, or a number of
// seconds such as 2 or 0.5; zero is allowed when min is zero.
type durationFlag struct {
	value time.Duration
	min   time.Duration
}

func (f *durationFlag) String() string { return f.value.String() }

func (f *durationFlag) Set(v string) error {
	s := strings.TrimSpace(v)
	d, err := time.ParseDuration(s)
	if err != nil {
		seconds, perr := strconv.ParseFloat(s, 64)
		if perr != nil || strings.ContainsAny(s, "xXpPeEiInN_") || seconds > 1e6 {
			return errors.New("must be a duration such as 2s, 500ms or 1m")
		}
		d = time.Duration(seconds * float64(time.Second))
	}
	if d < f.min || d > 24*time.Hour {
		if f.min > 0 {
			return fmt.Errorf("must be between %s and 24h", f.min)
		}
		return errors.New("must be between 0s and 24h")
	}
	f.value = d
	return nil
}

// watchSettings are cvsm run's --watch flags.
type watchSettings struct {
	debounce, grace, poll durationFlag
}

func newWatchSettings() *watchSettings {
	return &watchSettings{
		debounce: durationFlag{value: defaultDebounce},
		grace:    durationFlag{value: defaultGrace},
		poll:     durationFlag{value: defaultPoll, min: 100 * time.Millisecond},
	}
}

// watchClient is the SDK client for the values and, on the same HTTP client
// (its CA bundle and proxy), what the watcher needs to open the stream.
func (c *cli) watchClient() (*cvsm.Client, *watcher, error) {
	opts, err := c.options()
	if err != nil {
		return nil, nil, err
	}
	caFile := opts.CAFile
	if caFile == "" {
		caFile = strings.TrimSpace(os.Getenv(cvsm.EnvCAFile))
	}
	hc, err := watchHTTPClient(caFile)
	if err != nil {
		return nil, nil, err
	}
	opts.CAFile, opts.HTTPClient = "", hc
	if opts.Token == "" {
		opts.Token = strings.Trim(os.Getenv(cvsm.EnvToken), " \t\r\n")
	}
	client, err := cvsm.NewClient(opts) // checks the token, the URL, the team
	if err != nil {
		return nil, nil, err
	}
	stream := client.BaseURL() + "/teams/" + url.PathEscape(client.Team()) + "/secrets/changes?" +
		url.Values{"environment": {client.Environment()}}.Encode()
	return client, &watcher{hc: hc, url: stream, token: bearer(opts.Token)}, nil
}

// bearer is the part of token the server knows: an end-to-end team's token
// (cvsm_<64 hex>.<key>, its shape checked by NewClient) without its key
// part, which never leaves the process; any other token (a JWT has dots of
// its own) as it is.
func bearer(token string) string {
	if strings.HasPrefix(token, "cvsm_") {
		token, _, _ = strings.Cut(token, ".")
	}
	return token
}

// watchHTTPClient is the HTTP client of cvsm run --watch: the default
// transport (proxies from the environment) with caFile's CAs, if any, and no
// redirects followed (the token never goes to a Location).
func watchHTTPClient(caFile string) (*http.Client, error) {
	transport := http.DefaultTransport.(*http.Transport).Clone()
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, configErrorf("cannot read the CA file (--ca-file or %s): %v", cvsm.EnvCAFile, pathError(err))
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, configErrorf("the CA file %q (--ca-file or %s) holds no PEM certificate", caFile, cvsm.EnvCAFile)
		}
		transport.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return &http.Client{
		Transport:     transport,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}, nil
}

// runWatch is cvsm run --watch: it returns when the command exits by
// itself (or after a signal cvsm passed on), with the command's status.
func (c *cli) runWatch(argv []string, overwrite bool, ws *watchSettings) error {
	client, w, err := c.watchClient()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	values, err := client.GetAll(ctx)
	if err != nil {
		return err
	}
	env, err := childEnvironment(os.Environ(), values, overwrite)
	if err != nil {
		return err
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return startError(argv[0], err)
	}
	signals := make(chan os.Signal, 16)
	signal.Notify(signals, forwardedSignals...)
	defer signal.Stop(signals)

	start := func(env []string) (*exec.Cmd, chan error, error) {
		cmd := &exec.Cmd{Path: path, Args: argv, Env: env, Stdin: os.Stdin, Stdout: c.stdout, Stderr: c.stderr}
		if err := cmd.Start(); err != nil {
			return nil, nil, startError(argv[0], err)
		}
		waited := make(chan error, 1)
		go func() { waited <- cmd.Wait() }()
		return cmd, waited, nil
	}
	cmd, waited, err := start(env)
	if err != nil {
		return err
	}
	current := env // the environment of the command running (or the next one)

	say := func(format string, args ...any) {
		fmt.Fprintf(c.stderr, "cvsm: %s\n", oneLine(fmt.Sprintf(format, args...)))
	}
	w.poll, w.say = ws.poll.value, say
	w.notify = make(chan struct{}, 1)
	go w.run(ctx)

	type fetched struct {
		values map[string]string
		err    error
	}
	var (
		debounce   <-chan time.Time // fires once the changes have been quiet for --debounce
		fetches    = make(chan fetched, 1)
		fetching   bool
		again      bool             // a change came while fetching: fetch once more after
		restarting bool             // the command was asked to stop, to start again with next
		next       []string         // the environment of the next command
		grace      <-chan time.Time // fires when the stopping command has had --grace
		stopping   bool             // cvsm was asked to stop: no more restarts
		failing    bool             // the last fetch failed (said once until one works)
	)
	fetch := func() {
		fetching = true
		go func() {
			v, err := client.GetAll(ctx)
			fetches <- fetched{v, err}
		}()
	}
	for {
		select {
		case sig := <-signals:
			if isStopSignal(sig) {
				stopping = true
			}
			if !sentByTerminal(sig) {
				_ = cmd.Process.Signal(sig) // fails only when the command has just exited
			}
		case <-w.notify:
			debounce = time.After(ws.debounce.value)
		case <-debounce:
			debounce = nil
			if fetching {
				again = true
			} else {
				fetch()
			}
		case got := <-fetches:
			fetching = false
			if again {
				again = false
				fetch()
			}
			if got.err != nil {
				if !failing {
					say("cannot read the secrets (%s); the command keeps running with the ones it has", errorText(got.err))
				}
				failing = true
				continue
			}
			if failing {
				say("the secrets can be read again")
				failing = false
			}
			if equalValues(got.values, values) || stopping {
				continue
			}
			env, err := childEnvironment(os.Environ(), got.values, overwrite)
			if err != nil {
				say("the new secrets cannot be put in an environment (%s); the command keeps running with the ones it has", errorText(err))
				continue
			}
			values = got.values
			if slices.Equal(env, current) {
				continue // only secrets the command was not given changed
			}
			current, next = env, env
			if !restarting {
				say("the secrets changed: restarting the command")
				restarting = true
				if err := terminate(cmd.Process); err != nil {
					_ = cmd.Process.Kill()
				}
				grace = time.After(ws.grace.value)
			}
		case <-grace:
			grace = nil
			say("the command did not stop within %s: killing it", ws.grace.value)
			_ = cmd.Process.Kill()
		case err := <-waited:
			if !restarting || stopping {
				return exitStatus(err)
			}
			restarting, grace = false, nil
			if cmd, waited, err = start(next); err != nil {
				return err
			}
		}
	}
}

// errorText is an error's message for one line on stderr: an SDK error
// described as cvsm describes it (never with the token or a value).
func errorText(err error) string {
	var cerr *cvsm.Error
	if errors.As(err, &cerr) {
		return describe(cerr)
	}
	return err.Error()
}

func equalValues(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// watcher follows the change stream and sends on notify (never blocking)
// whenever the values may have changed.
type watcher struct {
	hc     *http.Client
	url    string
	token  string
	poll   time.Duration
	notify chan struct{}
	say    func(format string, args ...any)

	known   map[string]streamVersion // the versions last seen; nil before the first snapshot
	polling bool                     // said that the stream is unavailable
}

type streamVersion struct {
	Environment string `json:"environment"`
	Version     int64  `json:"version"`
}

// errNoStream is a server that answers the stream's path with 404 or 501: a
// server older than the stream, which is polled instead.
var errNoStream = errors.New("the server offers no change stream")

func (w *watcher) signal() {
	select {
	case w.notify <- struct{}{}:
	default:
	}
}

// run follows the stream until ctx ends. While the stream cannot be
// followed, each poll interval is a possible change (and a new try).
func (w *watcher) run(ctx context.Context) {
	backoff := reconnectWait
	for ctx.Err() == nil {
		var wait time.Duration
		opened := time.Now()
		connected, err := w.follow(ctx)
		if ctx.Err() != nil {
			return
		}
		if connected {
			// A stream that ends soon after it opened is opened again later each time.
			if time.Since(opened) < reconnectLong {
				backoff = min(2*backoff, reconnectMax)
			} else {
				backoff = reconnectWait
			}
			wait = backoff
			if w.polling {
				w.say("following the server's change stream again")
				w.polling = false
			}
		} else {
			if !w.polling {
				reason := "cannot open the server's change stream"
				if errors.Is(err, errNoStream) {
					reason = err.Error()
				} else if err != nil {
					reason += " (" + err.Error() + ")"
				}
				w.say("%s; checking for changes every %s", reason, w.poll)
				w.polling = true
			}
			w.known = nil // whatever changed meanwhile, the next snapshot tells
			wait = w.poll
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		if !connected {
			w.signal() // a poll: fetch and compare
		}
	}
}

// follow opens the stream and reads it until it ends; connected says whether
// it was opened (a snapshot came).
func (w *watcher) follow(ctx context.Context) (connected bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	idle := time.AfterFunc(streamIdle, cancel)
	defer idle.Stop()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.url, nil)
	if err != nil {
		return false, err
	}
	req.Header.Set("Authorization", "Bearer "+w.token)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("User-Agent", "cvsm-go/"+cvsm.Version+" (cvsm run --watch)")
	resp, err := w.hc.Do(req)
	if err != nil {
		return false, errors.New("cannot reach the server")
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusNotImplemented:
		return false, errNoStream
	case resp.StatusCode != http.StatusOK:
		return false, fmt.Errorf("HTTP %d", resp.StatusCode)
	case !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream"):
		return false, errNoStream
	}
	lines := bufio.NewReaderSize(resp.Body, 64*1024)
	var event string
	var data strings.Builder
	for {
		line, err := lines.ReadString('\n')
		if err != nil {
			if err == io.EOF || ctx.Err() != nil {
				return connected, nil // the server ended it, or it went quiet: open it again
			}
			return connected, errors.New("the stream broke")
		}
		idle.Reset(streamIdle)
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			if event != "" || data.Len() > 0 {
				if w.handle(event, data.String()) {
					connected = true
				}
				if event == "end" {
					return connected, nil
				}
			}
			event = ""
			data.Reset()
		case strings.HasPrefix(line, ":"): // a comment: the heartbeat
		default:
			field, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			switch field {
			case "event":
				event = value
			case "data":
				if data.Len() > 0 {
					data.WriteByte('\n')
				}
				data.WriteString(value)
			}
		}
	}
}

// handle takes one event; it reports whether it was the snapshot.
func (w *watcher) handle(event, data string) bool {
	switch event {
	case "snapshot":
		var snap struct {
			Secrets map[string]streamVersion `json:"secrets"`
		}
		if json.Unmarshal([]byte(data), &snap) != nil || snap.Secrets == nil {
			return false
		}
		if w.known == nil || !sameVersions(w.known, snap.Secrets) {
			w.signal() // the first, or anything missed while the stream was closed
		}
		w.known = snap.Secrets
		return true
	case "change":
		var ch struct {
			Name        string `json:"name"`
			Environment string `json:"environment"`
			Version     int64  `json:"version"`
			Deleted     bool   `json:"deleted"`
		}
		if json.Unmarshal([]byte(data), &ch) != nil {
			return false
		}
		if w.known != nil {
			if ch.Deleted {
				delete(w.known, ch.Name)
			} else {
				w.known[ch.Name] = streamVersion{ch.Environment, ch.Version}
			}
		}
		w.signal()
	}
	return false
}

func sameVersions(a, b map[string]streamVersion) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
