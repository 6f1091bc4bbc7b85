//! The shapes that go in and out of a store: new jobs, leased jobs, states and counts.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::envelope::Envelope;
use crate::name::{JobId, Topic};

/// Default retries after the first attempt (the seed's default): three runs in all.
pub const DEFAULT_RETRIES: u32 = 2;

/// The most retries a push (or a listener) may ask for: 1,000 runs after the first. With the
/// default backoff (doubling from 1 s, capped at 10 minutes) that is about a week of retrying;
/// a job that failed a thousand times needs a person, not a thousand more runs. More is refused
/// ([`Error::InvalidPush`](crate::Error::InvalidPush)) rather than stored.
pub const MAX_RETRIES: u32 = 1000;

/// When a job becomes due: a time relative to the store's clock, or an instant. These two are
/// all there is (the enum is exhaustive, so stores can match on it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Schedule {
    /// This long after the store receives the push, by the store's clock (Redis `TIME`), so a
    /// producer with a skewed clock cannot make a job early or late.
    After(Duration),
    /// At this wall-clock instant, as the caller reckons it.
    At(SystemTime),
}

impl Default for Schedule {
    fn default() -> Self {
        Schedule::After(Duration::ZERO)
    }
}

/// What a push does when a job with the same topic and id is still pending (delayed, ready or
/// running). A dead-lettered or finished job does not block its id.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum OnConflict {
    /// Leave the pending job as it is and report [`PushOutcome::AlreadyPending`] (the default,
    /// as BullMQ does with a custom job id): a push retried after a lost reply cannot create
    /// a second job.
    #[default]
    Keep,
    /// Replace the pending job's payload, due time and retries, as the seed's `HSET`+`ZADD`
    /// did. A job that is already running is not touched ([`PushOutcome::Running`]).
    Replace,
}

/// What a push did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PushOutcome {
    /// A new job was stored.
    Created,
    /// A job with this id was pending and was kept as it was.
    AlreadyPending,
    /// A pending job with this id was replaced.
    Replaced,
    /// A job with this id is running; it was not replaced.
    Running,
    /// A job with this id that was pushed with
    /// [`unique_for`](crate::PushBuilder::unique_for) finished less than that long ago: nothing
    /// was stored. `left` is how long the id stays reserved.
    Unique {
        /// Until the id may be pushed again.
        left: Duration,
    },
    /// The job of a schedule's tick ([`NewJob::fence`]), refused: the schedule's ticks in the
    /// job's shard were made under `generation`, a later generation than the push's. Either the
    /// push comes from a look that read the schedule before it changed, or the schedule's
    /// generation went back (a failover lost its latest change, Redis' clock stepped back);
    /// the ticker tells them apart and raises the generation in the second case.
    Superseded {
        /// The generation the shard's ticks were made under.
        generation: u64,
    },
}

/// A job to store, as built by [`Client::push`](crate::Client::push).
#[derive(Clone, Debug)]
pub struct NewJob {
    /// Its topic.
    pub topic: Topic,
    /// Its id, unique among the topic's pending jobs.
    pub id: JobId,
    /// When it is due.
    pub schedule: Schedule,
    /// Runs allowed before it is dead-lettered.
    pub max_attempts: u32,
    /// How long its id stays reserved after it succeeds (`None`: not at all).
    pub unique_for: Option<Duration>,
    /// For the job of a schedule's tick: created only after the ticks created before it.
    pub fence: Option<crate::store::FiredTick>,
    /// The serialized message.
    pub payload: Vec<u8>,
}

/// Where a job is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum JobState {
    /// Waiting for its due time.
    Delayed,
    /// Due, waiting for a worker.
    Ready,
    /// Leased to a worker.
    Running,
    /// Failed past its retries (or poison); kept with its error until retried or purged.
    Dead,
}

impl JobState {
    /// The lower-case name used in logs and by the CLI.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Delayed => "delayed",
            JobState::Ready => "ready",
            JobState::Running => "running",
            JobState::Dead => "dead",
        }
    }
}

/// `delayed`, `ready`, `running` or `dead`.
impl std::fmt::Display for JobState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Reads `delayed`, `ready`, `running` or `dead` (any case), as [`JobState`]'s `Display`
/// writes it.
impl std::str::FromStr for JobState {
    type Err = String;

