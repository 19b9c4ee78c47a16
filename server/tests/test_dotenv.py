"""The `.env` format: the parser over a corpus (and against python-dotenv, its reference), the
export as the real readers read it (bash, dash and zsh sourcing it, python-dotenv, Node's dotenv,
one-line-per-variable readers), the shell export (`format=shell`) as bash, zsh and dash read it,
and the export -> import round trip, both as a pure property and through the real server."""

from __future__ import annotations

import re
import tempfile
import uuid
from pathlib import Path

import dotenv as python_dotenv
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import Api, query
from cvsm_server.secrets import dotenv, service as secrets, shell_export
from cvsm_server.secrets import inputs as secret_inputs
from dotenv_readers import (EVAL, SOURCE, NodeDotenv, docker_env_file_names, line_reader_names,
                            node_reads, python_dotenv_bindings, python_dotenv_reads,
                            python_dotenv_values, shell_export_reads, shell_reads, source_in_shell)

SHELLS = ["bash", "dash", "zsh"]  # load the .env export with `set -a; . ./file; set +a`
EXPORT_SHELLS = ["bash", "zsh"]  # source or eval the shell export exactly


def values_of(content: str) -> dict[str, str]:
    return {e.name: e.value for e in dotenv.parse(content) if e.ok}


def errors_of(content: str) -> dict[int, str]:
    return {e.line: e.error for e in dotenv.parse(content) if not e.ok}


PEM = ("-----BEGIN PRIVATE KEY-----\n"
       "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj\n"
       "MzEfYyjiWA4R4/M2bS1GB4t7NXp98C3SC6dVMvDuictGeurT8jNbvJZHtCSuYEvu\n"
       "NMoSfm76oqFvAp8Gy0iz5sxjZmSnXyCdPEovGhLa0VzMaQ8s+CLOyS56YyCFGeJZ==\n"
       "-----END PRIVATE KEY-----")
CERT = ("-----BEGIN CERTIFICATE-----\n"
        "MIIDdzCCAl+gAwIBAgIEAgAAuTANBgkqhkiG9w0BAQUFADBaMQswCQYDVQQGEwJJ\n"
        "RTESMBAGA1UEChMJQmFsdGltb3JlMRMwEQYDVQQLEwpDeWJlclRydXN0MSIwIAYD=\n"
        "-----END CERTIFICATE-----")


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


def test_a_lone_carriage_return_ends_a_line_outside_quotes():
    entries = dotenv.parse("A=1\rB='2'\r\rC=3")
    assert [(e.line, e.name, e.value) for e in entries] == [(1, "A", "1"), (2, "B", "2"), (4, "C", "3")]


def test_leading_byte_order_mark_is_dropped():
    entries = dotenv.parse("\ufeffA=1\nB=2")
    assert [(e.name, e.value) for e in entries] == [("A", "1"), ("B", "2")]


def test_other_unicode_line_breaks_are_not_line_ends():
    content = 'A="x\u2028y\x0bz\x1c\x85"\nB=p\x0cq\u2029r\n'
    assert values_of(content) == {"A": "x\u2028y\x0bz\x1c\x85", "B": "p\x0cq\u2029r"}


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


def test_double_quotes_decode_the_other_escapes_python_dotenv_decodes():
    assert values_of(r'''A="\'\a\b\f\v"''') == {"A": "'\a\b\f\v"}


def test_double_quotes_decode_dollar_and_backtick_after_a_backslash_as_a_shell_does():
    # The export writes `$` and backticks so; python-dotenv would keep the backslashes here.
    assert values_of(r'A="\$HOME \`id\` \\$"') == {"A": "$HOME `id` \\$"}
    assert python_dotenv_values(r'A="\$HOME \`id\`"') == {"A": r"\$HOME \`id\`"}


def test_unknown_escapes_in_double_quotes_stay_as_written():
    assert values_of(r'A="\d\x41\u0041\z\#"') == {"A": r"\d\x41\u0041\z\#"}


def test_single_quotes_are_literal_but_for_escaped_backslash_and_quote():
    assert values_of(r"A='raw \n \t \" $HOME \$ \x'") == {"A": r'raw \n \t \" $HOME \$ \x'}
    assert values_of(r"A='C:\\dir it\'s'") == {"A": "C:\\dir it's"}


def test_quote_characters_inside_unquoted_value_are_literal():
    assert values_of("A=it's \"fine\"\n") == {"A": "it's \"fine\""}


def test_backslashes_in_unquoted_values_are_literal():
    assert values_of("A=C:\\dir\\\nB=a\\'b\\\"\n") == {"A": "C:\\dir\\", "B": "a\\'b\\\""}


def test_no_variable_expansion_or_command_substitution_ever():
    content = ("HOME_COPY=$HOME\nB=${HOME}\nC=\"$(id -u)\"\nD=`whoami`\nE='$(rm -rf /)'\n"
               "F=\"${PATH:-x}\"\n")
    assert values_of(content) == {
        "HOME_COPY": "$HOME", "B": "${HOME}", "C": "$(id -u)", "D": "`whoami`",
        "E": "$(rm -rf /)", "F": "${PATH:-x}",
    }


