//! Times as Nomad's API writes them: Unix nanoseconds where Nomad keeps an `int64`
//! (`CreateTime`, `SubmitTime`), and Go's `time.Time` JSON — RFC 3339 with the nanoseconds
//! Go prints (trailing zeros dropped), in UTC — where it keeps a `time.Time` (a task state's
//! `StartedAt`, `FinishedAt`, `LastRestart`). Go's zero time, `0001-01-01T00:00:00Z`, is
//! what Nomad sends for a time not yet reached; 0 nanoseconds stands for it here.

/// Go's zero `time.Time`, as its JSON encoder writes it.
pub const ZERO: &str = "0001-01-01T00:00:00Z";

/// `ns` as RFC 3339 to the second (`2026-12-03T05:10:11Z`).
pub fn rfc3339(ns: i64) -> String {
    let (date, time) = civil(ns.div_euclid(1_000_000_000));
    format!("{date}T{time}Z")
}

/// `ns` as Go encodes a `time.Time` in JSON (`2026-12-03T05:10:11.123456789Z`, fraction
/// without trailing zeros); 0 as Go's zero time.
pub fn rfc3339_nano(ns: i64) -> String {
    if ns == 0 {
        return ZERO.to_string();
    }
    let (date, time) = civil(ns.div_euclid(1_000_000_000));
    let fraction = ns.rem_euclid(1_000_000_000);
    if fraction == 0 {
        return format!("{date}T{time}Z");
    }
    let digits = format!("{fraction:09}");
    format!("{date}T{time}.{}Z", digits.trim_end_matches('0'))
}

/// The nanoseconds of a time [`rfc3339_nano`] wrote (UTC, `Z`, at most 9 digits of
/// fraction); Go's zero time is 0. `None` for anything else.
pub fn parse_rfc3339_nano(text: &str) -> Option<i64> {
    if text == ZERO {
        return Some(0);
    }
    let text = text.strip_suffix('Z')?;
    let (date, time) = text.split_once('T')?;
    let number = |s: &str, len: usize| {
        (s.len() == len && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse::<i64>().ok())
            .flatten()
    };
    let mut date = date.split('-');
    let (year, month, day) = (
        number(date.next()?, 4)?,
        number(date.next()?, 2)?,
        number(date.next()?, 2)?,
    );
    let (clock, fraction) = time.split_once('.').unwrap_or((time, ""));
    let mut clock = clock.split(':');
    let (hour, minute, second) = (
        number(clock.next()?, 2)?,
        number(clock.next()?, 2)?,
        number(clock.next()?, 2)?,
    );
    if date.next().is_some()
        || clock.next().is_some()
        || !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 59
        || fraction.len() > 9
        || !fraction.bytes().all(|b| b.is_ascii_digit())
        || (time.contains('.') && fraction.is_empty())
    {
        return None;
    }
    let nanos = if fraction.is_empty() {
        0
    } else {
        format!("{fraction:0<9}").parse::<i64>().ok()?
    };
    let seconds = days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second;
    seconds.checked_mul(1_000_000_000)?.checked_add(nanos)
}

/// A time kept as Unix nanoseconds, written and read as Go's `time.Time` JSON.
pub mod serde_time {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(ns: &i64, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&super::rfc3339_nano(*ns))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<i64, D::Error> {
        let text = String::deserialize(deserializer)?;
        super::parse_rfc3339_nano(&text)
            .ok_or_else(|| serde::de::Error::custom(format!("{text:?} is not an RFC 3339 time")))
    }
}

/// (`YYYY-MM-DD`, `HH:MM:SS`) of Unix seconds, by Howard Hinnant's civil-from-days.
fn civil(secs: i64) -> (String, String) {
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (
        format!("{year:04}-{month:02}-{day:02}"),
        format!("{:02}:{:02}:{:02}", rest / 3600, rest / 60 % 60, rest % 60),
    )
}

/// Days since 1970-01-01 of a civil date (Hinnant's days-from-civil).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let yoe = year.rem_euclid(400);
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// A duration as Go's `time.Duration` prints it: `0s`, `250ms`, `1.5ms`, `500µs`, `30s`,
/// `1m30s`, `1h0m0s` (non-negative durations; Nomad never has negative ones here).
pub fn go_duration(ns: i64) -> String {
    const SECOND: i64 = 1_000_000_000;
    let ns = ns.max(0);
    // One buffer written in place: a stop formats several durations per allocation.
    let mut out = String::with_capacity(16);
    if ns == 0 {
        out.push_str("0s");
    } else if ns < SECOND {
        let (unit, per) = match ns {
            0..1_000 => ("ns", 1),
            1_000..1_000_000 => ("µs", 1_000),
            _ => ("ms", 1_000_000),
        };
        decimal(&mut out, ns, per);
        out.push_str(unit);
    } else {
        let (hours, minutes) = (ns / (3600 * SECOND), ns / (60 * SECOND) % 60);
        if hours > 0 {
            push_int(&mut out, hours);
            out.push('h');
        }
        if hours > 0 || minutes > 0 {
            push_int(&mut out, minutes);
            out.push('m');
        }
        decimal(&mut out, ns % (60 * SECOND), SECOND);
        out.push('s');
    }
    out
}

