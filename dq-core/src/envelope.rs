//! The job envelope: what dq stores in Redis for each job.
//!
//! One value per job in the shard's `jobs` hash, read and rewritten by the Lua scripts, so it is
//! plain text up to the payload and cheap to parse on both sides:
//!
//! ```text
//! 2:<attempt>:<max_attempts>:<created_us>:<due_us>:<error_len>:<error bytes><payload bytes>
//! 3:<attempt>:<max_attempts>:<created_us>:<due_us>:<error_len>:<trace_len>:<error bytes><trace bytes><payload bytes>
//! 4:<attempt>:<max_attempts>:<created_us>:<due_us>:<error_len>:<trace_len>:<priority>:<group_len>:<error bytes><trace bytes><group bytes><payload bytes>
//! ```
//!
//! * `2`, `3` or `4` is the format version. Each is written only for a job that needs it, so
//!   that a rollback to the release before finds the jobs it can read: format 4 for a job with a
//!   priority other than 0 ([`Envelope::priority`]), format 3 for one that carries a trace
//!   context ([`Envelope::trace`], recorded by a push with the `otel` feature) and no priority,
//!   and format 2 for every other job, which every release reads. Format 1, which development builds before 0.1.0 wrote, also held a lease token;
//!   it is refused as unknown (the job is dead-lettered with its raw value kept, never dropped).
//! * `attempt` counts the runs that ended without success: failed, timed out, or lost with
//!   their worker (counted when the lease is reclaimed). A fetch does not rewrite the envelope:
//!   the lease token that refuses an ack from a worker whose lease was taken over lives in the
//!   shard's `leases` hash. A running job is on run `attempt + 1`, which is what
//!   [`LeasedJob`](crate::LeasedJob) and [`JobInfo`](crate::JobInfo) show.
//! * times are integer microseconds since the Unix epoch, from Redis `TIME`.
//! * `error_len` bytes of the last error (0 when none), then (format 3) `trace_len` bytes of the
//!   trace context, then the payload (JSON from serde). Every rewrite (a retry, a reclaim, a
//!   dead letter and its requeue, a reschedule) keeps the trace context.
//! * The error bytes of a job whose runs failed hold, after the last error and a NUL byte, the
//!   errors of its failed runs ([`Envelope::errors`]): the latest [`RUN_ERRORS_KEPT`], each
//!   `<run>:<us>:<len>:<text>` (the first [`RUN_ERROR_TEXT`] bytes of the error). Kept in the
//!   error field, so that a release that does not know of them still reads the job (and shows
//!   them after its last error), and they go with the job whatever deletes it. An error's own
//!   NUL bytes are written as `?`.
//!
//! The same parser lives in `lua/lib.lua`; both must change together.

use crate::error::{Error, Result};

/// The newest envelope format version this release reads and writes: 4, written for a job with
/// a priority. A job without one is written as format 3 when it carries a trace context, else
/// as format 2 (what the releases before read), and all three are read.
pub const ENVELOPE_VERSION: u32 = 4;

/// The format of a job with a trace context and no priority.
const TRACED_VERSION: u32 = 3;

/// The format of a job with neither a trace context nor a priority, which every release reads.
const UNTRACED_VERSION: u32 = 2;

/// How many failed runs' errors a job keeps ([`Envelope::errors`], [`JobInfo::errors`]): the
/// latest ten.
///
/// [`JobInfo::errors`]: crate::JobInfo::errors
pub const RUN_ERRORS_KEPT: usize = 10;

/// How much of each failed run's error a job's history keeps, in bytes: up to the first 1,024,
/// cut at a character's start (its last error is kept whole besides).
pub const RUN_ERROR_TEXT: usize = 1024;

/// One failed run of a job, as the job keeps it ([`Envelope::errors`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunError {
    /// Which run, from 1, as `JobContext::attempt` numbers it.
    pub run: u32,
    /// When it failed, in microseconds since the Unix epoch by the store's clock.
    pub at_us: u64,
    /// Its error, up to its first [`RUN_ERROR_TEXT`] bytes (cut at a character's start).
    pub error: String,
}

impl RunError {
    /// Run `run`'s error `error` at `at_us`, cut to at most [`RUN_ERROR_TEXT`] bytes at a
    /// character's start.
    pub fn new(run: u32, at_us: u64, error: &str) -> RunError {
        let mut cut = error.len().min(RUN_ERROR_TEXT);
        while !error.is_char_boundary(cut) {
            cut -= 1;
        }
        RunError {
            run,
            at_us,
            error: error[..cut].to_owned(),
        }
    }
}

