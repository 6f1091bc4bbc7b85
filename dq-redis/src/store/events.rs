//! Job events on Redis: a topic's events turned on or off in every shard (the `events` hash),
//! the read of where each shard's stream ends (the cursor `now`), and the reading of stream
//! entries into events. The scripts append the events (lib.lua's `emit_event`); the feed that
//! reads them is in `event_feed`.

use redis::Value;

use super::event_feed::RedisEventFeed;
use super::reply::malformed_reply;
use super::RedisStore;
use dq_core::events::{EventCursor, EventEntry, EventKind, EventPosition, JobEvent};
use dq_core::store::{from_us, EventFeed};
use dq_core::{JobId, Result, Topic};

/// What a failed read of events is reported as.
pub(super) const OP: &str = "read job events";

impl RedisStore {
    /// Writes (or removes, with the streams) `topic`'s events cap in every shard.
    pub(super) async fn record_events(&self, topic: &Topic, cap: Option<u64>) -> Result<()> {
        for k in &self.shards {
            match cap {
                Some(cap) => {
                    let cmd = redis::cmd("HSET")
                        .arg(k.events())
                        .arg(topic.as_str())
                        .arg(cap.max(1))
                        .to_owned();
                    self.simple("record the listeners' job events", &cmd)
                        .await?;
                }
                None => {
                    let mut inv = self.scripts().events_off.prepare_invoke();
                    inv.key(k.events())
                        .key(k.events_stream(topic))
                        .arg(topic.as_str());
                    self.call::<Value>("turn a topic's job events off", &mut inv)
                        .await?;
                }
            }
        }
        Ok(())
    }

    /// A feed of `topic`'s events after `after` (`now`: after each stream's last entry, read
    /// here).
    pub(super) async fn open_event_feed(
        &self,
        topic: &Topic,
        after: &EventCursor,
    ) -> Result<Box<dyn EventFeed>> {
        let keys: Vec<String> = self.shards.iter().map(|k| k.events_stream(topic)).collect();
        let start = if after.is_now() {
            let mut ends = Vec::with_capacity(keys.len());
            for key in &keys {
                ends.push(self.stream_end(topic, key).await?);
            }
            EventCursor::at(ends)
        } else {
            after.clone()
        };
        Ok(Box::new(RedisEventFeed::open(
            self.server.clone(),
            self.conn.clone(),
            topic.clone(),
            keys,
            start,
        )))
    }

    /// The position of the last entry of the stream `key` (before the first when it has none).
    async fn stream_end(&self, topic: &Topic, key: &str) -> Result<EventPosition> {
        let cmd = redis::cmd("XREVRANGE")
            .arg(key)
            .arg("+")
            .arg("-")
            .arg("COUNT")
            .arg(1)
            .to_owned();
        let reply: Value = self
            .query("read where a topic's job events end", &cmd)
            .await?;
        match &reply {
            Value::Array(entries) => match entries.first() {
                Some(last) => Ok(entries_of(topic, 0, last)?
                    .last()
                    .map(|e| e.position)
                    .unwrap_or_default()),
                None => Ok(EventPosition::default()),
            },
            Value::Nil => Ok(EventPosition::default()),
            other => Err(malformed_reply("XREVRANGE", other)),
        }
    }
}

/// The entries of an `XREAD` reply (none when it timed out), each stream's in order; `keys`
/// names the shard of each stream read.
pub(super) fn read_reply(
    topic: &Topic,
    keys: &[(u16, String)],
    reply: &Value,
) -> Result<Vec<EventEntry>> {
    let streams: Vec<(&Value, &Value)> = match reply {
        Value::Nil => return Ok(Vec::new()),
        // RESP3: a map of stream -> entries.
        Value::Map(pairs) => pairs.iter().map(|(k, v)| (k, v)).collect(),
        // RESP2: [[stream, entries], ...].
        Value::Array(items) => {
            let mut streams = Vec::with_capacity(items.len());
            for item in items {
                match item {
                    Value::Array(pair) if pair.len() == 2 => streams.push((&pair[0], &pair[1])),
                    other => return Err(malformed_reply(OP, other)),
                }
            }
            streams
        }
        other => return Err(malformed_reply(OP, other)),
    };
    let mut out = Vec::new();
    for (key, entries) in streams {
        let key = bytes_of(key).ok_or_else(|| malformed_reply(OP, key))?;
        let Some((shard, _)) = keys.iter().find(|(_, k)| k.as_bytes() == key) else {
            continue; // not a stream this read asked for
        };
        let Value::Array(entries) = entries else {
            return Err(malformed_reply(OP, entries));
        };
        for e in entries {
            out.extend(entries_of(topic, *shard, e)?);
        }
    }
    Ok(out)
}

