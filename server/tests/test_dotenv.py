"""The `.env` parser (unit tests over a corpus) and the export -> import round trip, both as a
pure property and through the real server."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import Api
from cvsm_server import dotenv, secrets


def values_of(content: str) -> dict[str, str]:
    return {e.name: e.value for e in dotenv.parse(content) if e.ok}


def errors_of(content: str) -> dict[int, str]:
    return {e.line: e.error for e in dotenv.parse(content) if not e.ok}


# --- corpus -----------------------------------------------------------------------------------

def test_comments_and_blank_lines_are_skipped():
    content = "# a comment\n\n   \n  # indented comment\nA=1\n\t\nB=2\n"
    entries = dotenv.parse(content)
    assert [(e.line, e.name, e.value) for e in entries] == [(5, "A", "1"), (7, "B", "2")]
    assert dotenv.parsed_count(entries) == 2


def test_export_prefix_is_accepted():
    assert values_of("export A=1\nexport\tB=2\n  export   C = 3\n") == {"A": "1", "B": "2", "C": "3"}


def test_a_key_named_export_is_just_a_key():
    assert values_of("export=1\nexportX=2\n") == {"export": "1", "exportX": "2"}


def test_crlf_line_ends_are_not_part_of_values():
    assert values_of('A=1\r\nB="two"\r\nC=\'three\'\r\n') == {"A": "1", "B": "two", "C": "three"}


def test_leading_byte_order_mark_is_dropped():
    entries = dotenv.parse("\ufeffA=1\nB=2")
    assert [(e.name, e.value) for e in entries] == [("A", "1"), ("B", "2")]


def test_only_lf_splits_lines_other_unicode_breaks_stay_in_values():
    content = 'A="x\u2028y\x0bz\x1c\x85"\nB=p\x0cq\n'
    assert values_of(content) == {"A": "x\u2028y\x0bz\x1c\x85", "B": "p\x0cq"}


def test_equals_sign_inside_values_is_kept():
    content = 'URL=postgres://u:p@h/db?sslmode=require&x==y\nQ="a=b"\nS=\'=\'\n'
    assert values_of(content) == {
        "URL": "postgres://u:p@h/db?sslmode=require&x==y", "Q": "a=b", "S": "=",
    }


def test_blanks_around_equals_and_trailing_blanks_of_unquoted_values_are_dropped():
    assert values_of("A =  spaced value  \nB=\t\ttab\n") == {"A": "spaced value", "B": "tab"}


def test_empty_values_are_allowed():
    assert values_of('A=\nB=""\nC=\'\'\nD= # only a comment\n') == {"A": "", "B": "", "C": "", "D": ""}


def test_inline_comment_after_blank_ends_an_unquoted_value():
    assert values_of("A=value # comment\nB=value\t# comment\n") == {"A": "value", "B": "value"}


def test_hash_without_blank_before_it_is_part_of_an_unquoted_value():
    assert values_of("URL=https://host/path#frag\nC=#notacomment\n") == {
        "URL": "https://host/path#frag", "C": "#notacomment",
    }


def test_hash_inside_quotes_is_literal_and_comment_may_follow_closing_quote():
    content = 'A="x # not a comment" # comment\nB=\'y # also not\'#c\n'
    assert values_of(content) == {"A": "x # not a comment", "B": "y # also not"}


def test_double_quotes_decode_the_spec_escapes():
    assert values_of(r'A="line1\nline2\ttab \"quoted\""') == {"A": 'line1\nline2\ttab "quoted"'}


def test_double_quotes_also_decode_backslash_and_carriage_return_for_round_trips():
    assert values_of(r'A="C:\\dir\\ and \r end"') == {"A": "C:\\dir\\ and \r end"}


def test_unknown_escapes_in_double_quotes_stay_as_written():
    assert values_of(r'A="\d\x41\u0041\$"') == {"A": r"\d\x41\u0041\$"}


def test_single_quotes_are_literal():
    assert values_of(r"A='raw \n \t \" $HOME'") == {"A": r'raw \n \t \" $HOME'}


def test_quote_characters_inside_unquoted_value_are_literal():
    assert values_of("A=it's \"fine\"\n") == {"A": "it's \"fine\""}


def test_no_variable_expansion_or_command_substitution_ever():
    content = ("HOME_COPY=$HOME\nB=${HOME}\nC=\"$(id -u)\"\nD=`whoami`\nE='$(rm -rf /)'\n"
               "F=\"${PATH:-x}\"\n")
    assert values_of(content) == {
        "HOME_COPY": "$HOME", "B": "${HOME}", "C": "$(id -u)", "D": "`whoami`",
        "E": "$(rm -rf /)", "F": "${PATH:-x}",
    }


def test_unterminated_quote_is_an_item_error_and_other_lines_still_parse():
    content = 'A=1\nB="never closed\nC=\'also open\nD="escaped at end\\"\nE=5\n'
    entries = dotenv.parse(content)
    assert values_of(content) == {"A": "1", "E": "5"}
    assert {e.line: e.name for e in entries if not e.ok} == {2: "B", 3: "C", 4: "D"}
    assert all("tanda kutip" in e.error for e in entries if not e.ok)
    assert dotenv.parsed_count(entries) == 5


def test_a_quoted_value_does_not_continue_on_the_next_line():
    content = 'A="first\nsecond"\nB=2\n'
    entries = dotenv.parse(content)
    assert [(e.line, e.name, e.ok) for e in entries] == [(1, "A", False), (2, None, False), (3, "B", True)]


def test_text_after_closing_quote_is_an_item_error():
    errors = errors_of('A="x" y\nB=\'x\'y\n')
    assert set(errors) == {1, 2}
    assert all("setelah tanda kutip" in message for message in errors.values())


def test_later_duplicate_key_is_an_item_error_and_first_value_wins():
    content = "A=first\nB=1\nA=second\n"
    entries = dotenv.parse(content)
    assert values_of(content) == {"A": "first", "B": "1"}
    duplicate = entries[2]
    assert (duplicate.line, duplicate.name, duplicate.ok) == (3, "A", False)
    assert "ganda" in duplicate.error and "baris 1" in duplicate.error
    assert dotenv.parsed_count(entries) == 3


def test_duplicate_after_a_failed_line_imports_the_first_valid_one():
    assert values_of('A="open\nA=good\nA=later\n') == {"A": "good"}


def test_keys_are_case_sensitive_so_differing_case_is_not_a_duplicate():
    assert values_of("api_key=1\nAPI_KEY=2\n") == {"api_key": "1", "API_KEY": "2"}


@pytest.mark.parametrize("line", ["1ABC=x", "MY-KEY=x", "KÉY=x", '"A"=x', "A.B=x", "$A=x",
                                  "A" * 256 + "=x"])
def test_invalid_names_are_item_errors_counted_as_parsed(line):
    entries = dotenv.parse(line + "\nGOOD=1\n")
    assert [e.ok for e in entries] == [False, True]
    assert entries[0].name == line.split("=")[0]
    assert "Nama" in entries[0].error
    assert dotenv.parsed_count(entries) == 2


@pytest.mark.parametrize("line", ["just words", "=value", "export ONLY", "A B=1", '"unterminated'])
def test_lines_without_key_value_shape_are_item_errors_not_counted_as_parsed(line):
    entries = dotenv.parse(f"{line}\nGOOD=1\n")
    assert [(e.name, e.ok, e.key_line) for e in entries] == [(None, False, False), ("GOOD", True, True)]
    assert entries[0].error == "Baris 1 bukan format KEY=VALUE"
    assert dotenv.parsed_count(entries) == 1


def test_error_messages_never_contain_the_value():
    content = 'A="s3cr3t-unterminated\nB="s3cr3t" trailing\nbad line s3cr3t\n1X=s3cr3t\n'
    entries = dotenv.parse(content)
    assert len(entries) == 4 and not any(e.ok for e in entries)
    assert not any("s3cr3t" in e.error for e in entries)


def test_parser_name_rule_is_the_secret_name_rule():
    assert dotenv.NAME_RE.pattern == secrets.NAME_RE.pattern


# --- round trip: the pure property ------------------------------------------------------------

names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,40}", fullmatch=True)
# Any string PostgreSQL-free code can carry: everything but lone surrogates (not UTF-8).
values = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=60)
value_maps = st.dictionaries(names, values, min_size=1, max_size=8)


@settings(max_examples=400, deadline=None)
@given(value_maps)
def test_parse_of_render_gives_back_exactly_the_same_values(mapping):
    rendered = dotenv.render(mapping)
    entries = dotenv.parse(rendered)
    assert all(e.ok for e in entries)
    assert {e.name: e.value for e in entries} == mapping
    assert dotenv.parsed_count(entries) == len(mapping)


@settings(max_examples=200, deadline=None)
@given(value_maps)
def test_round_trip_survives_crlf_and_a_byte_order_mark(mapping):
    rendered = "\ufeff" + dotenv.render(mapping).replace("\n", "\r\n")
    assert values_of(rendered) == mapping


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_parser_never_raises_on_arbitrary_text(content):
    entries = dotenv.parse(content)
    assert all(e.ok == (e.error is None) for e in entries)


# --- round trip through the real server -------------------------------------------------------

@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mapping=value_maps)
async def test_export_then_import_through_the_server_gives_back_the_same_values(
        client, api: Api, owner, mapping):
    # One app and database for all examples: each example works in a team of its own.
    team = await api.team(owner, f"rt-{uuid.uuid4().hex[:12]}")
    base = f"/api/v1/teams/{team}/secrets"
    headers = api.auth(owner["token"])
    items = [{"name": n, "value": v, "environment": "production"} for n, v in mapping.items()]
    resp = await client.post(f"{base}/bulk", json={"items": items}, headers=headers)
    assert resp.status == 200, await resp.text()
    assert (await resp.json())["summary"]["failed"] == 0

    resp = await client.get(f"{base}/export", params={"environment": "production"}, headers=headers)
    assert resp.status == 200
    assert resp.content_type == "text/plain"
    exported = await resp.text()

    resp = await client.post(f"{base}/bulk/import-dotenv", headers=headers,
                             json={"content": exported, "environment": "staging"})
    assert resp.status == 200, await resp.text()
    body = await resp.json()
    assert body["parsed"] == len(mapping)
    assert body["summary"] == {"total": len(mapping), "ok": len(mapping), "failed": 0}

    resp = await client.get(f"{base}/export", params={"environment": "staging", "format": "json"},
                            headers=headers)
    assert await resp.json() == mapping
