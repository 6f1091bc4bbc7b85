//! Job events: what happened to the jobs of a topic, in order, as a stream that a program reads,
//! and resumes after a restart without missing any.
//!
//! A topic's events are off by default. Its listener turns them on
//! (`#[dq::listener(events = true)]`, `Listener::events`): the runtime records it in the store at
//! start, and from then on every step that changes one of the topic's jobs appends its event in
//! the same atomic step (on Redis, in the same script call as the change: no round trip of its
//! own). A program that only pushes writes the `pushed` events too once the topic has them on.
//!
//! Each shard keeps its jobs' events in one capped stream per topic (on Redis, the Stream
//! `events:<topic>` of the shard, trimmed with `XADD MINID ~`): at least `cap` of the latest
//! events are kept per shard (10,000 unless the listener says otherwise). The trimming is
//! approximate, as Redis does it cheaply: a stream holds the cap and up to a hundred or so
//! entries more, never fewer: the cap is a floor. On Redis the events of one kind that one step
//! makes (a bulk push, a promotion, a fetch, an ack) share one stream entry, whose id is
//! `0-<n>`, `n` the number of its last event: the trim counts events, not entries.
//!
//! A reader ([`Client::events`](crate::Client::events)) holds an [`EventCursor`], where it stands
//! in each shard's stream. Saved as a string (`Display`) and given back
//! ([`Client::events_from`](crate::Client::events_from), `FromStr`), it resumes right after the
//! last event handed out and misses nothing still within the cap; a reader that fell further
//! behind is told so first ([`EventItem::Lagged`], with how many it missed). Every entry of a
//! stream is numbered (1, 2, ...), which is how a reader knows. A reader on Redis also checks,
//! whenever it connects and whenever a read finds nothing new, that the entry it stands on is
//! still the one it read (by its time): after Redis went back to an older state (a restart from
//! an older snapshot, a failover to a replica that was behind) it is told
//! ([`EventItem::RolledBack`]) and reads every event written since, though their numbers are
//! ones it had seen.
//!
//! Order: the events of one job come in the order they happened (a job lives in one shard, and
//! each shard's stream is read in order); the events of jobs in different shards are interleaved
//! as the shards' reads come back.

use std::fmt;
use std::str::FromStr;
use std::time::SystemTime;

use async_trait::async_trait;

use crate::error::{Error, Result};
use crate::name::{JobId, Topic};

/// The events kept per shard of a topic whose listener turns them on without a cap of its own.
pub const DEFAULT_EVENTS_CAP: u64 = 10_000;

/// What happened to a job.
///
/// `attempt` on the [`JobEvent`] says which run: for an event about a run (started, progress,
/// succeeded, failed, retrying, postponed, dead after a run, stalled, released, a cancel of a
/// running job) that run's number from 1, as `JobContext::attempt` numbers it (a postponed run
/// is not counted: the run after it has the same number); for an event about a waiting job
/// (pushed, a cancel before it ran) the runs counted so far (0 before the first). `promoted`
/// always says 0: a promotion moves up to a thousand jobs in one step without reading them,
/// and reading each one's runs for its event cost more than the rest of the promotion.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum EventKind {
    /// The job was created, or replaced by a push with `OnConflict::Replace`.
    Pushed {
        /// When it is due, for a job that waits; `None` for one ready at once.
        due: Option<SystemTime>,
    },
    /// Its due time came: it moved from waiting to ready.
    Promoted,
    /// A worker leased it: its run starts.
    Started,
    /// Its running handler reported progress (`JobContext::progress`).
    Progress {
        /// The progress, as JSON.
        value: Vec<u8>,
    },
    /// Its run succeeded.
    Succeeded {
        /// The JSON its handler returned, when its topic keeps the records of its succeeded
        /// jobs (`retain`); `None` otherwise, or when the handler returned no value.
        value: Option<Vec<u8>>,
    },
    /// Its run failed and it runs again: [`EventKind::Retrying`] follows. (A run that fails
    /// for the last time gives [`EventKind::Dead`].)
    Failed {
        /// The run's error.
        error: String,
    },
    /// After a failed run, it was scheduled to run again.
    Retrying {
        /// When it runs again.
        due: SystemTime,
    },
    /// It waits until `due`, without spending an attempt: either its handler returned
    /// `Outcome::RetryAfter`, or its group's rate held it back before it started (README "A
    /// rate per group"). The event does not say which.
    Postponed {
        /// When it runs again.
        due: SystemTime,
    },
    /// It was moved to the dead letters: its last run failed, its payload could not be read, or
    /// its worker died on its last attempt.
    Dead {
        /// Why.
        error: String,
    },
    /// It was deleted by a cancel: before it ran, as a dead letter, or while it ran and its
    /// handler then stopped without success.
    Cancelled,
    /// Its lease ran out (its worker died or stopped renewing it) and it is ready to run again.
    /// (On its last attempt it is dead instead: [`EventKind::Dead`].)
    Stalled,
    /// Its worker shut down while it ran: it is ready again at once, the run not counted.
    Released,
    /// The job was the last step of its workflow to end (`Client::workflow`): the workflow
    /// ended, in `state`. Announced on the stream of that step's topic (when its events are
    /// on), after the step's own event; `attempt` says 0.
    WorkflowEnded {
        /// The workflow's id.
        workflow: String,
        /// How it ended: succeeded, failed or cancelled.
        state: crate::workflow::WorkflowState,
    },
}

