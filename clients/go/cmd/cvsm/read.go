package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"sort"
	"strings"
)

// get prints one value, byte for byte; a newline only on a terminal.
func (c *cli) get(args []string) error {
	fs := c.newFlagSet("get")
	names, err := parseInterspersed(fs, args)
	if err != nil {
		return c.flagError("get", err)
	}
	switch {
	case len(names) == 0:
		return usagef("get", "get needs the NAME of a secret")
	case len(names) > 1:
		return usagef("get", "get takes one NAME, got %d arguments", len(names))
	}
	client, err := c.client()
	if err != nil {
		return err
	}
	value, err := client.Get(context.Background(), names[0])
	if err != nil {
		return err
	}
	if isTerminal(c.stdout) && !strings.HasSuffix(value, "\n") {
		value += "\n"
	}
	_, err = io.WriteString(c.stdout, value)
	return err
}

// export prints every secret in the format asked for.
func (c *cli) export(args []string) error {
	fs := c.newFlagSet("export")
	format := fs.String("format", "dotenv", "")
	rest, err := parseInterspersed(fs, args)
	if err != nil {
		return c.flagError("export", err)
	}
	if len(rest) > 0 {
		return usagef("export", "export takes no arguments, got %q", rest[0])
	}
	switch *format {
	case "dotenv", "shell", "json":
	default:
		return usagef("export", "unknown format %q: use dotenv, shell or json", *format)
	}
	client, err := c.client()
	if err != nil {
		return err
	}
	secrets, err := client.GetAll(context.Background())
	if err != nil {
		return err
	}
	out, err := render(*format, secrets)
	if err != nil {
		return err
	}
	_, err = c.stdout.Write(out)
	return err
}

// render writes secrets in format: "dotenv", "shell" or "json". The first
// two are checked whole before anything is written.
func render(format string, secrets map[string]string) ([]byte, error) {
	if format == "json" {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false) // "<" stays "<": the output is for people and programs, not HTML
		enc.SetIndent("", "  ")
		if err := enc.Encode(secrets); err != nil { // map keys come out sorted
			return nil, err
		}
		return b.Bytes(), nil
	}
	if err := checkForEnvironment(secrets); err != nil {
		return nil, err
	}
	prefix := ""
	if format == "shell" {
		prefix = "export "
	}
	var b bytes.Buffer
	for _, name := range sortedNames(secrets) {
		b.WriteString(prefix)
		b.WriteString(name)
		b.WriteByte('=')
		b.WriteString(shellQuote(secrets[name]))
		b.WriteByte('\n')
	}
	return b.Bytes(), nil
}

// shellQuote puts s in single quotes, inside which a POSIX shell takes every
// character literally; a ' ends the quotes, is escaped, and opens new ones.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// isVariableName reports whether name is a portable environment variable
// name: [A-Za-z_][A-Za-z0-9_]*.
func isVariableName(name string) bool {
	if name == "" {
		return false
	}
	for i, r := range name {
		switch {
		case r == '_', r >= 'A' && r <= 'Z', r >= 'a' && r <= 'z':
		case r >= '0' && r <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// checkForEnvironment checks that every secret can be a shell or process
// variable: a variable name, and a value without NUL (which neither a
// process environment nor a shell variable can hold). The message names the
// secret, never its value.
func checkForEnvironment(secrets map[string]string) error {
	for _, name := range sortedNames(secrets) {
		if !isVariableName(name) {
			return configErrorf("secret %q is not a valid variable name (letters, digits and _, not starting with a digit); nothing was done", name)
		}
		if strings.IndexByte(secrets[name], 0) >= 0 {
			return configErrorf("secret %q holds a NUL character, which no environment variable can hold; nothing was done", name)
		}
	}
	return nil
}

func sortedNames(m map[string]string) []string {
	names := make([]string, 0, len(m))
	for name := range m {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// isTerminal reports whether w is a terminal (a character device, which
// /dev/null also is: a newline there harms nothing).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	info, err := f.Stat()
	return err == nil && info.Mode()&os.ModeCharDevice != 0
}