    fn from_str(text: &str) -> std::result::Result<Self, Self::Err> {
        [
            JobState::Delayed,
            JobState::Ready,
            JobState::Running,
            JobState::Dead,
        ]
        .into_iter()
        .find(|s| s.as_str().eq_ignore_ascii_case(text.trim()))
        .ok_or_else(|| format!("unknown job state {text:?}: use delayed, ready, running or dead"))
    }
}

/// One job as seen from outside: its state and everything stored with it.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct JobInfo {
    /// Its topic.
    pub topic: Topic,
    /// Its id.
    pub id: JobId,
    /// Where it is.
    pub state: JobState,
    /// Runs that ended without success (failed, timed out, or lost with their worker); for a
    /// running job, the run under way (one more). Runs its handler postponed do not count.
    pub attempt: u32,
    /// Runs allowed.
    pub max_attempts: u32,
    /// When it was pushed.
    pub created: SystemTime,
    /// When it is (or was) due.
    pub due: SystemTime,
    /// The lease deadline when running, the time of death when dead.
    pub state_since_or_until: Option<SystemTime>,
    /// The error of the latest failed run.
    pub last_error: Option<String>,
    /// The serialized message.
    pub payload: Vec<u8>,
}

impl JobInfo {
    /// The record of a job a store read: its state, its envelope, and the score of its state
    /// (when it is due, or when it died or its lease ends; us).
    pub fn from_envelope(
        topic: Topic,
        id: JobId,
        state: JobState,
        env: Envelope,
        score_us: Option<u64>,
    ) -> JobInfo {
        JobInfo {
            topic,
            id,
            state,
            attempt: env.attempt,
            max_attempts: env.max_attempts,
            created: from_us(env.created_us),
            due: from_us(env.due_us),
            state_since_or_until: score_us.map(from_us),
            last_error: env.last_error,
            payload: env.payload,
        }
    }
}

/// A job leased to this worker by a fetch. Its [`LeaseRef`] acks, retries or dead-letters it.
#[derive(Clone, Debug)]
pub struct LeasedJob {
    /// The lease to hand back.
    pub lease: LeaseRef,
    /// The stored job, with `attempt` counting this run.
    pub envelope: Envelope,
}

/// The longest delay of a push or a retry, and the farthest ahead a due time may be: 200
/// years. Microseconds in a Lua double are exact up to 2^53, about the year 2255; a longer delay
/// would be stored wrong or wrap around to a short one.
pub const MAX_DELAY: Duration = Duration::from_secs(200 * 365 * 86_400);

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
    /// The shard the job lives in (where the fetch leased it): renewals and acks go there
    /// without hashing the job again.
    pub shard: u16,
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
}

/// A topic as an operator sees it: counts, how far behind the workers are, what comes next.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct TopicStats {
    /// Jobs in each state.
    pub counts: TopicCounts,
    /// Due time of the oldest job waiting for a worker: `now - this` is how far behind the
    /// workers are.
    pub oldest_ready_due: Option<SystemTime>,
    /// The topic's earliest delayed job (looked for among each shard's first 1,000 delayed
    /// jobs; `None` also when it is further back).
    pub next_due: Option<SystemTime>,
    /// True when workers do not fetch this topic.
    pub paused: bool,
}

/// One page of a listing; pass `next` back to get the following page.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct Page {
    /// The jobs of this page.
    pub jobs: Vec<JobInfo>,
    /// Where the next page starts, `None` at the end.
    pub next: Option<Cursor>,
}

/// Where a listing carries on: [`Cursor::START`] for the first page, then the page's `next`.
///
/// Opaque: what it holds (a shard and a position in it) is the store's business and may change
/// between releases. It prints and parses as a number so that a command line or a URL can
/// carry it (`dq jobs t --cursor 281474976710656`), and serializes as that number.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(transparent)]
pub struct Cursor(u64);

impl Cursor {
    /// The first page.
    pub const START: Cursor = Cursor(0);

    /// For implementations of [`Admin`](crate::store::Admin): the cursor with this value.
    pub fn from_raw(raw: u64) -> Cursor {
        Cursor(raw)
    }

    /// For implementations of [`Admin`](crate::store::Admin): the value given to
    /// [`Cursor::from_raw`].
    pub fn raw(self) -> u64 {
        self.0
    }
}

impl std::fmt::Display for Cursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::str::FromStr for Cursor {
    type Err = std::num::ParseIntError;

    fn from_str(s: &str) -> Result<Cursor, Self::Err> {
        s.parse().map(Cursor)
    }
}

