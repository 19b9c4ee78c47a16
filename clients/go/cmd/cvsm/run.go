package main

import (
	"context"
	"errors"
	"flag"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"sort"
	"strings"
	"syscall"
)

// run starts a command with every secret in its environment, passes it the
// signals cvsm receives, and exits with its status.
func (c *cli) run(args []string) error {
	flags := c.newFlagSet("run")
	overwrite := flags.Bool("overwrite", false, "")
	watch := flags.Bool("watch", false, "")
	ws := newWatchSettings()
	flags.Var(&ws.debounce, "debounce", "")
	flags.Var(&ws.grace, "grace", "")
	flags.Var(&ws.poll, "poll", "")
	if err := flags.Parse(args); err != nil {
		return c.flagError("run", err)
	}
	argv := flags.Args()
	if len(argv) == 0 {
		return usagef("run", "run needs a COMMAND: cvsm run [--overwrite] [--watch] -- COMMAND [ARGS...]")
	}
	if !*watch {
		var only string
		flags.Visit(func(f *flag.Flag) {
			if f.Name == "debounce" || f.Name == "grace" || f.Name == "poll" {
				only = f.Name
			}
		})
		if only != "" {
			return usagef("run", "--%s is for --watch only", only)
		}
	} else {
		return c.runWatch(argv, *overwrite, ws)
	}
	client, err := c.client()
	if err != nil {
		return err
	}
	secrets, err := client.GetAll(context.Background())
	if err != nil {
		return err
	}
	env, err := childEnvironment(os.Environ(), secrets, *overwrite)
	if err != nil {
		return err
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return startError(argv[0], err)
	}
	cmd := &exec.Cmd{Path: path, Args: argv, Env: env, Stdin: os.Stdin, Stdout: c.stdout, Stderr: c.stderr}

	// Catch the signals before the command starts, so that none arriving
	// in between kills cvsm and leaves the command behind.
	signals := make(chan os.Signal, 16)
	signal.Notify(signals, forwardedSignals...)
	defer signal.Stop(signals)
	if err := cmd.Start(); err != nil {
		return startError(argv[0], err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	for {
		select {
		case sig := <-signals:
			if !sentByTerminal(sig) {
				_ = cmd.Process.Signal(sig) // fails only when the command has just exited
			}
		case err := <-waited:
			return exitStatus(err)
		}
	}
}

// childEnvironment is environ with the secrets added: a variable already in
// environ (even empty) keeps its value unless overwrite is true. It checks
// every secret before anything is started.
func childEnvironment(environ []string, secrets map[string]string, overwrite bool) ([]string, error) {
	if err := checkForEnvironment(secrets); err != nil {
		return nil, err
	}
	env := make([]string, 0, len(environ)+len(secrets))
	present := make(map[string]bool, len(environ))
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if value, isSecret := secrets[name]; isSecret && name != "" {
			present[name] = true
			if overwrite {
				kv = name + "=" + value
			}
		}
		env = append(env, kv)
	}
	added := make([]string, 0, len(secrets))
	for name := range secrets {
		if !present[name] {
			added = append(added, name)
		}
	}
	sort.Strings(added)
	for _, name := range added {
		env = append(env, name+"="+secrets[name])
	}
	return env, nil
}

// startError is the answer when the command cannot be started: 127 when it
// does not exist, 126 when it cannot be run, as POSIX shells answer.
func startError(name string, err error) error {
	code := exitCannotExec
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) || errors.Is(err, exec.ErrDot) {
		code = exitNoCommand
	}
	reason := err.Error()
	var perr *fs.PathError
	var eerr *exec.Error
	switch {
	case errors.As(err, &eerr):
		reason = eerr.Err.Error()
	case errors.As(err, &perr):
		reason = perr.Err.Error()
	}
	return &exitError{code: code, msg: "cannot run " + quoteArg(name) + ": " + reason}
}

func quoteArg(s string) string {
	if s != "" && !strings.ContainsAny(s, " \t\n\"'\\") {
		return s
	}
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, "\t", `\t`).Replace(s) + `"`
}

// exitStatus turns the command's end into cvsm's: its exit status, or
// 128+N when signal N killed it.
func exitStatus(err error) error {
	if err == nil {
		return nil
	}
	var xerr *exec.ExitError
	if !errors.As(err, &xerr) {
		return err
	}
	if ws, ok := xerr.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return &exitError{code: 128 + int(ws.Signal())}
	}
	return &exitError{code: xerr.ExitCode()}
}
