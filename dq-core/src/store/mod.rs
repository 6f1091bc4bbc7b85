//! The job store: every state change of a job, behind seven role traits ([`Sharded`],
//! [`Producer`], [`Leases`], [`Admin`], [`Registry`], [`Schedules`], [`Workflows`]; [`Store`] is
//! all of them) with two
//! implementations, Redis (`RedisStore`, in the crate `dq-redis`; `dq::store::RedisStore`) and
//! in-process memory ([`MemoryStore`], the embedded default).
//!
//! A job lives in one shard, chosen by a stable hash of its topic and id ([`shard_of`]), and
//! every operation on it is one atomic step in that shard, so any number of processes may
//! push, move and run jobs at once.

mod backend;
mod memory;
pub mod policy;
mod registry;
mod schedules;
mod shard;
mod workflows;

use std::time::{Duration, SystemTime};

use async_trait::async_trait;

pub use self::backend::{open, Backend, Opening};
pub use self::memory::{Event, MemoryStore};
pub use self::registry::Registry;
pub use self::schedules::{ScheduleEntry, Schedules};
pub use self::shard::{shard_of, shard_of_group};
pub use self::workflows::Workflows;
pub use crate::envelope::{Envelope, ENVELOPE_VERSION};
pub use crate::events::{EventEntry, EventFeed, EventPosition};
pub use crate::job::{check_priority, from_us, to_us, FiredTick, NewJob};
pub use crate::lease::{check_progress, check_retry_delay};
pub use crate::lease::{Acked, Fetched, LeaseRef, LeasedJob, Promoted, Reclaimed, Succeeded};
pub use crate::lease::{RunEnd, RunEnded};
pub use crate::result::{Retention, Waited};

use crate::admin::{ChangeOutcome, Cursor, Expanded, Page, Throughput, TopicCounts, TopicStats};
use crate::error::Result;
use crate::events::EventCursor;
use crate::job::{Due, JobInfo, JobState, OnConflict, PushOutcome};
use crate::name::{JobId, Topic};
use crate::rate::Rate;

/// Who is fetching, so that the jobs of a fetch whose reply was lost are taken back.
///
/// A fetch whose reply does not arrive (a timeout, a dropped connection, Redis stalled with
/// the request in its buffer and running it later) leased jobs that nobody runs: they would
/// wait for their lease to run out and be counted as a failed run (dead-lettered "the worker
/// died" on their last attempt) though their handler never started. The store records each
/// fetch of a consumer under its nonce; a later fetch of the same consumer that names the nonce
/// in `lost` takes those jobs back, first, with no run counted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Fetcher {
    /// Names the consumer: one per process, topic and shard, unique among processes. Empty:
    /// the fetch is not recorded (a plain [`Leases::fetch`]).
    pub consumer: String,
    /// This fetch's number, different for each fetch of the consumer.
    pub nonce: u64,
    /// The numbers of the consumer's earlier fetches whose reply did not arrive.
    pub lost: Vec<u64>,
}

impl Fetcher {
    /// The fetcher `consumer` at its fetch `nonce`, taking back the fetches in `lost`.
    pub fn new(consumer: impl Into<String>, nonce: u64, lost: Vec<u64>) -> Fetcher {
        Fetcher {
            consumer: consumer.into(),
            nonce,
            lost,
        }
    }
}

/// Most jobs a single store call handles; larger batches are split by the store.
pub const MAX_BATCH: usize = 1000;

/// Waits, without taking anything, until a topic has ready jobs in one shard.
///
/// On Redis this waits for the topic's message on the shard's `ready` channel, which every
/// script that makes jobs ready publishes, through one subscription per process: it returns
/// as soon as a job is pushed or promoted (no Redis timer involved), and a crash while waiting
/// loses nothing because nothing was taken.
#[async_trait]
pub trait ReadyWaiter: Send + std::fmt::Debug {
    /// Returns `Ok(true)` when jobs are (probably) ready, `Ok(false)` after `timeout`.
    async fn wait(&mut self, timeout: Duration) -> Result<bool>;
}

