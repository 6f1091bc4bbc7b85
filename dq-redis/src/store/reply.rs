//! Reading the replies of dq's scripts: each reply shape is a type with a `FromRedisValue`
//! impl, so a reply dq cannot read is an `Error::Malformed` naming the script and what it sent,
//! never a count silently taken as zero.

use std::time::Duration;

use redis::{FromRedisValue, ParsingError, Value};

use dq_core::Envelope;
use dq_core::{ChangeOutcome, GroupLoad, JobInfo, JobState, PushOutcome, TopicCounts};
use dq_core::{Error, Result};
use dq_core::{JobId, Topic};

pub(super) fn malformed_reply(op: &str, value: &Value) -> Error {
    Error::Malformed {
        location: format!("the reply to {op}"),
        reason: format!("unexpected reply {value:?}"),
    }
}

/// Reads `op`'s reply as `T`.
pub(super) fn read<T: FromRedisValue>(op: &str, reply: Value) -> Result<T> {
    T::from_redis_value_ref(&reply).map_err(|e| Error::Malformed {
        location: format!("the reply to {op}"),
        reason: format!("{e}: {reply:?}"),
    })
}

fn unexpected(what: &str, v: &Value) -> ParsingError {
    format!("expected {what}, got {v:?}").into()
}

/// A whole number: Lua numbers come back as integers, `tostring`ed ones as text (which Lua may
/// write as `1.7e+15`).
fn whole(v: &Value) -> std::result::Result<i64, ParsingError> {
    let number = |t: &str| {
        t.parse::<i64>().ok().or_else(|| {
            let f = t.parse::<f64>().ok()?;
            // Within i64 and whole: the cast cannot truncate.
            (f.fract() == 0.0 && f.abs() < 9.0e18).then_some(f as i64)
        })
    };
    let parsed = match v {
        Value::Int(n) => Some(*n),
        Value::BulkString(b) => std::str::from_utf8(b).ok().and_then(number),
        Value::SimpleString(t) => number(t),
        _ => None,
    };
    parsed.ok_or_else(|| unexpected("a whole number", v))
}

fn items(v: &Value) -> std::result::Result<&[Value], ParsingError> {
    match v {
        Value::Array(items) => Ok(items),
        _ => Err(unexpected("an array", v)),
    }
}

fn item<T: FromRedisValue>(items: &[Value], i: usize) -> std::result::Result<T, ParsingError> {
    T::from_redis_value_ref(items.get(i).unwrap_or(&Value::Nil))
}

/// The topics in `items`; a name that is not a valid topic cannot be one of dq's, and is left out.
fn topics(items: &[Value]) -> Vec<Topic> {
    items
        .iter()
        .filter_map(|v| Topic::new(String::from_redis_value_ref(v).ok()?).ok())
        .collect()
}

/// `FromRedisValue` for a reply type, from a function of the borrowed reply.
macro_rules! reader {
    ($ty:ty, |$v:ident| $body:block) => {
        impl FromRedisValue for $ty {
            fn from_redis_value_ref($v: &Value) -> std::result::Result<Self, ParsingError> {
                $body
            }

            fn from_redis_value(v: Value) -> std::result::Result<Self, ParsingError> {
                Self::from_redis_value_ref(&v)
            }
        }
    };
}

/// A count: a whole number from 0.
pub(super) struct Count(pub(super) usize);

reader!(Count, |v| {
    usize::try_from(whole(v)?)
        .map(Count)
        .map_err(|_| unexpected("a count", v))
});

/// A number from 0 (a time in microseconds, a lease token, a position in a list), or none:
/// the scripts say -1.
pub(super) struct Unsigned(pub(super) Option<u64>);

reader!(Unsigned, |v| {
    Ok(Unsigned(u64::try_from(whole(v)?).ok()))
});

/// What a script that ends a run without success answered (retry.lua, dead.lua): applied (1)
/// or refused as stale (0), or left alone because a cancel was requested against the run's
/// lease (2): the store then deletes the job as cancelled.
pub(super) enum EndReply {
    Applied(bool),
    CancelRequested,
}

reader!(EndReply, |v| {
    match whole(v)? {
        0 => Ok(EndReply::Applied(false)),
        1 => Ok(EndReply::Applied(true)),
        2 => Ok(EndReply::CancelRequested),
        _ => Err(unexpected("0, 1 or 2", v)),
    }
});

/// Whether a script applied a change to a leased job (1), or refused it as stale (0).
pub(super) struct Applied(pub(super) bool);

