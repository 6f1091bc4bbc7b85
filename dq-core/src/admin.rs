//! What operators read: counts, stats and throughput of a topic, pages of jobs, workers, and
//! what a cancel or reschedule did.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::job::{to_us, JobInfo};

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
    /// Its bound on pending jobs ([`Client::set_max_pending`](crate::Client::set_max_pending)),
    /// filled in by [`Client::stats`](crate::Client::stats) (a store's own `stats` may leave
    /// it `None`).
    pub max_pending: Option<u64>,
    /// Its rate limit ([`Client::set_rate`](crate::Client::set_rate)), filled in as
    /// `max_pending` is.
    pub rate: Option<crate::Rate>,
    /// The most of its jobs running at once in all processes
    /// ([`Client::set_global_concurrency`](crate::Client::set_global_concurrency)), filled in
    /// as `max_pending` is.
    pub global_concurrency: Option<u32>,
    /// When the hold a handler asked for (`Outcome::RateLimited`) ends, while one is in force:
    /// no job of the topic starts before. Filled in as `max_pending` is.
    pub held_until: Option<SystemTime>,
    /// Its group concurrency ([`Client::set_group_concurrency`](crate::Client::set_group_concurrency)),
    /// `None` for the default of 1.
    pub group_concurrency: Option<u32>,
    /// How many jobs of each of its groups start per period
    /// ([`Client::set_group_rate`](crate::Client::set_group_rate)), `None` when it has none.
    /// Filled in as `max_pending` is.
    pub group_rate: Option<crate::Rate>,
    /// Its groups with the most jobs waiting for a slot, most first (ties: the name that sorts last first; at most
    /// [`BUSIEST_GROUPS`]); empty when no job waits for one.
    pub busiest_groups: Vec<GroupLoad>,
}

/// How many groups [`TopicStats::busiest_groups`] lists at most.
pub const BUSIEST_GROUPS: usize = 10;

/// One of a topic's groups ([`PushBuilder::group`](crate::PushBuilder::group)), as
/// [`TopicStats::busiest_groups`] lists it.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct GroupLoad {
    /// The group's key.
    pub group: String,
    /// How many of its jobs are ready but wait for one of its slots (counted as ready).
    pub waiting: u64,
    /// How many of its slots are held: by its jobs in line, running, or waiting for a retry.
    pub holding: u32,
}

impl GroupLoad {
    /// A group's load.
    pub fn new(group: impl Into<String>, waiting: u64, holding: u32) -> GroupLoad {
        GroupLoad {
            group: group.into(),
            waiting,
            holding,
        }
    }
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

/// What a cancel or reschedule found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ChangeOutcome {
    /// Done.
    Done,
    /// No pending job with that id.
    NotFound,
    /// The job is running; it was left alone (a reschedule: a running job has no due time to
    /// move).
    Running,
    /// The job is running: a cancel asked its worker, in whatever process, to stop it. Its
    /// handler sees the request in `JobContext::cancelled`; when the run then ends without
    /// success (an error, a panic, a timeout; or its worker shut down or died before hearing of
    /// the request), the job is deleted, not retried. A handler that ignores the request runs
    /// to its end, and a run that succeeds is done as any.
    CancelRequested,
}

/// What one step of [`Admin::expand`](crate::store::Admin::expand) did in a shard.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct Expanded {
    /// Jobs moved out of compact storage into the layout every release reads.
    pub jobs: u64,
    /// Parts of jobs stored compact still in the shard (0: none left).
    pub parts_left: u64,
}

impl Expanded {
    /// A step's outcome (for stores outside this crate).
    pub fn new(jobs: u64, parts_left: u64) -> Expanded {
        Expanded { jobs, parts_left }
    }
}

/// How many jobs of one topic are in each state, and how many records of its succeeded jobs
/// it keeps.
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
    /// Succeeded jobs whose records the topic keeps (only with a retention:
    /// `#[dq::listener(retain = "1h")]`); they go as the retention trims them.
    pub done: u64,
}