def test_a_double_quoted_value_may_span_lines():
    content = f'# key\nTLS_KEY="{PEM}"\nNEXT=1\n'
    entries = dotenv.parse(content)
    assert [(e.line, e.end_line, e.name, e.value) for e in entries] == [
        (2, 6, "TLS_KEY", PEM), (7, 7, "NEXT", "1")]
    assert dotenv.parsed_count(entries) == 2


def test_a_single_quoted_value_may_span_lines_with_crlf_kept_inside():
    content = "export TLS_CERT='" + CERT.replace("\n", "\r\n") + "' # the chain\r\nNEXT=1\r\n"
    assert values_of(content) == {"TLS_CERT": CERT.replace("\n", "\r\n"), "NEXT": "1"}


def test_an_escaped_quote_does_not_end_a_multi_line_value():
    assert values_of('A="say \\"\nhi\\""\nB=\'it\\\'s\nme\'\n') == {"A": 'say "\nhi"', "B": "it's\nme"}


def test_unterminated_quote_is_an_item_error_and_the_next_lines_still_parse():
    content = "A=1\nB=\"never closed\nC='also open\nD=4\n"
    entries = dotenv.parse(content)
    assert values_of(content) == {"A": "1", "D": "4"}
    assert {e.line: e.name for e in entries if not e.ok} == {2: "B", 3: "C"}
    assert all("tanda kutip pembuka tidak ditutup" in e.error for e in entries if not e.ok)
    assert dotenv.parsed_count(entries) == 4


def test_a_quote_closed_lines_later_by_another_quote_is_one_failed_entry_naming_its_lines():
    # B's quote is closed by D's opening quote: python-dotenv, Node and a shell all read B on to
    # there. The entry is one item error naming lines 2 to 4; reading goes on at line 5.
    content = 'A=1\nB="never closed\nC=3\nD="four"\nE=5\n'
    entries = dotenv.parse(content)
    assert [(e.line, e.end_line, e.name, e.ok) for e in entries] == [
        (1, 1, "A", True), (2, 4, "B", False), (5, 5, "E", True)]
    assert entries[1].error == ("Baris 2: tanda kutip yang dibuka di baris ini baru ditutup di baris 4 "
                                "dan diikuti teks lain; baris 2 sampai 4 tidak diimpor")
    assert dotenv.parsed_count(entries) == 3


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
                                  "'A'=x", "A" * 256 + "=x"])
def test_invalid_names_are_item_errors_counted_as_parsed(line):
    entries = dotenv.parse(line + "\nGOOD=1\n")
    assert [e.ok for e in entries] == [False, True]
    assert entries[0].name == line.split("=")[0]
    assert "Nama" in entries[0].error
    assert dotenv.parsed_count(entries) == 2


def test_an_invalid_name_with_a_multi_line_value_is_one_item_error():
    entries = dotenv.parse('MY-KEY="-----BEGIN\nAAAA=\n-----END"\nGOOD=1\n')
    assert [(e.line, e.end_line, e.name, e.ok) for e in entries] == [
        (1, 3, "MY-KEY", False), (4, 4, "GOOD", True)]


@pytest.mark.parametrize("line", ["just words", "=value", "export ONLY", "A B=1", '"unterminated',
                                  "JUST_KEY", "A#B=1", "export   "])
def test_lines_without_key_value_shape_are_item_errors_not_counted_as_parsed(line):
    entries = dotenv.parse(f"{line}\nGOOD=1\n")
    assert [(e.name, e.ok, e.key_line) for e in entries] == [(None, False, False), ("GOOD", True, True)]
    assert entries[0].error == "Baris 1 bukan format KEY=VALUE"
    assert dotenv.parsed_count(entries) == 1


def test_error_messages_never_contain_the_value():
    content = ("A='s3cr3t-unterminated\nB=\"s3cr3t\" trailing\nbad line s3cr3t\n1X=s3cr3t\n"
               'C="s3cr3t\ns3cr3t" s3cr3t\n')
    entries = dotenv.parse(content)
    assert len(entries) == 5 and not any(e.ok for e in entries)
    assert not any("s3cr3t" in e.error for e in entries)


def test_an_invalid_name_in_a_file_gets_the_same_message_as_a_single_create():
    [entry] = dotenv.parse("1BAD=x\n")
    try:
        secret_inputs.check_name("1BAD")
    except secrets.BadRequest as exc:
        assert entry.error == exc.message
    else:
        raise AssertionError("1BAD is not a valid secret name")


def test_parser_is_linear_on_long_runs_of_blanks():
    # python-dotenv's own `re.sub(r"\s+#.*", ...)` is quadratic here.
    content = "A=x" + " " * 150_000 + "y\nB=x" + "\t" * 50_000 + "#c\n"
    assert values_of(content) == {"A": "x" + " " * 150_000 + "y", "B": "x"}


