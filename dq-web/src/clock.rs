//! Times for a person: UTC as it is printed and typed (by jiff, so the calendar is right),
//! and spans and times relative to the store's clock.

use std::time::{Duration, SystemTime};

use jiff::civil::{Date, Time};
use jiff::fmt::strtime;
use jiff::tz::Offset;
use jiff::Timestamp;

/// UTC time as `2026-11-24 09:30:05`.
pub(crate) fn utc(t: SystemTime) -> String {
    // Out of jiff's range (years past 9999): the epoch, as a time before it always was.
    let t = Timestamp::try_from(t).unwrap_or(Timestamp::UNIX_EPOCH);
    t.strftime("%Y-%m-%d %H:%M:%S").to_string()
}

/// The shapes a typed time may have, tried in turn; `T` between the date and the time (as a
/// `datetime-local` input sends it) is read as a space first.
const TYPED: [&str; 4] = [
    "%Y-%m-%d",
    "%Y-%m-%d %H",
    "%Y-%m-%d %H:%M",
    "%Y-%m-%d %H:%M:%S",
];

/// Reads a UTC time typed into a form: `2026-11-24`, `2026-11-24 09:30`,
/// `2026-11-24T09:30:05` (what a `datetime-local` input sends). A date that does not exist
/// (`2026-02-31`) is refused, not rolled over into the next month; the error says why.
pub(crate) fn parse_utc(text: &str) -> Result<SystemTime, String> {
    let shape = || format!("{text:?} is no time: write it as 2026-11-24 18:00 (UTC)");
    let typed = text.trim().replacen('T', " ", 1);
    let fields = TYPED
        .iter()
        .find_map(|format| strtime::parse(format, &typed).ok());
    let Some(fields) = fields else {
        return Err(impossible_day(text, &typed).unwrap_or_else(shape));
    };
    let (Some(y), Some(m), Some(d)) = (fields.year(), fields.month(), fields.day()) else {
        return Err(shape());
    };
    if !(1970..=9999).contains(&y) {
        return Err(shape());
    }
    let date = Date::new(y, m, d).map_err(|_| no_such_day(text, y, m).unwrap_or_else(shape))?;
    let (h, min, sec) = (fields.hour(), fields.minute(), fields.second());
    let time =
        Time::new(h.unwrap_or(0), min.unwrap_or(0), sec.unwrap_or(0), 0).map_err(|_| shape())?;
    let t = Offset::UTC
        .to_timestamp(date.to_datetime(time))
        .map_err(|_| shape())?;
    Ok(SystemTime::from(t))
}

/// When `typed` is a year and a month followed by a day that no month has (`2026-01-00`,
/// `2026-01-32`: jiff refuses these before the month is looked at), the same error as for
/// `2026-02-31`, naming the month.
fn impossible_day(text: &str, typed: &str) -> Option<String> {
    let (fields, end) = strtime::BrokenDownTime::parse_prefix("%Y-%m-", typed).ok()?;
    let day = typed.get(end..)?;
    let numbered = day.starts_with(|c: char| c.is_ascii_digit());
    if !numbered || strtime::BrokenDownTime::parse_prefix("%d", day).is_ok() {
        return None; // no day number, or one some month has: the shape is what is wrong
    }
    let y = fields.year().filter(|y| (1970..=9999).contains(y))?;
    no_such_day(text, y, fields.month()?)
}

/// Why day-of-month of `text` does not exist: `"2026-02-31" is no date: February 2026 has 28
/// days` (`None` when month `m` of year `y` does not exist either).
fn no_such_day(text: &str, y: i16, m: i8) -> Option<String> {
    let first = Date::new(y, m, 1).ok()?;
    let (month, days) = (first.strftime("%B %Y"), first.days_in_month());
    Some(format!("{text:?} is no date: {month} has {days} days"))
}

/// "in 9m 59s", "3s ago", relative to `now` (the store's clock).
pub(crate) fn relative(t: SystemTime, now: SystemTime) -> String {
    match t.duration_since(now) {
        Ok(ahead) if ahead >= Duration::from_secs(1) => format!("in {}", span(ahead)),
        Ok(_) => "now".to_owned(),
        Err(e) if e.duration() < Duration::from_secs(1) => "now".to_owned(),
        Err(e) => format!("{} ago", span(e.duration())),
    }
}

/// A duration in its two largest units: `2d 3h`, `9m 59s`, `850ms`.
pub(crate) fn span(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0 => format!("{}ms", d.as_millis()),
        1..=59 => format!("{s}s"),
        60..=3599 => format!("{}m {}s", s / 60, s % 60),
        3600..=86_399 => format!("{}h {}m", s / 3600, s / 60 % 60),
        _ => format!("{}d {}h", s / 86_400, s / 3600 % 24),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::time::UNIX_EPOCH;

    use super::*;

    #[test]
    fn utc_times_print_and_parse_back() {
        let t = UNIX_EPOCH + Duration::from_secs(1_795_512_605); // 2026-11-24 09:30:05
        assert_eq!(utc(t), "2026-11-24 09:30:05");
        assert_eq!(parse_utc("2026-11-24T09:30:05"), Ok(t));
        assert_eq!(parse_utc("2026-11-24 09:30:05"), Ok(t));
        assert_eq!(
            parse_utc("2026-11-24"),
            Ok(t - Duration::from_secs(9 * 3600 + 30 * 60 + 5))
        );
        assert_eq!(utc(UNIX_EPOCH), "1970-01-01 00:00:00");
        assert_eq!(
            utc(parse_utc("2024-02-29 23:59").unwrap()),
            "2024-02-29 23:59:00"
        );
        assert!(parse_utc("2026-13-01").is_err());
        assert!(parse_utc("yesterday").is_err());
        assert!(parse_utc("2026-11-24 +9:30").is_err());
    }

    #[test]
    fn a_date_that_does_not_exist_is_refused_not_rolled_over() {
        assert_eq!(
            parse_utc("2026-02-31 10:00"),
            Err(r#""2026-02-31 10:00" is no date: February 2026 has 28 days"#.to_owned())
        );
        assert!(parse_utc("2026-04-31").is_err());
        assert_eq!(
            parse_utc("2026-01-00"),
            Err(r#""2026-01-00" is no date: January 2026 has 31 days"#.to_owned())
        );
        assert_eq!(
            parse_utc("2026-04-32 10:00"),
            Err(r#""2026-04-32 10:00" is no date: April 2026 has 30 days"#.to_owned())
        );
        assert!(parse_utc("2100-02-29").is_err(), "not a leap year");
        assert_eq!(
            utc(parse_utc("2000-02-29 12:00").unwrap()),
            "2000-02-29 12:00:00"
        );
        assert_eq!(
            utc(parse_utc("2026-12-31 23:59:59").unwrap()),
            "2026-12-31 23:59:59"
        );
    }

    #[test]
    fn durations_read_in_two_units() {
        assert_eq!(span(Duration::from_millis(850)), "850ms");
        assert_eq!(span(Duration::from_secs(599)), "9m 59s");
        assert_eq!(span(Duration::from_secs(3 * 86_400 + 7200)), "3d 2h");
    }
}
