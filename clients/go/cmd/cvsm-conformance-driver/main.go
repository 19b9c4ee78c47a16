// Command cvsm-conformance-driver drives the Go cvsm client for the shared
// conformance harness: it reads one JSON request per line on stdin and
// writes one JSON response per line on stdout, as conformance/PROTOCOL.md
// describes. Error kinds come from the error's type (errors.Is against the
// cvsm sentinels), never from its message.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"sort"
	"time"

	"github.com/cvsm/cvsm/clients/go/cvsm"
)

type request struct {
	ID   json.RawMessage `json:"id"`
	Op   string          `json:"op"`
	Args json.RawMessage `json:"args"`
}

type response struct {
	ID     json.RawMessage `json:"id"`
	OK     bool            `json:"ok"`
	Result any             `json:"result,omitempty"`
	Error  *wireError      `json:"error,omitempty"`
}

// wireError is the protocol's error object; every key is always present,
// null when the SDK's error has no value for it.
type wireError struct {
	Kind       string  `json:"kind"`
	Message    string  `json:"message"`
	Status     *int    `json:"status"`
	RetryAfter *int64  `json:"retry_after"`
	RequestID  *string `json:"request_id"`
	Suggestion *string `json:"suggestion"`
}

// opError is a failure the driver itself reports with a fixed kind
// (unsupported op, internal problem).
type opError struct {
	kind string
	msg  string
}

func (e *opError) Error() string { return e.msg }

func main() {
	d := &driver{}
	in := bufio.NewReaderSize(os.Stdin, 1<<20)
	out := bufio.NewWriter(os.Stdout)
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	for {
		line, err := in.ReadBytes('\n')
		if len(trimSpace(line)) > 0 {
			resp, stop := d.handle(line)
			if encErr := enc.Encode(resp); encErr != nil {
				fmt.Fprintln(os.Stderr, "cvsm-conformance-driver: cannot encode response:", encErr)
			}
			_ = out.Flush()
			if stop {
				os.Exit(0)
			}
		}
		if err != nil {
			if err != io.EOF {
				fmt.Fprintln(os.Stderr, "cvsm-conformance-driver: reading stdin:", err)
			}
			_ = out.Flush()
			os.Exit(0)
		}
	}
}

type driver struct {
	client *cvsm.Client
}

// handle answers one request line; stop is true after shutdown.
func (d *driver) handle(line []byte) (resp response, stop bool) {
	var req request
	if err := json.Unmarshal(line, &req); err != nil {
		return failure(json.RawMessage("null"), &opError{"internal", "request is not valid JSON: " + err.Error()}), false
	}
	if len(req.ID) == 0 {
		req.ID = json.RawMessage("null")
	}
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(os.Stderr, "cvsm-conformance-driver: panic in %s: %v\n%s", req.Op, r, debug.Stack())
			resp, stop = failure(req.ID, &opError{"internal", fmt.Sprintf("panic: %v", r)}), false
		}
	}()
	result, err := d.dispatch(req)
	if err != nil {
		return failure(req.ID, err), false
	}
	return response{ID: req.ID, OK: true, Result: result}, req.Op == "shutdown"
}

