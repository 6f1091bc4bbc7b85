//! A running job's side of the store: the lease a fetch gives, what a fetch, a promotion, an
//! ack and a reclaim report.

use std::time::Duration;

use crate::envelope::Envelope;
use crate::job::MAX_DELAY;
use crate::name::{JobId, Topic};

/// A job leased to this worker by a fetch. Its [`LeaseRef`] acks, retries or dead-letters it.
#[derive(Clone, Debug)]
pub struct LeasedJob {
    /// The lease to hand back.
    pub lease: LeaseRef,
    /// The stored job, with `attempt` counting this run.
    pub envelope: Envelope,
}

/// Refuses a retry delay over [`MAX_DELAY`] (both stores call it before writing anything).
pub fn check_retry_delay(lease: &LeaseRef, delay: Duration) -> crate::Result<()> {
    if delay > MAX_DELAY {
        return Err(crate::Error::InvalidSchedule {
            topic: lease.topic.to_string(),
            id: lease.id.to_string(),
            reason: "a retry delay is at most 200 years",
        });
    }
    Ok(())
}

/// The largest progress a running job may report ([`Leases::progress`](crate::store::Leases::progress)),
/// as JSON: 64 KiB. Progress is rewritten at every report and read by every status call; a
/// report is a fraction, a count or a short note, not data (return that as the job's result).
pub const MAX_PROGRESS_BYTES: usize = 64 * 1024;

/// Refuses a progress value over [`MAX_PROGRESS_BYTES`] (both stores call it before sending
/// anything), naming the job.
pub fn check_progress(lease: &LeaseRef, value: &[u8]) -> crate::Result<()> {
    if value.len() > MAX_PROGRESS_BYTES {
        return Err(crate::Error::InvalidProgress {
            topic: lease.topic.to_string(),
            id: lease.id.to_string(),
            reason: format!(
                "{} bytes of JSON, over the limit of {MAX_PROGRESS_BYTES} bytes (report a fraction, a count or a short note; return larger data as the job's result)",
                value.len()
            ),
        });
    }
    Ok(())
}

/// Names one lease on one job: the fencing token that refuses writes from a worker whose
/// lease was taken over.
///
/// `LeaseRef`, [`LeasedJob`], [`NewJob`] and [`Envelope`](crate::Envelope) are the records
/// stores exchange, and stay exhaustive so that a store of your own can build them: a field
/// added to one is a change of the stored format, made in a major version.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LeaseRef {
    /// The job's topic.
    pub topic: Topic,
    /// The job's id.
    pub id: JobId,
    /// The token given by the fetch.
    pub token: u64,
    /// The shard the job lives in, where the fetch leased it: the runtime groups its renewals
    /// and acks by shard with it (a store may still find the shard itself; both stores do). A
    /// store of your own sets the shard it fetched from, and hands back the same value in
    /// `stale` and `lost` lists: a lease is equal to another only with the same shard.
    pub shard: u16,
}

/// A job whose handler succeeded, to ack: its lease and the value its handler returned (JSON;
/// `None` for no value). The value is kept only when the topic has a retention.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Succeeded {
    /// The lease the run held.
    pub lease: LeaseRef,
    /// The handler's value, as JSON.
    pub result: Option<Vec<u8>>,
    /// Which run succeeded, from 1, as `JobContext::attempt` numbers it; 0 when the caller
    /// does not know (a store that needs it, for the job's `succeeded` event, reads it from the
    /// job then, at a cost: the runtime always says).
    pub run: u32,
}

/// What one fetch call returned.
///
/// A store of your own starts from `default()` and sets the fields (more may come).
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct Fetched {
    /// The jobs now leased to the caller.
    pub jobs: Vec<LeasedJob>,
    /// Jobs whose stored envelope could not be read: dead-lettered at once with the reason,
    /// raw value kept; `(id, reason)`.
    pub malformed: Vec<(JobId, String)>,
    /// The store's clock when the jobs were leased, in microseconds since the epoch.
    pub now_us: u64,
    /// The topic is paused: nothing was fetched.
    pub paused: bool,
    /// How many of `jobs` were taken back from earlier fetches of the same consumer whose reply
    /// was lost ([`Fetcher::lost`](crate::store::Fetcher)): leased again, no run counted.
    pub taken_back: usize,
    /// The topic's rate limit ([`Rate`](crate::Rate)), or a hold a handler asked for
    /// (`Outcome::RateLimited`), let fewer jobs out than asked for: the next may start after
    /// this long. `None` when the limit stopped nothing.
    pub throttled: Option<Duration>,
    /// The topic's global concurrency ([`Client::set_global_concurrency`]) let fewer jobs out
    /// than asked while more are ready: as many of its jobs run, in all processes, as it
    /// allows. The next may start when one of them ends.
    ///
    /// [`Client::set_global_concurrency`]: crate::Client::set_global_concurrency
    pub at_capacity: bool,
    /// Ready jobs this call found whose group had used its rate ([`Client::set_group_rate`]):
    /// each went back to wait for its group's next turn (a `postponed` event), not leased.
    ///
    /// [`Client::set_group_rate`]: crate::Client::set_group_rate
    pub held_back: usize,
}