/// An announcement on the stores' `wake` channels, from any process.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Wake {
    /// A push made `due_us` the earliest due time of `shard` (0: look now).
    Due {
        /// The shard whose mover should look.
        shard: u16,
        /// The new earliest due time, in store microseconds.
        due_us: u64,
    },
    /// An operator resumed the topic: consumers waiting out the pause look again at once.
    Resumed(Topic),
    /// A cancel of a running job ([`Producer::cancel`] answered
    /// [`ChangeOutcome::CancelRequested`]): the process running it tells its handler. An
    /// announcement that reaches nobody is made up for by [`Leases::cancel_requests`].
    Cancel {
        /// The job's topic.
        topic: Topic,
        /// The job's id.
        id: JobId,
    },
}

/// Receives the announcements that a push made a new earliest due time, that a topic was
/// resumed, or that a running job was cancelled, from any process.
#[async_trait]
pub trait WakeListener: Send + std::fmt::Debug {
    /// The next announcement.
    async fn next(&mut self) -> Result<Wake>;
}

/// What every store has: its shards and its clock.
///
/// Every method of the role traits below is one atomic step per shard. Calls that take many
/// jobs split them into calls of at most [`MAX_BATCH`] jobs, so no call does unbounded work.
#[async_trait]
pub trait Sharded: Send + Sync + std::fmt::Debug + 'static {
    /// How many shards the jobs are spread over.
    fn shards(&self) -> u16;

    /// The store's clock (Redis `TIME`), in microseconds since the epoch: the clock every due
    /// time, lease and heartbeat is measured by, so that a host whose own clock is off cannot
    /// misjudge them. On a cluster, the clock of shard 0's master, which keeps the worker
    /// registry (each script reads its own master's clock).
    async fn time_us(&self) -> Result<u64>;
}

/// Creating and changing jobs that have not started: what a program that pushes needs.
#[async_trait]
pub trait Producer: Sharded {
    /// Stores jobs; returns one outcome per job, in order.
    async fn push(&self, jobs: Vec<NewJob>, on_conflict: OnConflict) -> Result<Vec<PushOutcome>>;

    /// Deletes a job that has not started (or a dead letter, or a kept record of a succeeded
    /// job). A running job is not deleted here: the request is recorded against its lease and
    /// announced ([`Wake::Cancel`]), and the answer is [`ChangeOutcome::CancelRequested`]; its
    /// worker stops it and deletes it ([`Leases::cancel_running`]) unless the run succeeds.
    async fn cancel(&self, topic: &Topic, id: &JobId) -> Result<ChangeOutcome>;

    /// Moves a job that has not started to a new due time.
    async fn reschedule(&self, topic: &Topic, id: &JobId, when: Due) -> Result<ChangeOutcome>;

    /// One job's state and data, `None` when no such job is pending, dead or kept done.
    async fn status(&self, topic: &Topic, id: &JobId) -> Result<Option<JobInfo>>;

    /// Waits until the job is done or dead, at most `timeout`, woken by the store (never by
    /// polling). Answers at once when it is no longer pending (ended, not found, or in a topic
    /// that keeps no records: `NotKept`); waits for a pending job (a blocked workflow step
    /// too) whatever its topic's retention, and never waits past `timeout`, whatever becomes of
    /// the job or the connection meanwhile. A connection lost during the wait does not end it
    /// early: it looks again once the connection is back, and answers the error only when
    /// `timeout` comes first. On a store with a manual clock (`MemoryStore::with_manual_clock`)
    /// `timeout` counts that clock.
    async fn wait_finished(&self, topic: &Topic, id: &JobId, timeout: Duration) -> Result<Waited>;

    /// Opens a read of `topic`'s job events after `after` ([`EventCursor::now`]: those that
    /// come from now on; [`EventCursor::start`]: every one still kept), in every shard. A topic
    /// whose events are off ([`Leases::set_events`]) has none: the feed waits. `after` holds
    /// one position per shard (callers [`check`](EventCursor::check) it).
    async fn event_feed(&self, topic: &Topic, after: &EventCursor) -> Result<Box<dyn EventFeed>>;
}

/// The workers' side of a job's life: due jobs made ready, leased, renewed, settled, and taken
/// back when their worker died.
#[async_trait]
pub trait Leases: Sharded {
    /// Moves up to `limit` due jobs of a shard from delayed to ready.
    async fn promote(&self, shard: u16, limit: usize) -> Result<Promoted>;

    /// Leases up to `max` ready jobs of a topic in a shard for `ttl` (the lease time, renewed by [`Leases::extend`]).
    async fn fetch(&self, shard: u16, topic: &Topic, max: usize, ttl: Duration) -> Result<Fetched>;