# --- the parser against python-dotenv ---------------------------------------------------------

CORPUS = {
    "pem double quoted": f'KEY="{PEM}"\nNEXT=1\n',
    "pem single quoted": f"CERT='{CERT}'\n",
    "multi-line with crlf inside": 'A="one\r\ntwo"\r\nB=2\r\n',
    "multi-line then comment": 'A="x\ny" # note\nB=1\n',
    "multi-line with blank lines": "A='x\n\n\ny'\n\n\nB=2",
    "export prefix": "export A=1\nexport\tB='2'\n  export   C = \"3\"\nexport D=\"x\ny\"\n",
    "export as key": "export=1\nexportX=2\nexport # comment\n",
    "comments": ("# c\n  # indented\n\t# tab\nA=1 # trailing\nB=2#not\nC= # empty\nD=#x\n"
                 "E='q' # c\nF=\"q\"# c\n#G=7\nH=#  # c\n"),
    "empty values": "A=\nB=\"\"\nC=''\nD=   \nE= # c\nF=\n",
    "quotes inside": "A=it's \"fine\"\nB=\"it's\"\nC='say \"hi\"'\nD=\"say \\\"hi\\\"\"\nE=a'b'c\n",
    "escapes in double quotes": ('A="a\\nb\\tc\\\\d\\"e\\\'f\\rg\\ah\\bi\\fj\\vk"\n'
                                 'B="\\d\\x41\\u0041\\z"\nC="\\\\n"\n'),
    "escapes in single quotes": "A='a\\nb\\\\c\\'d'\nB='\\\\\\\\'\n",
    "escaped quote does not close": 'A="x\\"\ny"\nB=1\n',
    "crlf": "A=1\r\nB='2'\r\nC=\"3\"\r\n\r\n# c\r\nD=4 # c\r\nE=\"x\" y\r\nF=6\r\n",
    "lone cr": "A=1\rB=2\r\rC='3'\r",
    "bom": "\ufeffA=1\nB=2\n",
    "spaces around equals": "A = 1\nB\t=\t2\nC =\t'3'  \nD=  x  y  \n",
    "invalid keys": "MY-KEY=1\nA.B=2\nA.C=\"x\ny\"\n1X=3\nK\u00c9Y=4\nGOOD=5\n",
    "quoted keys": "'A'=1\n'B C'=2\nD=4\n",
    "no equals": "JUST_KEY\njust words\n=value\nexport ONLY\nA B=1\nOK=1\nA#B=1\n",
    "unterminated": 'A="open\nB=2\nC=\'open\nD=4\n',
    "unterminated closed later": 'A="open\nB=2\nC="3"\nD=4\n',
    "text after quote": "A=\"x\" y\nB='x'y\nC=\"x\ny\" z\nD=4\n",
    "duplicates": "A=1\nB=2\nA=3\n",
    "unicode": "A=日本語\nB='🔑 é'\nC=\"\u2028\"\nD=x\u00a0#c\nE=x\u2028y\n",
    "unicode blank space": "\u00a0A=1\n\u3000# c\nB=\u00a0 2\u00a0\n",
    "dollars stay literal": "A=$HOME\nB='${HOME}'\nC=\"$(id)\"\nD=`id`\nE='`id`'\n",
    "backslash endings": "A='x\\\\'\nB=\"x\\\\\"\nC=x\\\n",
    "no newline at the end": "A=1   ",
    "nul inside": "A='x\0y'\nB=\"\0\"\nC=\0\n",
}


def assert_reads_like_python_dotenv(text: str) -> None:
    """Each entry of ours is a binding of python-dotenv's at the same line. Where python-dotenv
    reads a name and value we read the same, or report one of our stricter item errors (an
    invalid name, a duplicate); where it fails or finds no `=`, we report an item error."""
    ours = dotenv.parse(text)
    theirs = python_dotenv_bindings(text)
    assert [e.line for e in ours] == [line for line, *_ in theirs]
    seen: set[str] = set()
    for entry, (_, key, value, failed) in zip(ours, theirs, strict=True):
        if failed or value is None:
            assert not entry.ok
            if value is None and not failed:  # `KEY` with no `=`
                assert not entry.key_line
        elif entry.ok:
            assert (entry.name, entry.value) == (key, value)
        elif entry.error == dotenv.INVALID_NAME:
            assert not dotenv.NAME_RE.match(entry.name)
        else:
            assert entry.error.startswith("Nama ganda") and key in seen
        if key is not None and value is not None and not failed:
            seen.add(key)
    once = [key for _, key, _, failed in theirs if not failed]
    final = python_dotenv_values(text)
    for entry in ours:
        if entry.ok and once.count(entry.name) == 1:
            assert final[entry.name] == entry.value


@pytest.mark.parametrize("text", CORPUS.values(), ids=CORPUS.keys())
def test_corpus_reads_like_python_dotenv(text):
    assert_reads_like_python_dotenv(text)


