// This file owns the HTTP client a Client sends its requests with: the
// package's own transport (proxies read from the environment when the client
// is created, an optional private CA bundle) or the caller's HTTPClient, and
// in both cases a redirect policy that never follows a Location.

package cvsm

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"net/url"
	"os"

	"golang.org/x/net/http/httpproxy"
)

// newHTTPClient returns the *http.Client a new Client uses.
//
// With opts.HTTPClient it is a shallow copy of the caller's client (the
// caller's Transport and Jar are shared, the caller's value is not changed)
// that stops at redirects and has no Timeout of its own.
//
// Without it, it is a client of the package's own, on a clone of
// http.DefaultTransport whose proxy settings are read from the environment
// now. http.ProxyFromEnvironment, which DefaultTransport uses, reads the
// environment once per process and would keep the first settings for ever.
func newHTTPClient(opts Options, cfg config) (*http.Client, error) {
	if opts.HTTPClient != nil {
		hc := *opts.HTTPClient
		hc.CheckRedirect = noRedirects
		hc.Timeout = 0
		return &hc, nil
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	proxy := httpproxy.FromEnvironment().ProxyFunc()
	transport.Proxy = func(req *http.Request) (*url.URL, error) { return proxy(req.URL) }
	if cfg.caFile != "" {
		pool, err := loadCAFile(cfg.caFile)
		if err != nil {
			return nil, err
		}
		if transport.TLSClientConfig == nil {
			transport.TLSClientConfig = &tls.Config{}
		}
		transport.TLSClientConfig.RootCAs = pool
	}
	return &http.Client{Transport: transport, CheckRedirect: noRedirects}, nil
}

// noRedirects makes the http.Client hand back a 3xx answer as it is, so the
// token is never sent to a Location; the answer becomes a KindAPI error.
func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// loadCAFile reads a PEM bundle into a pool that holds only its certificates,
// so they are trusted instead of the system store, not as well as it.
func loadCAFile(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		reason := "cannot be read"
		if errors.Is(err, os.ErrNotExist) {
			reason = "does not exist"
		} else if errors.Is(err, os.ErrPermission) {
			reason = "cannot be read (permission denied)"
		}
		e := newError(KindConfiguration, "the CA file %q (option CAFile or %s) %s", path, EnvCAFile, reason)
		e.Err = err
		return nil, e
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, newError(KindConfiguration, "the CA file %q (option CAFile or %s) holds no PEM certificate", path, EnvCAFile)
	}
	return pool, nil
}