/// A job as stored: bookkeeping and the serialized payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Envelope {
    /// Runs counted so far (see the module documentation: stored, the runs that ended without
    /// success; in a [`LeasedJob`](crate::LeasedJob), the run being made, from 1).
    pub attempt: u32,
    /// Runs allowed before the job is dead-lettered (retries + 1).
    pub max_attempts: u32,
    /// When the job was first pushed, in microseconds since the Unix epoch.
    pub created_us: u64,
    /// When the job is (or was) due, in microseconds since the Unix epoch.
    pub due_us: u64,
    /// The error of the latest failed attempt.
    pub last_error: Option<String>,
    /// The errors of its failed runs, oldest first: the latest [`RUN_ERRORS_KEPT`], each cut to
    /// [`RUN_ERROR_TEXT`] bytes ([`Envelope::failed_run`] adds one). Empty for a job whose runs
    /// never failed.
    pub errors: Vec<RunError>,
    /// The W3C trace context the push recorded (feature `otel`; see `dq_core::trace` for the
    /// text), kept through every rewrite of the envelope; `None` for a job pushed outside any
    /// traced span, or without the feature. Stored only when not empty.
    pub trace: Option<String>,
    /// Its priority within its topic ([`PushBuilder::priority`](crate::PushBuilder::priority)):
    /// from [`MIN_PRIORITY`](crate::MIN_PRIORITY) to [`MAX_PRIORITY`](crate::MAX_PRIORITY),
    /// higher first, 0 by default. Kept through every rewrite of the envelope.
    pub priority: i8,
    /// Its group within its topic ([`PushBuilder::group`](crate::PushBuilder::group)): at most
    /// the group's concurrency of its jobs run at once, in push order. Kept through every
    /// rewrite.
    pub group: Option<String>,
    /// The serialized message.
    pub payload: Vec<u8>,
}

impl Envelope {
    /// Run `run` failed with `error` at `now_us`: its last error, and the latest of its
    /// [`errors`](Envelope::errors) (the oldest dropped past [`RUN_ERRORS_KEPT`]). A NUL byte
    /// in the error becomes `?`. What lua/lib.lua's `failed_run` does on Redis.
    pub fn failed_run(&mut self, error: &str, run: u32, now_us: u64) {
        let error = error.replace('\0', "?");
        self.errors.push(RunError::new(run, now_us, &error));
        let extra = self.errors.len().saturating_sub(RUN_ERRORS_KEPT);
        self.errors.drain(..extra);
        self.last_error = Some(error);
    }

    /// Encodes the envelope: format 4 when it has a priority, else format 3 when it carries a
    /// trace context, else format 2.
    pub fn encode(&self) -> Vec<u8> {
        // A NUL byte ends the last error in the field: one of its own is written as `?`.
        let mut err = self.last_error.as_deref().unwrap_or("").replace('\0', "?");
        if !self.errors.is_empty() {
            err.push('\0');
            for e in &self.errors {
                err.push_str(&format!(
                    "{}:{}:{}:{}",
                    e.run,
                    e.at_us,
                    e.error.len(),
                    e.error
                ));
            }
        }
        let (attempt, max, created, due) = (
            self.attempt,
            self.max_attempts,
            self.created_us,
            self.due_us,
        );
        let trace = self.trace.as_deref().filter(|t| !t.is_empty());
        let group = self.group.as_deref().filter(|g| !g.is_empty());
        let mut out = match (trace, self.priority) {
            (None, 0) if group.is_none() => format!(
                "{UNTRACED_VERSION}:{attempt}:{max}:{created}:{due}:{}:{err}",
                err.len()
            ),
            (Some(trace), 0) if group.is_none() => format!(
                "{TRACED_VERSION}:{attempt}:{max}:{created}:{due}:{}:{}:{err}{trace}",
                err.len(),
                trace.len()
            ),
            (trace, priority) => {
                let (trace, group) = (trace.unwrap_or(""), group.unwrap_or(""));
                format!(
                    "{ENVELOPE_VERSION}:{attempt}:{max}:{created}:{due}:{}:{}:{priority}:{}:{err}{trace}{group}",
                    err.len(),
                    trace.len(),
                    group.len()
                )
            }
        }
        .into_bytes();
        out.extend_from_slice(&self.payload);
        out
    }