reader!(Applied, |v| {
    match whole(v)? {
        0 => Ok(Applied(false)),
        1 => Ok(Applied(true)),
        _ => Err(unexpected("1 or 0", v)),
    }
});

/// A record of dq-core read from a reply (the wrapper lets this crate implement
/// `FromRedisValue` for it).
pub(super) struct Reply<T>(pub(super) T);

reader!(Reply<ChangeOutcome>, |v| {
    match whole(v)? {
        1 => Ok(Reply(ChangeOutcome::Done)),
        0 => Ok(Reply(ChangeOutcome::NotFound)),
        2 => Ok(Reply(ChangeOutcome::Running)),
        3 => Ok(Reply(ChangeOutcome::CancelRequested)),
        _ => Err(unexpected("0, 1, 2 or 3", v)),
    }
});

reader!(Reply<PushOutcome>, |v| {
    if let Value::BulkString(b) = v {
        // A refusal with its number: `<code>:<n>`.
        let number = |n: &[u8], what: &str| {
            std::str::from_utf8(n)
                .ok()
                .and_then(|t| t.parse::<u64>().ok())
                .ok_or_else(|| unexpected(what, v))
        };
        // '4:<us>': the id is reserved for <us> more.
        if let Some(left) = b.strip_prefix(b"4:") {
            let us = number(left, "a reservation's time left")?;
            return Ok(Reply(PushOutcome::Unique {
                left: std::time::Duration::from_micros(us),
            }));
        }
        // '5:<generation>': the schedule's ticks were made under a later generation.
        if let Some(generation) = b.strip_prefix(b"5:") {
            let generation = number(generation, "a schedule's generation")?;
            return Ok(Reply(PushOutcome::Superseded { generation }));
        }
        // '6:<bound>': the topic holds as many pending jobs as its max_pending allows.
        if let Some(bound) = b.strip_prefix(b"6:") {
            let max_pending = number(bound, "a topic's max_pending")?;
            return Ok(Reply(PushOutcome::Full { max_pending }));
        }
    }
    let outcome = match whole(v)? {
        0 => PushOutcome::AlreadyPending,
        1 => PushOutcome::Created,
        2 => PushOutcome::Replaced,
        3 => PushOutcome::Running,
        _ => return Err(unexpected("a push code from 0 to 3", v)),
    };
    Ok(Reply(outcome))
});

reader!(Reply<JobState>, |v| {
    String::from_redis_value_ref(v)?
        .parse()
        .map(Reply)
        .map_err(|e: String| e.into())
});

// counts.lua, and the head of stats.lua: delayed, ready, running, dead, done.
reader!(Reply<TopicCounts>, |v| {
    let items = items(v)?;
    // Kept by the scripts' counters: one that drifted below zero reads as none, as listings
    // and admin calls must go on answering.
    let n = |i| item::<i64>(items, i).map(|c| u64::try_from(c).unwrap_or(0));
    let mut counts = TopicCounts::default();
    counts.delayed = n(0)?;
    counts.ready = n(1)?;
    counts.running = n(2)?;
    counts.dead = n(3)?;
    counts.done = n(4)?;
    Ok(Reply(counts))
});

/// stats.lua: the counts, the due time of the oldest ready job, the next due time, paused.
pub(super) struct ShardStats {
    pub(super) counts: TopicCounts,
    pub(super) oldest_ready_due_us: Option<u64>,
    pub(super) next_due_us: Option<u64>,
    pub(super) paused: bool,
    pub(super) group_concurrency: Option<u32>,
    pub(super) busiest_groups: Vec<GroupLoad>,
}

// stats.lua: the counts, the oldest ready job's due time and the next due time (-1: none),
// paused, the shard's clock, the group concurrency (-1: none), then `group, parked, held`
// triples.
reader!(ShardStats, |v| {
    let items = items(v)?;
    let mut busiest_groups = Vec::new();
    for triple in items.get(10..).unwrap_or_default().chunks(3) {
        busiest_groups.push(GroupLoad::new(
            item::<String>(triple, 0)?,
            item::<Count>(triple, 1)?.0 as u64,
            u32::try_from(item::<Count>(triple, 2)?.0).unwrap_or(u32::MAX),
        ));
    }
    Ok(ShardStats {
        counts: Reply::<TopicCounts>::from_redis_value_ref(v)?.0,
        oldest_ready_due_us: item::<Unsigned>(items, 5)?.0,
        next_due_us: item::<Unsigned>(items, 6)?.0,
        paused: item::<Applied>(items, 7)?.0,
        group_concurrency: item::<Unsigned>(items, 9)?
            .0
            .and_then(|n| u32::try_from(n).ok()),
        busiest_groups,
    })
});

