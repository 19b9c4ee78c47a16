//go:build unix

package main

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// serverExport is the reference server's own export of team's environment
// in format, as text.
func serverExport(t *testing.T, s *testServer, team, environment, format string) string {
	t.Helper()
	query := url.Values{"environment": {environment}, "format": {format}}
	req, err := http.NewRequest("GET", s.api+"/teams/"+team+"/secrets/export?"+query.Encode(), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.token)
	resp, err := (&http.Client{Timeout: 60 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the server's %s export: %d %v", format, resp.StatusCode, err)
	}
	return string(body)
}

func TestExportIsTheServersExportByteForByte(t *testing.T) {
	s := needServer(t)
	t.Parallel()
	// The seeded team, and a team of values chosen to break quoting: a line break that would
	// start a variable of its own in a line-based reader, backslashes before a quote and at the
	// end, every ASCII control character but NUL, DEL, Unicode line separators.
	slug := "export-" + randomHex(4)
	created, err := s.call("POST", "/teams", s.jwt, map[string]string{"name": "Export", "slug": slug}, http.StatusCreated)
	if err != nil {
		t.Fatal(err)
	}
	teamID, _ := created["team"].(map[string]any)["id"].(string)
	var controls strings.Builder
	for c := 1; c < 0x20; c++ {
		controls.WriteByte(byte(c))
	}
	hostile := map[string]string{
		"INJECT":       "x\nINJECTED=yes\rALSO=yes\r\n",
		"BACKSLASH":    `ends with a backslash\`,
		"TWO":          `two \\ in a row`,
		"BEFORE_QUOTE": `a \' b \" c`,
		"EXPANSIONS":   "$HOME ${HOME} $(id) `id` !! \\$",
		"BOTH_QUOTES":  `it's "both"`,
		"CONTROLS":     controls.String() + "\x7f",
		"SEPARATORS":   "a\u2028b\u2029c\u0085d\x0be\x0cf",
		"EMPTY":        "",
		"HASH":         "#not a comment",
		"PEM":          "-----BEGIN KEY-----\nMIIE\n-----END KEY-----\n",
	}
	for name, value := range hostile {
		if _, err := s.call("POST", "/teams/"+teamID+"/secrets", s.jwt,
			map[string]string{"name": name, "value": value, "environment": "staging"}, http.StatusCreated); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct{ team, environment string }{{s.teamSlug, "production"}, {slug, "staging"}} {
		for _, format := range []string{"dotenv", "shell"} {
			args := []string{"export", "--team", tc.team, "-e", tc.environment, "--format", format}
			r := runCLI(t, s.env(), args...)
			expectCode(t, r, 0, args...)
			if want := serverExport(t, s, tc.team, tc.environment, format); r.stdout != want {
				t.Errorf("cvsm %q:\n%s\nthe server's export:\n%s", args, r.stdout, want)
			}
			if got := strings.Count(r.stdout, "\n"); tc.team == slug && got != len(hostile) {
				t.Errorf("cvsm %q: %d lines for %d secrets", args, got, len(hostile))
			}
		}
	}
}