func (d *driver) dispatch(req request) (any, error) {
	ctx := context.Background()
	switch req.Op {
	case "new_client":
		var args struct {
			Options map[string]json.RawMessage `json:"options"`
		}
		if err := decodeArgs(req.Args, &args); err != nil {
			return nil, err
		}
		if d.client != nil {
			_ = d.client.Close() // ends its change stream, if live
			d.client = nil
		}
		opts, err := buildOptions(args.Options)
		if err != nil {
			return nil, err
		}
		// Warnings (a value served stale) go to stderr; stdout is the protocol's.
		opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
		client, err := cvsm.NewClient(opts)
		if err != nil {
			return nil, err
		}
		d.client = client
		return map[string]any{"config": map[string]any{
			"base_url":       client.BaseURL(),
			"team":           client.Team(),
			"environment":    client.Environment(),
			"cache_ttl":      int64(client.CacheTTL() / time.Second),
			"timeout":        client.Timeout().Seconds(),
			"max_retries":    client.MaxRetries(),
			"stale_if_error": int64(client.StaleIfError() / time.Second),
		}}, nil

	case "get":
		var args struct {
			Name string `json:"name"`
		}
		if err := decodeArgs(req.Args, &args); err != nil {
			return nil, err
		}
		c, err := d.current()
		if err != nil {
			return nil, err
		}
		v, info, err := c.GetWithInfo(ctx, args.Name)
		if err != nil {
			return nil, err
		}
		return withStale(map[string]any{"value": v}, info), nil

	case "refresh":
		var args struct {
			Name        string  `json:"name"`
			Environment *string `json:"environment"`
		}
		if err := decodeArgs(req.Args, &args); err != nil {
			return nil, err
		}
		c, err := d.current()
		if err != nil {
			return nil, err
		}
		var opts []cvsm.RefreshOption
		if args.Environment != nil {
			opts = append(opts, cvsm.InEnvironment(*args.Environment))
		}
		v, err := c.Refresh(ctx, args.Name, opts...)
		if err != nil {
			return nil, err
		}
		return map[string]any{"value": v}, nil

	case "get_all":
		c, err := d.current()
		if err != nil {
			return nil, err
		}
		values, info, err := c.GetAllWithInfo(ctx)
		if err != nil {
			return nil, err
		}
		return withStale(map[string]any{"values": values}, info), nil

	case "inject":
		var args struct {
			Overwrite bool `json:"overwrite"`
		}
		if err := decodeArgs(req.Args, &args); err != nil {
			return nil, err
		}
		c, err := d.current()
		if err != nil {
			return nil, err
		}
		names, err := c.Inject(ctx, cvsm.Overwrite(args.Overwrite))
		if err != nil {
			return nil, err
		}
		sort.Strings(names)
		return map[string]any{"names": names}, nil

	case "clear_cache":
		c, err := d.current()
		if err != nil {
			return nil, err
		}
		c.ClearCache()
		return map[string]any{}, nil

	case "describe":
		c, err := d.current()
		if err != nil {
			return nil, err
		}
		return map[string]any{"text": fmt.Sprintf("%v", c)}, nil

	case "set_env":
		var args struct {
			Set   map[string]string `json:"set"`
			Unset []string          `json:"unset"`
		}
		if err := decodeArgs(req.Args, &args); err != nil {
			return nil, err
		}
		for name, value := range args.Set {
			if err := os.Setenv(name, value); err != nil {
				return nil, &opError{"internal", "set_env: " + err.Error()}
			}
		}
		for _, name := range args.Unset {
			if err := os.Unsetenv(name); err != nil {
				return nil, &opError{"internal", "set_env: " + err.Error()}
			}
		}
		return map[string]any{}, nil

	case "capabilities":
		return map[string]any{"capabilities": []string{"tls_ca_file", "proxy_env", "live", "refresh"}}, nil

	case "get_env":
		var args struct {
			Names []string `json:"names"`
		}
		if err := decodeArgs(req.Args, &args); err != nil {
			return nil, err
		}
		values := map[string]*string{}
		for _, name := range args.Names {
			if v, ok := os.LookupEnv(name); ok {
				values[name] = &v
			} else {
				values[name] = nil
			}
		}
		return map[string]any{"values": values}, nil

	case "shutdown":
		return map[string]any{}, nil

	default:
		return nil, &opError{"unsupported", fmt.Sprintf("unsupported op %q", req.Op)}
	}
}

// withStale adds "stale": true to a result the SDK reported as served stale
// (rule R14), and nothing otherwise.
func withStale(result map[string]any, info cvsm.Info) map[string]any {
	if info.Stale {
		result["stale"] = true
	}
	return result
}

func (d *driver) current() (*cvsm.Client, error) {
	if d.client == nil {
		return nil, &opError{"internal", "no client: send new_client first (or the last new_client failed)"}
	}
	return d.client, nil
}