impl TopicCounts {
    /// Adds another shard's counts.
    pub fn add(&mut self, other: &TopicCounts) {
        self.delayed += other.delayed;
        self.ready += other.ready;
        self.running += other.running;
        self.dead += other.dead;
        self.done += other.done;
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

    /// Runs that ended, done or failed, in the last `k` full minutes (those before the current
    /// one; at most 59).
    pub fn runs_in_last_minutes(&self, k: usize) -> u64 {
        let end = self.minutes.len().saturating_sub(1);
        let start = end.saturating_sub(k);
        self.minutes[start..end]
            .iter()
            .map(|m| m.done + m.failed)
            .sum()
    }

    /// How many full minutes [`Throughput::rate_used`] counts for `rate`: enough for two starts
    /// at its rate, 1 for a start every 30 s or more often. `None` for a rate slower than one
    /// start every 29.5 minutes, whose starts the hour's minutes cannot average.
    pub fn rate_window(rate: crate::Rate) -> Option<usize> {
        let k = (2.0 * rate.interval().as_secs_f64() / 60.0).ceil().max(1.0);
        (k <= 59.0).then_some(k as usize)
    }

    /// How much of `rate` the topic used over its window ([`Throughput::rate_window`]: the last
    /// full minute for any rate of two starts a minute or more): the runs that ended in it,
    /// done or failed, against the starts `rate` allows in it (1.0: all of them; a little above
    /// 1 is a burst, or runs started before the window). Runs a handler postponed, met a 429
    /// with (`Outcome::RateLimited`) or that were cancelled or released are not counted, though
    /// they took a start; the rate as it is now is the measure, even when it changed within the
    /// window. So a topic held back by its rate alone reads about 1.0; one held back by its
    /// global concurrency, its workers or its backlog reads less. `None` for a rate too slow to
    /// measure this way.
    pub fn rate_used(&self, rate: crate::Rate) -> Option<f64> {
        let k = Self::rate_window(rate)?;
        let allowed = k as f64 * rate.count() as f64 * 60.0 / rate.period().as_secs_f64();
        Some(self.runs_in_last_minutes(k) as f64 / allowed.max(f64::MIN_POSITIVE))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_used_counts_the_runs_of_the_last_full_minute_against_what_the_rate_allows() {
        // Minute 100 is the current one (not counted), 99 the last full one.
        let hour = Throughput::from_tallies(100, [(99, 500, 100), (100, 9000, 0), (98, 7, 0)]);
        assert_eq!(hour.runs_in_last_minutes(1), 600);
        assert_eq!(hour.runs_in_last_minutes(2), 607);
        let rate = |text: &str| text.parse::<crate::Rate>().unwrap();
        let used = |text: &str| hour.rate_used(rate(text)).unwrap();
        assert!((used("10/1s") - 1.0).abs() < 1e-9);
        assert!((used("20/1m") - 30.0).abs() < 1e-9);
        let idle = Throughput::from_tallies(100, []);
        assert_eq!(idle.rate_used(rate("10/1s")), Some(0.0));
    }

    #[test]
    fn a_slow_rate_is_measured_over_enough_minutes_for_two_starts_or_not_at_all() {
        let rate = |text: &str| text.parse::<crate::Rate>().unwrap();
        assert_eq!(Throughput::rate_window(rate("2/1m")), Some(1));
        assert_eq!(Throughput::rate_window(rate("1/1m")), Some(2));
        assert_eq!(Throughput::rate_window(rate("10/1h")), Some(12));
        assert_eq!(Throughput::rate_window(rate("1/1d")), None);
        // 10/1h over 12 minutes allows 2 starts: 2 runs in them are all of it.
        let hour = Throughput::from_tallies(100, [(90, 1, 0), (97, 1, 0), (80, 5, 0)]);
        assert_eq!(hour.rate_used(rate("10/1h")), Some(1.0));
        assert_eq!(hour.rate_used(rate("1/1d")), None);
    }
}
