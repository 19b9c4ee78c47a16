"""The support assistant: help articles, conversations with the assistant, and tickets.

- **Articles.** The help articles ship in the package, in Indonesian (`cvsm_server/help/*.md`)
  and in English (`help/en/*.md`, the same slugs). At start-up `load_articles` puts them in
  `help_articles` and their paragraphs in `help_passages`, by language, slug and content hash
  (unchanged articles are left alone; removed ones are deleted), under an advisory lock so
  several processes starting at once load them once.
- **Answers** are in the reader's language: the page's on the dashboard, the account's
  (`users.language`) else Indonesian through the API (whose error bodies stay Indonesian). A
  question is searched among that language's articles with PostgreSQL full-text search
  (`websearch_to_tsquery` over `cvsm_help` for Indonesian: Indonesian stemming where the server
  has it, migration 0009; over `english` for English, migration 0036), its words joined with
  `or` after common question words are dropped, ranked with `ts_rank`. The answer quotes the best article's most relevant paragraph and lists as sources
  the articles that match as many of the question's words as that one (no article that shares
  only a common word); with no match it says so and offers a human. No external service is
  called. Answers are Markdown (the articles' own), rendered to HTML by `render_markdown`
  (markdown-it-py, CommonMark, raw HTML escaped, unsafe link schemes refused).
- **Conversations** belong to one user (someone else's is a 404), are stored with the answers
  and the articles each used, and are limited in message size, length and rate.
- **Tickets.** `escalate` hands a conversation to a human: a ticket (audited), mailed to
  `CVSM_SUPPORT_EMAIL` when set (otherwise it is only in the admin panel). Admins list tickets,
  read one with its conversation, reply (the reply joins the conversation and is mailed to the
  user; audited) and close it (audited). The ticket functions live here, beside the tables they
  use; they check the admin right with `admin.require_admin`.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources

from markdown_it import MarkdownIt
from psycopg2.extras import Json

from ..instance import admin
from ..audit import log as audit
from .. import db
from ..mail import messages as mail
from ..accounts import ratelimit
from ..core.actor import Actor
from ..crypto.sealing import Keyring
from ..core.errors import BadRequest, Conflict, NotFound
from ..core import i18n
from ..core.i18n import N_, Text
from ..core.inputs import check_text
from ..accounts.sessions import require_jwt
from ..core.timeutil import iso

# A stable number for pg_advisory_xact_lock while loading the articles ("help" in ASCII).
LOAD_LOCK_ID = 0x68656C70
MAX_MESSAGE = 2000  # characters of one question, note or admin reply
MAX_MESSAGES = 200  # per conversation (questions and answers together)
MAX_TERMS = 32  # words of a question searched for
RELATED_SHARE = 0.6  # another article is listed when its score is at least this share of the best
MAX_ARTICLES = 3
TICKET_STATUSES = ("open", "closed")

CONVERSATION_NOT_FOUND = "Percakapan tidak ditemukan"
TICKET_NOT_FOUND = "Tiket tidak ditemukan"
ALREADY_ESCALATED = "Percakapan ini sudah diteruskan ke admin dan tiketnya masih terbuka"
TICKET_CLOSED = "Tiket sudah ditutup"
CONVERSATION_FULL = "Percakapan ini sudah terlalu panjang; mulai percakapan baru"
NO_MATCH = N_("Maaf, saya belum menemukan jawaban untuk pertanyaan itu di artikel bantuan. Coba "
            "dengan kata lain, atau pilih \u201cBicara dengan manusia\u201d agar admin membalas "
            "lewat email.")
# The answer's first line, before the quoted paragraph (`compose_answer`).
ACCORDING_TO = N_("Menurut artikel \u201c{title}\u201d")
ACCORDING_TO_SECTION = N_("Menurut artikel \u201c{title}\u201d (bagian \u201c{heading}\u201d)")
# The text search configuration of each language's articles (migrations 0009 and 0036).
SEARCH_CONFIG = {"id": "cvsm_help", "en": "english"}

# Words that say little about the topic of a question (they would match every article).
STOPWORDS = frozenset("""
ada adalah agar akan aku anda apa apakah atau bagaimana bagaimanakah bahwa baru begitu belum
benar berapa bila bisa bisakah boleh bolehkah buat cara caranya dalam dan dapat dari dengan di
dia ingin ini itu jadi jika juga kalau kami kamu kapan karena ke kenapa ketika kok lagi lain
lewat mana mau melalui mengapa menjadi mohon nya oleh pada para perlu saat saja sama sampai
saya sebuah secara sedang sekarang selalu seperti siapa sih sudah supaya tapi tetapi tidak
tolong untuk yang ya gimana gmn gak nggak enggak tak hai halo terima kasih
the a an is are how do does what why can i to of in my me you your it its be was were will
would should could where which who when there this that these those with for on at by from
about into please hi hello thanks thank get got any some so if not no
""".split())

_WORD = re.compile(r'"[^"]{1,200}"|[^\W_][\w-]*', re.UNICODE)


# CommonMark without raw HTML: `<script>` in an article or a question shows as text, and
# markdown-it's link validation refuses `javascript:`, `vbscript:`, `file:` and `data:` links.
_MARKDOWN = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})


def render_markdown(text: str) -> str:
    """`text` (Markdown) as HTML safe to put in a page: raw HTML in it is escaped."""
    return _MARKDOWN.render(text)


# Articles ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Article:
    """One help article: `# Title`, then paragraphs; a `## Heading` goes with the paragraphs
    after it."""

    slug: str
    title: str
    body: str
    passages: tuple[tuple[str, str], ...]  # (heading, paragraph)
    content_hash: str
    language: str = "id"


def parse_article(slug: str, text: str, language: str = "id") -> Article:
    blocks = [b.strip() for b in re.split(r"\n\s*\n", text.replace("\r\n", "\n")) if b.strip()]
    if not blocks or not blocks[0].startswith("# "):
        raise ValueError(f"help article {slug!r} must start with '# Title'")
    title = blocks[0][2:].strip()
    heading, passages, body = "", [], []
    for block in blocks[1:]:
        if block.startswith("## "):
            heading = block[3:].strip()
            continue
        paragraph = " ".join(line.strip() for line in block.splitlines())
        passages.append((heading, paragraph))
        body.append(paragraph)
    return Article(slug, title, "\n\n".join(body), tuple(passages),
                   hashlib.sha256(text.encode()).hexdigest(), language)


# Where each language's articles are, under the package's `help` folder.
HELP_FOLDERS = {"id": (), "en": ("en",)}


def shipped_articles(language: str | None = None) -> list[Article]:
    """The articles in the package (one language's, or all), by language and slug."""
    found = []
    for lang, parts in HELP_FOLDERS.items():
        if language is not None and lang != language:
            continue
        folder = resources.files("cvsm_server").joinpath("help", *parts)
        found += [parse_article(entry.name[:-3], entry.read_text(encoding="utf-8"), lang)
                  for entry in folder.iterdir() if entry.name.endswith(".md")]
    return sorted(found, key=lambda a: (a.language, a.slug))


async def load_articles(pool: db.Pool, articles: list[Article] | None = None) -> int:
    """Bring `help_articles` in line with the shipped articles; returns how many changed."""
    articles = shipped_articles() if articles is None else articles
    changed = 0
    async with db.pool_transaction(pool) as cur:
        await cur.execute("SELECT pg_advisory_xact_lock(%s)", (LOAD_LOCK_ID,))
        stored = {(r["language"], r["slug"]): r["content_hash"] for r in await db.fetchall(
            cur, "SELECT language, slug, content_hash FROM help_articles")}
        for article in articles:
            key = (article.language, article.slug)
            if stored.get(key) == article.content_hash:
                continue
            changed += 1
            await cur.execute(
                """INSERT INTO help_articles (language, slug, title, body, content_hash)
                   VALUES (%s, %s, %s, %s, %s)
                   ON CONFLICT (language, slug) DO UPDATE SET title = EXCLUDED.title,
                       body = EXCLUDED.body, content_hash = EXCLUDED.content_hash,
                       updated_at = now()""",
                (*key, article.title, article.body, article.content_hash))
            await cur.execute("DELETE FROM help_passages WHERE language = %s AND slug = %s", key)
            for position, (heading, text) in enumerate(article.passages):
                await cur.execute(
                    """INSERT INTO help_passages (language, slug, position, heading, text)
                       VALUES (%s, %s, %s, %s, %s)""", (*key, position, heading, text))
        gone = set(stored) - {(a.language, a.slug) for a in articles}
        for language, slug in sorted(gone):
            changed += 1
            await cur.execute("DELETE FROM help_articles WHERE language = %s AND slug = %s",
                              (language, slug))
    return changed


def search_terms(question: str) -> list[str]:
    """The question's quoted phrases and topic words (common question words dropped), each a
    `websearch_to_tsquery` text; at most `MAX_TERMS`."""
    terms: list[str] = []
    for match in _WORD.finditer(question.lower()):
        term = match.group(0)
        if term.startswith('"'):
            inner = " ".join(w for w in re.findall(r"[^\W_][\w-]*", term) if w not in STOPWORDS)
            if inner:
                terms.append(f'"{inner}"')
        elif term not in STOPWORDS and (len(term) > 1 or term.isdigit()) and term != "or":
            terms.append(term)
    return list(dict.fromkeys(terms))[:MAX_TERMS]


# How well a text matches: how many of the question's terms it has (the whole number), then
# PostgreSQL's ts_rank (below 1) among texts with as many. Counting terms first keeps a text
# that repeats one common word from beating one that has every word asked about.
_SCORE = """(SELECT count(*) FROM unnest(%(terms)s::text[]) AS term
             WHERE {column} @@ websearch_to_tsquery(%(config)s::regconfig, term))
            + ts_rank({column}, q.q)"""


async def search(cur: db.Cursor, question: str,
                 language: str = "id") -> tuple[list[dict], dict | None]:
    """The matching articles of `language` (slug, title), best first, and the best one's most
    relevant paragraph (heading, text); ([], None) without a match."""
    terms = search_terms(question)
    if not terms:
        return [], None
    language = language if language in SEARCH_CONFIG else "id"
    params = {"q": " or ".join(terms), "terms": terms, "limit": MAX_ARTICLES,
              "language": language, "config": SEARCH_CONFIG[language]}
    rows = await db.fetchall(cur, f"""
        WITH q AS (SELECT websearch_to_tsquery(%(config)s::regconfig, %(q)s) AS q)
        SELECT a.slug, a.title, {_SCORE.format(column="a.search")} AS score
        FROM help_articles a, q
        WHERE a.language = %(language)s AND a.search @@ q.q
        ORDER BY score DESC, a.slug
        LIMIT %(limit)s""", params)
    if not rows:
        return [], None
    best = rows[0]["score"]
    # A source matches as many of the question's terms as the best (the score's whole part),
    # and ranks close to it.
    used = [{"slug": r["slug"], "title": r["title"]} for r in rows
            if int(r["score"]) == int(best) and r["score"] >= best * RELATED_SHARE]
    passage = await db.fetchone(cur, f"""
        WITH q AS (SELECT websearch_to_tsquery(%(config)s::regconfig, %(q)s) AS q)
        SELECT p.heading, p.text
        FROM help_passages p, q
        WHERE p.language = %(language)s AND p.slug = %(slug)s
        ORDER BY {_SCORE.format(column="p.search")} DESC, p.position
        LIMIT 1""", {**params, "slug": rows[0]["slug"]})
    return used, passage


def compose_answer(articles: list[dict], passage: Mapping | None, language: str = "id") -> str:
    """The assistant's answer (Markdown) in `language`: the best article's paragraph, quoted
    after a line naming the article (and its section), or `NO_MATCH`."""
    with i18n.use_language(language):
        if not articles or passage is None:
            return i18n.gettext(NO_MATCH)
        if passage["heading"]:
            lead = i18n.translate(Text(ACCORDING_TO_SECTION, title=articles[0]["title"],
                                       heading=passage["heading"]))
        else:
            lead = i18n.translate(Text(ACCORDING_TO, title=articles[0]["title"]))
    return f"{lead}:\n\n{passage['text']}"


# Conversations -------------------------------------------------------------------------------

def _text(name: str, value: str) -> str:
    value = check_text(name, value).strip()
    if not value:
        raise BadRequest(Text("Kolom '{name}' wajib diisi", name=name))
    if len(value) > MAX_MESSAGE:
        raise BadRequest(Text("Kolom '{name}' paling banyak {n} karakter", name=name,
                              n=MAX_MESSAGE))
    return value


def message_json(row: Mapping) -> dict:
    """One message; an assistant's answer also as `html` (its Markdown rendered), the others'
    are plain text shown as written."""
    out = {"id": str(row["id"]), "author": row["author"], "body": row["body"],
           "articles": row["articles"], "created_at": iso(row["created_at"])}
    if row["author"] == "assistant":
        out["html"] = render_markdown(row["body"])
    return out


async def _own_conversation(cur: db.Cursor, actor: Actor, conversation_id: uuid.UUID,
                            *, lock: bool = False) -> dict:
    row = await db.fetchone(cur, "SELECT id, user_id, created_at FROM support_conversations "
                                 "WHERE id = %s AND user_id = %s" + (" FOR UPDATE" if lock else ""),
                            (conversation_id, actor.user_id))
    if row is None:
        raise NotFound(CONVERSATION_NOT_FOUND)
    return row


async def _messages(cur: db.Cursor, conversation_id: uuid.UUID) -> list[dict]:
    return await db.fetchall(cur, """
        SELECT id, author, body, articles, created_at FROM support_messages
        WHERE conversation_id = %s ORDER BY created_at, id""", (conversation_id,))


async def chat(conn: db.Connection, actor: Actor, message: str, *,
               conversation_id: uuid.UUID | None = None, language: str | None = None,
               charge: ratelimit.Charge | None = None) -> dict:
    """Answer a question from the help articles, in a new conversation or the user's own one,
    in `language` (the page's), or without one in the account's language, else Indonesian.

    Returns `conversation_id`, `answer` (Markdown), `answer_html` (it rendered, raw HTML
    escaped), `articles` (slug, title; empty without a match) and `matched`."""
    require_jwt(actor)
    message = _text("message", message)
    await ratelimit.hit(conn, charge)
    async with db.transaction(conn) as cur:
        if conversation_id is None:
            row = await db.fetchone(cur, "INSERT INTO support_conversations (user_id) VALUES (%s) "
                                         "RETURNING id", (actor.user_id,))
            conversation_id = row["id"]
        else:
            await _own_conversation(cur, actor, conversation_id, lock=True)
            count = await db.fetchone(cur, "SELECT count(*) AS n FROM support_messages "
                                           "WHERE conversation_id = %s", (conversation_id,))
            if count["n"] + 2 > MAX_MESSAGES:
                raise BadRequest(CONVERSATION_FULL)
        if language not in SEARCH_CONFIG:
            row = await db.fetchone(cur, "SELECT language FROM users WHERE id = %s",
                                    (actor.user_id,))
            language = row["language"] if row and row["language"] in SEARCH_CONFIG else "id"
        articles, passage = await search(cur, message, language)
        answer = compose_answer(articles, passage, language)
        await cur.execute(
            """INSERT INTO support_messages (conversation_id, author, body) VALUES (%s, 'user', %s)""",
            (conversation_id, message))
        await cur.execute(
            """INSERT INTO support_messages (conversation_id, author, body, articles)
               VALUES (%s, 'assistant', %s, %s)""", (conversation_id, answer, Json(articles)))
        await cur.execute("UPDATE support_conversations SET updated_at = now() WHERE id = %s",
                          (conversation_id,))
    return {"conversation_id": str(conversation_id), "answer": answer,
            "answer_html": render_markdown(answer), "articles": articles,
            "matched": bool(articles)}


async def conversation(conn: db.Connection, actor: Actor, conversation_id: uuid.UUID) -> dict:
    """The user's own conversation with its messages and its latest ticket's status."""
    require_jwt(actor)
    async with db.cursor(conn) as cur:
        row = await _own_conversation(cur, actor, conversation_id)
        messages = await _messages(cur, conversation_id)
        ticket = await db.fetchone(cur, """
            SELECT id, status FROM support_tickets WHERE conversation_id = %s
            ORDER BY created_at DESC LIMIT 1""", (conversation_id,))
    return {"id": str(row["id"]), "created_at": iso(row["created_at"]),
            "messages": [message_json(m) for m in messages],
            "ticket": None if ticket is None else {"id": str(ticket["id"]),
                                                   "status": ticket["status"]}}


async def latest_conversation(conn: db.Connection, actor: Actor) -> uuid.UUID | None:
    """The user's most recently used conversation (the support page opens it)."""
    async with db.cursor(conn) as cur:
        row = await db.fetchone(cur, """
            SELECT id FROM support_conversations WHERE user_id = %s
            ORDER BY updated_at DESC, id LIMIT 1""", (actor.user_id,))
    return None if row is None else row["id"]


# Tickets -------------------------------------------------------------------------------------

_TICKETS = """
SELECT t.id, t.conversation_id, t.status, t.note, t.created_at, t.updated_at, t.closed_at,
       t.user_id, u.email AS user_email, u.name AS user_name
FROM support_tickets t JOIN users u ON u.id = t.user_id
"""


def ticket_json(row: Mapping) -> dict:
    return {"id": str(row["id"]), "conversation_id": str(row["conversation_id"]),
            "status": row["status"], "note": row["note"],
            "user": {"id": str(row["user_id"]), "email": row["user_email"]},
            "created_at": iso(row["created_at"]), "updated_at": iso(row["updated_at"]),
            "closed_at": iso(row["closed_at"])}


def _transcript(messages: list[dict]) -> list[dict]:
    """The conversation for the ticket's mail: who said what (the mail's template names the
    authors in its recipient's language)."""
    return [{"author": m["author"], "body": m["body"]} for m in messages]


async def escalate(conn: db.Connection, actor: Actor, keyring: Keyring,
                   conversation_id: uuid.UUID, note: str, *, support_email: str | None,
                   base_url: str, charge: ratelimit.Charge | None = None) -> dict:
    """Hand the user's conversation to a human: a ticket (audited), mailed to `support_email`
    when set. One open ticket per conversation (409 while it is open)."""
    require_jwt(actor)
    note = _text("note", note)
    await ratelimit.hit(conn, charge)
    async with db.transaction(conn) as cur:
        await _own_conversation(cur, actor, conversation_id, lock=True)
        if await db.fetchone(cur, "SELECT 1 FROM support_tickets WHERE conversation_id = %s "
                                  "AND status = 'open'", (conversation_id,)):
            raise Conflict(ALREADY_ESCALATED)
        row = await db.fetchone(cur, """
            INSERT INTO support_tickets (conversation_id, user_id, note) VALUES (%s, %s, %s)
            RETURNING id""", (conversation_id, actor.user_id, note))
        ticket = await db.fetchone(cur, _TICKETS + "WHERE t.id = %s", (row["id"],))
        await audit.record(cur, actor, "support_escalate", "support_ticket", resource_id=row["id"],
                           metadata={"conversation_id": str(conversation_id)})
        if support_email:
            await mail.send(cur, keyring, "support_ticket", "support_ticket", support_email, {
                "ticket_id": str(row["id"]), "user_email": ticket["user_email"],
                "user_name": ticket["user_name"], "note": note,
                "transcript": _transcript(await _messages(cur, conversation_id)),
                "link": f"{base_url}/app/admin/tickets/{row['id']}", "app_url": base_url})
    return ticket_json(ticket)


async def list_tickets(conn: db.Connection, actor: Actor, *, status: str | None = "open",
                       limit: int = 50, offset: int = 0) -> tuple[list[dict], int]:
    """A page of tickets (`open`, `closed`, or None for all), newest first; and the total."""
    if status is not None and status not in TICKET_STATUSES:
        raise BadRequest("Status harus 'open', 'closed' atau 'all'")
    async with db.cursor(conn) as cur:
        await admin.require_admin(cur, actor)
        where = "WHERE (%(status)s::text IS NULL OR t.status = %(status)s)"
        params = {"status": status, "limit": limit, "offset": offset}
        rows = await db.fetchall(cur, _TICKETS + where + """
            ORDER BY t.created_at DESC, t.id LIMIT %(limit)s OFFSET %(offset)s""", params)
        total = await db.fetchone(cur, "SELECT count(*) AS n FROM support_tickets t " + where, params)
    return rows, total["n"]


async def get_ticket(conn: db.Connection, actor: Actor, ticket_id: uuid.UUID) -> tuple[dict, list[dict]]:
    """One ticket and its conversation's messages (admin)."""
    async with db.cursor(conn) as cur:
        await admin.require_admin(cur, actor)
        ticket = await db.fetchone(cur, _TICKETS + "WHERE t.id = %s", (ticket_id,))
        if ticket is None:
            raise NotFound(TICKET_NOT_FOUND)
        return ticket, await _messages(cur, ticket["conversation_id"])


async def reply_ticket(conn: db.Connection, actor: Actor, keyring: Keyring, ticket_id: uuid.UUID,
                       message: str, *, base_url: str) -> dict:
    """An admin's answer: it joins the conversation and is mailed to the user; audited."""
    message = _text("message", message)
    async with db.transaction(conn) as cur:
        await admin.require_admin(cur, actor)
        ticket = await db.fetchone(cur, _TICKETS + "WHERE t.id = %s FOR UPDATE OF t", (ticket_id,))
        if ticket is None:
            raise NotFound(TICKET_NOT_FOUND)
        if ticket["status"] != "open":
            raise Conflict(TICKET_CLOSED)
        await cur.execute(
            """INSERT INTO support_messages (conversation_id, author, admin_id, body)
               VALUES (%s, 'admin', %s, %s)""", (ticket["conversation_id"], actor.user_id, message))
        await cur.execute("UPDATE support_tickets SET updated_at = now() WHERE id = %s", (ticket_id,))
        await cur.execute("UPDATE support_conversations SET updated_at = now() WHERE id = %s",
                          (ticket["conversation_id"],))
        await audit.record(cur, actor, "support_reply", "support_ticket", resource_id=ticket_id,
                           metadata={"user_email": ticket["user_email"]})
        await mail.send(cur, keyring, "support_reply", "support_reply", ticket["user_email"], {
            "name": ticket["user_name"], "message": message, "note": ticket["note"],
            "link": f"{base_url}/app/support?c={ticket['conversation_id']}", "app_url": base_url})
        return await db.fetchone(cur, _TICKETS + "WHERE t.id = %s", (ticket_id,))


async def close_ticket(conn: db.Connection, actor: Actor, ticket_id: uuid.UUID) -> dict:
    """Close a ticket (audited); closing a closed one changes nothing."""
    async with db.transaction(conn) as cur:
        await admin.require_admin(cur, actor)
        ticket = await db.fetchone(cur, "SELECT id, status FROM support_tickets WHERE id = %s "
                                        "FOR UPDATE", (ticket_id,))
        if ticket is None:
            raise NotFound(TICKET_NOT_FOUND)
        if ticket["status"] == "open":
            await cur.execute("""UPDATE support_tickets SET status = 'closed', closed_at = now(),
                                     closed_by = %s, updated_at = now() WHERE id = %s""",
                              (actor.user_id, ticket_id))
            await audit.record(cur, actor, "support_close", "support_ticket", resource_id=ticket_id)
        return await db.fetchone(cur, _TICKETS + "WHERE t.id = %s", (ticket_id,))