impl EventKind {
    /// The event's name, as the CLI prints it and the stores write it: `pushed`, `promoted`,
    /// `started`, `progress`, `succeeded`, `failed`, `retrying`, `postponed`, `dead`,
    /// `cancelled`, `stalled`, `released`, `workflow_ended`.
    pub fn name(&self) -> &'static str {
        match self {
            EventKind::Pushed { .. } => "pushed",
            EventKind::Promoted => "promoted",
            EventKind::Started => "started",
            EventKind::Progress { .. } => "progress",
            EventKind::Succeeded { .. } => "succeeded",
            EventKind::Failed { .. } => "failed",
            EventKind::Retrying { .. } => "retrying",
            EventKind::Postponed { .. } => "postponed",
            EventKind::Dead { .. } => "dead",
            EventKind::Cancelled => "cancelled",
            EventKind::Stalled => "stalled",
            EventKind::Released => "released",
            EventKind::WorkflowEnded { .. } => "workflow_ended",
        }
    }
}

/// One thing that happened to one job: what, to which run, and when (by the store's clock:
/// Redis `TIME`, or the memory store's clock, virtual under `dq::testing`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct JobEvent {
    /// The job's topic.
    pub topic: Topic,
    /// The job's id.
    pub id: JobId,
    /// What happened.
    pub kind: EventKind,
    /// Which run (see [`EventKind`]).
    pub attempt: u32,
    /// When.
    pub at: SystemTime,
}

impl JobEvent {
    /// An event (for stores of your own).
    pub fn new(topic: Topic, id: JobId, kind: EventKind, attempt: u32, at: SystemTime) -> Self {
        JobEvent {
            topic,
            id,
            kind,
            attempt,
            at,
        }
    }
}

/// Where a reader stands in one shard's stream of a topic: the last event it read, by the id
/// of its entry in the stream (`<ms>-<seq>`, as Redis writes stream ids: dq's Redis store writes
/// `0-<n>`, the memory store the time and rank), the event's number (1, 2, ...: how a reader
/// knows it missed some, and where it stands inside an entry of several) and, on Redis, the
/// entry's time (how a reader knows the entry it stands on is still the one it read, after
/// Redis went back to an older state: [`EventItem::RolledBack`]). The default (`0-0`, number
/// 0) is before the first entry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EventPosition {
    /// The first part of the entry's stream id.
    pub ms: u64,
    /// The second part of the entry's stream id.
    pub seq: u64,
    /// The event's number in the stream, from 1.
    pub n: u64,
    /// When the entry was written, in microseconds since the Unix epoch by the store's clock
    /// (its `t`); 0 when not known (a cursor saved by a release before this field, or a store
    /// that does not check it).
    pub t_us: u64,
}

impl EventPosition {
    /// The position of the entry `<ms>-<seq>` numbered `n`, its time not known.
    pub fn new(ms: u64, seq: u64, n: u64) -> EventPosition {
        EventPosition {
            ms,
            seq,
            n,
            t_us: 0,
        }
    }

    /// The same position, the entry written at `t_us` (microseconds since the Unix epoch).
    pub fn written_at(self, t_us: u64) -> EventPosition {
        EventPosition { t_us, ..self }
    }

    /// The stream id, `<ms>-<seq>`.
    pub fn stream_id(&self) -> String {
        format!("{}-{}", self.ms, self.seq)
    }

