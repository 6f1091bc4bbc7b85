//! The in-memory store: the embedded default when no Redis URL is configured, and the test
//! backend whose clock a test can move. Same semantics as the Redis store (the behaviour suite
//! in `tests/store_behaviour.rs` runs against both); not durable: jobs live as long as the
//! process. One shard; a timer-ordered set for delayed jobs and leases, a queue per topic, so
//! no operation scans, and memory is bounded by what is pending (plus the per-topic tallies,
//! the ids reserved by `unique_for`, and the records of succeeded jobs that a topic with a
//! retention keeps, trimmed at each ack); the history of events is kept only where a test asks.
//! A wait for a job's end is told by the step that ends it (ack, dead letter, cancel); on a
//! manual clock its timeout counts that clock, so a test that moves the clock past a wait's
//! deadline ends it at once.
//!
//! A topic with job events on keeps its latest events (exactly its cap: Redis keeps the cap and
//! a little more), appended by the same step that makes each change, numbered and placed as
//! Redis numbers stream entries, stamped by the store's clock; readers are woken when events
//! are added.
//!
//! `state` holds the jobs and every change to them as plain synchronous code; the role traits
//! are implemented over it in `produce`, `lease` (the writes about a running job in `running`)
//! and `admin`, the waits for ready jobs and announcements in `waiters`, the waits for a job's
//! end in `ends`, the job events in `events`.

mod admin;
mod ends;
mod events;
mod groups;
mod lease;
mod produce;
mod ready;
mod running;
mod schedules;
mod state;
mod waiters;
mod workflows;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use tokio::sync::{broadcast, watch};

use self::state::State;
use super::{Sharded, Wake};
use crate::error::Result;
use crate::job::to_us;
use crate::name::{JobId, Topic};

/// What happened to a job in a [`MemoryStore`], in order (kept for tests to inspect, by the
/// stores that keep a history: [`MemoryStore::with_history`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// A job was created or replaced.
    Pushed {
        /// Its topic.
        topic: Topic,
        /// Its id.
        id: JobId,
    },
    /// A job finished and was acked.
    Acked {
        /// Its topic.
        topic: Topic,
        /// Its id.
        id: JobId,
        /// The run that finished it.
        attempt: u32,
    },
    /// A failed job was scheduled to run again.
    Retried {
        /// Its topic.
        topic: Topic,
        /// Its id.
        id: JobId,
        /// The run that failed.
        attempt: u32,
        /// Why.
        error: String,
    },
    /// A job its handler postponed (`Outcome::RetryAfter`) was scheduled to run again; the
    /// run did not count as an attempt.
    Postponed {
        /// Its topic.
        topic: Topic,
        /// Its id.
        id: JobId,
    },
    /// A job was dead-lettered.
    DeadLettered {
        /// Its topic.
        topic: Topic,
        /// Its id.
        id: JobId,
        /// Why.
        error: String,
    },
}

/// Where the store's time comes from.
#[derive(Clone, Debug)]
enum Clock {
    System,
    /// Microseconds since the epoch, moved only by [`MemoryStore::advance`].
    Manual(Arc<AtomicU64>),
}