    /// [`Leases::fetch`] by `fetcher`, which also takes back the jobs of its fetches whose
    /// reply was lost (see [`Fetcher`]). A store whose replies cannot be lost (the memory
    /// store) keeps this default, a plain fetch.
    async fn fetch_for(
        &self,
        shard: u16,
        topic: &Topic,
        max: usize,
        ttl: Duration,
        fetcher: &Fetcher,
    ) -> Result<Fetched> {
        let _ = fetcher;
        self.fetch(shard, topic, max, ttl).await
    }

    /// Completes jobs (any shards) whose handler returned no value; stale leases are refused
    /// and reported. The same as [`Leases::ack_succeeded`] without values.
    async fn ack(&self, leases: &[LeaseRef]) -> Result<Acked> {
        let done: Vec<Succeeded> = leases
            .iter()
            .map(|lease| Succeeded {
                lease: lease.clone(),
                result: None,
                run: 0,
            })
            .collect();
        self.ack_succeeded(&done).await
    }

    /// Completes jobs (any shards); stale leases are refused and reported. A job of a topic
    /// with a retention ([`Leases::set_retention`]) is kept as [`Done`](crate::JobState::Done)
    /// with its value, in the same atomic step, and the records past the retention go; anyone
    /// waiting for it ([`Producer::wait_finished`]) is woken.
    async fn ack_succeeded(&self, done: &[Succeeded]) -> Result<Acked>;

    /// Schedules a failed job to run again after `delay`, recording `error`.
    /// Returns false when the lease was no longer held. A job whose cancel was requested
    /// against this lease ([`Leases::cancel_requests`]) is deleted as cancelled instead, as
    /// [`Leases::cancel_running`] does, whether or not its worker heard of the request (true is
    /// returned then too); so it is for a postpone, a dead letter, a release and a reclaim.
    async fn retry(&self, lease: &LeaseRef, delay: Duration, error: &str) -> Result<bool>;

    /// Schedules a job its handler postponed ([`Outcome::RetryAfter`]) to run again after
    /// `delay`, without counting the run as an attempt or changing the job's last error.
    /// Returns false when the lease was no longer held.
    ///
    /// [`Outcome::RetryAfter`]: https://docs.rs/dq/latest/dq/enum.Outcome.html
    async fn postpone(&self, lease: &LeaseRef, delay: Duration) -> Result<bool>;

    /// Moves a job to its topic's dead letters with `error`.
    /// Returns false when the lease was no longer held.
    async fn dead_letter(&self, lease: &LeaseRef, error: &str) -> Result<bool>;

    /// Writes a run's end without success ([`Leases::retry`], [`Leases::postpone`],
    /// [`Leases::dead_letter`] or [`Leases::release`]) and says what became of it, telling apart a job deleted as
    /// cancelled because a cancel was requested against its lease ([`RunEnded::Cancelled`]),
    /// which the runtime counts as cancelled, not as retried or dead-lettered. The default
    /// calls those methods, which cannot tell (a store of your own that deletes such jobs
    /// should say so here).
    async fn end_run(&self, lease: &LeaseRef, end: RunEnd<'_>) -> Result<RunEnded> {
        let written = match end {
            RunEnd::Retry { delay, error } => self.retry(lease, delay, error).await?,
            RunEnd::Postpone { delay } => self.postpone(lease, delay).await?,
            RunEnd::DeadLetter { error } => self.dead_letter(lease, error).await?,
            RunEnd::Release => self.release(std::slice::from_ref(lease)).await? == 1,
        };
        Ok(if written {
            RunEnded::Written
        } else {
            RunEnded::NotHeld
        })
    }

    /// Returns jobs to the front of their ready lists at once, not counting the attempt (those
    /// whose cancel was requested are deleted as cancelled: [`Leases::retry`]); how many.
    async fn release(&self, leases: &[LeaseRef]) -> Result<usize>;

    /// Records `value` (JSON, at most [`MAX_PROGRESS_BYTES`](crate::MAX_PROGRESS_BYTES)) as the
    /// progress of the running job `lease` names, replacing the one before; [`Producer::status`]
    /// reads it back in [`JobInfo::progress`] while the job runs, and it goes when the job leaves
    /// running. Returns false when the lease is no longer held (the job ended, or its lease was
    /// taken over): nothing is written. A larger value is refused with
    /// [`Error::InvalidProgress`](crate::Error::InvalidProgress) before anything is sent
    /// ([`check_progress`]).
    async fn progress(&self, lease: &LeaseRef, value: &[u8]) -> Result<bool>;