// buildOptions passes to cvsm.Options only the keys present (and not null).
func buildOptions(raw map[string]json.RawMessage) (cvsm.Options, error) {
	var opts cvsm.Options
	for key, value := range raw {
		if string(value) == "null" {
			continue
		}
		var err error
		switch key {
		case "token":
			err = json.Unmarshal(value, &opts.Token)
		case "base_url":
			err = json.Unmarshal(value, &opts.BaseURL)
		case "live":
			err = json.Unmarshal(value, &opts.Live)
		case "team":
			err = json.Unmarshal(value, &opts.Team)
		case "environment":
			err = json.Unmarshal(value, &opts.Environment)
		case "cache_ttl":
			var seconds float64
			if err = json.Unmarshal(value, &seconds); err == nil {
				if seconds == 0 {
					opts.CacheTTL = cvsm.NoCache
				} else {
					opts.CacheTTL = seconds2duration(seconds)
				}
			}
		case "timeout":
			var seconds float64
			if err = json.Unmarshal(value, &seconds); err == nil {
				opts.Timeout = seconds2duration(seconds)
			}
		case "max_retries":
			var n int
			if err = json.Unmarshal(value, &n); err == nil {
				opts.MaxRetries = cvsm.Int(n)
			}
		case "ca_file":
			err = json.Unmarshal(value, &opts.CAFile)
		case "stale_if_error":
			var seconds float64
			if err = json.Unmarshal(value, &seconds); err == nil {
				if seconds == 0 {
					opts.StaleIfError = cvsm.NoStaleIfError // an explicit 0 wins over CVSM_STALE_IF_ERROR
				} else {
					opts.StaleIfError = seconds2duration(seconds)
				}
			}
		default:
			fmt.Fprintf(os.Stderr, "cvsm-conformance-driver: ignoring unknown option %q\n", key)
		}
		if err != nil {
			return cvsm.Options{}, &opError{"internal", fmt.Sprintf("option %q has the wrong type", key)}
		}
	}
	return opts, nil
}

func seconds2duration(s float64) time.Duration {
	if s > float64(math.MaxInt64)/float64(time.Second) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(s * float64(time.Second))
}

func decodeArgs(raw json.RawMessage, into any) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	if err := json.Unmarshal(raw, into); err != nil {
		return &opError{"internal", "bad args: " + err.Error()}
	}
	return nil
}

// failure maps err to the protocol's error object. SDK errors get their
// kind from errors.Is against the sentinel of each kind.
func failure(id json.RawMessage, err error) response {
	we := &wireError{Kind: "internal", Message: err.Error()}
	var oe *opError
	var ce *cvsm.Error
	switch {
	case errors.As(err, &oe):
		we.Kind = oe.kind
	case errors.As(err, &ce):
		we.Kind = kindOf(err)
		if ce.Status != 0 {
			status := ce.Status
			we.Status = &status
		}
		if ce.HasRetryAfter {
			seconds := int64(ce.RetryAfter / time.Second)
			we.RetryAfter = &seconds
		}
		if ce.RequestID != "" {
			id := ce.RequestID
			we.RequestID = &id
		}
		if ce.Suggestion != "" {
			suggestion := ce.Suggestion
			we.Suggestion = &suggestion
		}
	}
	return response{ID: id, OK: false, Error: we}
}

func kindOf(err error) string {
	switch {
	case errors.Is(err, cvsm.ErrConfiguration):
		return "configuration"
	case errors.Is(err, cvsm.ErrAuthentication):
		return "authentication"
	case errors.Is(err, cvsm.ErrPermissionDenied):
		return "permission_denied"
	case errors.Is(err, cvsm.ErrNotFound):
		return "not_found"
	case errors.Is(err, cvsm.ErrRateLimited):
		return "rate_limited"
	case errors.Is(err, cvsm.ErrAPI):
		return "api"
	case errors.Is(err, cvsm.ErrNetwork):
		return "network"
	case errors.Is(err, cvsm.ErrDecryption):
		return "decryption"
	}
	return "internal"
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t' || b[0] == '\r' || b[0] == '\n') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t' || b[len(b)-1] == '\r' || b[len(b)-1] == '\n') {
		b = b[:len(b)-1]
	}
	return b
}
