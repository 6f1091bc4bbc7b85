//! A job as it goes into a store and comes out of it: when it is due, what a push does and
//! reports, its state and what an operator sees of it. Leases are in `lease`, the records
//! operators read in `admin`.

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

/// The highest priority a push may give a job ([`PushBuilder::priority`](crate::PushBuilder::priority)):
/// higher runs first. The default is 0; the range is [`MIN_PRIORITY`] to `MAX_PRIORITY`.
pub const MAX_PRIORITY: i8 = 10;

/// The lowest priority a push may give a job: below the default of 0, for work that may wait
/// for everything else of its topic ("newsletters after password resets").
pub const MIN_PRIORITY: i8 = -10;

/// Refuses a job whose priority is outside [`MIN_PRIORITY`]..=[`MAX_PRIORITY`] (the push
/// builder, and both stores before writing anything, for jobs made by hand).
pub fn check_priority(job: &NewJob) -> crate::Result<()> {
    if (MIN_PRIORITY..=MAX_PRIORITY).contains(&job.priority) {
        return Ok(());
    }
    Err(crate::Error::InvalidPush {
        topic: job.topic.to_string(),
        reason: format!(
            "job {}: priority {} is outside {MIN_PRIORITY}..={MAX_PRIORITY} (dq::limits::MIN_PRIORITY and MAX_PRIORITY); higher runs first, 0 is the default",
            job.id, job.priority
        ),
    })
}

/// When a job becomes due: a time relative to the store's clock, or an instant. These two are
/// all there is (the enum is exhaustive, so stores can match on it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Due {
    /// This long after the store receives the push, by the store's clock (Redis `TIME`), so a
    /// producer with a skewed clock cannot make a job early or late.
    After(Duration),
    /// At this wall-clock instant, as the caller reckons it.
    At(SystemTime),
}

impl Default for Due {
    fn default() -> Self {
        Due::After(Duration::ZERO)
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
    /// Refused: the topic holds as many jobs as its `max_pending` allows (delayed, ready and
    /// running together); nothing was stored. A single push reports it as
    /// [`Error::TopicFull`](crate::Error::TopicFull); a batch ([`Client::push_batch`](crate::Client::push_batch))
    /// says it of each job it refused, and stores the others.
    Full {
        /// The topic's bound.
        max_pending: u64,
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
    pub due: Due,
    /// Runs allowed before it is dead-lettered.
    pub max_attempts: u32,
    /// How long its id stays reserved after it succeeds (`None`: not at all).
    pub unique_for: Option<Duration>,
    /// For the job of a schedule's tick: created only after the ticks created before it.
    pub fence: Option<FiredTick>,
    /// The W3C trace context of the span the push was made in (feature `otel`; the text is
    /// described in `dq_core::trace`), stored in the job's [`Envelope::trace`] so that its run
    /// continues the trace; `None` stores nothing.
    pub trace: Option<String>,
    /// Its priority within its topic, from [`MIN_PRIORITY`] to [`MAX_PRIORITY`] (0: none).
    pub priority: i8,
    /// Its group within its topic (`None`: none): at most the topic's group concurrency of
    /// one group's jobs run at once, in push order, and groups take turns.
    pub group: Option<String>,
    /// Whether dq drew its id for this push (no id of the caller's, nor of the payload): no job
    /// can hold it yet, so the store need not look for one where looking costs (jobs due far
    /// ahead, stored compact, are found through an index). `false` for an id chosen by the
    /// caller, which is always looked for.
    pub id_drawn: bool,
    /// The serialized message.
    pub payload: Vec<u8>,
}

/// A tick of a schedule, as a look fired it: under the schedule's generation it read.
///
/// It makes the tick's job a one-time thing ([`NewJob::fence`]): the store creates the job only
/// when the schedule's fence in the job's shard, the latest `(generation, tick)` created there,
/// is below this one, and then raises the fence to it; otherwise the push is
/// [`AlreadyPending`](crate::PushOutcome::AlreadyPending) and nothing is stored. Ticks are
/// created in order, so a process that wakes from a long stall and pushes a tick that was made
/// (and ran, and whose reservation ran out) minutes ago makes nothing. A new generation (the
/// spec changed, or the schedule was resumed) starts again from any tick.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FiredTick {
    /// The schedule's id.
    pub schedule: String,
    /// Its generation when the tick was fired ([`ScheduleEntry::generation`](crate::store::ScheduleEntry::generation)).
    pub generation: u64,
    /// The tick (us since the epoch).
    pub tick_us: u64,
}

impl FiredTick {
    /// Whether this tick's job may be created where `stored` is the schedule's fence, the
    /// `(generation, tick)` created last (a tick at or before it may not).
    pub fn is_after(&self, stored: Option<(u64, u64)>) -> bool {
        stored.is_none_or(|s| (self.generation, self.tick_us) > s)
    }
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
    /// Succeeded, with the value its handler returned; kept while its topic's retention lasts
    /// ([`Retention`](crate::Retention)), and only when it has one.
    Done,
    /// A step of a workflow waiting for the steps it comes after
    /// ([`Client::workflow`](crate::Client::workflow)): not pushed yet, so neither counted nor
    /// listed with the topic's jobs; [`Client::workflow_status`](crate::Client::workflow_status)
    /// shows it.
    Blocked,
}

impl JobState {
    /// The lower-case name used in logs and by the CLI.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Delayed => "delayed",
            JobState::Ready => "ready",
            JobState::Running => "running",
            JobState::Dead => "dead",
            JobState::Done => "done",
            JobState::Blocked => "blocked",
        }
    }
}

