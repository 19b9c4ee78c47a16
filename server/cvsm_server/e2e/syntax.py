"""The syntax of what end-to-end clients seal (docs/e2e.md): envelopes, key wraps, passphrase and
recovery wraps, shares, public keys, links and anchors, each a canonical base64url form checked
here with its Indonesian message; the server never opens any of them."""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import uuid
from dataclasses import dataclass

from ..core.errors import BadRequest, Conflict
from ..core.i18n import N_, Text

KEY_BYTES = 32
NONCE_BYTES = 12
TAG_BYTES = 16
SALT_BYTES = 16
MIN_ITERATIONS = 600_000
MAX_ITERATIONS = 10_000_000  # a stored wrap must not make a client hang
MAX_NUMBER = 2**31 - 1
MAX_VALUE_BYTES = 65536  # secrets.MAX_VALUE_BYTES: the plaintext's limit, sealed or not


def _b64u_length(size: int) -> int:
    return (size * 4 + 2) // 3


# Canonical base64url without padding, as regular expressions (the same in the OpenAPI
# document): a last character of a group of 2 (3) carries 4 (2) bits that must be zero.
_B64U = "[A-Za-z0-9_-]"
_LAST_OF_2 = "[AQgw]"
_LAST_OF_3 = "[AEIMQUYcgkosw048]"


def _fixed(size: int) -> str:
    """`size` bytes in canonical base64url."""
    whole, rest = divmod(size, 3)
    tail = {0: "", 1: f"{_B64U}{_LAST_OF_2}", 2: f"{_B64U}{{2}}{_LAST_OF_3}"}[rest]
    return f"(?:{_B64U}{{{whole * 4}}}{tail})"


def _varying(least: int) -> str:
    """At least `least` bytes in canonical base64url (the upper bound is a length limit)."""
    return (f"(?={_B64U}{{{_b64u_length(least)}}})"
            f"(?:{_B64U}{{4}})*(?:{_B64U}{_LAST_OF_2}|{_B64U}{{2}}{_LAST_OF_3})?")


_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_NUMBER = r"[1-9][0-9]{0,9}"
_ITERATIONS = r"(?:[6-9][0-9]{5}|[1-9][0-9]{6}|10000000)"  # 600,000 to 10,000,000
_KEY = _fixed(KEY_BYTES)                      # 43 characters
_NONCE = _fixed(NONCE_BYTES)                  # 16
_SALT = _fixed(SALT_BYTES)                    # 22
_WRAPPED = _fixed(KEY_BYTES + TAG_BYTES)      # 64: 32 bytes and the tag
_SEALED = _varying(TAG_BYTES)                 # a value's bytes and the tag
ENVELOPE_RE = re.compile(
    rf"cvsm-e2e1\.({_NUMBER})\.({_UUID})\.({_NUMBER})\.({_NONCE})\.({_SEALED})\Z")
WRAP_RE = re.compile(rf"cvsm-wrap1\.({_KEY})\.({_NONCE})\.({_WRAPPED})\Z")
PASS_RE = re.compile(rf"cvsm-pass1\.({_ITERATIONS})\.({_SALT})\.({_NONCE})\.({_WRAPPED})\Z")
REC_RE = re.compile(rf"cvsm-rec1\.({_NONCE})\.({_WRAPPED})\Z")
SHARE_RE = re.compile(rf"cvsm-share1\.({_NONCE})\.({_SEALED})\Z")
PUBLIC_KEY_RE = re.compile(rf"({_KEY})\Z")
AUTH_RE = re.compile(rf"({_KEY})\Z")  # HMAC-SHA256: 32 bytes
LINK_RE = re.compile(rf"cvsm-link1\.({_NONCE})\.({_WRAPPED})\Z")
# An anchor seals "<key version>:<43 characters>": 45 to 54 bytes, and the tag.
ANCHOR_RE = re.compile(rf"cvsm-anchor1\.({_NONCE})\.({_varying(45 + TAG_BYTES)})\Z")
MAX_ANCHOR_LENGTH = len("cvsm-anchor1.") + _b64u_length(NONCE_BYTES) + 1 + _b64u_length(54 + TAG_BYTES)
# The X25519 public keys of low order (docs/e2e.md): with any private key their shared secret is
# all zeros, so nothing wrapped to them is secret and every client refuses to wrap to them. The
# u-coordinates 0, 1, the two points of order 8, p-1, p and p+1, each also with the top bit set.
_P = 2**255 - 19
LOW_ORDER_KEYS = frozenset(
    (u + (high << 255)).to_bytes(32, "little")
    for high in (0, 1)
    for u in (0, 1, 325606250916557431795983626356110631294008115727848805560023387167927233504,
              39382357235489614581723060781553021112529911719440698176882885853963445705823,
              _P - 1, _P, _P + 1))
