'use strict';
/**
 * retry-after: reads a `Retry-After` header (RFC 9110, section 10.2.3) as whole seconds to wait.
 */

const MONTHS = ['jan', 'feb', 'mar', 'apr', 'may', 'jun', 'jul', 'aug', 'sep', 'oct', 'nov', 'dec'];
const DAY = '(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)';
const LONG_DAY = '(?:Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday)';
const MONTH = '(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)';
const TIME = '([0-9]{2}):([0-9]{2}):([0-9]{2})';

/** IMF-fixdate: `Sun, 06 Nov 1994 08:49:37 GMT`. */
const IMF_FIXDATE = new RegExp(`^${DAY}, ([0-9]{2}) ${MONTH} ([0-9]{4}) ${TIME} GMT$`);
/** Obsolete RFC 850 form: `Sunday, 06-Nov-94 08:49:37 GMT`. */
const RFC_850 = new RegExp(`^${LONG_DAY}, ([0-9]{2})-${MONTH}-([0-9]{2}) ${TIME} GMT$`);
/** Obsolete asctime form: `Sun Nov  6 08:49:37 1994`. */
const ASCTIME = new RegExp(`^${DAY} ${MONTH} ([ 0-9][0-9]) ${TIME} ([0-9]{4})$`);

/** Returns the epoch milliseconds of a date, or NaN when a field is out of range. */
function utc(year, month, day, hour, minute, second) {
  const ms = Date.UTC(year, month, day, hour, minute, second);
  const d = new Date(ms);
  const exact =
    d.getUTCFullYear() === year &&
    d.getUTCMonth() === month &&
    d.getUTCDate() === day &&
    hour < 24 &&
    minute < 60 &&
    second < 61;
  return exact ? ms : NaN;
}

/** Returns the epoch milliseconds of an HTTP date in any of its three forms, or NaN. */
function parseHttpDate(text) {
  let m = IMF_FIXDATE.exec(text);
  if (m) {
    const [, day, month, year, h, min, s] = m;
    return utc(+year, MONTHS.indexOf(month.toLowerCase()), +day, +h, +min, +s);
  }
  m = RFC_850.exec(text);
  if (m) {
    const [, day, month, yy, h, min, s] = m;
    // RFC 9110: a two-digit year more than 50 years in the future means the past century.
    const thisYear = new Date().getUTCFullYear();
    let year = Math.floor(thisYear / 100) * 100 + Number(yy);
    if (year > thisYear + 50) year -= 100;
    return utc(year, MONTHS.indexOf(month.toLowerCase()), +day, +h, +min, +s);
  }
  m = ASCTIME.exec(text);
  if (m) {
    const [, month, day, h, min, s, year] = m;
    return utc(+year, MONTHS.indexOf(month.toLowerCase()), Number(day.trim()), +h, +min, +s);
  }
  return NaN;
}

/**
 * Turns a `Retry-After` header into whole seconds: a delay in seconds as is
 * (`0` is 0); an HTTP date as the seconds from `now` until then, rounded up, 0 when past;
 * anything else, or no header, null.
 */
function parseRetryAfter(header, now = Date.now()) {
  if (header === null || header === undefined) return null;
  const text = String(header).trim();
  if (/^[0-9]+$/.test(text)) {
    const seconds = Number(text);
    return Number.isSafeInteger(seconds) ? seconds : null;
  }
  const when = parseHttpDate(text);
  if (Number.isNaN(when)) return null;
  return Math.max(0, Math.ceil((when - now) / 1000));
}

module.exports = { parseRetryAfter, parseHttpDate };
