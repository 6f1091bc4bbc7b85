//! The in-memory store: the embedded default when no Redis URL is configured, and the test
//! backend whose clock a test can move. Same semantics as the Redis store (the behaviour suite
//! in `tests/store_behaviour.rs` runs against both); not durable: jobs live as long as the
//! process. One shard; a timer-ordered set for delayed jobs and leases, a queue per topic, so
//! no operation scans, and memory is bounded by what is pending.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use tokio::sync::{broadcast, watch};

use super::{Admin, Leases, Producer, ReadyWaiter, Registry, Sharded, Wake, WakeListener};
use crate::envelope::Envelope;
use crate::error::Result;
use crate::job::{
    from_us, to_us, Acked, ChangeOutcome, Fetched, JobInfo, JobState, LeaseRef, LeasedJob, NewJob,
    OnConflict, Page, Promoted, PushOutcome, Reclaimed, Schedule, TopicCounts, TopicStats,
    WorkerInfo,
};
use crate::name::{JobId, Topic};

type Member = (Topic, JobId);

/// What happened to a job in a [`MemoryStore`], in order (kept for tests to inspect).
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

#[derive(Default)]
struct State {
    jobs: HashMap<Member, Envelope>,
    delayed: BTreeSet<(u64, Member)>,
    ready: HashMap<Topic, VecDeque<JobId>>,
    inflight: BTreeSet<(u64, Member)>,
    /// Running jobs: lease deadline and token.
    leases: HashMap<Member, (u64, u64)>,
    /// The last lease token given.
    last_token: u64,
    dead: HashMap<Topic, BTreeSet<(u64, JobId)>>,
    died_at: HashMap<Member, u64>,
    delayed_count: HashMap<Topic, u64>,
    running_count: HashMap<Topic, u64>,
    topics: BTreeSet<Topic>,
    paused: BTreeSet<Topic>,
    /// The most runs each topic's listeners allow (the reclaimer's limit).
    attempt_limits: HashMap<Topic, u32>,
    workers: HashMap<String, WorkerInfo>,
    history: Vec<Event>,
}

