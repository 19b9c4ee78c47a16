package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
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

// render writes secrets in format: "dotenv", "shell" or "json", byte for
// byte as the server's export of the same format writes them. The first two
// are checked whole before anything is written.
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
	prefix, quote := "", dotenvQuote
	if format == "shell" {
		prefix, quote = "export ", ansiCQuote
	}
	var b bytes.Buffer
	for _, name := range sortedNames(secrets) {
		b.WriteString(prefix)
		b.WriteString(name)
		b.WriteByte('=')
		b.WriteString(quote(secrets[name]))
		b.WriteByte('\n')
	}
	return b.Bytes(), nil
}

// dotenvQuote is value as it follows NAME= in a .env file, on one line
// whatever the value holds (the server's rule, cvsm_server/dotenv.py): in
// single quotes as it is when it holds no ', LF or CR, no two backslashes in
// a row and does not end with a backslash; otherwise in double quotes with
// \, ", $ and backtick escaped, LF written \n and CR \r. A value ending with
// a backslash gets a comment holding a " after its closing quote, which stops
// Node's dotenv from reading on into the next lines.
func dotenvQuote(value string) string {
	if !strings.ContainsAny(value, "'\n\r") && !strings.Contains(value, `\\`) && !strings.HasSuffix(value, `\`) {
		return "'" + value + "'"
	}
	quoted := `"` + dotenvEscapes.Replace(value) + `"`
	if strings.HasSuffix(value, `\`) {
		quoted += ` # ends with a backslash: "\"`
	}
	return quoted
}

var dotenvEscapes = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "$", `\$`, "`", "\\`", "\n", `\n`, "\r", `\r`)

// ansiCQuote is value as it follows NAME= in the shell export: $'...', in
// which bash and zsh read every character back exactly and expand nothing
// (the server's rule, cvsm_server/shell_export.py): \ is \\, ' is \x27, LF
// \n, CR \r, tab \t, other ASCII control characters and DEL \xHH; every
// other byte as it is.
func ansiCQuote(value string) string {
	var b strings.Builder
	b.WriteString("$'")
	for i := 0; i < len(value); i++ {
		switch c := value[i]; {
		case c == '\\':
			b.WriteString(`\\`)
		case c == '\'':
			b.WriteString(`\x27`)
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\r':
			b.WriteString(`\r`)
		case c == '\t':
			b.WriteString(`\t`)
		case c < ' ' || c == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('\'')
	return b.String()
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