/// The events of one stream entry, `[id, [field, value, ...]]`, of `topic` in `shard`, each at
/// its own position: an entry holds one event, or `c` of one kind (numbered up to `n`, each
/// per-job field one line per job: lib.lua's `emit_events`). An event this version cannot read
/// (a kind added later, a field missing) keeps its place, without its event, and is logged.
fn entries_of(topic: &Topic, shard: u16, v: &Value) -> Result<Vec<EventEntry>> {
    let (at, fields) = entry_parts(v)?;
    let (ms, seq, last, written) = (at.ms, at.seq, at.n, at.t_us);
    let count = fields.number("c").unwrap_or(1).max(1);
    let mut out = Vec::new();
    for i in 0..count {
        let event = job_event(
            topic,
            &fields,
            usize::try_from(i).unwrap_or(usize::MAX),
            count,
        );
        if event.is_none() {
            tracing::warn!(topic = %topic, shard, entry = %format!("{ms}-{seq}"), "a job event that this version of dq cannot read was skipped");
        }
        let n = (last + i + 1).saturating_sub(count);
        out.push(EventEntry {
            shard,
            position: EventPosition::new(ms, seq, n).written_at(written),
            event,
        });
    }
    Ok(out)
}

/// Where one stream entry, `[id, [field, value, ...]]`, stands: its id, the number of its last
/// event and its time (its events not read).
pub(super) fn entry_position(v: &Value) -> Result<EventPosition> {
    Ok(entry_parts(v)?.0)
}

/// One stream entry's position (its id, the number of its last event, its time) and fields.
fn entry_parts(v: &Value) -> Result<(EventPosition, Fields<'_>)> {
    let bad = || malformed_reply(OP, v);
    let Value::Array(parts) = v else {
        return Err(bad());
    };
    let (Some(id), Some(fields)) = (parts.first(), parts.get(1)) else {
        return Err(bad());
    };
    let (ms, seq) = bytes_of(id)
        .and_then(|b| std::str::from_utf8(b).ok())
        .and_then(EventPosition::parse_stream_id)
        .ok_or_else(bad)?;
    let fields = Fields::of(fields);
    let n = fields.number("n").unwrap_or(0);
    let at = EventPosition::new(ms, seq, n).written_at(fields.number("t").unwrap_or(0));
    Ok((at, fields))
}

/// Event `i` of the `count` an entry's fields describe (keys.rs lists them).
fn job_event(topic: &Topic, f: &Fields<'_>, i: usize, count: u64) -> Option<JobEvent> {
    // A field of a batched entry holds one line per job; one of a single event, its value
    // whole (an error may hold line breaks).
    let nth = |name: &str| -> Option<&[u8]> {
        let whole = f.get(name)?;
        if count == 1 {
            return Some(whole);
        }
        whole.split(|&b| b == b'\n').nth(i)
    };
    let text = |name: &str| nth(name).and_then(|b| std::str::from_utf8(b).ok());
    let number = |name: &str| text(name).and_then(|t| t.parse::<u64>().ok());
    // A batch may name its jobs `topic:id` (neither holds a colon): the id follows it.
    let named = text("id")?;
    let id = JobId::new(named.rsplit_once(':').map_or(named, |(_, id)| id)).ok()?;
    // An entry without runs (`promoted`: a promotion does not read the jobs) reads as 0.
    let attempt = match f.get("a") {
        None => 0,
        Some(_) => u32::try_from(number("a")?).ok()?,
    };
    let at = from_us(f.number("t")?);
    let due = || number("d").map(from_us);
    let error = || nth("e").map(|e| String::from_utf8_lossy(e).into_owned());
    let value = || nth("v").filter(|v| !v.is_empty()).map(<[u8]>::to_vec);
    let kind = match f.text("k")? {
        "pushed" => EventKind::Pushed { due: due() },
        "promoted" => EventKind::Promoted,
        "started" => EventKind::Started,
        "progress" => EventKind::Progress { value: value()? },
        "succeeded" => EventKind::Succeeded { value: value() },
        "failed" => EventKind::Failed { error: error()? },
        "retrying" => EventKind::Retrying { due: due()? },
        "postponed" => EventKind::Postponed { due: due()? },
        "dead" => EventKind::Dead { error: error()? },
        "cancelled" => EventKind::Cancelled,
        "stalled" => EventKind::Stalled,
        "released" => EventKind::Released,
        "workflow_ended" => EventKind::WorkflowEnded {
            workflow: text("w")?.to_owned(),
            state: dq_core::workflow::WorkflowState::from_name(text("s")?)?,
        },
        _ => return None,
    };
    Some(JobEvent::new(topic.clone(), id, kind, attempt, at))
}