    /// Renews leases for another `lease`; returns those no longer held.
    async fn extend(&self, leases: &[LeaseRef], lease: Duration) -> Result<Vec<LeaseRef>>;

    /// Those of `leases` whose job a cancel asked to stop ([`Producer::cancel`] of a running
    /// job, recorded against that very lease). The heartbeat reads it beside each renewal, in
    /// case the announcement ([`Wake::Cancel`]) reached nobody.
    async fn cancel_requests(&self, leases: &[LeaseRef]) -> Result<Vec<LeaseRef>>;

    /// The handler of `lease`'s run returned (its end is written after): a store that counts
    /// the runs of a global concurrency outside the lease itself may free its slot now, for
    /// the next fetch (the Redis store over several shards does). The runtime calls it before
    /// it gives the run's permit back. The default does nothing.
    fn run_returned(&self, lease: &LeaseRef) {
        let _ = lease;
    }

    /// Gives back at once what this store keeps for its next fetches: the Redis store keeps
    /// the slots of a global concurrency over several shards that its ended runs held, a
    /// moment, for its next fetch of the topic. The runtime calls it at the end of a shutdown,
    /// after the last ack. A store that keeps nothing does nothing (the default).
    async fn give_back_kept(&self) {}

    /// Deletes a running job whose cancel was requested and whose run ended without success:
    /// no retry, no dead letter, nothing kept (a cancelled job reserves no id); anyone waiting
    /// for its end ([`Producer::wait_finished`]) is woken (it is not found). Returns false when
    /// the lease was no longer held (nothing changed).
    async fn cancel_running(&self, lease: &LeaseRef) -> Result<bool>;

    /// Takes back up to `limit` jobs of a shard whose lease expired (those whose cancel was
    /// requested are deleted as cancelled: [`Leases::retry`]).
    async fn reclaim(&self, shard: u16, limit: usize) -> Result<Reclaimed>;

    /// Records the most runs (`retries` + 1, at least 1) the listeners of `topic` allow, or
    /// forgets it (`None`: the limit given at push applies). The reclaimer judges a job whose
    /// worker died by it, so that a listener's `retries` holds whichever process reclaims the
    /// job. Each job's envelope keeps the limit given at push.
    async fn set_attempt_limit(&self, topic: &Topic, max_attempts: Option<u32>) -> Result<()>;

    /// Records how long, and how many, records of `topic`'s succeeded jobs are kept (`None`:
    /// none, the default), in every shard. Written at runtime start from the listener, as the
    /// attempt limit is.
    async fn set_retention(&self, topic: &Topic, retention: Option<Retention>) -> Result<()>;

    /// Turns `topic`'s job events on, each shard keeping at least `cap` (at least 1) of the
    /// latest, or off (`None`, the default: no event is written, and the streams kept so far
    /// are deleted), in every shard. Written at runtime start from the listener, as the
    /// retention is; every step that changes a job of the topic then appends its event in the
    /// same atomic step (see [`events`](crate::events)).
    async fn set_events(&self, topic: &Topic, cap: Option<u64>) -> Result<()>;

    /// Bounds how many jobs of `topic` may be pending (delayed, ready and running together) to
    /// `max` (`None`: no bound, the default): a push that would create a job past it is refused
    /// ([`PushOutcome::Full`](crate::PushOutcome::Full)), so a runaway producer cannot fill
    /// Redis. On Redis each of the namespace's shards holds its share, the shares adding up to
    /// `max`; a `max` under the shard count is refused (`Error::Config`).
    async fn set_max_pending(&self, topic: &Topic, max: Option<u64>) -> Result<()>;

    /// The bound [`set_max_pending`](Leases::set_max_pending) recorded for `topic`, `None`
    /// when it has none.
    async fn max_pending(&self, topic: &Topic) -> Result<Option<u64>>;