/// Appends `value` in decimal, digit by digit rather than through `fmt`'s machinery, which
/// cost ten times as much: a stop formats several durations per task.
fn push_int(out: &mut String, value: i64) {
    if value < 0 {
        out.push('-');
    }
    let mut digits = [0u8; 20];
    let mut start = digits.len();
    let mut rest = value.unsigned_abs();
    loop {
        start -= 1;
        digits[start] = b'0' + u8::try_from(rest % 10).expect("a digit");
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    out.push_str(std::str::from_utf8(&digits[start..]).expect("ASCII digits"));
}

/// Appends `value / per` with the remainder as a decimal fraction, trailing zeros dropped
/// (`per` a power of ten).
fn decimal(out: &mut String, value: i64, per: i64) {
    let (whole, rest) = (value / per, value % per);
    push_int(out, whole);
    if rest == 0 {
        return;
    }
    out.push('.');
    let mut digit = per / 10;
    let mut rest = rest;
    while rest > 0 {
        let d = u8::try_from(rest / digit).expect("a digit");
        out.push(char::from(b'0' + d));
        rest %= digit;
        digit /= 10;
    }
}

/// A Go duration (`1s`, `2000ms`, `1m30s`, `1.5h`) in nanoseconds.
pub fn parse_go_duration(text: &str) -> Option<i64> {
    if text == "0" {
        return Some(0);
    }
    let mut rest = text;
    let mut total = 0f64;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest[..number_end].parse().ok()?;
        rest = &rest[number_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_end] {
            "ns" => 1.0,
            "us" | "µs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return None,
        };
        rest = &rest[unit_end..];
        total += number * scale;
    }
    Some(total as i64)
}

/// The wall clock, in Unix nanoseconds: what the agent stamps its records with and the CLI
/// and probe print. Nothing in the runners, server or simulator reads it: their time comes
/// in with each call.
pub fn unix_now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_are_written_as_display_writes_them() {
        for value in [0, 7, 10, 59, 1_234_567_890, i64::MAX, -1, -60, i64::MIN] {
            let mut out = String::from("x");
            push_int(&mut out, value);
            assert_eq!(out, format!("x{value}"));
        }
    }

    #[test]
    fn times_print_as_rfc3339() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_796_040_000_000_000_000), "2026-11-30T12:00:00Z");
    }

    #[test]
    fn times_are_written_as_go_writes_them_and_read_back() {
        // 2026-12-03T05:10:11.123456789Z, as `date -d @1796274611` gives its second.
        let ns = 1_796_274_611_123_456_789;
        assert_eq!(rfc3339_nano(ns), "2026-12-03T05:10:11.123456789Z");
        assert_eq!(rfc3339(ns), "2026-12-03T05:10:11Z");
        assert_eq!(
            rfc3339_nano(1_796_274_611_120_000_000),
            "2026-12-03T05:10:11.12Z"
        );
        assert_eq!(
            rfc3339_nano(1_796_274_611_000_000_000),
            "2026-12-03T05:10:11Z"
        );
        assert_eq!(rfc3339_nano(0), ZERO);
        assert_eq!(rfc3339(951_782_400_000_000_000), "2000-02-29T00:00:00Z");
        for ns in [
            0,
            1,
            ns,
            951_782_400_000_000_000,
            1_796_274_611_120_000_000,
            4_102_444_799_999_999_999,
        ] {
            assert_eq!(parse_rfc3339_nano(&rfc3339_nano(ns)), Some(ns), "{ns}");
        }
    }

    #[test]
    fn anything_else_is_not_a_time() {
        for text in [
            "",
            "2026-12-03",
            "2026-12-03T05:10:11",
            "2026-12-03T05:10:11+01:00",
            "2026-13-03T05:10:11Z",
            "2026-12-03T24:00:00Z",
            "2026-12-03T05:10:11.Z",
            "2026-12-03T05:10:11.1234567890Z",
            "2026-12-03T05:10:11.12a4Z",
            "+026-12-03T05:10:11Z",
            "2026-12-03T05:10:11:12Z",
        ] {
            assert_eq!(parse_rfc3339_nano(text), None, "{text:?}");
        }
    }
}