/// The bytes of a string reply.
fn bytes_of(v: &Value) -> Option<&[u8]> {
    match v {
        Value::BulkString(b) => Some(b),
        Value::SimpleString(s) => Some(s.as_bytes()),
        Value::VerbatimString { text, .. } => Some(text.as_bytes()),
        _ => None,
    }
}

/// An entry's fields: `[field, value, ...]` (or a map, in RESP3).
struct Fields<'a>(Vec<(&'a [u8], &'a [u8])>);

impl<'a> Fields<'a> {
    fn of(v: &'a Value) -> Fields<'a> {
        let pairs = match v {
            Value::Array(items) => items
                .chunks(2)
                .filter_map(|p| Some((bytes_of(p.first()?)?, bytes_of(p.get(1)?)?)))
                .collect(),
            Value::Map(pairs) => pairs
                .iter()
                .filter_map(|(k, v)| Some((bytes_of(k)?, bytes_of(v)?)))
                .collect(),
            _ => Vec::new(),
        };
        Fields(pairs)
    }

    fn get(&self, name: &str) -> Option<&'a [u8]> {
        self.0
            .iter()
            .find(|(k, _)| *k == name.as_bytes())
            .map(|(_, v)| *v)
    }

    fn text(&self, name: &str) -> Option<&'a str> {
        std::str::from_utf8(self.get(name)?).ok()
    }

    fn number(&self, name: &str) -> Option<u64> {
        self.text(name)?.parse().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    fn stream_entry(id: &str, fields: &[&str]) -> Value {
        Value::Array(vec![
            bulk(id),
            Value::Array(fields.iter().copied().map(bulk).collect()),
        ])
    }

    #[test]
    fn an_xread_reply_becomes_each_shards_events_in_order() {
        let topic = Topic::new("mail").unwrap();
        let keys = vec![(0, "s0".to_owned()), (1, "s1".to_owned())];
        let failed = [
            "n", "4", "k", "failed", "id", "a", "a", "2", "t", "7000", "e", "boom",
        ];
        let due = [
            "n", "5", "k", "retrying", "id", "a", "a", "2", "t", "7000", "d", "9000",
        ];
        let reply = Value::Array(vec![Value::Array(vec![
            bulk("s1"),
            Value::Array(vec![
                stream_entry("7-0", &failed),
                stream_entry("7-1", &due),
                stream_entry("8-0", &["n", "6", "k", "exploded", "id", "a"]),
            ]),
        ])]);
        let entries = read_reply(&topic, &keys, &reply).unwrap();
        assert_eq!(entries.len(), 3);
        assert_eq!(entries[0].shard, 1);
        assert_eq!(
            entries[1].position,
            EventPosition::new(7, 1, 5).written_at(7000)
        );
        let failed = entries[0].event.as_ref().unwrap();
        assert_eq!(
            (failed.id.as_str(), failed.attempt, &failed.kind),
            (
                "a",
                2,
                &EventKind::Failed {
                    error: "boom".into()
                }
            )
        );
        let retrying = &entries[1].event.as_ref().unwrap().kind;
        assert_eq!(retrying, &EventKind::Retrying { due: from_us(9000) });
        assert_eq!(
            entries[2].event, None,
            "an unknown kind keeps its place only"
        );
        assert_eq!(entries[2].position.n, 6);
        assert!(read_reply(&topic, &keys, &Value::Nil).unwrap().is_empty());
    }

    #[test]
    fn a_batched_entry_becomes_one_event_per_job_each_numbered() {
        let topic = Topic::new("mail").unwrap();
        let keys = vec![(0, "s0".to_owned())];
        let pushed = [
            "n",
            "12",
            "c",
            "3",
            "k",
            "pushed",
            "id",
            "a\nmail:b\nc",
            "a",
            "0\n0\n0",
            "t",
            "7000",
            "d",
            "\n9000\n",
        ];
        let reply = Value::Array(vec![Value::Array(vec![
            bulk("s0"),
            Value::Array(vec![stream_entry("7-0", &pushed)]),
        ])]);
        let entries = read_reply(&topic, &keys, &reply).unwrap();
        let numbers: Vec<u64> = entries.iter().map(|e| e.position.n).collect();
        assert_eq!(numbers, [10, 11, 12]);
        let kinds: Vec<(&str, EventKind)> = entries
            .iter()
            .map(|e| {
                let e = e.event.as_ref().unwrap();
                (e.id.as_str(), e.kind.clone())
            })
            .collect();
        assert_eq!(
            kinds,
            [
                ("a", EventKind::Pushed { due: None }),
                (
                    "b",
                    EventKind::Pushed {
                        due: Some(from_us(9000))
                    }
                ),
                ("c", EventKind::Pushed { due: None }),
            ]
        );
    }
}