/// promote.lua: moved, next due (-1: none), the shard's clock, how many topics it found that
/// were not declared, those topics, then `topic, jobs made ready` pairs.
pub(super) struct Promotion {
    pub(super) moved: usize,
    pub(super) next_due_us: Option<u64>,
    pub(super) now_us: u64,
    pub(super) undeclared: Vec<Topic>,
    pub(super) made_ready: Vec<(Topic, usize)>,
}

reader!(Promotion, |v| {
    let items = items(v)?;
    let n = item::<Count>(items, 3)?.0;
    let tail = items.get(4..).unwrap_or_default();
    let (undeclared, pairs) = tail.split_at(n.min(tail.len()));
    let mut made_ready = Vec::new();
    for pair in pairs.chunks(2) {
        let Ok(topic) = Topic::new(item::<String>(pair, 0)?) else {
            continue;
        };
        made_ready.push((topic, item::<Count>(pair, 1)?.0));
    }
    Ok(Promotion {
        moved: item::<Count>(items, 0)?.0,
        next_due_us: item::<Unsigned>(items, 1)?.0,
        now_us: item::<Unsigned>(items, 2)?
            .0
            .ok_or_else(|| unexpected("the shard's clock", v))?,
        undeclared: topics(undeclared),
        made_ready,
    })
});

/// reclaim.lua: jobs put back to ready, jobs dead-lettered, when the next lease runs out, the
/// jobs left alone because a cancel was requested against their lease (member, token), then
/// topics it found undeclared.
pub(super) struct Reclamation {
    pub(super) requeued: usize,
    pub(super) dead: usize,
    /// How long until the next lease still held runs out (none held: `None`).
    pub(super) next_expiry: Option<Duration>,
    pub(super) asked: Vec<(String, u64)>,
    pub(super) undeclared: Vec<Topic>,
}

reader!(Reclamation, |v| {
    let items = items(v)?;
    let n = item::<Count>(items, 3)?.0;
    let mut asked = Vec::with_capacity(n);
    for k in 0..n {
        let member: String = item(items, 4 + 2 * k)?;
        let token = item::<Unsigned>(items, 5 + 2 * k)?.0;
        let token = token.ok_or_else(|| unexpected("a lease token", v))?;
        asked.push((member, token));
    }
    // -1: no lease is held; otherwise the microseconds until the next one runs out.
    let next_expiry = match item::<i64>(items, 2)? {
        -1 => None,
        us => Some(Duration::from_micros(u64::try_from(us).map_err(|_| {
            unexpected("the time until the next lease runs out (-1 or more)", v)
        })?)),
    };
    Ok(Reclamation {
        requeued: item::<Count>(items, 0)?.0,
        dead: item::<Count>(items, 1)?.0,
        next_expiry,
        asked,
        undeclared: topics(items.get(4 + 2 * n..).unwrap_or_default()),
    })
});

/// release.lua: how many were released, then the members left alone because a cancel was
/// requested against their lease.
pub(super) struct Released {
    pub(super) released: usize,
    pub(super) asked: Vec<String>,
}

reader!(Released, |v| {
    let items = items(v)?;
    Ok(Released {
        released: item::<Count>(items, 0)?.0,
        asked: String::from_redis_value_refs(items.get(1..).unwrap_or_default())?,
    })
});

/// ack.lua: how many were acked, then the members whose lease was stale.
pub(super) struct AckReply {
    pub(super) acked: usize,
    pub(super) stale: Vec<String>,
}

reader!(AckReply, |v| {
    let items = items(v)?;
    Ok(AckReply {
        acked: item::<Count>(items, 0)?.0,
        stale: String::from_redis_value_refs(items.get(1..).unwrap_or_default())?,
    })
});

/// Jobs from a script's `member, score_us, envelope` triples (list.lua, dead_list.lua). An
/// unreadable entry is logged and skipped: one bad envelope must not hide a whole page.
pub(super) fn decode_jobs(
    triples: &[Value],
    jobs_key: &str,
    state: JobState,
    keep_score: bool,
) -> Vec<JobInfo> {
    let mut out = Vec::new();
    for triple in triples.chunks(3) {
        let (Ok(m), Ok(Unsigned(score)), Some(Value::BulkString(raw))) = (
            item::<String>(triple, 0),
            item::<Unsigned>(triple, 1),
            triple.get(2),
        ) else {
            continue;
        };
        let Some((topic, id)) = parse_member(&m) else {
            continue;
        };
        match Envelope::decode(raw, &format!("{jobs_key} field {m}")) {
            Ok(env) => {
                let score = score.filter(|_| keep_score);
                out.push(job_info(topic, id, state, env, score));
            }
            Err(e) => tracing::warn!(error = %e, "skipping an unreadable job in a listing"),
        }
    }
    out
}

