//! Tables and JSON for the terminal.

use std::time::SystemTime;

use dq::admin::Page;
use dq::JobInfo;
use serde_json::{json, Value};

/// A page of jobs: JSON with the `next` cursor, or a table of `row`s and the command that prints
/// the next page (`next` followed by the cursor).
pub(crate) fn print_page(
    json: bool,
    page: &Page,
    headers: &[&str],
    row: impl Fn(&JobInfo) -> Vec<String>,
    next: &str,
) {
    if json {
        let jobs: Vec<_> = page.jobs.iter().map(job_json).collect();
        println!("{}", json!({ "jobs": jobs, "next": page.next }));
        return;
    }
    print_table(headers, page.jobs.iter().map(row).collect());
    if let Some(cursor) = page.next {
        println!("more: {next} {cursor}");
    }
}

/// What a command did: `value` with `--json`, else `text`.
pub(crate) fn report(json: bool, value: Value, text: &str) {
    if json {
        println!("{value}");
    } else {
        println!("{text}");
    }
}

/// Prints rows under headers, each column as wide as its widest cell. A cell of the last
/// column may hold several lines (a pretty result): they go on under its column.
pub(crate) fn print_table(headers: &[&str], rows: Vec<Vec<String>>) {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let last_column: usize = widths.iter().rev().skip(1).map(|w| w + 2).sum();
    let go_on = format!("\n{}", " ".repeat(last_column));
    let line = |cells: Vec<String>| {
        let text: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        println!("{}", text.join("  ").trim_end().replace('\n', &go_on));
    };
    line(headers.iter().map(|h| (*h).to_owned()).collect());
    if rows.is_empty() {
        println!("(none)");
    }
    for row in rows {
        line(row);
    }
}

fn ms(t: SystemTime) -> u64 {
    dq::store::to_us(t) / 1000
}

/// "in 9m59s" or "3s ago".
pub(crate) fn until(t: SystemTime) -> String {
    match t.duration_since(SystemTime::now()) {
        Ok(d) => format!("in {}", human(d.as_secs_f64())),
        Err(e) => format!("{} ago", human(e.duration().as_secs_f64())),
    }
}

/// "3s ago" (or "in ..." for a time ahead).
pub(crate) fn ago(t: SystemTime) -> String {
    until(t)
}

fn human(secs: f64) -> String {
    let s = secs as u64;
    match s {
        0 => format!("{:.0}ms", secs * 1000.0),
        1..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{}s", s / 60, s % 60),
        3600..=86_399 => format!("{}h{}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d{}h", s / 86_400, (s % 86_400) / 3600),
    }
}

/// Nested JSON when `bytes` are JSON (as dq's clients push payloads and keep results), else
/// their text.
fn nested(bytes: &[u8]) -> Value {
    serde_json::from_slice::<Value>(bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(bytes).into_owned()))
}

/// A done job's result on one line, cut after `n` characters ("-" when its handler returned
/// no value).
pub(crate) fn result_line(j: &JobInfo, n: usize) -> String {
    let Some(result) = &j.result else {
        return "-".into();
    };
    let text = match serde_json::from_slice::<Value>(result) {
        Ok(value) => value.to_string(),
        Err(_) => String::from_utf8_lossy(result).replace(['\n', '\r'], " "),
    };
    match text.char_indices().nth(n) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text,
    }
}

/// A done job's result for `dq show`: pretty JSON, or its text ("-" when its handler returned
/// no value).
pub(crate) fn result_pretty(j: &JobInfo) -> String {
    j.result.as_deref().map_or_else(|| "-".into(), pretty)
}

/// A value a job holds as JSON (a result, a progress): pretty JSON, or its text when it is not
/// JSON.
pub(crate) fn pretty(value: &[u8]) -> String {
    match serde_json::from_slice::<Value>(value) {
        Ok(parsed) => serde_json::to_string_pretty(&parsed)
            .unwrap_or_else(|_| String::from_utf8_lossy(value).into_owned()),
        Err(_) => String::from_utf8_lossy(value).into_owned(),
    }
}

pub(crate) fn job_json(j: &dq::JobInfo) -> Value {
    json!({
        "topic": j.topic.as_str(),
        "id": j.id.as_str(),
        "state": j.state.as_str(),
        "attempt": j.attempt,
        "max_attempts": j.max_attempts,
        "priority": j.priority,
        // Its group (`dq push --group`), null for none.
        "group": j.group,
        "due_ms": ms(j.due),
        "created_ms": ms(j.created),
        "state_time_ms": j.state_since_or_until.map(ms),
        "last_error": j.last_error,
        // Each failed run's error it keeps (the latest 10, each its first KiB), oldest first.
        "errors": j.errors.iter().map(|e| json!({
            "run": e.run,
            "at_ms": e.at_us / 1000,
            "error": e.error,
        })).collect::<Vec<_>>(),
        "payload": nested(&j.payload),
        // A done job's value (null for none, and for a job that is not done).
        "result": j.result.as_deref().map(nested),
        // A running job's latest progress (null when it reported none, and when not running).
        "progress": j.progress.as_deref().map(nested),
        // A running job whose worker was asked to stop it (`dq cancel`), its run not ended yet.
        "cancel_requested": j.cancel_requested,
    })
}

pub(crate) fn stats_json(
    topic: &str,
    s: &dq::admin::TopicStats,
    hour: &dq::admin::Throughput,
) -> Value {
    json!({
        "topic": topic,
        "delayed": s.counts.delayed,
        "ready": s.counts.ready,
        "running": s.counts.running,
        "dead": s.counts.dead,
        // The records of succeeded jobs it keeps (only with a retention).
        "done": s.counts.done,
        "oldest_ready_due_ms": s.oldest_ready_due.map(ms),
        "next_due_ms": s.next_due.map(ms),
        "paused": s.paused,
        "done_1h": hour.done(),
        "failed_1h": hour.failed(),
        // Its bound on pending jobs (`dq max-pending`), null when it has none.
        "max_pending": s.max_pending,
        // Its rate limit as written (`dq rate`, "100/1s"), null when it has none.
        "rate": s.rate.map(|r| r.to_string()),
        // How much of it the runs that ended in its window used (1: all of it), null without a
        // rate or for one too slow to measure; the window in full minutes (1 for any rate of
        // two starts a minute or more: `Throughput::rate_window`).
        "rate_used": s.rate.and_then(|r| hour.rate_used(r)).map(|u| (u * 1000.0).round() / 1000.0),
        "rate_window_minutes": s.rate.and_then(dq::admin::Throughput::rate_window),
        // The most of its jobs running at once in all processes (`dq global-concurrency`).
        "global_concurrency": s.global_concurrency,
        // When a handler's hold (Outcome::RateLimited) in force ends, null when none is.
        "held_until_ms": s.held_until.map(ms),
        // How many of one group's jobs run at once (`dq groups`), null for the default of 1.
        "group_concurrency": s.group_concurrency,
        // How many jobs of each group start per period (`dq groups --rate`, "10/1s"), null
        // when it has none.
        "group_rate": s.group_rate.map(|r| r.to_string()),
        // The groups with the most jobs waiting for a slot: group, waiting, holding.
        "busiest_groups": s.busiest_groups,
    })
}
