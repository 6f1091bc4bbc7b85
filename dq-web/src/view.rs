//! The page frame, the formatting every page shares, and the compiled-in assets.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use dq_core::{JobState, Throughput};
use maud::{html, Markup, PreEscaped, DOCTYPE};

use crate::Viewer;

const CSS: &str = include_str!("../assets/dq.css");
const JS: &str = include_str!("../assets/dq.js");

pub(crate) async fn stylesheet() -> Response {
    asset("text/css; charset=utf-8", CSS)
}

pub(crate) async fn script() -> Response {
    asset("text/javascript; charset=utf-8", JS)
}

fn asset(kind: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        body,
    )
        .into_response()
}

/// A whole page: the navigation, an optional note (what the last action did), the body.
pub(crate) fn page(
    viewer: &Viewer,
    title: &str,
    refresh: Duration,
    note: Option<&str>,
    body: Markup,
) -> Html<String> {
    let base = &viewer.base;
    let home = home(viewer);
    let markup = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · dq" }
                link rel="stylesheet" href={ (base) "/assets/dq.css" };
                script src={ (base) "/assets/dq.js" } defer {}
            }
            body data-refresh-ms=(refresh.as_millis()) {
                header {
                    nav {
                        a.brand href=(home) { "dq" }
                        a href=(home) { "Topics" }
                        a href={ (base) "/schedules" } { "Schedules" }
                        a href={ (base) "/workers" } { "Workers" }
                    }
                    @if !viewer.can_act {
                        span.badge.readonly title="Actions are hidden and refused" { "read-only" }
                    }
                }
                main {
                    @if let Some(note) = note {
                        p.note role="status" { (note) }
                    }
                    (body)
                }
            }
        }
    };
    Html(markup.into_string())
}

/// The overview's address: the mount point itself (`/dq`; axum's `nest` does not route
/// `/dq/`), or `/` at the root.
pub(crate) fn home(viewer: &Viewer) -> String {
    if viewer.base.is_empty() {
        "/".to_owned()
    } else {
        viewer.base.clone()
    }
}

/// An error page: what went wrong and what to do, with its status.
pub(crate) fn error(status: StatusCode, viewer: Option<&Viewer>, message: &str) -> Response {
    let fallback = Viewer {
        base: String::new(),
        can_act: false,
    };
    let viewer = viewer.unwrap_or(&fallback);
    let body = html! {
        h1 { (status.as_u16()) " " (status.canonical_reason().unwrap_or("")) }
        p.error { (message) }
        p { a href=(home(viewer)) { "Back to the topics" } }
    };
    (status, page(viewer, "Error", Duration::ZERO, None, body)).into_response()
}

/// A POST form with one button and the CSRF token.
pub(crate) fn button(action: &str, csrf: &str, label: &str, class: &str) -> Markup {
    html! {
        form.inline method="post" action=(action) {
            input type="hidden" name="csrf" value=(csrf);
            button type="submit" class=(class) { (label) }
        }
    }
}