ENVELOPE_PREFIX = "cvsm-e2e1."
# The longest ciphertext: a value of MAX_VALUE_BYTES and its tag. This, not an envelope's
# length, is the value's limit (an envelope's numbers may be shorter than 10 digits).
MAX_SEALED_LENGTH = _b64u_length(MAX_VALUE_BYTES + TAG_BYTES)  # 87,403 characters
# The longest envelope: the prefix, two 10-digit numbers, an id, the nonce and the largest value.
MAX_ENVELOPE_LENGTH = (len(ENVELOPE_PREFIX) + 10 + 1 + 36 + 1 + 10 + 1 + _b64u_length(NONCE_BYTES)
                       + 1 + _b64u_length(MAX_VALUE_BYTES + TAG_BYTES))
MAX_SHARE_LENGTH = (len("cvsm-share1.") + _b64u_length(NONCE_BYTES) + 1
                    + _b64u_length(MAX_VALUE_BYTES + TAG_BYTES))
# The refusals: the API's Indonesian texts (the contract), marked for the catalogs so that a
# page shows them in its own language (`core.i18n`); those with values are raised as
# `Text(TEMPLATE, name=...)`, which the API's JSON shows filled in, unchanged.
BAD_ENVELOPE = N_("Nilai untuk tim end-to-end harus amplop terenkripsi "
                  "cvsm-e2e1.<versi kunci>.<id secret>.<versi>.<nonce>.<ciphertext> (docs/e2e.md)")
BAD_WRAP = N_("Kolom '{name}' harus kunci tim terbungkus "
              "cvsm-wrap1.<kunci efemeral>.<nonce>.<ciphertext>")
BAD_PASS = N_("Kolom 'wrapped_private_key' harus cvsm-pass1.<iterasi>.<salt>.<nonce>.<ciphertext> "
              "dengan {low} sampai {high} iterasi")
BAD_REC = N_("Kolom 'recovery_wrapped_private_key' harus cvsm-rec1.<nonce>.<ciphertext>")
BAD_SHARE = N_("Nilai tautan berbagi tim end-to-end harus amplop cvsm-share1.<nonce>.<ciphertext>")
BAD_PUBLIC_KEY = N_("Kolom '{name}' harus kunci publik X25519 (32 byte, base64url tanpa padding)")
LOW_ORDER_KEY = N_("Kolom '{name}' berisi kunci publik X25519 berorde rendah (misalnya nol "
                   "semua): tidak ada yang aman dibungkus untuknya")
BAD_AUTH = N_("Kolom '{name}' harus autentikasi penerima (HMAC-SHA256, 32 byte, base64url tanpa "
              "padding)")
BAD_LINK = N_("Kolom 'link' harus tautan kunci cvsm-link1.<nonce>.<ciphertext>")
BAD_ANCHOR = N_("Kolom 'anchor' harus jangkar cvsm-anchor1.<nonce>.<ciphertext>")
NO_ANCHOR = N_("Anda belum menyimpan jangkar untuk tim end-to-end ini")
STALE_KEY_VERSION = N_("Nilai disegel dengan versi kunci {got}, padahal versi kunci tim sekarang "
                       "{want}: ambil kunci tim lagi lalu segel ulang")
STALE_WRAP_VERSION = N_("Kunci tim yang dibungkus versi {got}, padahal versi kunci tim sekarang "
                        "{want}: ambil kunci tim lagi lalu ulangi")
WRONG_SECRET = N_("Amplop disegel untuk secret lain, bukan secret yang sedang ditulis")
WRONG_VERSION = N_("Amplop disegel untuk versi {got}, padahal yang ditulis versi {want}: "
                   "secret sudah berubah, baca lagi lalu segel ulang")