    /// Reads a stream id, `<ms>-<seq>`.
    pub fn parse_stream_id(id: &str) -> Option<(u64, u64)> {
        let (ms, seq) = id.split_once('-')?;
        Some((ms.parse().ok()?, seq.parse().ok()?))
    }
}

/// `<ms>-<seq>:<n>`, then `@<t_us>` when the entry's time is known.
impl fmt::Display for EventPosition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}:{}", self.ms, self.seq, self.n)?;
        if self.t_us > 0 {
            write!(f, "@{}", self.t_us)?;
        }
        Ok(())
    }
}

impl FromStr for EventPosition {
    type Err = String;

    fn from_str(text: &str) -> std::result::Result<Self, String> {
        let bad = || format!("{text:?} is not a shard's position, <ms>-<seq>:<n>[@<time>]");
        let (id, rest) = text.split_once(':').ok_or_else(bad)?;
        let (ms, seq) = EventPosition::parse_stream_id(id).ok_or_else(bad)?;
        let (n, t_us) = match rest.split_once('@') {
            Some((n, t)) => (n, t.parse().map_err(|_| bad())?),
            None => (rest, 0),
        };
        Ok(EventPosition::new(ms, seq, n.parse().map_err(|_| bad())?).written_at(t_us))
    }
}

/// Where a reader of a topic's events stands: one [`EventPosition`] per shard, or `now` (the
/// events that come after the read opens) or `start` (every event still kept).
///
/// It prints as a string to save (`now`, `start`, or the shards' positions joined by commas,
/// each `<stream id>:<number of its last event>@<time of its entry, us>`: on Redis
/// `0-57:57@1764063000123456,0-12:12@1764063000200000` for two shards, whose stream ids are the
/// event numbers; the memory store's ids are times, as `1764063000123-0:57`, without `@`) and
/// parses back from one, so that a consumer that restarts resumes where it stopped. (A
/// position without `@`, as cursors were saved before, reads the same; only the check for a
/// rollback, [`EventItem::RolledBack`], needs the time.)
///
/// ```
/// use dq_core::events::EventCursor;
///
/// let saved = "0-57:57@1764063000123456,0-12:12@1764063000200000".to_string();
/// let cursor: EventCursor = saved.parse().unwrap();
/// assert_eq!(cursor.to_string(), saved);
/// assert_eq!("start".parse::<EventCursor>().unwrap(), EventCursor::start());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct EventCursor(At);

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum At {
    Now,
    Start,
    Shards(Vec<EventPosition>),
}

impl EventCursor {
    /// The events that come after the read opens (what [`Client::events`](crate::Client::events)
    /// reads).
    pub fn now() -> EventCursor {
        EventCursor(At::Now)
    }

    /// Every event still kept, the oldest first.
    pub fn start() -> EventCursor {
        EventCursor(At::Start)
    }

    /// The cursor at these positions, one per shard, shard 0 first (for stores of your own).
    pub fn at(positions: Vec<EventPosition>) -> EventCursor {
        EventCursor(At::Shards(positions))
    }

    /// True for [`EventCursor::now`], which a store resolves to where each stream ends.
    pub fn is_now(&self) -> bool {
        matches!(self.0, At::Now)
    }

    /// Where the cursor stands in `shard`'s stream: before the first entry for `start` (and
    /// `now`, which a store resolves first).
    pub fn position(&self, shard: u16) -> EventPosition {
        match &self.0 {
            At::Shards(positions) => positions
                .get(usize::from(shard))
                .copied()
                .unwrap_or_default(),
            At::Now | At::Start => EventPosition::default(),
        }
    }

    /// Refuses a cursor of another number of shards than the namespace's `shards` (saved for
    /// another namespace, or before the shards were changed).
    pub fn check(&self, shards: u16) -> Result<()> {
        match &self.0 {
            At::Shards(positions) if positions.len() != usize::from(shards) => {
                Err(Error::InvalidCursor {
                    cursor: self.to_string(),
                    reason: format!(
                        "it holds {} shards' positions and the namespace has {shards} shards: read from `start` or `now` instead",
                        positions.len()
                    ),
                })
            }
            _ => Ok(()),
        }
    }
}

impl fmt::Display for EventCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            At::Now => f.write_str("now"),
            At::Start => f.write_str("start"),
            At::Shards(positions) => {
                for (i, p) in positions.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{p}")?;
                }
                Ok(())
            }
        }
    }
}

impl FromStr for EventCursor {
    type Err = Error;