    /// Limits how many jobs of `topic` start per period, in all processes together, to `rate`
    /// (`None`: no limit, the default): [`Leases::fetch`] leases no more than it allows and
    /// says how long until the next may start ([`Fetched::throttled`]). On Redis the
    /// namespace's first shard counts the starts of every shard (a fetch in another asks it
    /// first). The same rate recorded again keeps where the limit stands; a new one starts
    /// afresh.
    async fn set_rate(&self, topic: &Topic, rate: Option<Rate>) -> Result<()>;

    /// The rate [`set_rate`](Leases::set_rate) recorded for `topic`, `None` when it has none.
    async fn rate(&self, topic: &Topic) -> Result<Option<Rate>>;

    /// Holds back every start of `topic`'s jobs for `duration` from now, in every shard and so
    /// in every process (a handler's `Outcome::RateLimited`: the provider said "429, retry
    /// after"), whether or not the topic has a rate. A hold that ends later already stays.
    async fn hold(&self, topic: &Topic, duration: Duration) -> Result<()>;

    /// Ends a hold of `topic` now, in every shard (an operator who knows the provider is
    /// back): its jobs start again at once, as its rate allows. True when a hold was in force.
    async fn lift_hold(&self, topic: &Topic) -> Result<bool>;

    /// When the hold of `topic` ([`Leases::hold`]) in force ends, in microseconds of the
    /// store's clock (the latest over the shards); `None` when none is in force.
    async fn hold_ends_us(&self, topic: &Topic) -> Result<Option<u64>>;

    /// Limits how many jobs of `topic` run at once in all processes together to `max` (`None`:
    /// no limit, the default), counted by leases: [`Leases::fetch`] leases no more than the
    /// leases held allow and says so ([`Fetched::at_capacity`]); a lease ends with its job's
    /// run, or when a dead worker's lease is reclaimed. On Redis over several shards the first
    /// shard counts the slots of all (granted to each fetch, given back at each run's end,
    /// each grant held for a lease and renewed with its jobs' leases).
    async fn set_global_concurrency(&self, topic: &Topic, max: Option<u32>) -> Result<()>;

    /// The limit [`set_global_concurrency`](Leases::set_global_concurrency) recorded for
    /// `topic`, `None` when it has none.
    async fn global_concurrency(&self, topic: &Topic) -> Result<Option<u32>>;

    /// Limits how many jobs of each group of `topic` run at once to `max` (`None`: back to the
    /// default of 1: a group's jobs one at a time, in push order).
    async fn set_group_concurrency(&self, topic: &Topic, max: Option<u32>) -> Result<()>;

    /// The group concurrency [`set_group_concurrency`](Leases::set_group_concurrency) recorded
    /// for `topic`, `None` when it has none (the default of 1 holds).
    async fn group_concurrency(&self, topic: &Topic) -> Result<Option<u32>>;

    /// Limits how many jobs of each group of `topic` start per period (`None`: no group rate,
    /// the default), counted at fetch with the store's clock (GCRA per group, the burst of
    /// [`Rate`]). A job whose group has used its rate is not leased: it goes back to wait,
    /// delayed until its group may start again, keeping its group's slot. The same rate
    /// recorded again keeps where each group stands; a new one starts afresh.
    async fn set_group_rate(&self, topic: &Topic, rate: Option<Rate>) -> Result<()>;

    /// The group rate [`set_group_rate`](Leases::set_group_rate) recorded for `topic`, `None`
    /// when it has none.
    async fn group_rate(&self, topic: &Topic) -> Result<Option<Rate>>;

    /// A waiter for ready jobs of `topic` in `shard` (on Redis, a bell rung by the one `ready`
    /// subscription of the process: no connection of its own).
    fn ready_waiter(&self, shard: u16, topic: &Topic) -> Box<dyn ReadyWaiter>;

    /// Subscribes to the announcements of every shard ([`Wake`]): new earliest due times,
    /// resumed topics, cancels of running jobs.
    async fn wake_listener(&self) -> Result<Box<dyn WakeListener>>;
}

/// What operators look at and do: counts, listings, pauses and dead letters.
#[async_trait]
pub trait Admin: Sharded {
    /// How many jobs of a topic are in each state, over all shards (cheap: callers poll it).
    async fn counts(&self, topic: &Topic) -> Result<TopicCounts>;

    /// A topic's counts, oldest ready job, next due time and pause flag, over all shards.
    async fn stats(&self, topic: &Topic) -> Result<TopicStats>;

    /// How many runs of a topic ended done or failed in each of the last 60 minutes, over all
    /// shards (bounded: 60 slots per shard).
    async fn throughput(&self, topic: &Topic) -> Result<Throughput>;