/// Jobs in this process's memory. Cheap to clone; clones share the jobs.
#[derive(Clone)]
pub struct MemoryStore {
    state: Arc<Mutex<State>>,
    clock: Clock,
    ready_signal: Arc<Mutex<HashMap<Topic, watch::Sender<u64>>>>,
    wake: broadcast::Sender<Wake>,
    /// What [`Registry::namespace_epoch`](super::Registry::namespace_epoch) answers: when the
    /// store was made (us), for as long as it lives.
    epoch: String,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore")
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore::new()
    }
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section below leaves the state consistent before anything can panic.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl MemoryStore {
    /// A store on the system clock, as the embedded runtime uses: it keeps no
    /// [`history`](MemoryStore::history), so its memory is bounded by the jobs pending,
    /// however many have run.
    pub fn new() -> MemoryStore {
        MemoryStore::with_clock(Clock::System)
    }

    /// A store whose clock starts at `start` and moves only with [`MemoryStore::advance`]:
    /// tests move time instead of sleeping. It keeps the [`history`](MemoryStore::history)
    /// of what happened to its jobs (`dq::testing` reads it). Due times, leases, the age of
    /// done records and the timeout of a wait for a job's end
    /// ([`Producer::wait_finished`](super::Producer::wait_finished)) follow this clock: moving
    /// it to a wait's deadline or past it ends the wait (a wait is also never held longer than
    /// its timeout of real time, so a test that does not move the clock is not stuck).
    pub fn with_manual_clock(start: SystemTime) -> MemoryStore {
        MemoryStore::with_clock(Clock::Manual(Arc::new(AtomicU64::new(to_us(start)))))
            .with_history()
    }

    /// The same store, keeping the [`history`](MemoryStore::history) of every event from
    /// now on: one entry per push, ack, retry, postponement and dead letter, never trimmed,
    /// so for tests, not for a long-running process.
    pub fn with_history(self) -> MemoryStore {
        lock(&self.state).keep_history = true;
        self
    }

    fn with_clock(clock: Clock) -> MemoryStore {
        MemoryStore {
            state: Arc::default(),
            epoch: to_us(SystemTime::now()).to_string(),
            clock,
            ready_signal: Arc::default(),
            wake: broadcast::channel(1024).0,
        }
    }

    /// The store's clock, in microseconds since the epoch.
    pub fn now_us(&self) -> u64 {
        match &self.clock {
            Clock::System => to_us(SystemTime::now()),
            Clock::Manual(us) => us.load(Ordering::SeqCst),
        }
    }

    /// Moves a manual clock forward by `by`, ends the waits for a job's end whose timeout ran
    /// out by then (they answer `TimedOut`), and wakes the movers (no effect on the system
    /// clock, which moves by itself).
    pub fn advance(&self, by: Duration) {
        if let Clock::Manual(us) = &self.clock {
            us.fetch_add(
                u64::try_from(by.as_micros()).unwrap_or(u64::MAX),
                Ordering::SeqCst,
            );
            self.clock_moved();
        }
    }

    /// Moves a manual clock forward to `us` microseconds since the epoch (never backwards),
    /// ends the waits whose timeout ran out by then, and wakes the movers.
    pub fn advance_to(&self, us: u64) {
        if let Clock::Manual(now) = &self.clock {
            now.fetch_max(us, Ordering::SeqCst);
            self.clock_moved();
        }
    }

    /// After a move of the manual clock: the waits that ran out end first, under the lock, so
    /// that no job the move made due can end them with its value; then the movers look.
    fn clock_moved(&self) {
        let now = self.now_us();
        let released: Vec<Topic> = {
            let mut s = lock(&self.state);
            s.expire_waits(now);
            s.throttles
                .keys()
                .filter(|t| s.ready.get(*t).is_some_and(|q| !q.is_empty()))
                .filter(|t| s.held_back(t, now).is_none())
                .cloned()
                .collect()
        };
        let _ = self.wake.send(Wake::Due {
            shard: 0,
            due_us: 0,
        });
        // Consumers waiting out a rate limit or hold that the move ended look again now, not
        // after their own (real-time) wait.
        for topic in released {
            let _ = self.wake.send(Wake::Resumed(topic));
        }
    }

    /// Whether the clock is manual (moved by [`MemoryStore::advance`]).
    fn is_manual(&self) -> bool {
        matches!(self.clock, Clock::Manual(_))
    }

    /// The due time of the earliest delayed job, in microseconds since the epoch.
    pub fn next_due_us(&self) -> Option<u64> {
        lock(&self.state).earliest()
    }

    /// When the earliest rate limit or hold that keeps ready jobs back lets the next start,
    /// in microseconds since the epoch (`None`: none keeps jobs back).
    pub fn next_release_us(&self) -> Option<u64> {
        let now = self.now_us();
        let s = lock(&self.state);
        s.ready
            .iter()
            .filter(|(_, q)| !q.is_empty())
            .filter_map(|(t, _)| s.held_back(t, now))
            .map(|wait| now.saturating_add(u64::try_from(wait.as_micros()).unwrap_or(u64::MAX)))
            .min()
    }

    /// Everything that happened to jobs so far, in order; empty unless the store keeps its
    /// history ([`with_manual_clock`](MemoryStore::with_manual_clock),
    /// [`with_history`](MemoryStore::with_history)).
    pub fn history(&self) -> Vec<Event> {
        lock(&self.state).history.clone()
    }

    /// True when no job is ready, running or due: what is left waits for its time.
    pub fn is_idle(&self) -> bool {
        self.is_idle_for(|_| true)
    }

    /// True when nothing is left that a runtime handling the topics `handled` accepts could
    /// run now: no job running or due, and no job ready in a handled topic that is not paused
    /// or held back by its rate limit. Jobs ready in other topics (handled elsewhere) or in
    /// paused ones wait for someone else; those held back, for their time
    /// ([`next_release_us`](MemoryStore::next_release_us)).
    pub fn is_idle_for(&self, handled: impl Fn(&Topic) -> bool) -> bool {
        let now = self.now_us();
        let s = lock(&self.state);
        s.inflight.is_empty()
            && s.ready.iter().all(|(t, q)| {
                q.is_empty() || !handled(t) || s.paused.contains(t) || s.held_back(t, now).is_some()
            })
            && s.delayed.first().is_none_or(|(due, _)| *due > now)
    }

    /// Tells the consumers of the topics whose groups (or workflows) let a job in (see
    /// `State::woken`), the movers of a workflow step released with a delay, and the workers
    /// of the running jobs a workflow's cancel asked to stop.
    fn flush_woken(&self) {
        let (woken, due, cancels) = {
            let mut s = lock(&self.state);
            (
                std::mem::take(&mut s.woken),
                s.workflow_due.take(),
                std::mem::take(&mut s.workflow_cancels),
            )
        };
        for topic in &woken {
            self.signal_ready(topic);
        }
        if let Some(due_us) = due {
            let _ = self.wake.send(Wake::Due { shard: 0, due_us });
        }
        for (topic, id) in cancels {
            let _ = self.wake.send(Wake::Cancel { topic, id });
        }
    }

    fn signal_ready(&self, topic: &Topic) {
        let mut signals = lock(&self.ready_signal);
        let tx = signals
            .entry(topic.clone())
            .or_insert_with(|| watch::channel(0).0);
        tx.send_modify(|v| *v = v.wrapping_add(1));
    }

    fn ready_receiver(&self, topic: &Topic) -> watch::Receiver<u64> {
        lock(&self.ready_signal)
            .entry(topic.clone())
            .or_insert_with(|| watch::channel(0).0)
            .subscribe()
    }
}

#[async_trait]
impl Sharded for MemoryStore {
    fn shards(&self) -> u16 {
        1
    }

    async fn time_us(&self) -> Result<u64> {
        Ok(self.now_us())
    }
}