NOT_E2E = N_("Tim ini bukan tim end-to-end")
NO_USER_KEY = N_("Kunci end-to-end Anda belum disiapkan (PUT /api/v1/me/e2e-key)")
USER_KEY_EXISTS = N_("Kunci end-to-end Anda sudah ada dengan kunci publik lain; kirim "
                     "\"replace\": true untuk menggantinya (akses Anda ke tim end-to-end hilang "
                     "sampai diberikan lagi)")
NO_WRAP = N_("Anda belum diberi akses ke kunci tim end-to-end ini")
MEMBER_NOT_FOUND = N_("Anggota tidak ditemukan")
MEMBER_HAS_NO_KEY = N_("Anggota ini belum menyiapkan kunci end-to-end")
MEMBER_KEY_CHANGED = N_("Kunci publik anggota ini sudah berganti sejak halaman dimuat: muat ulang, "
                        "bandingkan sidik jarinya, lalu ulangi")
RECIPIENT_KEY_CHANGED = N_("Kunci publik {count} penerima kunci baru sudah berganti sejak "
                           "halaman dimuat: muat ulang lalu ulangi")
REKEY_VERSION = N_("Versi kunci baru harus {want} (versi sekarang ditambah satu)")
REKEY_RECIPIENTS = N_("Daftar penerima kunci baru tidak cocok dengan anggota yang punya akses "
                      "dan token tim yang aktif (kurang {missing}, tidak dikenal {unknown}): muat "
                      "ulang lalu ulangi")
REKEY_SECRETS = N_("Daftar nilai yang disegel ulang tidak cocok dengan secret tim yang aktif "
                   "(kurang {missing}, tidak dikenal {unknown}): muat ulang lalu ulangi")
DUPLICATE = N_("Kolom '{name}' berisi entri ganda")
ONE_RECIPIENT = N_("Setiap entri 'wraps' memerlukan tepat satu dari 'user_id' dan 'token_id'")


def _canonical(text: str, size: int | None = None) -> bytes | None:
    """The bytes of canonical base64url `text` (of `size` bytes when given), or None."""
    try:
        data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        return None
    if base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii") != text:
        return None
    if size is not None and len(data) != size:
        return None
    return data


def b64u(data: bytes) -> str:
    return base64.urlsafe_b64encode(bytes(data)).rstrip(b"=").decode("ascii")


@dataclass(frozen=True, slots=True)
class Envelope:
    """What the server reads of a sealed value: whom it was sealed for. Never printed whole."""

    key_version: int
    secret_id: uuid.UUID
    version: int

    def __repr__(self) -> str:
        return f"Envelope(key_version={self.key_version}, secret_id={self.secret_id}, " \
               f"version={self.version})"


def parse_envelope(text: object) -> Envelope:
    """The key version, secret id and version of a `cvsm-e2e1.` envelope; 400 when `text` is
    not one (canonical base64url, a 12-byte nonce, a ciphertext of a value of at most 65,536
    bytes and its tag)."""
    match = ENVELOPE_RE.match(text) if isinstance(text, str) and len(text) <= MAX_ENVELOPE_LENGTH \
        else None
    if match is None or len(match[5]) > MAX_SEALED_LENGTH \
            or _canonical(match[4], NONCE_BYTES) is None or _canonical(match[5]) is None:
        raise BadRequest(BAD_ENVELOPE)
    return Envelope(int(match[1]), uuid.UUID(match[2]), int(match[3]))


def check_envelope(text: object, *, key_version: int, secret_id: uuid.UUID, version: int) -> str:
    """`text`, an envelope sealed for `version` of `secret_id` under key version `key_version`
    (the team's current one); 400 when it is not an envelope, 409 when it names other ones."""
    envelope = parse_envelope(text)
    if envelope.key_version != key_version:
        raise Conflict(Text(STALE_KEY_VERSION, got=envelope.key_version, want=key_version))
    if envelope.secret_id != secret_id:
        raise Conflict(WRONG_SECRET)
    if envelope.version != version:
        raise Conflict(Text(WRONG_VERSION, got=envelope.version, want=version))
    return text  # type: ignore[return-value]