def test_corpus_values_we_import():
    assert values_of(CORPUS["pem double quoted"]) == {"KEY": PEM, "NEXT": "1"}
    assert values_of(CORPUS["multi-line with crlf inside"]) == {"A": "one\r\ntwo", "B": "2"}
    assert values_of(CORPUS["escapes in double quotes"]) == {
        "A": "a\nb\tc\\d\"e'f\rg\ah\bi\fj\vk", "B": r"\d\x41\u0041\z", "C": "\\n"}
    assert values_of(CORPUS["escapes in single quotes"]) == {"A": "a\\nb\\c'd", "B": "\\\\"}
    assert values_of(CORPUS["unicode blank space"]) == {"A": "1", "B": "2"}
    assert errors_of(CORPUS["text after quote"]).keys() == {1, 2, 3}


# The parser's pieces, in any order: python-dotenv reads each text as we do (`$` and backticks
# are left out: after a backslash in double quotes we read them as a shell does).
_PIECES = ["A", "B", "_", "export ", "=", " ", "\t", '"', "'", "\\", "#", "\n", "\r\n", "\r", "x",
           "-", ".", "\u00a0", "\u2028", "é", "\ufeff", "\0"]


@settings(max_examples=600, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=40).map("".join))
def test_any_text_reads_like_python_dotenv(text):
    assert_reads_like_python_dotenv(text)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_parser_never_raises_on_arbitrary_text(content):
    entries = dotenv.parse(content)
    assert all(e.ok == (e.error is None) for e in entries)


# --- generated values -------------------------------------------------------------------------

names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,40}", fullmatch=True)
# What a hostile or merely unusual value is made of: shell syntax, quotes, escapes, line breaks.
_FRAGMENTS = ["$", "`", "$(id)", "`id`", "${HOME}", "$HOME", "$0", "'", '"', "\\", "\\\\", "\\'",
              '\\"', "\\n", "\\r", "\\$", "\n", "\r", "\r\n", "\t", " ", "#", " # c", "=", "'\\''",
              '"; touch pwned; "', "'; touch pwned; '", "é", "日本", "🔑", "\u2028", "\x0b",
              "\x85", "-----BEGIN KEY-----", "\nX=injected\n", "\nX='injected'", '"\nX="injected']


def hostile_values(*, nul: bool = True) -> st.SearchStrategy[str]:
    characters = st.characters(exclude_categories=("Cs",), exclude_characters="" if nul else "\0")
    return st.lists(st.one_of(st.sampled_from(_FRAGMENTS), characters), max_size=12).map("".join)


value_maps = st.dictionaries(names, hostile_values(), min_size=1, max_size=8)


# --- rendering: what the export looks like ----------------------------------------------------

def test_render_writes_single_quotes_when_it_can_and_escaped_double_quotes_otherwise():
    values = {
        "PLAIN": "abc", "EMPTY": "", "CMD": "$(id) `id` ${HOME} $HOME", "HASH": "#x", "TAB": "a\tb",
        "LINES": "a\nb\r\nc\rd", "QUOTE": "it's", "TWO_BACKSLASHES": "a\\\\b", "ONE_BACKSLASH": "a\\b",
        "MIXED": "it's $HOME \"q\"", "ENDS": "C:\\dir\\", "NUL": "a\0b",
    }
    assert dotenv.render(values) == (
        "CMD='$(id) `id` ${HOME} $HOME'\n"
        "EMPTY=''\n"
        "ENDS=\"C:\\\\dir\\\\\" # ends with a backslash: \"\\\"\n"
        "HASH='#x'\n"
        "LINES=\"a\\nb\\r\\nc\\rd\"\n"
        "MIXED=\"it's \\$HOME \\\"q\\\"\"\n"
        "NUL='a\0b'\n"
        "ONE_BACKSLASH='a\\b'\n"
        "PLAIN='abc'\n"
        "QUOTE=\"it's\"\n"
        "TAB='a\tb'\n"
        "TWO_BACKSLASHES=\"a\\\\\\\\b\"\n"
    )


# Values that add a variable to a line-based reader when a value is written over several lines.
INJECTIONS = {
    "LF": "prod\nLD_PRELOAD=/tmp/evil.so", "CR": "prod\rLD_PRELOAD=/tmp/evil.so",
    "CRLF": "prod\r\nLD_PRELOAD=/tmp/evil.so\r\n", "SINGLE": "x'\nLD_PRELOAD='/tmp/evil.so",
    "DOUBLE": 'x"\nLD_PRELOAD="/tmp/evil.so', "CONTINUED": "x\\\nLD_PRELOAD=/tmp/evil.so",
    "ENDS": "x\\", "AFTER_ENDS": 'y" #\nLD_PRELOAD=evil', "COMMENT": "#\nLD_PRELOAD=1 #",
    "EXPORTED": "\nexport LD_PRELOAD=/tmp/evil.so\n", "BLANK_LINES": "\n\n\nLD_PRELOAD=1\n\n",
    "INDENTED": "\n  LD_PRELOAD=1", "PEM": PEM,
}


