//! Reading the replies of dq's scripts: numbers, text, arrays, and jobs in listings.

use redis::Value;

use crate::envelope::Envelope;
use crate::error::{Error, Result};
use crate::job::{ChangeOutcome, JobInfo, JobState};
use crate::name::{JobId, Topic};

pub(super) fn malformed_reply(op: &str, value: &Value) -> Error {
    Error::Malformed {
        location: format!("the reply to {op}"),
        reason: format!("unexpected reply {value:?}"),
    }
}

pub(super) fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(n) => Some(*n),
        Value::BulkString(b) => std::str::from_utf8(b)
            .ok()?
            .parse::<f64>()
            .ok()
            .map(|f| f as i64),
        Value::SimpleString(s) => s.parse::<f64>().ok().map(|f| f as i64),
        _ => None,
    }
}

pub(super) fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

pub(super) fn array(op: &str, v: Value) -> Result<Vec<Value>> {
    match v {
        Value::Array(items) => Ok(items),
        other => Err(malformed_reply(op, &other)),
    }
}

pub(super) fn change_outcome(op: &str, v: &Value) -> Result<ChangeOutcome> {
    match int(v) {
        Some(1) => Ok(ChangeOutcome::Done),
        Some(0) => Ok(ChangeOutcome::NotFound),
        Some(2) => Ok(ChangeOutcome::Running),
        _ => Err(malformed_reply(op, v)),
    }
}

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
        let (Some(m), Some(score), Some(Value::BulkString(raw))) = (
            triple.first().and_then(text),
            triple.get(1).and_then(int),
            triple.get(2),
        ) else {
            continue;
        };
        let Some((topic, id)) = parse_member(&m) else {
            continue;
        };
        match Envelope::decode(raw, &format!("{jobs_key} field {m}")) {
            Ok(env) => {
                let score = (keep_score && score >= 0).then_some(score as u64);
                out.push(job_info(topic, id, state, env, score));
            }
            Err(e) => tracing::warn!(error = %e, "skipping an unreadable job in a listing"),
        }
    }
    out
}

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