/// A job id or topic as one URL path segment: everything but letters, digits and `-._~`
/// percent-encoded (an id may hold `/`, `?`, `#` or `%`).
pub(crate) fn seg(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Like [`button`], asking the person to confirm first (for what cannot be undone).
pub(crate) fn confirm_button(action: &str, csrf: &str, label: &str, question: &str) -> Markup {
    html! {
        form.inline method="post" action=(action) data-confirm=(question) {
            input type="hidden" name="csrf" value=(csrf);
            button type="submit" class="danger" { (label) }
        }
    }
}

/// UTC time as `2026-11-24 09:30:05`.
pub(crate) fn utc(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(i64::try_from(days).unwrap_or(0));
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        rest / 3600,
        rest / 60 % 60,
        rest % 60
    )
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian calendar
/// (Howard Hinnant's `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = u32::try_from(doy - (153 * mp + 2) / 5 + 1).unwrap_or(1);
    let m = u32::try_from(if mp < 10 { mp + 3 } else { mp - 9 }).unwrap_or(1);
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// (year, month, day) to days since 1970-01-01 (Hinnant's `days_from_civil`).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Reads a UTC time typed into a form: `2026-11-24`, `2026-11-24 09:30`,
/// `2026-11-24T09:30:05` (what a `datetime-local` input sends). A date that does not exist
/// (`2026-02-31`) is refused, not rolled over into the next month; the error says why.
pub(crate) fn parse_utc(text: &str) -> Result<SystemTime, String> {
    let shape = || format!("{text:?} is no time: write it as 2026-11-24 18:00 (UTC)");
    let trimmed = text.trim();
    let (date, time) = trimmed.split_once(['T', ' ']).unwrap_or((trimmed, "00:00"));
    let mut ymd = date.splitn(3, '-');
    let (Some(y), Some(m), Some(d)) = (digits(ymd.next()), digits(ymd.next()), digits(ymd.next()))
    else {
        return Err(shape());
    };
    let mut hms = time.trim().splitn(3, ':');
    let h = digits(hms.next()).ok_or_else(shape)?;
    let min = hms
        .next()
        .map_or(Some(0), |p| digits(Some(p)))
        .ok_or_else(shape)?;
    let sec = hms
        .next()
        .map_or(Some(0), |p| digits(Some(p)))
        .ok_or_else(shape)?;
    if !(1970..=9999).contains(&y) || !(1..=12).contains(&m) || h > 23 || min > 59 || sec > 59 {
        return Err(shape());
    }
    let last_day = days_in_month(y, m);
    if !(1..=last_day).contains(&d) {
        let month = MONTHS[usize::try_from(m - 1).unwrap_or(0)];
        return Err(format!(
            "{text:?} is no date: {month} {y} has {last_day} days"
        ));
    }
    let civil = (i64::try_from(y), u32::try_from(m), u32::try_from(d));
    let (Ok(y), Ok(m), Ok(d)) = civil else {
        return Err(shape());
    };
    let days = u64::try_from(days_from_civil(y, m, d)).map_err(|_| shape())?;
    Ok(UNIX_EPOCH + Duration::from_secs(days * 86_400 + h * 3600 + min * 60 + sec))
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

/// A field of a date or a time: digits only (no sign, no space).
fn digits(part: Option<&str>) -> Option<u64> {
    part.filter(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))?
        .parse()
        .ok()
}

/// How many days month `m` (1-12) of year `y` has, in the Gregorian calendar.
fn days_in_month(y: u64, m: u64) -> u64 {
    match m {
        2 if y.is_multiple_of(4) && (!y.is_multiple_of(100) || y.is_multiple_of(400)) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
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

/// The job's payload for a person: pretty JSON, or the text as it is.
pub(crate) fn pretty_payload(payload: &[u8]) -> String {
    match serde_json::from_slice::<serde_json::Value>(payload) {
        Ok(v) => serde_json::to_string_pretty(&v)
            .unwrap_or_else(|_| String::from_utf8_lossy(payload).into_owned()),
        Err(_) => String::from_utf8_lossy(payload).into_owned(),
    }
}

/// The first `n` characters, with an ellipsis when cut.
pub(crate) fn clip(text: &str, n: usize) -> String {
    match text.char_indices().nth(n) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_owned(),
    }
}

pub(crate) fn state_name(state: JobState) -> &'static str {
    state.as_str()
}

/// The last hour as a small bar chart: done above the line, failed below, one bar a minute.
pub(crate) fn chart(hour: &Throughput) -> Markup {
    const W: usize = 180;
    const H: u64 = 28;
    let most = hour
        .minutes
        .iter()
        .map(|m| m.done.max(m.failed))
        .max()
        .unwrap_or(0)
        .max(1);
    let bar = |n: u64| (n * (H / 2)).div_ceil(most);
    let mut bars = String::new();
    for (i, m) in hour.minutes.iter().enumerate() {
        let x = i * W / 60;
        if m.done > 0 {
            let h = bar(m.done);
            bars.push_str(&format!(
                r#"<rect class="done" x="{x}" y="{}" width="2" height="{h}"/>"#,
                H / 2 - h
            ));
        }
        if m.failed > 0 {
            bars.push_str(&format!(
                r#"<rect class="failed" x="{x}" y="{}" width="2" height="{}"/>"#,
                H / 2,
                bar(m.failed)
            ));
        }
    }
    let label = format!("last hour: {} done, {} failed", hour.done(), hour.failed());
    html! {
        svg.chart viewBox={ "0 0 " (W) " " (H) } width=(W) height=(H) role="img" aria-label=(label) {
            title { (label) }
            line.axis x1="0" y1=(H / 2) x2=(W) y2=(H / 2) {}
            // Numbers only, formatted above: nothing from the store is in this string.
            (PreEscaped(bars))
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
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
        assert!(parse_utc("2026-01-00").is_err());
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

    #[test]
    fn ids_are_one_path_segment() {
        assert_eq!(seg("order-42"), "order-42");
        assert_eq!(seg("a/b?c#d%e\"<"), "a%2Fb%3Fc%23d%25e%22%3C");
    }

    #[test]
    fn payloads_are_pretty_json_or_text() {
        assert_eq!(pretty_payload(br#"{"a":1}"#), "{\n  \"a\": 1\n}");
        assert_eq!(pretty_payload(b"not json"), "not json");
        assert_eq!(clip("abcdef", 3), "abc…");
        assert_eq!(clip("abc", 3), "abc");
    }
}