def test_a_line_break_in_a_value_never_adds_a_variable_for_a_line_based_reader():
    text = dotenv.render(INJECTIONS)
    assert "LF=\"prod\\nLD_PRELOAD=/tmp/evil.so\"\n" in text
    assert "PEM=\"-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADANBgkqhkiG9w0B" in text
    assert docker_env_file_names(text) == line_reader_names(text) == sorted(INJECTIONS)


@settings(max_examples=300, deadline=None)
@given(value_maps)
def test_every_secret_is_exactly_one_line_of_the_export(mapping):
    text = dotenv.render(mapping)
    assert "\r" not in text and text.endswith("\n")
    lines = text[:-1].split("\n")
    assert [line.partition("=")[0] for line in lines] == sorted(mapping)
    assert all(line.endswith(("'", '"')) for line in lines)  # never a `\` that continues a line
    assert docker_env_file_names(text) == line_reader_names(text) == sorted(mapping)


# --- rendering: what bash, dash, zsh, python-dotenv and Node's dotenv read --------------------

# Shell: names of our own (no PATH, IFS, read-only UID...).
shell_maps = st.dictionaries(names.map(lambda n: "T_" + n), hostile_values(), min_size=1, max_size=8)
# Node: `__proto__` would set the prototype of Node's result object.
node_maps = st.dictionaries(names.filter(lambda n: n != "__proto__"), hostile_values(),
                            min_size=1, max_size=8)


@pytest.fixture(scope="session")
def node_dotenv():
    reader = NodeDotenv()
    yield reader
    reader.close()


@pytest.mark.parametrize("shell", SHELLS)
@settings(max_examples=100, deadline=None)
@given(mapping=shell_maps)
def test_sourcing_the_export_in_a_shell_gives_the_documented_values(shell, mapping):
    environment = source_in_shell(shell, dotenv.render(mapping))
    assert {k: v for k, v in environment.items() if k.startswith("T_")} == {
        name: shell_reads(value, shell) for name, value in mapping.items()}


@pytest.mark.parametrize("shell", SHELLS)
def test_sourcing_the_export_runs_and_expands_nothing(shell, tmp_path: Path):
    values = {
        "CMD": "$(touch pwned1)", "TICKS": "`touch pwned2`", "VARS": "$HOME ${HOME} $0 $$ $1",
        "BREAK_SINGLE": "'; touch pwned3; echo '", "BREAK_DOUBLE": '"; touch pwned4; echo "',
        "BREAK_BOTH": "'\"$(touch pwned5)\"'", "LINE_BREAKS": "x\ntouch pwned6\n", "ESCAPED": "\\$(touch pwned7)\\",
        "EXPORT": "'\nexport INJECTED=1\n'", **INJECTIONS,
    }
    environment = source_in_shell(shell, dotenv.render(values), cwd=tmp_path)
    assert {k: environment.get(k) for k in values} == {k: shell_reads(v, shell) for k, v in values.items()}
    assert environment["PEM"] == PEM.replace("\n", "\\n")
    assert "INJECTED" not in environment and "LD_PRELOAD" not in environment
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("shell", SHELLS)
def test_no_shell_variable_holds_nul(shell):
    expected = {"bash": "ab", "dash": "ab", "zsh": "a"}[shell]
    assert source_in_shell(shell, dotenv.render({"N": "a\0b"}))["N"] == shell_reads("a\0b", shell) == expected
    assert values_of(dotenv.render({"N": "a\0b"})) == {"N": "a\0b"}


@settings(max_examples=300, deadline=None)
@given(value_maps)
def test_python_dotenv_reads_the_export_as_documented(mapping):
    read = python_dotenv_values(dotenv.render(mapping))
    assert read == {name: python_dotenv_reads(value) for name, value in mapping.items()}


def test_python_dotenv_reads_exactly_all_but_dollars_and_backticks_in_double_quotes():
    exact = {"A": "$(id) `x`", "B": "it's \"q\" \\n", "C": "a\\\\b\\", "D": "x\r\ny\rz\n", "E": "\\",
             **INJECTIONS}
    assert python_dotenv_values(dotenv.render(exact)) == exact
    assert python_dotenv_values(dotenv.render({"F": "it's $HOME `id`"})) == {"F": "it's \\$HOME \\`id\\`"}


def test_python_dotenv_from_a_path_keeps_carriage_returns_and_interpolates_when_asked(tmp_path: Path):
    path = tmp_path / "exported.env"
    path.write_bytes(dotenv.render({"A": "x\r\ny\rz", "B": "b", "C": "${B}"}).encode())
    assert python_dotenv.dotenv_values(path, interpolate=False) == {"A": "x\r\ny\rz", "B": "b", "C": "${B}"}
    assert python_dotenv.dotenv_values(path)["C"] == "b"


