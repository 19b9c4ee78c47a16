"""HTTPS for `cvsm-server serve --tls-cert FILE --tls-key FILE`: the server's `ssl.SSLContext`
(TLS 1.2 or later, Python's default ciphers for a server), with one-line errors for a file that
cannot be read, is not PEM, is encrypted, or holds a key that does not belong to the certificate.

The certificate file may hold the whole chain (the server's certificate first, then the
intermediates), as nginx and Let's Encrypt's `fullchain.pem` have it.
"""

from __future__ import annotations

import ssl
from pathlib import Path


class TlsError(Exception):
    """The certificate or key cannot be used; the message is one line and names the file."""


class _Encrypted(Exception):
    pass


def _no_passphrase() -> str:
    # Without a callback OpenSSL would ask for a passphrase on the terminal.
    raise _Encrypted()


def _check_readable(option: str, path: Path) -> None:
    try:
        with path.open("rb") as stream:
            stream.read(1)
    except OSError as exc:
        reason = (exc.strerror or str(exc)).lower()
        raise TlsError(f"{option} {path}: cannot read it: {reason}") from None


def server_context(cert: Path, key: Path) -> ssl.SSLContext:
    """An `ssl.SSLContext` that serves `cert` with `key`, TLS 1.2 and later only."""
    _check_readable("--tls-cert", cert)
    _check_readable("--tls-key", key)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key, password=_no_passphrase)
    except _Encrypted:
        raise TlsError(f"--tls-key {key}: the key is encrypted with a passphrase; "
                       "give the server an unencrypted key (mode 0600)") from None
    except ssl.SSLError as exc:
        raise TlsError(_explain(exc, cert, key)) from None
    return context


def _explain(exc: ssl.SSLError, cert: Path, key: Path) -> str:
    reason = (exc.reason or "").upper()
    if "KEY_VALUES_MISMATCH" in reason:
        return f"--tls-key {key} does not match the certificate in --tls-cert {cert}"
    # Which file OpenSSL choked on: load the certificate alone to tell.
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        probe.load_verify_locations(cafile=str(cert))
    except ssl.SSLError:
        return f"--tls-cert {cert}: not a PEM certificate"
    return f"--tls-key {key}: not a PEM private key"
