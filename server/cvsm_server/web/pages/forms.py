"""The dashboard's forms: reading a posted form within its size limit, `Form` (fields, errors
beside them, what is kept for the page shown again), the post/redirect/get of `form_work`, and
the counted failures of a form."""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

from aiohttp import web
from multidict import MultiDictProxy

from ...core.actor import Actor
from ...core.errors import DomainError
from ...core.inputs import decimal
from ...accounts import ratelimit
from ..request import FORM_TOO_LARGE, FormValue, read_form
from ..state import ACTOR, POOL, SETTINGS
from .rendering import render_page
from .session import check_anonymous_csrf, check_session_csrf, form_field
from ... import db

FORM_LIMIT = 256 * 1024  # a 65,536-byte value, form-encoded, fits several times over


def page_number(raw: str | None) -> int:
    """A list page's `page` query parameter: 1 when missing or not a number from 1 to 999,999
    in ASCII digits (a link that went stale, not an error worth a page)."""
    number = decimal(raw, max_digits=6)
    return number if number is not None and number >= 1 else 1


async def read_page_form(request: web.Request, *, max_bytes: int = FORM_LIMIT,
                         too_large: str = FORM_TOO_LARGE) -> MultiDictProxy[FormValue]:
    """Every page's form, read by the one parser (`web.request.read_form`): NUL characters,
    invalid UTF-8, another charset and broken multipart are a 400 page, never a 500."""
    return await read_form(request, max_bytes=max_bytes, too_large=too_large)


class Answer(Exception):
    """A page's answer given from deep inside its handler (a form refused in `Form.attempt`):
    `signed_in` and `page_errors` send it as it is."""

    def __init__(self, response: web.Response) -> None:
        super().__init__("answered")
        self.response = response


_LINE_BREAK = re.compile(r"\r\n?")
# Fields whose typed value a page never shows again, whatever form they are in (a form names
# any other secret field itself: `Form.posted(..., secret=...)`).
NEVER_KEPT = frozenset({"csrf", "value", "content", "password", "password_again", "confirm",
                        "code", "token", "pending"})


class Form:
    """A posted form of a page, read by the one parser and CSRF-checked (`posted`). Its fields
    are strings (`form["name"]`, "" when absent); a refusal (`refused`) puts the message beside
    its field (`errors`) and keeps what was typed (`kept`), never the fields named `secret`."""

    def __init__(self, data: MultiDictProxy[FormValue], secret: tuple[str, ...] = ()) -> None:
        self.data = data
        self.secret = secret

    @classmethod
    async def posted(cls, request: web.Request, actor: Actor | None = None, *,
                     secret: tuple[str, ...] = (), max_bytes: int = FORM_LIMIT,
                     too_large: str = FORM_TOO_LARGE) -> Form:
        """The form, once its CSRF token is checked: the session's when `actor` is given,
        else the pre-session's (a refusal is the 403 error page)."""
        data = await read_page_form(request, max_bytes=max_bytes, too_large=too_large)
        if actor is not None:
            check_session_csrf(request, actor, data)
        else:
            check_anonymous_csrf(request, data)
        return cls(data, secret)

    def __getitem__(self, name: str) -> str:
        return form_field(self.data, name)

    def get(self, name: str, default: str = "") -> str:
        return form_field(self.data, name, default)

    def text(self, name: str) -> str:
        """A text field as the person typed it: a browser sends a textarea's line breaks as
        CRLF (HTML's form encoding), so CRLF and a lone CR are LF here (a PEM pasted into a
        value comes back from the API and the export with LF only). The API's values are
        stored as sent."""
        return _LINE_BREAK.sub("\n", self[name])

    def getall(self, name: str) -> list[str]:
        return [v for v in self.data.getall(name, []) if isinstance(v, str)]

    def kept(self) -> dict[str, str]:
        return {name: self[name] for name in self.data
                if name not in NEVER_KEPT and name not in self.secret}

    @contextlib.asynccontextmanager
    async def attempt(self, request: web.Request, template: str,
                      context: Mapping[str, Any] | Callable[[db.Connection], Awaitable[dict[str, Any]]],
                      *, field: str | Callable[[DomainError], str | None] | None = None,
                      private: bool = False, rate: str | None = None,
                      raising: tuple[int, ...] = ()) -> AsyncIterator[db.Connection]:
        """A connection for the form's work, counted first against the `rate` limit when given
        (the signed-out forms: `auth`, `newsletter`). A refusal in it is the page again
        (`refused`, with `context`, or `context(conn)`, the message beside `field`: a name, or a
        function of the error), answered at once (`Answer`): the handler goes on only when the
        work was done. A refusal with a status in `raising` (the page itself cannot be shown: a
        403, a 404) is the error page instead."""
        async with db.connection(request.app[POOL]) as conn:
            try:
                if rate is not None:
                    await count_form(conn, request, rate)
                yield conn
            except DomainError as exc:
                if exc.status in raising:
                    raise
                where = field(exc) if callable(field) else field
                shown = dict(context) if isinstance(context, Mapping) else await context(conn)
                raise Answer(self.refused(request, template, shown, exc, field=where,
                                          private=private)) from None

    def refused(self, request: web.Request, template: str, context: dict[str, Any],
                exc: DomainError, *, field: str | None = None, private: bool = False) -> web.Response:
        """The page again, `exc`'s message beside `field` (else above the form), with its
        status and headers, and the values typed except the secret ones."""
        context = {**context, "form": {**context.get("form", {}), **self.kept()}}
        if field:
            context["errors"] = {field: exc.message}
        else:
            context["error"] = exc.message
        response = render_page(request, template, context, status=exc.status, private=private)
        response.headers.update(exc.headers)
        return response


@contextlib.asynccontextmanager
async def form_work(request: web.Request,
                    actor: Actor) -> AsyncIterator[tuple[Form, db.Connection]]:
    """A signed-in form that changes something and shows no page again (a button: revoke,
    cancel, close...): the form once its CSRF token is checked, and a connection for its work.
    A refusal is the error page (`signed_in`)."""
    form = await Form.posted(request, actor)
    async with db.connection(request.app[POOL]) as conn:
        yield form, conn


async def count_form(conn: db.Connection, request: web.Request, rate: str = "auth") -> None:
    """A signed-out form counted against the `rate` limit of the caller's address."""
    await ratelimit.hit(conn, ratelimit.Charge.of(rate, request[ACTOR].ip or "-",
                                                  request.app[SETTINGS].rate_limit(rate)))


def failures_of(request: web.Request) -> ratelimit.Charge | None:
    return ratelimit.Charge.failed_auth(request.app[SETTINGS], request[ACTOR].ip)


def beside(field: str, *statuses: int) -> Callable[[DomainError], str | None]:
    """For `Form.attempt`: a refusal with one of `statuses` is said beside `field`, any other
    (a wait, a conflict of state) above the form."""
    return lambda exc: field if exc.status in statuses else None