@settings(max_examples=300, deadline=None)
@given(node_maps)
def test_node_dotenv_reads_the_export_as_documented(node_dotenv, mapping):
    expected = {name: node_reads(value) for name, value in mapping.items()}
    default, fast = node_dotenv.parse(dotenv.render(mapping))
    assert default == expected
    assert fast == expected


def test_node_dotenv_reads_exactly_single_quoted_and_plain_double_quoted_values(node_dotenv):
    exact = {"A": "$(id) `x` ${HOME}", "B": "it's", "C": "multi\nline #x", "D": "a\\b \"q\"",
             "E": "x\r\ny\r", **{k: v for k, v in INJECTIONS.items() if not set('\\"$`') & set(v)}}
    assert {"LF", "CR", "CRLF", "SINGLE", "PEM"} <= exact.keys()
    assert node_dotenv.parse(dotenv.render(exact)) == (exact, exact)


@settings(max_examples=500, deadline=None)
@given(hostile_values())
def test_the_values_each_reader_reads_exactly_are_those_the_docstring_names(value):
    in_single_quotes = dotenv.single_quotable(value)
    assert (python_dotenv_reads(value) == value) == (in_single_quotes or not ({"$", "`"} & set(value)))
    assert (node_reads(value) == value) == (in_single_quotes or not ({"\\", '"', "$", "`"} & set(value)))
    for shell in SHELLS:
        assert (shell_reads(value, shell) == value) == ("\0" not in value and (
            in_single_quotes or not ({"\n", "\r"} & set(value))))


def test_a_value_ending_in_a_backslash_cannot_pull_the_next_lines_into_it(node_dotenv):
    # Without the comment after it, Node's dotenv takes A's closing quote as escaped, reads A on to
    # the `"` in B, and then C=evil from inside B's value.
    mapping = {"A": "x\\", "B": 'y" #\nC=evil'}
    text = dotenv.render(mapping)
    assert node_dotenv.parse(text) == ({"A": "x\\\\", "B": 'y\\" #\nC=evil'},) * 2
    assert python_dotenv_values(text) == mapping
    environment = source_in_shell("bash", text)
    assert {name: environment.get(name) for name in mapping} == {"A": "x\\", "B": 'y" #\\nC=evil'}
    assert "C" not in environment
    assert docker_env_file_names(text) == line_reader_names(text) == ["A", "B"]


# --- the shell export: what bash, zsh and dash read -------------------------------------------

def test_shell_export_writes_one_export_line_per_secret_in_ansi_c_quotes():
    values = {
        "PLAIN": "abc", "EMPTY": "", "QUOTE": "it's", "BACKSLASH": "a\\b\\", "LINES": "a\nb\r\n",
        "CONTROL": "\t\x01a\x1b[0m\x7f", "NUL": "a\0b", "CMD": "$(id) `id` ${HOME} \"q\"",
        "UNICODE": "é🔑\u2028\x85",
    }
    assert shell_export.render(values) == (
        "export BACKSLASH=$'a\\\\b\\\\'\n"
        "export CMD=$'$(id) `id` ${HOME} \"q\"'\n"
        "export CONTROL=$'\\t\\x01a\\x1b[0m\\x7f'\n"
        "export EMPTY=$''\n"
        "export LINES=$'a\\nb\\r\\n'\n"
        "export NUL=$'ab'\n"
        "export PLAIN=$'abc'\n"
        "export QUOTE=$'it\\x27s'\n"
        "export UNICODE=$'é🔑\u2028\x85'\n"
    )


@settings(max_examples=300, deadline=None)
@given(value_maps)
def test_every_secret_is_one_line_of_the_shell_export_with_no_quote_inside(mapping):
    lines = shell_export.render(mapping).split("\n")
    assert lines.pop() == ""
    found = [re.fullmatch(r"export ([A-Za-z_][A-Za-z0-9_]*)=\$'([^'\n\r\0]*)'", line) for line in lines]
    assert all(found) and [m.group(1) for m in found] == sorted(mapping)


shell_export_maps = st.dictionaries(names.map(lambda n: "T_" + n), hostile_values(),
                                    min_size=1, max_size=8)


@pytest.mark.parametrize("shell", EXPORT_SHELLS)
@pytest.mark.parametrize("load", [SOURCE, EVAL], ids=["source", "eval"])
@settings(max_examples=75, deadline=None)
@given(mapping=shell_export_maps)
def test_the_shell_export_sourced_or_evaluated_gives_exactly_the_values(shell, load, mapping):
    environment = source_in_shell(shell, shell_export.render(mapping), load=load)
    assert {k: v for k, v in environment.items() if k.startswith("T_")} == {
        name: shell_export_reads(value) for name, value in mapping.items()}