/// `delayed`, `ready`, `running`, `dead`, `done` or `blocked`.
impl std::fmt::Display for JobState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Reads `delayed`, `ready`, `running`, `dead`, `done` or `blocked` (any case), as [`JobState`]'s `Display`
/// writes it.
impl std::str::FromStr for JobState {
    type Err = String;

    fn from_str(text: &str) -> std::result::Result<Self, Self::Err> {
        [
            JobState::Delayed,
            JobState::Ready,
            JobState::Running,
            JobState::Dead,
            JobState::Done,
            JobState::Blocked,
        ]
        .into_iter()
        .find(|s| s.as_str().eq_ignore_ascii_case(text.trim()))
        .ok_or_else(|| {
            format!(
                "unknown job state {text:?}: use delayed, ready, running, dead, done or blocked"
            )
        })
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
    /// The lease deadline when running, the time of death when dead, when it succeeded when
    /// done.
    pub state_since_or_until: Option<SystemTime>,
    /// The error of the latest failed run.
    pub last_error: Option<String>,
    /// The errors of its failed runs, oldest first: which run, when, and the first
    /// [`RUN_ERROR_TEXT`](crate::RUN_ERROR_TEXT) bytes of its error, the latest
    /// [`RUN_ERRORS_KEPT`](crate::RUN_ERRORS_KEPT) (runs that failed, timed out or were lost
    /// with their worker; not runs its handler postponed). Kept with the job while it waits,
    /// runs, is a dead letter, or is a kept record of a succeeded job (`retain`).
    pub errors: Vec<crate::RunError>,
    /// Its priority within its topic (0 unless the push gave one; higher runs first).
    pub priority: i8,
    /// Its group within its topic, when the push gave one.
    pub group: Option<String>,
    /// The serialized message.
    pub payload: Vec<u8>,
    /// What its handler returned, as JSON, when it is [`Done`](JobState::Done) and returned a
    /// value (`None` for `()`).
    pub result: Option<Vec<u8>>,
    /// The latest progress its handler reported (`JobContext::progress`), as JSON, while it is
    /// [`Running`](JobState::Running). A job's progress belongs to its run: it goes when the
    /// job leaves running, however it leaves (acked, retried, postponed, dead-lettered,
    /// released, reclaimed), so a retried job starts without one and a done job shows its
    /// [`result`](JobInfo::result) instead. Read by `status` (`Client::status`); listings
    /// need not carry it.
    pub progress: Option<Vec<u8>>,
    /// Whether its worker was asked to stop it: a [`Running`](JobState::Running) job whose
    /// cancel was asked (`Client::cancel`) during this run, which has not ended yet. A handler
    /// that listens (`JobContext::cancelled`) stops and the job ends cancelled; one that does
    /// not runs to its end. Read by `status`; listings need not carry it.
    pub cancel_requested: bool,
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
            errors: env.errors,
            priority: env.priority,
            group: env.group,
            payload: env.payload,
            result: None,
            progress: None,
            cancel_requested: false,
        }
    }
}

/// The longest delay of a push or a retry, and the farthest ahead a due time may be: 200
/// years. Microseconds in a Lua double are exact up to 2^53, about the year 2255; a longer delay
/// would be stored wrong or wrap around to a short one.
pub const MAX_DELAY: Duration = Duration::from_secs(200 * 365 * 86_400);

/// Converts a wall-clock time to microseconds since the epoch (0 before 1970).
pub fn to_us(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// Converts microseconds since the epoch to a wall-clock time.
pub fn from_us(us: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_micros(us)
}
