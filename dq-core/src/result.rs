//! What became of a job: the value its handler returned, kept for a while, and the wait for
//! it.
//!
//! A topic keeps the records of its succeeded jobs (their values) only when its listener asks
//! for it (`#[dq::listener(retain = "1h")]`, [`Retention`]); without that, nothing is kept and
//! memory stays flat. Dead letters are kept until they are retried or purged, whatever the
//! retention.

use std::time::Duration;

use crate::job::JobInfo;

/// How long, and how many, records of succeeded jobs a topic keeps (as BullMQ's
/// `removeOnComplete: { age, count }`): a record goes when it is older than `age` or when
/// more than `count` newer ones are kept (per shard). Set on the listener; the last runtime
/// started decides for its topic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    /// Longest a record is kept.
    pub age: Duration,
    /// Most records kept per shard of the topic. Redis forgets them an ack call's worth at a
    /// time (the jobs one ack kept, up to 1000), oldest first, once the rest still holds the
    /// count: it keeps between the count and the count plus one call's worth (a call of one job
    /// at a time keeps it exactly; the records a push or a cancel of their id took out may let it
    /// run over by as many until later acks make up for them). The memory store keeps it
    /// exactly.
    pub count: u64,
}

impl Retention {
    /// Records kept for `age`, at most [`Retention::DEFAULT_COUNT`] per shard.
    pub fn for_age(age: Duration) -> Retention {
        Retention {
            age,
            count: Retention::DEFAULT_COUNT,
        }
    }

    /// The count bound when only an age is given: 10,000 per shard.
    pub const DEFAULT_COUNT: u64 = 10_000;
}

/// What a store's wait for a job's end found (`Producer::wait_finished`).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Waited {
    /// It ended: its record, [`Done`](crate::JobState::Done) (with its value) or
    /// [`Dead`](crate::JobState::Dead) (with its last error).
    Finished(Box<JobInfo>),
    /// It is not pending, and its topic keeps no records of succeeded jobs (no retention): it
    /// succeeded, was cancelled or was never pushed, and nothing of it was kept.
    NotKept,
    /// It was cancelled (before it ran, or while it ran and its handler stopped), within its
    /// topic's retention: a topic that keeps its ends keeps a mark of each cancelled job for as
    /// long, and as many, as its records of succeeded ones.
    Cancelled,
    /// No such job, pending or kept: never pushed, purged, its record outlived its topic's
    /// retention, or cancelled before its topic kept its ends.
    NotFound,
    /// Still pending when the wait ran out.
    TimedOut,
}

/// What became of a job, as [`Client::result`](crate::Client::result) and
/// [`Client::wait`](crate::Client::wait) tell it, with its value decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum JobResult<T> {
    /// It succeeded and its handler returned this value.
    Succeeded(T),
    /// It succeeded; its handler returned no value (`()`).
    SucceededEmpty,
    /// It failed past its retries (or was dead-lettered): its last error and the runs made.
    Dead {
        /// The last run's error.
        error: String,
        /// Runs that ended without success.
        attempts: u32,
    },
    /// Still delayed, ready or running (a `wait` that ran out says so).
    Pending,
    /// It is not pending (it succeeded, was cancelled, or was never pushed), and its topic
    /// keeps no records of succeeded jobs: give its listener a retention
    /// (`#[dq::listener(retain = "1h")]`) to read values. A wait for a job still pending
    /// waits for its end whatever the retention.
    NotKept,
    /// It was cancelled (before it ran, or while it ran and its handler stopped); told for as
    /// long as its topic's retention keeps records.
    Cancelled,
    /// No such job, pending or kept: never pushed, purged, its record outlived its topic's
    /// retention, or cancelled longer ago than the retention keeps.
    NotFound,
}