/// status.lua's reply: nothing (no such job), or the job's state, its raw envelope and the
/// score of its state (when it is due, or when it died or its lease ends), then a done job's
/// value, or a running job's '', progress and whether its cancel was asked ('1' or '0').
pub(super) struct StatusReply(pub(super) Option<Status>);

/// A job status.lua found.
pub(super) struct Status {
    pub(super) state: JobState,
    /// Its raw envelope.
    pub(super) raw: Vec<u8>,
    /// The score of its state.
    pub(super) score: Option<u64>,
    /// A done job's value ('' for none).
    pub(super) value: Option<Vec<u8>>,
    /// A running job's latest progress ('' for none).
    pub(super) progress: Option<Vec<u8>>,
    /// A running job whose worker was asked to stop it (its cancel, against its lease).
    pub(super) cancel_requested: bool,
}

reader!(StatusReply, |v| {
    let parts = items(v)?;
    if parts.is_empty() {
        return Ok(StatusReply(None));
    }
    if !(3..=6).contains(&parts.len()) {
        return Err(unexpected(
            "nothing, or a state, an envelope, a score (and a done job's value, a running job's progress and cancel)",
            v,
        ));
    }
    let Reply(state) = item(parts, 0)?;
    let raw: Vec<u8> = item(parts, 1)?;
    let Unsigned(score) = item(parts, 2)?;
    let value: Option<Vec<u8>> = if parts.len() >= 4 {
        Some(item(parts, 3)?)
    } else {
        None
    };
    let progress: Option<Vec<u8>> = if parts.len() >= 5 {
        Some(item(parts, 4)?)
    } else {
        None
    };
    let cancel_requested = if parts.len() == 6 {
        let asked: Vec<u8> = item(parts, 5)?;
        match asked.as_slice() {
            b"1" => true,
            b"0" => false,
            _ => {
                return Err(unexpected(
                    "'1' or '0': whether a running job's cancel was asked",
                    v,
                ))
            }
        }
    } else {
        false
    };
    Ok(StatusReply(Some(Status {
        state,
        raw,
        score,
        value,
        progress,
        cancel_requested,
    })))
});

/// A stored job as seen from outside: a running job is on the run after the ones its envelope
/// counts.
pub(super) fn job_info(
    topic: Topic,
    id: JobId,
    state: JobState,
    mut env: Envelope,
    score: Option<u64>,
) -> JobInfo {
    if state == JobState::Running {
        env.attempt = env.attempt.saturating_add(1);
    }
    JobInfo::from_envelope(topic, id, state, env, score)
}

pub(super) fn parse_member(m: &str) -> Option<(Topic, JobId)> {
    let (t, i) = m.split_once(':')?;
    Some((Topic::new(t).ok()?, JobId::new(i).ok()?))
}

/// throughput.lua: the shard's current minute, then `minute, done, failed` triples.
pub(super) struct ShardThroughput {
    pub(super) now_minute: u64,
    pub(super) tallies: Vec<(u64, u64, u64)>,
}

reader!(ShardThroughput, |v| {
    let items = items(v)?;
    let number = |i| -> std::result::Result<u64, ParsingError> {
        Ok(u64::try_from(whole(items.get(i).unwrap_or(&Value::Nil))?).unwrap_or(0))
    };
    let tallies = (1..items.len())
        .step_by(3)
        .map(|i| Ok((number(i)?, number(i + 1)?, number(i + 2)?)))
        .collect::<std::result::Result<_, ParsingError>>()?;
    Ok(ShardThroughput {
        now_minute: number(0)?,
        tallies,
    })
});

#[cfg(test)]
mod tests {
    use super::*;

    fn text(t: &str) -> Value {
        Value::BulkString(t.as_bytes().to_vec())
    }

    #[test]
    fn a_count_that_is_not_a_whole_number_from_zero_is_malformed_not_zero() {
        assert_eq!(read::<Count>("release", Value::Int(3)).unwrap().0, 3);
        assert_eq!(
            read::<Count>("release", text("1.7e+15")).unwrap().0,
            1_700_000_000_000_000
        );
        for bad in [Value::Int(-1), text("many"), text("1.5"), Value::Nil] {
            let err = read::<Count>("release", bad).map(|c| c.0).unwrap_err();
            assert_eq!(err.kind(), dq_core::ErrorKind::Malformed);
            assert!(err.to_string().contains("the reply to release"), "{err}");
        }
    }