/// Jobs in this process's memory. Cheap to clone; clones share the jobs.
#[derive(Clone)]
pub struct MemoryStore {
    state: Arc<Mutex<State>>,
    clock: Clock,
    ready_signal: Arc<Mutex<HashMap<Topic, watch::Sender<u64>>>>,
    wake: broadcast::Sender<Wake>,
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

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section below leaves the state consistent before anything can panic.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl MemoryStore {
    /// A store on the system clock.
    pub fn new() -> MemoryStore {
        MemoryStore::with_clock(Clock::System)
    }

    /// A store whose clock starts at `start` and moves only with [`MemoryStore::advance`]:
    /// tests move time instead of sleeping.
    pub fn with_manual_clock(start: SystemTime) -> MemoryStore {
        MemoryStore::with_clock(Clock::Manual(Arc::new(AtomicU64::new(to_us(start)))))
    }

    fn with_clock(clock: Clock) -> MemoryStore {
        MemoryStore {
            state: Arc::default(),
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

    /// Moves a manual clock forward by `by` and wakes the movers (no effect on the system
    /// clock, which moves by itself).
    pub fn advance(&self, by: Duration) {
        if let Clock::Manual(us) = &self.clock {
            us.fetch_add(
                u64::try_from(by.as_micros()).unwrap_or(u64::MAX),
                Ordering::SeqCst,
            );
            let _ = self.wake.send(Wake::Due {
                shard: 0,
                due_us: 0,
            });
        }
    }

    /// Moves a manual clock forward to `us` microseconds since the epoch (never backwards) and
    /// wakes the movers.
    pub fn advance_to(&self, us: u64) {
        if let Clock::Manual(now) = &self.clock {
            now.fetch_max(us, Ordering::SeqCst);
            let _ = self.wake.send(Wake::Due {
                shard: 0,
                due_us: 0,
            });
        }
    }

    /// The due time of the earliest delayed job, in microseconds since the epoch.
    pub fn next_due_us(&self) -> Option<u64> {
        lock(&self.state).earliest()
    }

    /// Everything that happened to jobs so far, in order.
    pub fn history(&self) -> Vec<Event> {
        lock(&self.state).history.clone()
    }

    /// True when no job is ready, running or due: what is left waits for its time.
    pub fn is_idle(&self) -> bool {
        self.is_idle_for(|_| true)
    }

    /// True when nothing is left that a runtime handling the topics `handled` accepts could
    /// run now: no job running or due, and no job ready in a handled topic that is not paused.
    /// Jobs ready in other topics (handled elsewhere) or in paused ones wait for someone else.
    pub fn is_idle_for(&self, handled: impl Fn(&Topic) -> bool) -> bool {
        let now = self.now_us();
        let s = lock(&self.state);
        s.inflight.is_empty()
            && s.ready
                .iter()
                .all(|(t, q)| q.is_empty() || !handled(t) || s.paused.contains(t))
            && s.delayed.first().is_none_or(|(due, _)| *due > now)
    }

    /// A failed run to retry (with its `error`), or a postponed one (`None`: the run does not
    /// count, the last error stays).
    fn retry_job(&self, lease: &LeaseRef, delay: Duration, error: Option<&str>) -> Result<bool> {
        crate::job::check_retry_delay(lease, delay)?;
        let now = self.now_us();
        let (ready, announce) = {
            let mut s = lock(&self.state);
            let Some(m) = s.holds(lease) else {
                return Ok(false);
            };
            let before = s.earliest();
            s.end_lease(&m);
            let due = due_of(Schedule::After(delay), now);
            let mut attempt = 0;
            if let Some(e) = s.jobs.get_mut(&m) {
                e.due_us = due;
                match error {
                    // The attempt was counted at fetch.
                    Some(error) => e.last_error = Some(error.to_owned()),
                    None => e.attempt = e.attempt.saturating_sub(1),
                }
                attempt = e.attempt;
            }
            s.history.push(match error {
                Some(error) => Event::Retried {
                    topic: m.0.clone(),
                    id: m.1.clone(),
                    attempt,
                    error: error.to_owned(),
                },
                None => Event::Postponed {
                    topic: m.0.clone(),
                    id: m.1.clone(),
                },
            });
            let ready = s.place(m, due, now);
            (
                ready,
                s.earliest().filter(|a| before.is_none_or(|b| a < &b)),
            )
        };
        if ready {
            self.signal_ready(&lease.topic);
        }
        if let Some(due) = announce {
            let _ = self.wake.send(Wake::Due {
                shard: 0,
                due_us: due,
            });
        }
        Ok(true)
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

fn due_of(when: Schedule, now: u64) -> u64 {
    match when {
        Schedule::After(d) => now.saturating_add(u64::try_from(d.as_micros()).unwrap_or(u64::MAX)),
        Schedule::At(t) => to_us(t),
    }
}

impl State {
    fn earliest(&self) -> Option<u64> {
        self.delayed.first().map(|(due, _)| *due)
    }

    fn bump(map: &mut HashMap<Topic, u64>, topic: &Topic, up: bool) {
        let n = map.entry(topic.clone()).or_default();
        *n = if up { *n + 1 } else { n.saturating_sub(1) };
    }

    /// Puts a job where its due time says; returns true when it went to ready.
    fn place(&mut self, m: Member, due: u64, now: u64) -> bool {
        if due <= now {
            self.ready.entry(m.0.clone()).or_default().push_back(m.1);
            true
        } else {
            State::bump(&mut self.delayed_count, &m.0, true);
            self.delayed.insert((due, m));
            false
        }
    }

    /// Takes a not-started job out of delayed or ready.
    fn unplace(&mut self, m: &Member) {
        let due = self.jobs.get(m).map_or(0, |e| e.due_us);
        if self.delayed.remove(&(due, m.clone())) {
            State::bump(&mut self.delayed_count, &m.0, false);
        } else if let Some(q) = self.ready.get_mut(&m.0) {
            if let Some(pos) = q.iter().position(|id| *id == m.1) {
                q.remove(pos);
            }
        }
    }

    fn counts(&self, topic: &Topic) -> TopicCounts {
        TopicCounts {
            delayed: self.delayed_count.get(topic).copied().unwrap_or(0),
            ready: self.ready.get(topic).map_or(0, |q| q.len() as u64),
            running: self.running_count.get(topic).copied().unwrap_or(0),
            dead: self.dead.get(topic).map_or(0, |d| d.len() as u64),
        }
    }

    fn holds(&self, l: &LeaseRef) -> Option<Member> {
        let m = (l.topic.clone(), l.id.clone());
        let held = self.leases.get(&m).is_some_and(|&(_, t)| t == l.token);
        held.then_some(m)
    }

    fn end_lease(&mut self, m: &Member) {
        if let Some((deadline, _)) = self.leases.remove(m) {
            self.inflight.remove(&(deadline, m.clone()));
            State::bump(&mut self.running_count, &m.0, false);
        }
    }

    fn kill(&mut self, m: Member, error: String, now: u64) {
        if let Some(e) = self.jobs.get_mut(&m) {
            e.last_error = Some(error.clone());
        }
        self.dead
            .entry(m.0.clone())
            .or_default()
            .insert((now, m.1.clone()));
        self.died_at.insert(m.clone(), now);
        self.history.push(Event::DeadLettered {
            topic: m.0,
            id: m.1,
            error,
        });
    }

    fn info(&self, m: &Member) -> Option<JobInfo> {
        let env = self.jobs.get(m)?;
        let (state, score) = if self.delayed.contains(&(env.due_us, m.clone())) {
            (JobState::Delayed, None)
        } else if let Some((d, _)) = self.leases.get(m) {
            (JobState::Running, Some(*d))
        } else if let Some(d) = self.died_at.get(m) {
            (JobState::Dead, Some(*d))
        } else {
            (JobState::Ready, None)
        };
        Some(JobInfo::from_envelope(
            m.0.clone(),
            m.1.clone(),
            state,
            env.clone(),
            score,
        ))
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

#[async_trait]
impl Producer for MemoryStore {
    async fn push(&self, jobs: Vec<NewJob>, on_conflict: OnConflict) -> Result<Vec<PushOutcome>> {
        let now = self.now_us();
        let replace = on_conflict == OnConflict::Replace;
        let mut out = Vec::with_capacity(jobs.len());
        let mut ready_topics = BTreeSet::new();
        let announce = {
            let mut s = lock(&self.state);
            let before = s.earliest();
            for job in jobs {
                let m = (job.topic.clone(), job.id.clone());
                let mut outcome = PushOutcome::Created;
                if s.jobs.contains_key(&m) {
                    if let Some(died) = s.died_at.remove(&m) {
                        if let Some(d) = s.dead.get_mut(&m.0) {
                            d.remove(&(died, m.1.clone()));
                        }
                    } else if s.leases.contains_key(&m) {
                        outcome = if replace {
                            PushOutcome::Running
                        } else {
                            PushOutcome::AlreadyPending
                        };
                    } else if !replace {
                        outcome = PushOutcome::AlreadyPending;
                    } else {
                        outcome = PushOutcome::Replaced;
                        s.unplace(&m);
                    }
                }
                if matches!(outcome, PushOutcome::Created | PushOutcome::Replaced) {
                    let due = due_of(job.schedule, now);
                    s.jobs.insert(
                        m.clone(),
                        Envelope {
                            attempt: 0,
                            max_attempts: job.max_attempts,
                            created_us: now,
                            due_us: due,
                            last_error: None,
                            payload: job.payload,
                        },
                    );
                    s.topics.insert(m.0.clone());
                    s.history.push(Event::Pushed {
                        topic: m.0.clone(),
                        id: m.1.clone(),
                    });
                    if s.place(m.clone(), due, now) {
                        ready_topics.insert(m.0);
                    }
                }
                out.push(outcome);
            }
            let after = s.earliest();
            after.filter(|a| before.is_none_or(|b| a < &b))
        };
        for t in &ready_topics {
            self.signal_ready(t);
        }
        if let Some(due) = announce {
            let _ = self.wake.send(Wake::Due {
                shard: 0,
                due_us: due,
            });
        }
        Ok(out)
    }

    async fn cancel(&self, topic: &Topic, id: &JobId) -> Result<ChangeOutcome> {
        let mut s = lock(&self.state);
        let m = (topic.clone(), id.clone());
        if !s.jobs.contains_key(&m) {
            return Ok(ChangeOutcome::NotFound);
        }
        if s.leases.contains_key(&m) {
            return Ok(ChangeOutcome::Running);
        }
        if let Some(died) = s.died_at.remove(&m) {
            if let Some(d) = s.dead.get_mut(topic) {
                d.remove(&(died, id.clone()));
            }
        } else {
            s.unplace(&m);
        }
        s.jobs.remove(&m);
        Ok(ChangeOutcome::Done)
    }

    async fn reschedule(&self, topic: &Topic, id: &JobId, when: Schedule) -> Result<ChangeOutcome> {
        let now = self.now_us();
        let m = (topic.clone(), id.clone());
        let (went_ready, announce) = {
            let mut s = lock(&self.state);
            if !s.jobs.contains_key(&m) || s.died_at.contains_key(&m) {
                return Ok(ChangeOutcome::NotFound);
            }
            if s.leases.contains_key(&m) {
                return Ok(ChangeOutcome::Running);
            }
            let before = s.earliest();
            s.unplace(&m);
            let due = due_of(when, now);
            if let Some(e) = s.jobs.get_mut(&m) {
                e.due_us = due;
            }
            let ready = s.place(m.clone(), due, now);
            (
                ready,
                s.earliest().filter(|a| before.is_none_or(|b| a < &b)),
            )
        };
        if went_ready {
            self.signal_ready(topic);
        }
        if let Some(due) = announce {
            let _ = self.wake.send(Wake::Due {
                shard: 0,
                due_us: due,
            });
        }
        Ok(ChangeOutcome::Done)
    }

    async fn status(&self, topic: &Topic, id: &JobId) -> Result<Option<JobInfo>> {
        Ok(lock(&self.state).info(&(topic.clone(), id.clone())))
    }
}

#[async_trait]
impl Leases for MemoryStore {
    async fn promote(&self, _shard: u16, limit: usize) -> Result<Promoted> {
        let now = self.now_us();
        let mut moved: Vec<(Topic, usize)> = Vec::new();
        let (count, next) = {
            let mut s = lock(&self.state);
            let mut count = 0;
            while count < limit {
                let Some((due, _)) = s.delayed.first() else {
                    break;
                };
                if *due > now {
                    break;
                }
                let Some((_, m)) = s.delayed.pop_first() else {
                    break;
                };
                State::bump(&mut s.delayed_count, &m.0, false);
                match moved.iter_mut().find(|(t, _)| *t == m.0) {
                    Some((_, n)) => *n += 1,
                    None => moved.push((m.0.clone(), 1)),
                }
                s.ready.entry(m.0).or_default().push_back(m.1);
                count += 1;
            }
            (count, s.earliest())
        };
        for (t, _) in &moved {
            self.signal_ready(t);
        }
        Ok(Promoted {
            moved: count,
            topics: moved,
            next_due_us: next,
            now_us: now,
        })
    }

    async fn fetch(
        &self,
        _shard: u16,
        topic: &Topic,
        max: usize,
        lease: Duration,
    ) -> Result<Fetched> {
        let now = self.now_us();
        let deadline = now.saturating_add(u64::try_from(lease.as_micros()).unwrap_or(u64::MAX));
        let mut s = lock(&self.state);
        let mut out = Fetched {
            now_us: now,
            ..Fetched::default()
        };
        if s.paused.contains(topic) {
            out.paused = true;
            return Ok(out);
        }
        while out.jobs.len() < max {
            let Some(id) = s.ready.get_mut(topic).and_then(VecDeque::pop_front) else {
                break;
            };
            let m = (topic.clone(), id.clone());
            let Some(env) = s.jobs.get_mut(&m) else {
                continue;
            };
            env.attempt += 1;
            let envelope = env.clone();
            s.last_token += 1;
            let token = s.last_token;
            s.inflight.insert((deadline, m.clone()));
            s.leases.insert(m, (deadline, token));
            State::bump(&mut s.running_count, topic, true);
            out.jobs.push(LeasedJob {
                lease: LeaseRef {
                    topic: topic.clone(),
                    id,
                    token,
                },
                envelope,
            });
        }
        Ok(out)
    }

    async fn ack(&self, leases: &[LeaseRef]) -> Result<Acked> {
        let mut s = lock(&self.state);
        let mut out = Acked::default();
        for l in leases {
            match s.holds(l) {
                Some(m) => {
                    s.end_lease(&m);
                    let attempt = s.jobs.remove(&m).map_or(0, |e| e.attempt);
                    s.history.push(Event::Acked {
                        topic: m.0,
                        id: m.1,
                        attempt,
                    });
                    out.acked += 1;
                }
                None => out.stale.push(l.clone()),
            }
        }
        Ok(out)
    }

    async fn retry(&self, lease: &LeaseRef, delay: Duration, error: &str) -> Result<bool> {
        self.retry_job(lease, delay, Some(error))
    }

    async fn postpone(&self, lease: &LeaseRef, delay: Duration) -> Result<bool> {
        self.retry_job(lease, delay, None)
    }

    async fn dead_letter(&self, lease: &LeaseRef, error: &str) -> Result<bool> {
        let now = self.now_us();
        let mut s = lock(&self.state);
        let Some(m) = s.holds(lease) else {
            return Ok(false);
        };
        s.end_lease(&m);
        s.kill(m, error.to_owned(), now);
        Ok(true)
    }

    async fn release(&self, leases: &[LeaseRef]) -> Result<usize> {
        let mut topics = BTreeSet::new();
        let mut n = 0;
        {
            let mut s = lock(&self.state);
            for l in leases {
                let Some(m) = s.holds(l) else { continue };
                s.end_lease(&m);
                if let Some(e) = s.jobs.get_mut(&m) {
                    e.attempt = e.attempt.saturating_sub(1);
                }
                s.ready.entry(m.0.clone()).or_default().push_front(m.1);
                topics.insert(m.0);
                n += 1;
            }
        }
        for t in &topics {
            self.signal_ready(t);
        }
        Ok(n)
    }

    async fn extend(&self, leases: &[LeaseRef], lease: Duration) -> Result<Vec<LeaseRef>> {
        let deadline = self
            .now_us()
            .saturating_add(u64::try_from(lease.as_micros()).unwrap_or(u64::MAX));
        let mut s = lock(&self.state);
        let mut lost = Vec::new();
        for l in leases {
            match s.holds(l) {
                Some(m) => {
                    if let Some((old, _)) = s.leases.insert(m.clone(), (deadline, l.token)) {
                        s.inflight.remove(&(old, m.clone()));
                    }
                    s.inflight.insert((deadline, m));
                }
                None => lost.push(l.clone()),
            }
        }
        Ok(lost)
    }

    async fn reclaim(&self, _shard: u16, limit: usize) -> Result<Reclaimed> {
        let now = self.now_us();
        let mut out = Reclaimed::default();
        let mut topics = BTreeSet::new();
        {
            let mut s = lock(&self.state);
            let mut expired = Vec::new();
            while expired.len() < limit {
                match s.inflight.first() {
                    Some((deadline, _)) if *deadline <= now => {
                        if let Some(entry) = s.inflight.pop_first() {
                            expired.push(entry.1);
                        }
                    }
                    _ => break,
                }
            }
            // Backwards, so the job that expired first ends up first in line.
            for m in expired.into_iter().rev() {
                s.leases.remove(&m);
                State::bump(&mut s.running_count, &m.0, false);
                let limit = s.attempt_limits.get(&m.0).copied();
                let Some(e) = s.jobs.get_mut(&m) else {
                    continue;
                };
                let max = limit.unwrap_or(e.max_attempts);
                if e.attempt >= max {
                    let error = format!(
                        "lease expired on attempt {} of {max} (the worker died or stopped renewing its lease)",
                        e.attempt
                    );
                    s.kill(m, error, now);
                    out.dead += 1;
                } else {
                    e.last_error = Some(format!(
                        "lease expired on attempt {} (the worker died or stopped renewing its lease)",
                        e.attempt
                    ));
                    s.ready.entry(m.0.clone()).or_default().push_front(m.1);
                    topics.insert(m.0);
                    out.requeued += 1;
                }
            }
        }
        for t in &topics {
            self.signal_ready(t);
        }
        Ok(out)
    }

    async fn set_attempt_limit(&self, topic: &Topic, max_attempts: Option<u32>) -> Result<()> {
        let mut s = lock(&self.state);
        match max_attempts {
            Some(max) => s.attempt_limits.insert(topic.clone(), max.max(1)),
            None => s.attempt_limits.remove(topic),
        };
        Ok(())
    }

    fn ready_waiter(&self, _shard: u16, topic: &Topic) -> Box<dyn ReadyWaiter> {
        Box::new(MemoryReadyWaiter {
            store: self.clone(),
            topic: topic.clone(),
            rx: self.ready_receiver(topic),
        })
    }

    async fn wake_listener(&self) -> Result<Box<dyn WakeListener>> {
        Ok(Box::new(MemoryWakeListener {
            rx: self.wake.subscribe(),
        }))
    }
}

#[async_trait]
impl Admin for MemoryStore {
    async fn counts(&self, topic: &Topic) -> Result<TopicCounts> {
        Ok(lock(&self.state).counts(topic))
    }

    async fn stats(&self, topic: &Topic) -> Result<TopicStats> {
        let s = lock(&self.state);
        let oldest_ready_due = s
            .ready
            .get(topic)
            .and_then(VecDeque::front)
            .and_then(|id| s.jobs.get(&(topic.clone(), id.clone())))
            .map(|e| from_us(e.due_us));
        let next_due = s
            .delayed
            .iter()
            .take(1000)
            .find(|(_, m)| m.0 == *topic)
            .map(|(due, _)| from_us(*due));
        Ok(TopicStats {
            counts: s.counts(topic),
            oldest_ready_due,
            next_due,
            paused: s.paused.contains(topic),
        })
    }

    // The memory store's listings walk its structures (it is for development and tests).
    async fn list(
        &self,
        topic: &Topic,
        state: JobState,
        cursor: u64,
        limit: usize,
    ) -> Result<Page> {
        let s = lock(&self.state);
        let skip = usize::try_from(cursor).unwrap_or(usize::MAX);
        let limit = limit.clamp(1, super::MAX_BATCH);
        let members: Vec<Member> = match state {
            JobState::Ready => s
                .ready
                .get(topic)
                .map(|q| q.iter().map(|id| (topic.clone(), id.clone())).collect())
                .unwrap_or_default(),
            JobState::Delayed => s
                .delayed
                .iter()
                .filter(|(_, m)| m.0 == *topic)
                .map(|(_, m)| m.clone())
                .collect(),
            JobState::Running => s
                .inflight
                .iter()
                .filter(|(_, m)| m.0 == *topic)
                .map(|(_, m)| m.clone())
                .collect(),
            _ => {
                return Err(crate::Error::Config {
                    key: "state",
                    value: state.as_str().to_owned(),
                    reason: "list delayed, ready or running jobs here; dead ones with dead_jobs"
                        .into(),
                })
            }
        };
        let jobs: Vec<JobInfo> = members
            .iter()
            .skip(skip)
            .take(limit)
            .filter_map(|m| s.info(m))
            .collect();
        let next = (skip + jobs.len() < members.len()).then_some((skip + jobs.len()) as u64);
        Ok(Page { jobs, next })
    }

    async fn pause(&self, topic: &Topic) -> Result<()> {
        lock(&self.state).paused.insert(topic.clone());
        Ok(())
    }

    async fn resume(&self, topic: &Topic) -> Result<()> {
        lock(&self.state).paused.remove(topic);
        self.signal_ready(topic);
        let _ = self.wake.send(Wake::Resumed(topic.clone()));
        Ok(())
    }

    async fn topics(&self) -> Result<Vec<Topic>> {
        Ok(lock(&self.state).topics.iter().cloned().collect())
    }

    async fn dead_jobs(&self, topic: &Topic, cursor: u64, limit: usize) -> Result<Page> {
        let s = lock(&self.state);
        let limit = limit.clamp(1, super::MAX_BATCH);
        let Some(dead) = s.dead.get(topic) else {
            return Ok(Page::default());
        };
        let offset = usize::try_from(cursor).unwrap_or(usize::MAX);
        let jobs: Vec<JobInfo> = dead
            .iter()
            .rev()
            .skip(offset)
            .take(limit)
            .filter_map(|(_, id)| s.info(&(topic.clone(), id.clone())))
            .collect();
        let next = (offset.saturating_add(limit) < dead.len()).then(|| (offset + limit) as u64);
        Ok(Page { jobs, next })
    }

    async fn requeue_dead(
        &self,
        topic: &Topic,
        ids: &[JobId],
        max_attempts: u32,
        limit: usize,
        died_before_us: u64,
    ) -> Result<usize> {
        let now = self.now_us();
        let limit = limit.clamp(1, super::MAX_BATCH);
        let n = {
            let mut s = lock(&self.state);
            let chosen: Vec<JobId> = if ids.is_empty() {
                s.dead
                    .get(topic)
                    .map(|d| {
                        d.iter()
                            .take_while(|(died, _)| *died <= died_before_us)
                            .take(limit)
                            .map(|(_, id)| id.clone())
                            .collect()
                    })
                    .unwrap_or_default()
            } else {
                ids.iter().take(limit).cloned().collect()
            };
            let mut n = 0;
            for id in chosen {
                let m = (topic.clone(), id.clone());
                let Some(died) = s.died_at.remove(&m) else {
                    continue;
                };
                if let Some(d) = s.dead.get_mut(topic) {
                    d.remove(&(died, id.clone()));
                }
                if let Some(e) = s.jobs.get_mut(&m) {
                    e.attempt = 0;
                    e.max_attempts = max_attempts;
                    e.due_us = now;
                }
                s.ready.entry(topic.clone()).or_default().push_back(id);
                n += 1;
            }
            n
        };
        if n > 0 {
            self.signal_ready(topic);
        }
        Ok(n)
    }

    async fn purge_dead(&self, topic: &Topic, before: SystemTime, limit: usize) -> Result<usize> {
        let before = to_us(before);
        let mut s = lock(&self.state);
        let old: Vec<(u64, JobId)> = s
            .dead
            .get(topic)
            .map(|d| {
                d.iter()
                    .take_while(|(at, _)| *at < before)
                    .take(limit)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        for (at, id) in &old {
            let m = (topic.clone(), id.clone());
            if let Some(d) = s.dead.get_mut(topic) {
                d.remove(&(*at, id.clone()));
            }
            s.died_at.remove(&m);
            s.jobs.remove(&m);
        }
        Ok(old.len())
    }
}

#[async_trait]
impl Registry for MemoryStore {
    async fn register_worker(&self, worker: &WorkerInfo) -> Result<()> {
        let mut worker = worker.clone();
        worker.last_seen_ms = self.now_us() / 1000;
        lock(&self.state).workers.insert(worker.id.clone(), worker);
        Ok(())
    }

    async fn unregister_worker(&self, id: &str) -> Result<()> {
        lock(&self.state).workers.remove(id);
        Ok(())
    }

    async fn workers(&self) -> Result<Vec<WorkerInfo>> {
        let now_ms = self.now_us() / 1000;
        let mut s = lock(&self.state);
        s.workers
            .retain(|_, w| now_ms.saturating_sub(w.last_seen_ms) <= super::redis::WORKER_EXPIRY_MS);
        let mut all: Vec<WorkerInfo> = s.workers.values().cloned().collect();
        all.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(all)
    }
}

#[derive(Debug)]
struct MemoryReadyWaiter {
    store: MemoryStore,
    topic: Topic,
    rx: watch::Receiver<u64>,
}

#[async_trait]
impl ReadyWaiter for MemoryReadyWaiter {
    async fn wait(&mut self, timeout: Duration) -> Result<bool> {
        // Mark the current signal seen before looking, so a push in between still wakes us.
        self.rx.borrow_and_update();
        let has_jobs = lock(&self.store.state)
            .ready
            .get(&self.topic)
            .is_some_and(|q| !q.is_empty());
        if has_jobs {
            return Ok(true);
        }
        Ok(matches!(
            tokio::time::timeout(timeout, self.rx.changed()).await,
            Ok(Ok(()))
        ))
    }
}

#[derive(Debug)]
struct MemoryWakeListener {
    rx: broadcast::Receiver<Wake>,
}

#[async_trait]
impl WakeListener for MemoryWakeListener {
    async fn next(&mut self) -> Result<Wake> {
        loop {
            match self.rx.recv().await {
                Ok(wake) => return Ok(wake),
                // Missed announcements: wake now and let the mover look.
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    return Ok(Wake::Due {
                        shard: 0,
                        due_us: 0,
                    })
                }
                Err(broadcast::error::RecvError::Closed) => std::future::pending::<()>().await,
            }
        }
    }
}