    /// Decodes an envelope; `location` names where it was read, for the error.
    pub fn decode(raw: &[u8], location: &str) -> Result<Envelope> {
        Envelope::decode_with(raw, || location.to_owned())
    }

    /// Like [`Envelope::decode`], naming the location only when there is an error (a fetch
    /// decodes thousands of envelopes a second; formatting each one's location cost more
    /// than decoding it).
    pub fn decode_with(raw: &[u8], location: impl Fn() -> String) -> Result<Envelope> {
        let malformed = |reason: &str| Error::Malformed {
            location: location(),
            reason: format!("{reason} (envelope starts {:?})", preview(raw)),
        };
        let mut pos = 0;
        let version = header_number(raw, &mut pos, 0).map_err(|r| malformed(&r))?;
        let fields = match version {
            2 => 6,
            3 => 7,
            4 => 7,
            _ => {
                return Err(malformed(&format!(
                    "envelope version {version} is not known to this release of dq (it reads versions {UNTRACED_VERSION} to {ENVELOPE_VERSION})"
                )))
            }
        };
        // version, attempt, max_attempts, created, due, error length, trace length (format 3).
        let mut header = [version, 0, 0, 0, 0, 0, 0];
        for (n, field) in header.iter_mut().enumerate().take(fields).skip(1) {
            *field = header_number(raw, &mut pos, n).map_err(|r| malformed(&r))?;
        }
        let [_, attempt, max_attempts, created_us, due_us, err_len, trace_len] = header;
        let (priority, group_len) = if version == 4 {
            let priority = header_priority(raw, &mut pos).map_err(|r| malformed(&r))?;
            (
                priority,
                header_number(raw, &mut pos, 8).map_err(|r| malformed(&r))?,
            )
        } else {
            (0, 0)
        };
        let end_of = |start: usize, len: u64, what: &str| {
            usize::try_from(len)
                .ok()
                .and_then(|len| start.checked_add(len))
                .filter(|&end| end <= raw.len())
                .ok_or_else(|| malformed(&format!("{what} length runs past the end")))
        };
        let err_end = end_of(pos, err_len, "error")?;
        let trace_end = end_of(err_end, trace_len, "trace context")?;
        let group_end = end_of(trace_end, group_len, "group")?;
        let text = |from: usize, to: usize| {
            (from < to).then(|| String::from_utf8_lossy(&raw[from..to]).into_owned())
        };
        let small = |v: u64, what: &str| {
            u32::try_from(v).map_err(|_| malformed(&format!("{what} out of range")))
        };
        // The last error, and after a NUL byte the errors of the failed runs.
        let (last_end, errors) = match raw[pos..err_end].iter().position(|&b| b == 0) {
            Some(nul) => (pos + nul, run_errors(&raw[pos + nul + 1..err_end])),
            None => (err_end, Vec::new()),
        };
        Ok(Envelope {
            attempt: small(attempt, "attempt")?,
            max_attempts: small(max_attempts, "max_attempts")?,
            created_us,
            due_us,
            last_error: text(pos, last_end),
            errors,
            trace: text(err_end, trace_end),
            priority,
            group: text(trace_end, group_end),
            payload: raw[group_end..].to_vec(),
        })
    }
}

/// Reads header field `n`, the number at `*pos` up to its `:`, and moves past it; `Err` says
/// what is wrong with it.
fn header_number(raw: &[u8], pos: &mut usize, n: usize) -> std::result::Result<u64, String> {
    let rest = &raw[*pos..];
    let end = rest
        .iter()
        .position(|&b| b == b':')
        .ok_or_else(|| "header ends early".to_owned())?;
    let text = std::str::from_utf8(&rest[..end]).map_err(|_| "header is not text".to_owned())?;
    let value = text
        .parse()
        .map_err(|_| format!("header field {n} is not a number"))?;
    *pos += end + 1;
    Ok(value)
}

/// Reads format 4's priority field, a signed number within the range a push allows.
fn header_priority(raw: &[u8], pos: &mut usize) -> std::result::Result<i8, String> {
    let rest = &raw[*pos..];
    let end = rest
        .iter()
        .position(|&b| b == b':')
        .ok_or_else(|| "header ends early".to_owned())?;
    let priority = std::str::from_utf8(&rest[..end])
        .ok()
        .and_then(|text| text.parse::<i8>().ok())
        .filter(|p| (crate::MIN_PRIORITY..=crate::MAX_PRIORITY).contains(p))
        .ok_or_else(|| {
            format!(
                "the priority is not a number from {} to {}",
                crate::MIN_PRIORITY,
                crate::MAX_PRIORITY
            )
        })?;
    *pos += end + 1;
    Ok(priority)
}