/// A running worker process, as it registers itself at every heartbeat.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct WorkerInfo {
    /// Unique per process: host, pid and a random suffix.
    pub id: String,
    /// Host name.
    pub host: String,
    /// Process id.
    pub pid: u32,
    /// Topics it runs.
    pub topics: Vec<String>,
    /// Jobs running at the last heartbeat.
    pub running: usize,
    /// When it started, in milliseconds since the epoch.
    pub started_ms: u64,
    /// Its last heartbeat, in milliseconds since the epoch, by the store's clock (the store
    /// stamps it when the heartbeat is recorded).
    pub last_seen_ms: u64,
}

impl WorkerInfo {
    /// Describes this process.
    pub fn for_this_process(topics: Vec<String>) -> WorkerInfo {
        let host = std::fs::read_to_string("/etc/hostname")
            .ok()
            .map(|h| h.trim().to_owned())
            .filter(|h| !h.is_empty())
            .or_else(|| std::env::var("HOSTNAME").ok())
            .unwrap_or_else(|| "unknown-host".to_owned());
        let pid = std::process::id();
        let now = to_us(SystemTime::now()) / 1000;
        WorkerInfo {
            id: format!("{host}-{pid}-{:x}", now % 0x10000),
            host,
            pid,
            topics,
            running: 0,
            started_ms: now,
            last_seen_ms: now,
        }
    }
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
    /// The due time of the earliest job still delayed, in microseconds since the epoch.
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
}

/// What a cancel or reschedule found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ChangeOutcome {
    /// Done.
    Done,
    /// No pending job with that id.
    NotFound,
    /// The job is running; it was left alone.
    Running,
}

/// How many jobs of one topic are in each state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct TopicCounts {
    /// Waiting for their due time.
    pub delayed: u64,
    /// Due and waiting for a worker.
    pub ready: u64,
    /// Leased to workers.
    pub running: u64,
    /// Dead letters.
    pub dead: u64,
}

impl TopicCounts {
    /// Adds another shard's counts.
    pub fn add(&mut self, other: &TopicCounts) {
        self.delayed += other.delayed;
        self.ready += other.ready;
        self.running += other.running;
        self.dead += other.dead;
    }
}

/// How many runs of a topic ended done or failed in each of the last 60 minutes, by the
/// store's clock. A failed run is one whose handler failed (retried or dead-lettered) or whose
/// worker died holding it (its lease expired); a postponed run ([`Outcome::RetryAfter`]) is
/// neither. Kept in the store as a ring of 60 one-minute slots per topic, so its size is bounded
/// whatever the traffic.
///
/// [`Outcome::RetryAfter`]: https://docs.rs/dq/latest/dq/enum.Outcome.html
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct Throughput {
    /// The 60 minutes up to and including the current one, oldest first.
    pub minutes: Vec<MinuteTally>,
}

impl Throughput {
    /// The last hour's minutes from the tallies found, oldest first (minutes without runs
    /// count zero). `now_minute` and each tally's minute count minutes since the epoch.
    pub fn from_tallies(now_minute: u64, found: impl IntoIterator<Item = (u64, u64, u64)>) -> Self {
        let first = now_minute.saturating_sub(59);
        let mut minutes: Vec<MinuteTally> = (first..=now_minute)
            .map(|m| MinuteTally {
                minute: UNIX_EPOCH + Duration::from_secs(m * 60),
                done: 0,
                failed: 0,
            })
            .collect();
        for (minute, done, failed) in found {
            if let Some(slot) = minute
                .checked_sub(first)
                .and_then(|i| minutes.get_mut(usize::try_from(i).ok()?))
            {
                slot.done += done;
                slot.failed += failed;
            }
        }
        Throughput { minutes }
    }

    /// Runs done over the hour.
    pub fn done(&self) -> u64 {
        self.minutes.iter().map(|m| m.done).sum()
    }

    /// Runs failed over the hour.
    pub fn failed(&self) -> u64 {
        self.minutes.iter().map(|m| m.failed).sum()
    }
}

/// One minute of [`Throughput`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct MinuteTally {
    /// The minute's start.
    pub minute: SystemTime,
    /// Runs that succeeded in it.
    pub done: u64,
    /// Runs that failed in it.
    pub failed: u64,
}

/// Converts a wall-clock time to microseconds since the epoch (0 before 1970).
pub fn to_us(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// Converts microseconds since the epoch to a wall-clock time.
pub fn from_us(us: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_micros(us)
}