    /// A page of a topic's jobs that are delayed, ready or running, or of its kept succeeded
    /// jobs (done, newest first); dead ones: [`Admin::dead_jobs`].
    /// `cursor` is [`Cursor::START`] for the first page, then the page's `next`.
    async fn list(&self, topic: &Topic, state: JobState, at: Cursor, limit: usize) -> Result<Page>;

    /// Stops workers from fetching the topic (they finish what they run); survives restarts.
    async fn pause(&self, topic: &Topic) -> Result<()>;

    /// Lets workers fetch the topic again.
    async fn resume(&self, topic: &Topic) -> Result<()>;

    /// Every topic that was ever pushed to, and every paused one (a topic may be paused before
    /// its first push), sorted.
    async fn topics(&self) -> Result<Vec<Topic>>;

    /// A page of at most `limit` (at most [`MAX_BATCH`]) of a topic's dead letters, shard by
    /// shard, newest first within a shard. `at` is [`Cursor::START`] for the first page, then
    /// the page's `next`; each call costs O(log n + limit) whatever the number of dead letters.
    async fn dead_jobs(&self, topic: &Topic, at: Cursor, limit: usize) -> Result<Page>;

    /// Gives the chosen dead letters a fresh `max_attempts` and makes them ready now. Returns
    /// how many were requeued (ids that are not dead letters are skipped).
    async fn requeue_dead(&self, topic: &Topic, which: DeadLetters<'_>, max: u32) -> Result<usize>;

    /// Deletes up to `limit` dead letters of a topic that died before `before`.
    async fn purge_dead(&self, topic: &Topic, before: SystemTime, limit: usize) -> Result<usize>;

    /// Deletes those of `ids` (the first [`MAX_BATCH`] of them) that are dead letters of
    /// `topic` now, atomically per shard; returns how many. An id that is not a dead letter is
    /// skipped and nothing of it is touched: in particular an id pushed again since it died
    /// (its new job is pending) or retried. [`Producer::cancel`] would delete that new job.
    async fn delete_dead(&self, topic: &Topic, ids: &[JobId]) -> Result<usize>;

    /// Moves the jobs of up to two parts of `shard`'s compact storage (jobs due far ahead,
    /// written compact on one Redis: README, "How jobs are stored") into the layout every
    /// release reads, with their exact due times, the parts due soonest first; a step is
    /// bounded as a promotion is. Called again until no part is left, it leaves none: what a
    /// rollback to a release before compact storage needs first
    /// ([`Client::expand`](crate::Client::expand)). A store that stores nothing compact (the
    /// in-memory one, a Redis Cluster) has nothing to move.
    async fn expand(&self, shard: u16) -> Result<Expanded> {
        let _ = shard;
        Ok(Expanded::default())
    }
}

/// Which dead letters [`Admin::requeue_dead`] takes.
#[derive(Clone, Copy, Debug)]
pub enum DeadLetters<'a> {
    /// These ids (the first [`MAX_BATCH`] of them).
    Ids(&'a [JobId]),
    /// Up to `limit` (at most [`MAX_BATCH`]) of the oldest, among those that died at or before
    /// `before_us` (store time, see [`Sharded::time_us`]): jobs dying again while a caller
    /// works through the dead letters are not taken again.
    DiedBy {
        /// The cutoff, in microseconds of the store's clock.
        before_us: u64,
        /// Most jobs taken.
        limit: usize,
    },
}

impl DeadLetters<'_> {
    /// The ids asked for (none for `DiedBy`), at most this many jobs, and the cutoff.
    pub fn parts(&self) -> (&[JobId], usize, u64) {
        match *self {
            DeadLetters::Ids(ids) => (ids, policy::batch_limit(ids.len()), u64::MAX),
            DeadLetters::DiedBy { before_us, limit } => {
                (&[], policy::batch_limit(limit), before_us)
            }
        }
    }
}

/// Every role of a store: what the runtime and the client hold (`Arc<dyn Store>`), and what
/// `RedisStore` and [`MemoryStore`] are. Implement the seven role traits; this one follows.
pub trait Store: Producer + Leases + Admin + Registry + Schedules + Workflows {}

impl<T: Producer + Leases + Admin + Registry + Schedules + Workflows> Store for T {}
