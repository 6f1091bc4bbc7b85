//! The rules for what users write to dq, in one place: topic names, job ids, durations and
//! rates.
//!
//! `dq-core` checks them at run time (`Topic::new`, `Config`, the `DQ_*` variables) and
//! `dq-macros` at compile time (`#[dq::listener(topic = "..", timeout = "5s")]`), so that a value
//! the macro accepts is one the runtime accepts, and the reverse. No dependencies: a
//! proc-macro crate can use it without building dq-core.
//!
//! Topics and ids end up inside Redis keys and members (`{ns:shard}:ready:<topic>`,
//! `<topic>:<id>`), so anything that would break that layout is refused: `{` and `}` would
//! change the cluster hashtag, `:` would make `<topic>:<id>` ambiguous, `*` and whitespace make
//! keys unsafe to type in `redis-cli`, and control characters corrupt logs.

#![forbid(unsafe_code)]

use std::time::Duration;

/// Longest topic name accepted, in bytes.
pub const MAX_TOPIC_LEN: usize = 128;
/// Longest job id accepted, in bytes.
pub const MAX_JOB_ID_LEN: usize = 256;

/// Why `name` cannot be a topic (1 to 128 ASCII letters, digits, `-`, `_` or `.`, not `.` or
/// `..`), or `None`.
///
/// ```
/// assert_eq!(dq_syntax::topic_problem("order-cancel"), None);
/// assert!(dq_syntax::topic_problem("order cancel").is_some());
/// ```
pub fn topic_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        return Some("a topic must not be empty");
    }
    if name.len() > MAX_TOPIC_LEN {
        return Some("a topic is at most 128 bytes long");
    }
    if name
        .bytes()
        .any(|b| !(b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')))
    {
        return Some("a topic may hold only ASCII letters, digits, '-', '_' and '.'");
    }
    if matches!(name, "." | "..") {
        return Some("a topic must not be '.' or '..' (they read as paths in URLs, the dashboard's included)");
    }
    None
}

/// Why `id` cannot be a job id (1 to 256 bytes of printable text without whitespace, `{`,
/// `}`, `:` or `*`), or `None`.
///
/// ```
/// assert_eq!(dq_syntax::id_problem("order-42"), None);
/// assert!(dq_syntax::id_problem("order:42").is_some());
/// ```
pub fn id_problem(id: &str) -> Option<&'static str> {
    if id.is_empty() {
        return Some("a job id must not be empty");
    }
    if id.len() > MAX_JOB_ID_LEN {
        return Some("a job id is at most 256 bytes long");
    }
    if id.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Some("a job id must not contain whitespace or control characters");
    }
    if id.contains(['{', '}', ':', '*']) {
        return Some("a job id must not contain '{', '}', ':' or '*'");
    }
    if matches!(id, "." | "..") {
        return Some("a job id must not be '.' or '..' (they read as paths in URLs, the dashboard's included)");
    }
    None
}

/// Parses `250ms`, `5s`, `1.5s`, `10m`, `2h` or `1d` (zero too: each setting says whether it
/// takes zero).
///
/// ```
/// use std::time::Duration;
/// assert_eq!(dq_syntax::parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
/// assert_eq!(dq_syntax::parse_duration("1d"), Ok(Duration::from_secs(86_400)));
/// assert!(dq_syntax::parse_duration("5 parsecs").is_err());
/// assert!(dq_syntax::parse_duration("5").is_err());
/// ```
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} does not start with a number (as in \"5s\")"))?;
    let scale = match unit.trim() {
        "ms" => 0.001,
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        "d" => 86400.0,
        "" => {
            return Err(format!(
                "{text:?} needs a unit: ms, s, m, h or d (as in \"5s\")"
            ))
        }
        _ => {
            return Err(format!(
                "{text:?} has an unknown unit: use ms, s, m, h or d"
            ))
        }
    };
    Duration::try_from_secs_f64(number * scale).map_err(|e| format!("{text:?}: {e}"))
}

/// Most jobs a rate may allow per period.
pub const MAX_RATE_COUNT: u64 = 1_000_000_000;

/// Parses a rate limit, `<count>/<period>`: `100/1s`, `6000/1m`, `5/250ms`; a unit alone
/// means one of it (`100/s`). The count is 1 to 1,000,000,000 and the period at least 1 ms and
/// at most a day.
///
/// ```
/// use std::time::Duration;
/// assert_eq!(dq_syntax::parse_rate("100/1s"), Ok((100, Duration::from_secs(1))));
/// assert_eq!(dq_syntax::parse_rate("100/s"), Ok((100, Duration::from_secs(1))));
/// assert!(dq_syntax::parse_rate("100").is_err());
/// assert!(dq_syntax::parse_rate("0/1s").is_err());
/// ```
pub fn parse_rate(text: &str) -> Result<(u64, Duration), String> {
    let text = text.trim();
    let Some((count, period)) = text.split_once('/') else {
        return Err(format!(
            "{text:?} is not a rate: write <count>/<period>, as in \"100/1s\""
        ));
    };
    let count: u64 = count
        .trim()
        .parse()
        .map_err(|_| format!("{text:?}: {:?} is not a whole number of jobs", count.trim()))?;
    if !(1..=MAX_RATE_COUNT).contains(&count) {
        return Err(format!(
            "{text:?}: the count must be 1 to {MAX_RATE_COUNT} (leave the rate out for no limit)"
        ));
    }
    let period = period.trim();
    let period = if period.starts_with(|c: char| c.is_ascii_digit() || c == '.') {
        parse_duration(period)?
    } else {
        parse_duration(&format!("1{period}"))?
    };
    if period < Duration::from_millis(1) || period > Duration::from_secs(86_400) {
        return Err(format!("{text:?}: the period must be 1ms to 1d"));
    }
    Ok((count, period))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_and_dot_dot_are_neither_topics_nor_ids_but_may_appear_inside_them() {
        for name in [".", ".."] {
            assert!(topic_problem(name).is_some(), "{name}");
            assert!(id_problem(name).is_some(), "{name}");
        }
        assert_eq!(topic_problem("orders.v2"), None);
        assert_eq!(id_problem("..."), None);
        assert_eq!(id_problem("a/../b"), None);
    }

    #[test]
    fn every_unit_parses_and_zero_is_a_duration() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration(" 10m "), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
    }

    #[test]
    fn a_rate_needs_a_count_of_at_least_one_and_a_period_of_at_least_a_millisecond() {
        assert_eq!(parse_rate("6000/1m"), Ok((6000, Duration::from_secs(60))));
        assert_eq!(
            parse_rate(" 5 / 250ms "),
            Ok((5, Duration::from_millis(250)))
        );
        for bad in [
            "100",
            "x/1s",
            "-1/1s",
            "0/1s",
            "10/0s",
            "10/0.5ms",
            "10/2d",
            "10/1 parsec",
            "2000000000/1s",
        ] {
            assert!(parse_rate(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_duration_past_what_duration_holds_is_refused() {
        assert!(parse_duration("99999999999999999999999d").is_err());
    }

    #[test]
    fn a_topic_at_the_length_limit_is_accepted_and_one_past_it_refused() {
        assert_eq!(topic_problem(&"a".repeat(MAX_TOPIC_LEN)), None);
        assert!(topic_problem(&"a".repeat(MAX_TOPIC_LEN + 1)).is_some());
    }
}