@pytest.mark.parametrize("shell", EXPORT_SHELLS)
@pytest.mark.parametrize("locale", ["C", "C.UTF-8"])
def test_the_shell_export_gives_hostile_values_exactly_and_runs_nothing(shell, locale, tmp_path: Path):
    values = {**HOSTILE, **INJECTIONS, "HEX_AFTER_CONTROL": "\x01abc\x1bF", "NUL": "a\0b",
              "ANSI_C_LOOKALIKE": "$'\\x41' \\x41 \\u0041 \\c@ \\e", "TICK_QUOTE": "'`touch pwned9`'"}
    environment = source_in_shell(shell, shell_export.render(values), cwd=tmp_path,
                                  load=f'export LC_ALL={locale}; {SOURCE}')
    assert {k: environment.get(k) for k in values} == {k: shell_export_reads(v) for k, v in values.items()}
    assert environment["NUL"] == "ab" and environment["LF"] == "prod\nLD_PRELOAD=/tmp/evil.so"
    assert "INJECTED" not in environment and "LD_PRELOAD" not in environment
    assert list(tmp_path.iterdir()) == []


@settings(max_examples=100, deadline=None)
@given(mapping=shell_export_maps)
def test_a_shell_without_ansi_c_quotes_runs_nothing_and_gets_one_variable_per_line(mapping):
    # dash (a plain POSIX sh) reads `$'...'` as `$` and a single-quoted word: the text as written.
    with tempfile.TemporaryDirectory(prefix="cvsm-dash-") as cwd:
        environment = source_in_shell("dash", shell_export.render(mapping), cwd=Path(cwd), load=SOURCE)
        assert list(Path(cwd).iterdir()) == []
    assert {k: v for k, v in environment.items() if k.startswith("T_")} == {
        name: "$" + shell_export.quote(value)[2:-1] for name, value in mapping.items()}


# --- round trip: the pure property ------------------------------------------------------------

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
def test_round_trip_survives_crlf_line_ends_and_a_byte_order_mark(mapping):
    rendered = "\ufeff" + dotenv.render(mapping).replace("\n", "\r\n")
    assert values_of(rendered) == mapping


# --- through the real server ------------------------------------------------------------------

@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mapping=st.dictionaries(names, hostile_values(), min_size=1, max_size=8))
async def test_export_then_import_through_the_server_gives_back_the_same_values(
        client, api: Api, owner, node_dotenv, mapping):
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
    assert exported == dotenv.render(mapping)
    assert docker_env_file_names(exported) == line_reader_names(exported) == sorted(mapping)
    assert python_dotenv_values(exported) == {n: python_dotenv_reads(v) for n, v in mapping.items()}
    in_node = {n: node_reads(v) for n, v in mapping.items() if n != "__proto__"}
    assert node_dotenv.parse(exported) == (in_node, in_node)

    resp = await client.get(f"{base}/export", params={"environment": "production", "format": "shell"},
                            headers=headers)
    assert resp.status == 200 and resp.content_type == "text/plain"
    assert await resp.text() == shell_export.render(mapping)

    resp = await client.post(f"{base}/bulk/import-dotenv", headers=headers,
                             json={"content": exported, "environment": "staging"})
    assert resp.status == 200, await resp.text()
    body = await resp.json()
    assert body["parsed"] == len(mapping)
    assert body["summary"] == {"total": len(mapping), "ok": len(mapping), "failed": 0}

    resp = await client.get(f"{base}/export", params={"environment": "staging", "format": "json"},
                            headers=headers)
    assert await resp.json() == mapping


async def test_import_of_multi_line_pem_values_through_the_api(client, api: Api, owner, team_id):
    base = f"/api/v1/teams/{team_id}/secrets"
    headers = api.auth(owner["token"])
    crlf_pem = PEM.replace("\n", "\r\n")
    content = (f'# TLS\nexport TLS_KEY="{PEM}"\n'
               f"TLS_CERT='{CERT}' # chain\n"
               f'CRLF_KEY="{crlf_pem}"\r\n'
               "AFTER=1\n")
    resp = await client.post(f"{base}/bulk/import-dotenv", headers=headers,
                             json={"content": content, "environment": "production"})
    assert resp.status == 200, await resp.text()
    body = await resp.json()
    assert body["parsed"] == 4
    assert [(r["line"], r["name"], r["ok"]) for r in body["results"]] == [
        (2, "TLS_KEY", True), (7, "TLS_CERT", True), (11, "CRLF_KEY", True), (16, "AFTER", True)]
    expected = {"TLS_KEY": PEM, "TLS_CERT": CERT, "CRLF_KEY": crlf_pem, "AFTER": "1"}
    for result in body["results"]:
        resp = await client.get(f"{base}/{result['id']}", headers=headers)
        assert (await resp.json())["value"] == expected[result["name"]]
    resp = await client.get(f"{base}/export", params={"format": "json"}, headers=headers)
    assert await resp.json() == expected


