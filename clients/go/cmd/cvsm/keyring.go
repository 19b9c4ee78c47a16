package main

// Where cvsm login keeps its token: the OS keyring where there is one
// (macOS Keychain, Windows Credential Manager, the Secret Service over D-Bus
// on Linux and the BSDs: github.com/zalando/go-keyring), under the service
// "cvsm" and the server's address as the account; else the 0600 file of
// the stored logins (credentials.json), as gh and doppler fall back to.
// The file always keeps the login's entry without the secret part (server,
// token name and prefix, team, reach) for whoami and setup; its token field
// is empty, and "keyring" true, when the keyring holds the token.
//
// CVSM_KEYRING=off keeps the token in the file (no keyring is asked).

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/zalando/go-keyring"
)

const (
	keyringService = "cvsm"
	envKeyring     = "CVSM_KEYRING"
	// keyringTimeout bounds one keyring call: a Secret Service that does
	// not answer (or waits on an unlock prompt nobody sees) must not hang
	// a 'cvsm run' in a script.
	keyringTimeout = 20 * time.Second
)

// keyringOff says whether CVSM_KEYRING turns the keyring off.
func keyringOff() bool {
	switch strings.ToLower(strings.TrimSpace(os.Getenv(envKeyring))) {
	case "off", "0", "false", "no", "file":
		return true
	}
	return false
}

// withTimeout runs f, giving up after keyringTimeout.
func withTimeout[T any](f func() (T, error)) (T, error) {
	type answer struct {
		v   T
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		v, err := f()
		ch <- answer{v, err}
	}()
	select {
	case a := <-ch:
		return a.v, a.err
	case <-time.After(keyringTimeout):
		var zero T
		return zero, fmt.Errorf("the keyring did not answer within %s", keyringTimeout)
	}
}

func keyringSet(server, token string) error {
	_, err := withTimeout(func() (struct{}, error) { return struct{}{}, keyring.Set(keyringService, server, token) })
	return err
}

func keyringGet(server string) (string, error) {
	return withTimeout(func() (string, error) { return keyring.Get(keyringService, server) })
}

// keyringDelete deletes server's token from the keyring; none there is no error.
func keyringDelete(server string) error {
	_, err := withTimeout(func() (struct{}, error) { return struct{}{}, keyring.Delete(keyringService, server) })
	if errors.Is(err, keyring.ErrNotFound) {
		return nil
	}
	return err
}

// keyringReason is a keyring error as one line for stderr (it never holds
// the token: the libraries' errors name the service at most).
func keyringReason(err error) string {
	return oneLine(err.Error())
}

// storeLogin stores server's login: the token in the keyring where one
// takes it, else in the file; the entry without the token in the file
// either way. It says on stderr which was used (never the token).
func (c *cli) storeLogin(creds *credentials, path, server string, cred *credential) error {
	old := creds.Servers[server]
	token := cred.Token
	stored := *cred
	where := ""
	switch {
	case keyringOff():
		where = fmt.Sprintf("stored in %s (readable by you only; %s=off)", path, envKeyring)
	default:
		if err := keyringSet(server, token); err != nil {
			where = fmt.Sprintf("stored in %s (readable by you only): no OS keyring could be used (%s)", path, keyringReason(err))
		} else {
			stored.Token, stored.Keyring = "", true
			where = fmt.Sprintf("stored in the OS keyring (service %q, account %q)", keyringService, server)
		}
	}
	creds.Servers[server] = &stored
	creds.Default = server
	if err := creds.save(path); err != nil {
		if stored.Keyring {
			_ = keyringDelete(server) // no entry in the file points at it
		}
		return err
	}
	// The previous login's token went to the keyring and this one did not:
	// it is revoked already (login), and must not linger there.
	if old != nil && old.Keyring && !stored.Keyring {
		_ = keyringDelete(server)
	}
	fmt.Fprintf(c.stderr, "cvsm: the token %q is %s\n", cred.TokenName, where)
	return nil
}

// storedToken is the token of a stored login: from the keyring when the
// entry says it is there, else from the file.
func storedToken(server string, cred *credential) (string, error) {
	if cred == nil {
		return "", nil
	}
	if cred.Token != "" || !cred.Keyring {
		return cred.Token, nil
	}
	token, err := keyringGet(server)
	if errors.Is(err, keyring.ErrNotFound) {
		return "", &exitError{code: exitAuth, msg: "the token of the login to " + server + " is no longer in the OS keyring: run 'cvsm login --server " + server + "' again"}
	}
	if err != nil {
		return "", configErrorf("the token of the login to %s is in the OS keyring, which cannot be read here (%s): unlock it, or run 'cvsm login' again (%s=off keeps the token in a 0600 file)", server, keyringReason(err), envKeyring)
	}
	return token, nil
}

// forgetLogin deletes server's login from the keyring and the file.
func (c *cli) forgetLogin(creds *credentials, path, server string) error {
	cred := creds.Servers[server]
	if cred != nil && cred.Keyring {
		if err := keyringDelete(server); err != nil {
			// The token is revoked by now: a copy left in the keyring is
			// dead, so this is said, not failed on.
			fmt.Fprintf(c.stderr, "cvsm: the revoked token could not be deleted from the OS keyring (%s): delete the entry %q/%q there yourself\n", keyringReason(err), keyringService, server)
		}
	}
	delete(creds.Servers, server)
	if creds.Default == server {
		creds.Default = ""
	}
	return creds.save(path)
}
