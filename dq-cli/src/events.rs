//! `dq events`: a topic's job events, one line each (JSON with `--json`, with the cursor after
//! each), until Ctrl-C or `--limit`; then the cursor to resume from, on stderr.

use std::time::{SystemTime, UNIX_EPOCH};

use dq::events::{EventCursor, EventItem, EventKind, JobEvent};
use dq::Client;
use serde_json::{json, Value};

use crate::args::EventsArgs;
use crate::output::until;
use crate::Exit;

/// Tails the events of `args.topic` from `args.from`; with `--job`, prints that job's history.
pub(crate) async fn tail(client: &Client, args: EventsArgs, json: bool) -> Result<(), Exit> {
    if let Some(id) = &args.job {
        return history(client, &args.topic, id, json).await;
    }
    let mut events = client.events_from(&args.topic, args.from).await?;
    let mut printed = 0u64;
    // An error ends the tail as Ctrl-C does, with the cursor to resume from said first.
    let mut failed = None;
    while args.limit.is_none_or(|limit| printed < limit) {
        let item = tokio::select! {
            item = events.recv() => item,
            _ = tokio::signal::ctrl_c() => break,
        };
        let item = match item {
            Some(Ok(item)) => item,
            Some(Err(e)) => {
                failed = Some(e);
                break;
            }
            None => break,
        };
        match item {
            EventItem::Event { event, cursor } => {
                println!("{}", line(&event, Some(&cursor), json));
                printed += 1;
            }
            EventItem::Lagged { shard, missed } if json => {
                println!(
                    "{}",
                    json!({ "lagged": { "shard": shard, "missed": missed } })
                );
            }
            EventItem::Lagged { shard, missed } => {
                println!("(missed {missed} events of shard {shard}: they were trimmed before they were read)");
            }
            EventItem::RolledBack { shard, forgotten } if json => {
                println!(
                    "{}",
                    json!({ "rolled_back": { "shard": shard, "forgotten": forgotten } })
                );
            }
            EventItem::RolledBack { shard, forgotten } => {
                println!("(Redis went back to an older state in shard {shard}: the last {forgotten} events printed are gone, with the changes they told of; the events written since follow)");
            }
            _ => {}
        }
    }
    eprintln!(
        "dq events: resume after the last event with: dq events {} --from {}",
        args.topic,
        events.cursor()
    );
    match failed {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}

/// `dq events TOPIC --job ID`: the job's events still kept, oldest first; says so when there
/// are none (its topic's events off, or past the cap).
async fn history(client: &Client, topic: &str, id: &str, json: bool) -> Result<(), Exit> {
    let events = client.job_history(topic, id).await?;
    if events.is_empty() && !json {
        println!("no events kept for job {id} of {topic}: its topic's events are off (a listener with `events = true` keeps them), or they went past the topic's cap");
    }
    for event in &events {
        println!("{}", line(event, None, json));
    }
    Ok(())
}

/// One event: JSON with the cursor that resumes after it (when read from the stream), or a
/// line of text.
fn line(event: &JobEvent, cursor: Option<&EventCursor>, json: bool) -> String {
    let (due, error, value) = details(&event.kind);
    if json {
        return json!({
            "topic": event.topic.as_str(),
            "id": event.id.as_str(),
            "event": event.kind.name(),
            "attempt": event.attempt,
            "at_ms": ms(event.at),
            "due_ms": due.map(ms),
            "error": error,
            "value": value.map(nested),
            "cursor": cursor.map(|c| c.to_string()),
        })
        .to_string();
    }
    let mut text = format!(
        "{}  {:<9}  {}  run {}",
        time_of_day(event.at),
        event.kind.name(),
        event.id,
        event.attempt
    );
    if let Some(due) = due {
        text.push_str(&format!("  due {}", until(due)));
    }
    if let Some(error) = error {
        text.push_str(&format!("  error: {}", error.replace(['\n', '\r'], " ")));
    }
    if let Some(value) = value {
        text.push_str(&format!("  {}", nested(value)));
    }
    text
}

/// What an event carries besides its kind: a due time, an error, a value.
fn details(kind: &EventKind) -> (Option<SystemTime>, Option<&str>, Option<&[u8]>) {
    match kind {
        EventKind::Pushed { due } => (*due, None, None),
        EventKind::Retrying { due } | EventKind::Postponed { due } => (Some(*due), None, None),
        EventKind::Failed { error } | EventKind::Dead { error } => {
            (None, Some(error.as_str()), None)
        }
        EventKind::Progress { value } => (None, None, Some(value.as_slice())),
        EventKind::Succeeded { value } => (None, None, value.as_deref()),
        _ => (None, None, None),
    }
}

/// A value as JSON (its text when it is not JSON).
fn nested(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(bytes).into_owned()))
}

fn ms(t: SystemTime) -> u64 {
    dq::store::to_us(t) / 1000
}

/// `HH:MM:SS.mmm`, UTC.
fn time_of_day(t: SystemTime) -> String {
    let ms = t
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() % 86_400_000);
    let (h, m, s) = (ms / 3_600_000, ms / 60_000 % 60, ms / 1000 % 60);
    format!("{h:02}:{m:02}:{s:02}.{:03}", ms % 1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_events_time_is_printed_as_its_time_of_day_in_utc() {
        let t = UNIX_EPOCH + std::time::Duration::from_millis(86_400_000 * 3 + 3_723_004);
        assert_eq!(time_of_day(t), "01:02:03.004");
    }
}