/// What one promotion call did.
///
/// A store of your own starts from `default()` and sets the fields (more may come).
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct Promoted {
    /// Jobs moved from delayed to ready.
    pub moved: usize,
    /// How many of them per topic.
    pub topics: Vec<(Topic, usize)>,
    /// The due time of the earliest job still delayed, in microseconds since the epoch; on
    /// Redis, or the time its jobs stored compact are next to be moved into place, when that
    /// comes first (dq-redis's far jobs: 5 minutes before the earliest of them is due).
    pub next_due_us: Option<u64>,
    /// The store's clock when the call ran, in microseconds since the epoch.
    pub now_us: u64,
}

/// What an ack call did.
///
/// A store of your own starts from `default()` and sets the fields (more may come).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Acked {
    /// Jobs completed.
    pub acked: usize,
    /// Leases that were no longer held (taken over after expiry, or cancelled): not acked.
    pub stale: Vec<LeaseRef>,
}

/// A run's end without success, as [`Leases::end_run`](crate::store::Leases::end_run) writes
/// it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunEnd<'a> {
    /// The run failed: run the job again after `delay`, the run counted, `error` its last
    /// error ([`Leases::retry`](crate::store::Leases::retry)).
    Retry {
        /// How long until it runs again.
        delay: Duration,
        /// The run's error.
        error: &'a str,
    },
    /// The handler postponed the job: again after `delay`, the run not counted
    /// ([`Leases::postpone`](crate::store::Leases::postpone)).
    Postpone {
        /// How long until it runs again.
        delay: Duration,
    },
    /// Move the job to its topic's dead letters with `error`
    /// ([`Leases::dead_letter`](crate::store::Leases::dead_letter)).
    DeadLetter {
        /// Why.
        error: &'a str,
    },
    /// The handler met its provider's rate limit: back to the front of its ready list at
    /// once, the run not counted ([`Leases::release`](crate::store::Leases::release)).
    Release,
}

/// What [`Leases::end_run`](crate::store::Leases::end_run) did with a run's end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RunEnded {
    /// Written as asked: the job runs again (later, or at once after a release), or is a
    /// dead letter.
    Written,
    /// The lease was no longer held (taken over after it expired): nothing changed.
    NotHeld,
    /// A cancel was requested against this lease (`Client::cancel` of the running job), heard
    /// by its worker or not: the job was deleted as cancelled instead of being retried,
    /// postponed or dead-lettered.
    Cancelled,
}

impl RunEnded {
    /// What a release of one run did, from how many jobs it put back and how many it deleted
    /// as cancelled instead (for stores of your own, as the Redis and memory stores use it).
    pub fn of_release(released: usize, cancelled: usize) -> RunEnded {
        if cancelled > 0 {
            RunEnded::Cancelled
        } else if released > 0 {
            RunEnded::Written
        } else {
            RunEnded::NotHeld
        }
    }
}

/// What a reclaim call did.
///
/// A store of your own starts from `default()` and sets the fields (more may come).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Reclaimed {
    /// Jobs whose lease had expired, put back to ready.
    pub requeued: usize,
    /// Jobs whose lease expired on their last attempt, dead-lettered.
    pub dead: usize,
    /// Jobs whose lease expired after a cancel was requested against it, deleted as cancelled
    /// (as a run that ends without success after its cancel was asked: README "Cancelling a
    /// running job").
    pub cancelled: usize,
    /// How long until the next lease still held in the shard runs out (`None`: no lease is
    /// held). The runtime's reclaimer looks again then, so that a job whose worker died, and
    /// the slot of its topic's global concurrency or group that it holds, come back as soon as
    /// its lease runs out rather than up to half a lease later.
    pub next_expiry: Option<Duration>,
}