HOSTILE = {
    "CMD": "$(touch pwned1)", "TICKS": "`touch pwned2`", "VARS": "$HOME ${HOME:-x} $0 $$",
    "BREAK_SINGLE": "'; touch pwned3; echo '", "BREAK_DOUBLE": '"; touch pwned4; echo "',
    "LINE_BREAKS": "line1\nINJECTED=1\n$(touch pwned5)", "BACKSLASHES": "C:\\dir\\\\share\\",
    "QUOTES": "it's \"quoted\" '\\''", "HASH": "#not a comment", "EMPTY": "", "SPACES": "  x  ",
    "TABS_CR": "\tx\r\ny\r", "UNICODE": "日本語 🔑 é\u2028", "PEM": PEM,
}
EXPORTED = {**HOSTILE, **INJECTIONS}


async def export_of(client, api: Api, owner, team_id, **params: str) -> str:
    """Store EXPORTED in the team and export it through the API."""
    for name, value in EXPORTED.items():
        await api.secret(owner, team_id, name, value)
    resp = await client.get(f"/api/v1/teams/{team_id}/secrets/export", params=params,
                            headers=api.auth(owner["token"]))
    assert resp.status == 200 and resp.content_type == "text/plain"
    return await resp.text()


async def test_export_through_the_api_gives_every_reader_one_line_per_secret(
        client, api: Api, owner, team_id, node_dotenv):
    exported = await export_of(client, api, owner, team_id)
    assert len(exported.split("\n")) == len(EXPORTED) + 1
    assert docker_env_file_names(exported) == line_reader_names(exported) == sorted(EXPORTED)
    assert re.search(r'^PEM="-----BEGIN PRIVATE KEY-----\\nMIIE[^\n]*-----END PRIVATE KEY-----"$',
                     exported, re.MULTILINE)
    assert values_of(exported) == EXPORTED
    assert python_dotenv_values(exported) == {n: python_dotenv_reads(v) for n, v in EXPORTED.items()}
    in_node = {n: node_reads(v) for n, v in EXPORTED.items()}
    assert node_dotenv.parse(exported) == (in_node, in_node)
    assert in_node["LF"] == INJECTIONS["LF"] and in_node["PEM"] == PEM


@pytest.mark.parametrize("shell", SHELLS)
async def test_export_through_the_api_sourced_in_a_shell_gives_the_documented_values(
        client, api: Api, owner, team_id, shell, tmp_path: Path):
    exported = await export_of(client, api, owner, team_id)
    environment = source_in_shell(shell, exported, cwd=tmp_path)
    assert {name: environment.get(name) for name in EXPORTED} == {
        name: shell_reads(value, shell) for name, value in EXPORTED.items()}
    assert "INJECTED" not in environment and "LD_PRELOAD" not in environment
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("shell", EXPORT_SHELLS)
@pytest.mark.parametrize("load", [SOURCE, EVAL], ids=["source", "eval"])
async def test_shell_export_through_the_api_gives_exactly_the_values(
        client, api: Api, owner, team_id, shell, load, tmp_path: Path):
    exported = await export_of(client, api, owner, team_id, format="shell")
    assert re.search(r"^export LF=\$'prod\\nLD_PRELOAD=/tmp/evil.so'$", exported, re.MULTILINE)
    environment = source_in_shell(shell, exported, cwd=tmp_path, load=load)
    assert {name: environment.get(name) for name in EXPORTED} == EXPORTED
    assert "INJECTED" not in environment and "LD_PRELOAD" not in environment
    assert list(tmp_path.iterdir()) == []


async def test_shell_export_is_audited_like_the_other_formats(client, api: Api, owner, team_id,
                                                              database_url):
    await api.secret(owner, team_id, "A", "it's")
    resp = await client.get(f"/api/v1/teams/{team_id}/secrets/export",
                            params={"format": "shell", "environment": "production"},
                            headers=api.auth(owner["token"]))
    assert await resp.text() == "export A=$'it\\x27s'\n"
    [entry] = await query(database_url, "SELECT metadata FROM audit_logs WHERE action = 'export'")
    assert entry["metadata"] == {"format": "shell", "environment": "production",
                                 "environments": ["production"], "count": 1}


async def test_an_unknown_export_format_is_refused_naming_the_formats(client, api: Api, owner, team_id,
                                                                    database_url):
    await api.secret(owner, team_id, "A", "1")
    resp = await client.get(f"/api/v1/teams/{team_id}/secrets/export", params={"format": "env"},
                            headers=api.auth(owner["token"]))
    assert resp.status == 400
    assert await resp.json() == {"error": "Format ekspor harus dotenv, shell, atau json"}
    assert await query(database_url, "SELECT 1 FROM audit_logs WHERE action = 'export'") == []


async def test_the_api_document_offers_the_shell_format(client):
    document = await (await client.get("/api/v1/openapi.json")).json()
    [fmt] = [p for p in document["paths"]["/api/v1/teams/{team_id}/secrets/export"]["get"]["parameters"]
             if p["name"] == "format"]
    assert fmt["schema"]["enum"] == ["dotenv", "shell", "json"]
    assert "`shell`" in fmt["description"] and "bash or zsh" in fmt["description"]
