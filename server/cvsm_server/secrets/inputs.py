"""The input rule of a secret, shared by create, update, bulk create and the `.env` import: names,
environments, types, values (sealed or not), descriptions and client-chosen ids, each refused
with its Indonesian message."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

from ..core.environments import ENVIRONMENTS, INVALID_ENVIRONMENT
from ..core.errors import BadRequest
from ..core.i18n import Text
from ..core.inputs import check_text
from ..e2e import syntax as e2e_syntax

NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,254}\Z")
TYPES = ("credential", "api_key", "certificate", "connection_string", "password", "token", "other")
EXPORT_FORMATS = ("dotenv", "shell", "json")  # .env file (`dotenv`), `shell_export`, JSON object
MAX_VALUE_BYTES = 65536
MAX_DESCRIPTION = 1000
MAX_VERSION = 2**31 - 1
INVALID_NAME = ("Nama secret harus diawali huruf atau garis bawah, lalu huruf, angka, atau garis "
                "bawah (maksimal 255 karakter)")
INVALID_EXPORT_FORMAT = "Format ekspor harus dotenv, shell, atau json"
E2E_TEXT_EXPORT = ("Tim end-to-end: server tidak dapat membuka nilai, jadi ekspor .env dan shell "
                   "dibuat di klien; minta format=json (amplop terenkripsi per nama) lalu buka "
                   "di klien")
E2E_IMPORT = ("Tim end-to-end: server tidak dapat membaca nilai, jadi impor .env dilakukan di "
              "klien (segel setiap nilai, lalu kirim lewat bulk create)")
E2E_ROLLBACK = ("Tim end-to-end: rollback dilakukan di klien (baca versi lama, segel ulang untuk "
                "versi berikutnya, lalu simpan sebagai nilai baru)")
E2E_MOVE = ("Tim end-to-end: nilai terikat pada environment-nya, jadi pindah environment "
            "memerlukan nilai baru yang disegel untuk environment tujuan")
E2E_ID_REQUIRED = ("Tim end-to-end: kolom 'id' (UUID pilihan klien, dipakai saat menyegel) "
                   "wajib diisi")
E2E_ID_ONLY = "Kolom 'id' hanya untuk tim end-to-end"
VALUE_TOO_LARGE = f"Nilai secret maksimal {MAX_VALUE_BYTES} byte"


def check_name(name: object) -> str:
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise BadRequest(INVALID_NAME)
    return name


def check_environment(environment: object) -> str:
    if environment not in ENVIRONMENTS:
        raise BadRequest(INVALID_ENVIRONMENT)
    return environment  # type: ignore[return-value]


def check_export_format(fmt: object) -> str:
    if fmt not in EXPORT_FORMATS:
        raise BadRequest(INVALID_EXPORT_FORMAT)
    return fmt  # type: ignore[return-value]


def check_type(kind: object) -> str:
    if kind not in TYPES:
        raise BadRequest("Tipe secret harus salah satu dari " + ", ".join(TYPES))
    return kind  # type: ignore[return-value]


def check_value(value: object) -> str:
    """A value as written: at most 65,536 bytes in UTF-8, or (for an end-to-end team, checked
    when the team is known: `check_stored_value`) an envelope of a value that size."""
    if not isinstance(value, str):
        raise BadRequest("Kolom 'value' harus berupa teks")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise BadRequest("Kolom 'value' berisi karakter yang tidak valid") from None
    limit = e2e_syntax.MAX_ENVELOPE_LENGTH if e2e_syntax.looks_sealed(value) else MAX_VALUE_BYTES
    if size > limit:
        raise BadRequest(VALUE_TOO_LARGE)
    return value


def check_stored_value(value: str, key_version: int | None, secret_id: uuid.UUID,
                       version: int) -> str:
    """`value` as the team stores it: a plain team's value within 65,536 bytes, or an envelope
    sealed for `version` of `secret_id` under the end-to-end team's `key_version` (400, 409)."""
    if key_version is None:
        if len(value.encode("utf-8")) > MAX_VALUE_BYTES:
            raise BadRequest(VALUE_TOO_LARGE)
        return value
    return e2e_syntax.check_envelope(value, key_version=key_version, secret_id=secret_id,
                              version=version)


def check_description(description: object) -> str:
    if not isinstance(description, str):
        raise BadRequest("Kolom 'description' harus berupa teks")
    check_text("description", description)
    if len(description) > MAX_DESCRIPTION:
        raise BadRequest(Text("Deskripsi maksimal {n} karakter", n=MAX_DESCRIPTION))
    return description


@dataclass(frozen=True, slots=True)
class SecretInput:
    """A new secret, valid by construction: `SecretInput.checked(...)` applies every rule."""

    name: str
    value: str
    environment: str
    type: str = "credential"
    description: str = ""
    id: uuid.UUID | None = None  # chosen by the client, for an end-to-end team only

    def __repr__(self) -> str:  # never the value
        return f"SecretInput(name={self.name!r}, environment={self.environment!r})"

    @classmethod
    def checked(cls, *, name: object, value: object, environment: object,
                type: object = "credential", description: object = "",
                id: object = None) -> SecretInput:
        return cls(name=check_name(name), value=check_value(value),
                   environment=check_environment(environment), type=check_type(type),
                   description=check_description(description), id=check_id(id))


def check_id(value: object) -> uuid.UUID | None:
    """A client-chosen id (a UUID in its 36-character form), or None when not given."""
    if value is None:
        return None
    try:
        parsed = uuid.UUID(value) if isinstance(value, str) and len(value) == 36 else None
    except ValueError:
        parsed = None
    if parsed is None:
        raise BadRequest("Kolom 'id' harus UUID")
    return parsed


@dataclass(frozen=True, slots=True)
class SecretUpdate:
    """The fields a PUT may change; None leaves a field as it is."""

    value: str | None = None
    type: str | None = None
    environment: str | None = None
    description: str | None = None

    def __repr__(self) -> str:  # never the value
        return f"SecretUpdate(value={'<set>' if self.value is not None else None}, " \
               f"type={self.type!r}, environment={self.environment!r})"

    @classmethod
    def checked(cls, *, value: object = None, type: object = None, environment: object = None,
                description: object = None) -> SecretUpdate:
        return cls(
            value=None if value is None else check_value(value),
            type=None if type is None else check_type(type),
            environment=None if environment is None else check_environment(environment),
            description=None if description is None else check_description(description),
        )