/// The entries `<run>:<us>:<len>:<text>` of a job's failed runs, as many as read whole (a
/// history that does not read on is cut there rather than failing the job).
fn run_errors(mut raw: &[u8]) -> Vec<RunError> {
    let mut out = Vec::new();
    while !raw.is_empty() {
        let mut pos = 0;
        let (Ok(run), Ok(at_us), Ok(len)) = (
            header_number(raw, &mut pos, 0),
            header_number(raw, &mut pos, 1),
            header_number(raw, &mut pos, 2),
        ) else {
            break;
        };
        let Some(end) = usize::try_from(len)
            .ok()
            .and_then(|len| pos.checked_add(len))
            .filter(|&end| end <= raw.len())
        else {
            break;
        };
        out.push(RunError {
            run: u32::try_from(run).unwrap_or(u32::MAX),
            at_us,
            error: String::from_utf8_lossy(&raw[pos..end]).into_owned(),
        });
        raw = &raw[end..];
    }
    out
}

fn preview(raw: &[u8]) -> String {
    String::from_utf8_lossy(&raw[..raw.len().min(48)]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn envelope() -> Envelope {
        Envelope {
            attempt: 2,
            max_attempts: 3,
            created_us: 1_700_000_000_000_123,
            due_us: 1_700_000_000_600_456,
            last_error: None,
            errors: Vec::new(),
            trace: None,
            priority: 0,
            group: None,
            payload: br#"{"order_id":42}"#.to_vec(),
        }
    }

    #[test]
    fn each_failed_runs_error_is_kept_after_the_last_error_and_round_trips() {
        let mut env = envelope();
        env.group = Some("g".into());
        env.failed_run("first: a:b", 1, 10);
        env.failed_run("second\0with a nul", 2, 20);
        let raw = env.encode();
        let back = Envelope::decode(&raw, "t").unwrap();
        assert_eq!(back, env);
        assert_eq!(back.last_error.as_deref(), Some("second?with a nul"));
        let runs: Vec<(u32, u64, &str)> = back
            .errors
            .iter()
            .map(|e| (e.run, e.at_us, e.error.as_str()))
            .collect();
        assert_eq!(runs, [(1, 10, "first: a:b"), (2, 20, "second?with a nul")]);
    }

    #[test]
    fn a_last_error_set_with_a_nul_byte_reads_back_whole_with_a_question_mark() {
        let mut env = envelope();
        env.last_error = Some("a\0b:c".into());
        let back = Envelope::decode(&env.encode(), "t").unwrap();
        assert_eq!(back.last_error.as_deref(), Some("a?b:c"));
        assert!(back.errors.is_empty());
    }

    #[test]
    fn a_run_error_is_cut_at_a_characters_start() {
        let error = format!("{}é", "x".repeat(RUN_ERROR_TEXT - 1));
        assert_eq!(
            RunError::new(1, 1, &error).error,
            "x".repeat(RUN_ERROR_TEXT - 1)
        );
    }

    #[test]
    fn a_jobs_history_keeps_the_latest_ten_runs_each_cut_to_a_kibibyte() {
        let mut env = envelope();
        for run in 1..=12 {
            env.failed_run(&"x".repeat(2000), run, u64::from(run));
        }
        let back = Envelope::decode(&env.encode(), "t").unwrap();
        let runs: Vec<u32> = back.errors.iter().map(|e| e.run).collect();
        assert_eq!(runs, (3..=12).collect::<Vec<_>>());
        assert!(back.errors.iter().all(|e| e.error.len() == RUN_ERROR_TEXT));
        assert_eq!(back.last_error.map(|e| e.len()), Some(2000), "kept whole");
    }

    #[test]
    fn a_release_that_does_not_know_the_history_reads_the_job_with_it_in_its_last_error() {
        let mut env = envelope();
        env.failed_run("boom", 1, 10);
        let raw = env.encode();
        // The field's length covers the history: a reader of the error field alone (as the
        // release before) finds the payload where it was.
        let expected = b"2:2:3:1700000000000123:1700000000600456:16:boom\x001:10:4:boom";
        assert!(raw.starts_with(expected), "{}", preview(&raw));
        assert!(raw.ends_with(br#"{"order_id":42}"#));
    }

    /// A W3C trace context as a push records it: traceparent, newline, tracestate.
    const TRACE: &str =
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\nrojo=00f067aa0ba902b7";

    #[test]
    fn envelope_round_trips_with_and_without_error() {
        let mut env = envelope();
        assert_eq!(Envelope::decode(&env.encode(), "t").unwrap(), env);
        env.last_error = Some("boom: a:b:c".into());
        assert_eq!(Envelope::decode(&env.encode(), "t").unwrap(), env);
    }

    #[test]
    fn a_job_without_trace_context_is_written_in_format_2_as_before() {
        let mut env = envelope();
        env.last_error = Some("boom".into());
        let raw = env.encode();
        let expected = br#"2:2:3:1700000000000123:1700000000600456:4:boom{"order_id":42}"#;
        assert_eq!(raw, expected.to_vec(), "what the release before reads");
        env.trace = Some(String::new());
        assert_eq!(env.encode(), expected.to_vec(), "an empty context is none");
    }

    #[test]
    fn a_trace_context_is_written_in_format_3_and_round_trips_with_and_without_error() {
        let mut env = envelope();
        env.trace = Some(TRACE.into());
        let raw = env.encode();
        assert!(raw.starts_with(b"3:2:3:"), "{}", preview(&raw));
        assert_eq!(Envelope::decode(&raw, "t").unwrap(), env);
        env.last_error = Some("boom: a:b:c".into());
        let raw = env.encode();
        let head = format!(
            "3:2:3:1700000000000123:1700000000600456:11:{}:boom: a:b:c",
            TRACE.len()
        );
        assert!(raw.starts_with(head.as_bytes()), "{}", preview(&raw));
        assert_eq!(Envelope::decode(&raw, "t").unwrap(), env);
    }

    #[test]
    fn format_3_without_a_trace_context_reads_as_none() {
        let env = Envelope::decode(b"3:0:3:1:2:0:0:{}", "t").unwrap();
        assert_eq!((env.trace, env.last_error), (None, None));
        assert_eq!(env.payload, b"{}");
    }

    #[test]
    fn a_priority_is_written_in_format_4_and_round_trips_with_trace_and_error() {
        let mut env = envelope();
        env.priority = -7;
        let raw = env.encode();
        assert_eq!(
            raw,
            br#"4:2:3:1700000000000123:1700000000600456:0:0:-7:0:{"order_id":42}"#.to_vec()
        );
        assert_eq!(Envelope::decode(&raw, "t").unwrap(), env);
        env.priority = 10;
        env.trace = Some(TRACE.into());
        env.last_error = Some("boom: a:b:c".into());
        assert_eq!(Envelope::decode(&env.encode(), "t").unwrap(), env);
        env.priority = 0;
        assert!(
            env.encode().starts_with(b"3:"),
            "no priority: the format the release before reads"
        );
    }

    #[test]
    fn a_group_is_written_in_format_4_and_round_trips_with_priority_trace_and_error() {
        let mut env = envelope();
        env.group = Some("account-42".into());
        let raw = env.encode();
        assert_eq!(
            raw,
            br#"4:2:3:1700000000000123:1700000000600456:0:0:0:10:account-42{"order_id":42}"#
                .to_vec()
        );
        assert_eq!(Envelope::decode(&raw, "t").unwrap(), env);
        env.priority = 3;
        env.trace = Some(TRACE.into());
        env.last_error = Some("boom".into());
        assert_eq!(Envelope::decode(&env.encode(), "t").unwrap(), env);
    }

    #[test]
    fn malformed_envelope_names_location_and_reason() {
        for raw in [
            &b"garbage"[..],
            b"9:0:3:1:1:0:",
            b"2:0:3:1:1:99:short",
            b"1:0:3:0:1:1:0:{}",
            b"3:0:3:1:1:0:99:short",
            b"3:0:3:1:1:2:18446744073709551615:ab",
            b"3:0:3:1:1:0:{}",
            b"4:0:3:1:1:0:0:11:0:{}",
            b"4:0:3:1:1:0:0:x:0:{}",
            b"4:0:3:1:1:0:0:{}",
            b"4:0:3:1:1:0:0:1:99:{}",
        ] {
            let err = Envelope::decode(raw, "dq:{app:0}:jobs/t:1").unwrap_err();
            let text = err.to_string();
            assert!(text.contains("dq:{app:0}:jobs/t:1"), "{text}");
        }
    }
}
