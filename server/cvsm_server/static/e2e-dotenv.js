// e2e-dotenv.js: the server's .env format (cvsm_server/secrets/dotenv.py) in the browser, for the
// import and export of end-to-end teams, whose values the server cannot read. `render` quotes
// exactly as the server's export does; `parse` reads what the server's import reads, with its
// messages (the Chromium tests compare both with the Python module on a corpus).
(function () {
  "use strict";

  // Python's str.isspace() (what `\s` means in the server's patterns), not JavaScript's `\s`.
  var WS = "\\t\\n\\x0b\\x0c\\r\\x1c-\\x20\\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000";
  var BLANK = "\\t\\x0b\\x0c\\x1c-\\x20\\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000";

  // The messages, in the page's language (`<html lang>`): the server's own (secrets/dotenv.py
  // and its English in the catalog), word for word.
  var TEXTS = {
    id: {
      notKeyValue: "Baris {line} bukan format KEY=VALUE",
      unterminated: "Baris {line}: tanda kutip pembuka tidak ditutup",
      trailingText: "Baris {line}: ada teks setelah tanda kutip penutup",
      trailingTextSpan: "Baris {line}: tanda kutip yang dibuka di baris ini baru ditutup di " +
        "baris {end} dan diikuti teks lain; baris {line} sampai {end} tidak diimpor",
      duplicate: "Nama ganda di dalam file (pertama kali di baris {first})",
      invalidName: "Nama secret harus diawali huruf atau garis bawah, lalu huruf, angka, atau " +
        "garis bawah (maksimal 255 karakter)",
    },
    en: {
      notKeyValue: "Line {line} is not in the KEY=VALUE format",
      unterminated: "Line {line}: the opening quote is never closed",
      trailingText: "Line {line}: there is text after the closing quote",
      trailingTextSpan: "Line {line}: the quote opened on this line is closed only on line " +
        "{end} and followed by other text; lines {line} to {end} are not imported",
      duplicate: "Duplicate name in the file (first on line {first})",
      invalidName: "A secret name starts with a letter or an underscore, then letters, digits " +
        "or underscores (at most 255 characters)",
    },
  };
  var T = (typeof document !== "undefined" && TEXTS[document.documentElement.lang]) || TEXTS.id;
  var NOT_KEY_VALUE = T.notKeyValue;
  var UNTERMINATED = T.unterminated;
  var TRAILING_TEXT = T.trailingText;
  var TRAILING_TEXT_SPAN = T.trailingTextSpan;
  var DUPLICATE = T.duplicate;
  var INVALID_NAME = T.invalidName;
  var NAME_RE = /^[A-Za-z_][A-Za-z0-9_]{0,254}$/;

  // --- rendering -------------------------------------------------------------------------------

  var DOUBLE_QUOTE_ESCAPES = { "\\": "\\\\", '"': '\\"', "$": "\\$", "`": "\\`", "\n": "\\n",
                               "\r": "\\r" };
  var BACKSLASH_END_NOTE = ' # ends with a backslash: "\\"';

  function singleQuotable(value) {
    return !/['\n\r]/.test(value) && value.indexOf("\\\\") < 0 && !value.endsWith("\\");
  }

  function quote(value) {
    if (singleQuotable(value)) return "'" + value + "'";
    var quoted = '"' + value.replace(/[\\"$`\n\r]/g, function (ch) {
      return DOUBLE_QUOTE_ESCAPES[ch];
    }) + '"';
    return value.endsWith("\\") ? quoted + BACKSLASH_END_NOTE : quoted;
  }

  // Python sorts names by code point; names are ASCII, so this order is the same.
  function render(values) {
    return Object.keys(values).sort(function (a, b) { return a < b ? -1 : a > b ? 1 : 0; })
      .map(function (name) { return name + "=" + quote(values[name]) + "\n"; }).join("");
  }

  // --- parsing ---------------------------------------------------------------------------------

  function sticky(source, flags) {
    return new RegExp(source, "y" + (flags || ""));
  }

  var NEWLINE = /\r\n|\n|\r/g;
  var SPACE = sticky("[" + WS + "]*");
  var BLANKS = sticky("[" + BLANK + "]*");
  var EXPORT = sticky("export[" + BLANK + "]+");
  var QUOTED_KEY = sticky("'[^']+'");
  var KEY = sticky("[^=#" + WS + "]+");
  var EQUALS = sticky("=[" + BLANK + "]*");
  var SINGLE_QUOTED = sticky("'((?:\\\\[\\s\\S]|[^'\\\\])*)'");
  var DOUBLE_QUOTED = sticky('"((?:\\\\[\\s\\S]|[^"\\\\])*)"');
  var UNQUOTED = sticky("[^\\r\\n]*");
  var COMMENT = sticky("[" + BLANK + "]*#[^\\r\\n]*");
  var END_OF_LINE = sticky("[" + BLANK + "]*(?:\\r\\n|\\n|\\r|$)");
  var REST_OF_LINE = sticky("[^\\r\\n]*(?:\\r\\n|\\n|\\r)?");
  var SINGLE_ESCAPES = /\\[\\']/g;
  var DOUBLE_ESCAPES = /\\[\\'"abfnrtv$`]/g;
  var DOUBLE_DECODED = { "\\": "\\", "'": "'", '"': '"', a: "\x07", b: "\b", f: "\f", n: "\n",
                         r: "\r", t: "\t", v: "\x0b", $: "$", "`": "`" };
  var IS_SPACE = new RegExp("[" + WS + "]");

  function unquoted(part) {
    var at = part.indexOf("#", 1);
    while (at > 0) {
      if (IS_SPACE.test(part[at - 1])) return rstrip(part.slice(0, at));
      at = part.indexOf("#", at + 1);
    }
    return rstrip(part);
  }

  function rstrip(text) {
    return text.replace(new RegExp("[" + WS + "]+$"), "");
  }

  function Failed(message, at, key, keyLine) {
    this.message = message;
    this.at = at;
    this.key = key;
    this.keyLine = keyLine !== false;
  }

  function Reader(content) {
    this.text = content.charAt(0) === "\ufeff" ? content.slice(1) : content;
    this.pos = 0;
    this.lineEnds = [];
    var match;
    NEWLINE.lastIndex = 0;
    while ((match = NEWLINE.exec(this.text)) !== null) {
      this.lineEnds.push(match.index + match[0].length);
    }
  }

  // The line of the character at `offset` (a line break belongs to the line it ends).
  Reader.prototype.lineAt = function (offset) {
    var lo = 0, hi = this.lineEnds.length;
    while (lo < hi) {
      var mid = (lo + hi) >> 1;
      if (this.lineEnds[mid] <= offset) lo = mid + 1; else hi = mid;
    }
    return lo + 1;
  };

  Reader.prototype.take = function (pattern) {
    pattern.lastIndex = this.pos;
    var match = pattern.exec(this.text);
    if (match !== null) this.pos = pattern.lastIndex;
    return match;
  };

  Reader.prototype.peek = function () {
    return this.text.charAt(this.pos);
  };

  // [key as written, value, offset of its last character], or null for a comment.
  Reader.prototype.entry = function () {
    this.take(EXPORT);
    if (this.peek() === "#") {
      this.take(REST_OF_LINE);
      return null;
    }
    var key = this.take(this.peek() === "'" ? QUOTED_KEY : KEY);
    if (key === null) throw new Failed(NOT_KEY_VALUE, this.pos, null, false);
    this.take(BLANKS);
    if (this.peek() !== "=") throw new Failed(NOT_KEY_VALUE, this.pos, null, false);
    var equals = this.take(EQUALS);
    var value = equals[0].length > 1 && this.peek() === "#" ? "" : this.value(key[0]);
    this.take(COMMENT);
    var last = this.pos - 1;
    if (this.take(END_OF_LINE) === null) throw new Failed(TRAILING_TEXT, this.pos, key[0]);
    return [key[0], value, last];
  };

  Reader.prototype.value = function (key) {
    var first = this.peek(), match;
    if (first === "'") {
      match = this.take(SINGLE_QUOTED);
      if (match === null) throw new Failed(UNTERMINATED, this.pos, key);
      return match[1].replace(SINGLE_ESCAPES, function (m) { return m[1]; });
    }
    if (first === '"') {
      match = this.take(DOUBLE_QUOTED);
      if (match === null) throw new Failed(UNTERMINATED, this.pos, key);
      return match[1].replace(DOUBLE_ESCAPES, function (m) { return DOUBLE_DECODED[m[1]]; });
    }
    if (first === "" || first === "\n" || first === "\r") return "";
    return unquoted(this.take(UNQUOTED)[0]);
  };

  function format(message, values) {
    return message.replace(/\{(\w+)\}/g, function (_, name) { return String(values[name]); });
  }

  // Every entry: { line, name, value } or { line, name, error }, in file order.
  function parse(content) {
    var reader = new Reader(content);
    var entries = [];
    var firstLine = Object.create(null);
    for (;;) {
      reader.take(SPACE);
      if (reader.pos >= reader.text.length) return entries;
      var line = reader.lineAt(reader.pos);
      var read;
      try {
        read = reader.entry();
      } catch (failed) {
        if (!(failed instanceof Failed)) throw failed;
        reader.pos = failed.at;
        reader.take(REST_OF_LINE);
        var end = reader.lineAt(failed.at);
        var message = failed.message === TRAILING_TEXT && end > line ? TRAILING_TEXT_SPAN
          : failed.message;
        entries.push({ line: line, name: failed.key, keyLine: failed.keyLine,
                       error: format(message, { line: line, end: end }) });
        continue;
      }
      if (read === null) continue;
      var name = read[0];
      if (!NAME_RE.test(name)) {
        entries.push({ line: line, name: name, error: INVALID_NAME, keyLine: true });
      } else if (name in firstLine) {
        entries.push({ line: line, name: name, error: format(DUPLICATE, { first: firstLine[name] }),
                       keyLine: true });
      } else {
        firstLine[name] = line;
        entries.push({ line: line, name: name, value: read[1], keyLine: true });
      }
    }
  }

  window.CvsmDotenv = Object.freeze({ parse: parse, quote: quote, render: render });
})();