    #[test]
    fn a_counter_that_drifted_below_zero_counts_none() {
        let drifted = vec![
            Value::Int(-2),
            Value::Int(2),
            Value::Int(0),
            Value::Int(1),
            Value::Int(3),
        ];
        let Reply(c) = read::<Reply<TopicCounts>>("counts", Value::Array(drifted)).unwrap();
        assert_eq!(
            (c.delayed, c.ready, c.running, c.dead, c.done),
            (0, 2, 0, 1, 3)
        );
    }

    #[test]
    fn counts_short_of_a_state_are_malformed() {
        let five = Value::Array(vec![
            Value::Int(1),
            Value::Int(2),
            Value::Int(3),
            Value::Int(4),
            Value::Int(5),
        ]);
        let Reply(c) = read::<Reply<TopicCounts>>("counts", five).unwrap();
        assert_eq!(
            (c.delayed, c.ready, c.running, c.dead, c.done),
            (1, 2, 3, 4, 5)
        );
        let four = Value::Array(vec![
            Value::Int(1),
            Value::Int(2),
            Value::Int(3),
            Value::Int(4),
        ]);
        assert!(read::<Reply<TopicCounts>>("counts", four).is_err());
    }

    #[test]
    fn a_promotion_reads_its_undeclared_topics_and_the_jobs_made_ready_per_topic() {
        let reply = Value::Array(vec![
            Value::Int(5),
            Value::Int(-1),
            Value::Int(1_700_000_000_000_000),
            Value::Int(1),
            text("emails"),
            text("orders"),
            Value::Int(3),
            text("emails"),
            Value::Int(2),
        ]);
        let p: Promotion = read("promote", reply).unwrap();
        assert_eq!(
            (p.moved, p.next_due_us, p.now_us),
            (5, None, 1_700_000_000_000_000)
        );
        assert_eq!(p.undeclared, vec![Topic::new("emails").unwrap()]);
        let ready: Vec<(String, usize)> = p
            .made_ready
            .into_iter()
            .map(|(t, n)| (t.as_str().to_owned(), n))
            .collect();
        assert_eq!(ready, [("orders".to_owned(), 3), ("emails".to_owned(), 2)]);
    }

    #[test]
    fn a_running_jobs_status_carries_its_progress_and_a_done_jobs_its_value() {
        let running = Value::Array(vec![
            text("running"),
            text("2:0:3:1:1:0:{}"),
            Value::Int(5),
            text(""),
            text("0.5"),
            text("1"),
        ]);
        let StatusReply(Some(s)) = read::<StatusReply>("status", running).unwrap() else {
            panic!("a job was found");
        };
        assert_eq!(s.state, JobState::Running);
        assert_eq!(s.progress.as_deref(), Some(&b"0.5"[..]));
        assert!(s.cancel_requested);
        let done = Value::Array(vec![
            text("done"),
            text("2:0:3:1:1:0:{}"),
            Value::Int(5),
            text("1"),
        ]);
        let StatusReply(Some(s)) = read::<StatusReply>("status", done).unwrap() else {
            panic!("a job was found");
        };
        assert_eq!((s.value.as_deref(), s.progress), (Some(&b"1"[..]), None));
        let seven = Value::Array(vec![text("ready"); 7]);
        assert!(read::<StatusReply>("status", seven).is_err());
    }

    #[test]
    fn push_codes_and_change_outcomes_outside_their_range_are_malformed() {
        assert!(matches!(
            read::<Reply<PushOutcome>>("push", Value::Int(2)),
            Ok(Reply(PushOutcome::Replaced))
        ));
        assert!(read::<Reply<PushOutcome>>("push", Value::Int(7)).is_err());
        assert!(matches!(
            read::<Reply<ChangeOutcome>>("cancel", Value::Int(2)),
            Ok(Reply(ChangeOutcome::Running))
        ));
        assert!(matches!(
            read::<Reply<ChangeOutcome>>("cancel", Value::Int(3)),
            Ok(Reply(ChangeOutcome::CancelRequested))
        ));
        assert!(read::<Reply<ChangeOutcome>>("cancel", Value::Int(-1)).is_err());
        assert!(read::<Reply<ChangeOutcome>>("cancel", Value::Int(4)).is_err());
    }
}