    fn from_str(text: &str) -> Result<EventCursor> {
        match text.trim() {
            "now" => Ok(EventCursor::now()),
            "start" => Ok(EventCursor::start()),
            positions => positions
                .split(',')
                .map(|p| p.trim().parse::<EventPosition>())
                .collect::<std::result::Result<Vec<_>, String>>()
                .map(EventCursor::at)
                .map_err(|reason| Error::InvalidCursor {
                    cursor: text.to_owned(),
                    reason,
                }),
        }
    }
}

/// What an [`EventStream`](crate::EventStream) hands out.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum EventItem {
    /// An event, and the cursor that resumes right after it (save it to resume there).
    Event {
        /// What happened.
        event: JobEvent,
        /// Where the reader stands now.
        cursor: EventCursor,
    },
    /// The reader fell behind the cap in `shard`: `missed` events were trimmed from its stream
    /// before they were read (it was stopped too long, or read slower than the jobs moved).
    /// The events after them follow.
    Lagged {
        /// The shard whose events were missed.
        shard: u16,
        /// How many.
        missed: u64,
    },
    /// The store went back to an older state in `shard`: the last `forgotten` events the
    /// reader had read are no longer in its stream, and the numbers go on from before them.
    /// On Redis, it restarted from a snapshot older than those events (`save` persistence,
    /// or an `appendfsync` that had not written them), or a replica that had not received them
    /// took over. The changes those events told of were lost with them; the events written
    /// since follow, none missed.
    RolledBack {
        /// The shard that went back.
        shard: u16,
        /// How many events read before are gone.
        forgotten: u64,
    },
}

/// One entry of a shard's event stream as a store's feed hands it over ([`EventFeed`]): where
/// it is, and its event (`None` for one this version cannot read, which the store logs; the
/// cursor moves past it all the same).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventEntry {
    /// The shard it is in.
    pub shard: u16,
    /// Its place in the shard's stream.
    pub position: EventPosition,
    /// The event.
    pub event: Option<JobEvent>,
}

/// A live read of one topic's job events from a cursor on, in every shard: what
/// [`Producer::event_feed`](crate::store::Producer::event_feed) opens.
///
/// It reads on connections of its own (on Redis, one `XREAD BLOCK` over every shard's stream
/// of the topic on one server, one per shard on a cluster: a blocking read never holds the
/// shared connection), each read bounded in time; after a failure it reconnects with backoff,
/// says so in the log, and goes on from the last entry it read. Dropping it stops it.
#[async_trait]
pub trait EventFeed: Send + std::fmt::Debug {
    /// Where the feed started: the cursor it was opened with, [`EventCursor::now`] resolved
    /// to where each shard's stream ended then.
    fn start(&self) -> &EventCursor;

    /// The next entries, in order within each shard (at most a thousand a shard at once);
    /// waits until there are some. An error is one the feed could not get past by itself (a
    /// command Redis' ACL denies, say): it is reported, and the next call tries again.
    async fn next(&mut self) -> Result<Vec<EventEntry>>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_prints_and_parses_back_whatever_it_holds() {
        for text in [
            "now",
            "start",
            "0-0:0",
            "1764063000123-4:57,1764063000200-0:12",
            "0-57:57@1764063000123456,0-12:12",
        ] {
            let cursor: EventCursor = text.parse().unwrap();
            assert_eq!(cursor.to_string(), text);
        }
        let cursor: EventCursor = "5-1:3,7-0:9".parse().unwrap();
        assert_eq!(cursor.position(1), EventPosition::new(7, 0, 9));
        assert_eq!(
            cursor.position(2),
            EventPosition::default(),
            "no such shard"
        );
    }

    #[test]
    fn a_cursor_that_is_not_one_or_of_another_shard_count_is_refused() {
        for bad in [
            "",
            "yesterday",
            "5-1",
            "5:3",
            "5-x:3",
            "5-1:3,",
            "5-1:3@",
            "5-1:3@x",
        ] {
            let e = bad.parse::<EventCursor>().unwrap_err();
            assert_eq!(e.kind(), crate::ErrorKind::InvalidInput, "{bad:?}: {e}");
        }
        let two: EventCursor = "5-1:3,7-0:9".parse().unwrap();
        assert!(two.check(2).is_ok());
        let e = two.check(16).unwrap_err();
        assert!(e.to_string().contains("16 shards"), "{e}");
        assert!(EventCursor::now().check(16).is_ok());
        assert!(EventCursor::start().check(1).is_ok());
    }
}