def check_wrap(text: object, name: str = "wrapped_key") -> str:
    match = WRAP_RE.match(text) if isinstance(text, str) else None
    if match is None or _canonical(match[1], KEY_BYTES) is None \
            or _canonical(match[2], NONCE_BYTES) is None \
            or _canonical(match[3], KEY_BYTES + TAG_BYTES) is None:
        raise BadRequest(Text(BAD_WRAP, name=name))
    return text  # type: ignore[return-value]


def check_passphrase_wrap(text: object) -> str:
    match = PASS_RE.match(text) if isinstance(text, str) else None
    if match is None or not MIN_ITERATIONS <= int(match[1]) <= MAX_ITERATIONS \
            or _canonical(match[2], SALT_BYTES) is None \
            or _canonical(match[3], NONCE_BYTES) is None \
            or _canonical(match[4], KEY_BYTES + TAG_BYTES) is None:
        raise BadRequest(Text(BAD_PASS, low=MIN_ITERATIONS, high=MAX_ITERATIONS))
    return text  # type: ignore[return-value]


def check_recovery_wrap(text: object) -> str:
    match = REC_RE.match(text) if isinstance(text, str) else None
    if match is None or _canonical(match[1], NONCE_BYTES) is None \
            or _canonical(match[2], KEY_BYTES + TAG_BYTES) is None:
        raise BadRequest(BAD_REC)
    return text  # type: ignore[return-value]


def check_share(text: object) -> str:
    """A `cvsm-share1.` envelope (its key is in the link's fragment, never here)."""
    match = SHARE_RE.match(text) if isinstance(text, str) else None
    if match is None or len(text) > MAX_SHARE_LENGTH or _canonical(match[1], NONCE_BYTES) is None \
            or _canonical(match[2]) is None:
        raise BadRequest(BAD_SHARE)
    return text  # type: ignore[return-value]


def check_public_key(text: object, name: str = "public_key") -> bytes:
    """The 32 bytes of an X25519 public key in base64url, not one of low order."""
    match = PUBLIC_KEY_RE.match(text) if isinstance(text, str) else None
    key = _canonical(match[1], KEY_BYTES) if match else None
    if key is None:
        raise BadRequest(Text(BAD_PUBLIC_KEY, name=name))
    if key in LOW_ORDER_KEYS:
        raise BadRequest(Text(LOW_ORDER_KEY, name=name))
    return key


def check_auth(text: object, name: str = "auth") -> str | None:
    """A recipient's authentication (32 bytes in base64url), or None when not given: the server
    cannot check it (it has no team key); clients treat a wrap without one as unauthenticated."""
    if text is None:
        return None
    match = AUTH_RE.match(text) if isinstance(text, str) else None
    if match is None or _canonical(match[1], KEY_BYTES) is None:
        raise BadRequest(Text(BAD_AUTH, name=name))
    return text  # type: ignore[return-value]


def check_link(text: object) -> str | None:
    """A back-link `cvsm-link1.` (the previous key version's key sealed under the new one), or
    None when not given."""
    if text is None:
        return None
    match = LINK_RE.match(text) if isinstance(text, str) else None
    if match is None or _canonical(match[1], NONCE_BYTES) is None \
            or _canonical(match[2], KEY_BYTES + TAG_BYTES) is None:
        raise BadRequest(BAD_LINK)
    return text  # type: ignore[return-value]


def check_anchor(text: object) -> str:
    """A member's anchor `cvsm-anchor1.` (the server cannot open it)."""
    match = ANCHOR_RE.match(text) if isinstance(text, str) else None
    if match is None or len(text) > MAX_ANCHOR_LENGTH \
            or _canonical(match[1], NONCE_BYTES) is None or _canonical(match[2]) is None:
        raise BadRequest(BAD_ANCHOR)
    return text  # type: ignore[return-value]


def fingerprint(public_key: bytes) -> str:
    """The first 16 bytes of SHA-256(public key) in hex, in groups of 4 separated by spaces:
    what members compare out of band before a grant."""
    digest = hashlib.sha256(bytes(public_key)).hexdigest()[:32]
    return " ".join(digest[i:i + 4] for i in range(0, 32, 4))


def looks_sealed(value: str) -> bool:
    """Whether a value is written as an envelope (its size is then the envelope's rule)."""
    return value.startswith(ENVELOPE_PREFIX)
