//! Consumer loops: one per topic per shard. Each owns a semaphore of `concurrency` permits
//! (the seed's Semaphore) and takes permits *before* fetching, so it never holds work it has
//! no room for: jobs waiting in a local queue would be lost in a crash. One fetch leases up to
//! as many jobs as there are free permits. When no job is ready the loop waits for the store to
//! say one is (on Redis, the `ready` channel the scripts publish to, through one subscription
//! per process) or, with `poll_interval` set, sleeps (for proxies without pub/sub or blocking
//! commands).

use std::ops::ControlFlow;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dq_core::store::{Fetcher, Leases};
use dq_core::{metric, Fetched, LeaseRef, ReadyWaiter, Topic, MAX_BATCH};
use tokio::sync::futures::Notified;
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

use crate::health::Health;
use crate::job::Runner;
use crate::listener::Listener;
use crate::shared::Shared;

/// How long one blocking wait lasts before it is renewed (it only bounds how long a silently
/// dead connection goes unnoticed; pushes wake it at once).
const WAIT_SLICE: Duration = Duration::from_secs(5);

/// How often a paused topic is checked for being resumed when no resume announcement came.
const PAUSED_RECHECK: Duration = Duration::from_secs(1);

/// How often a consumer whose topic is at its global concurrency looks again when none of this
/// process's jobs ended meanwhile (the ends in other processes are not announced).
const ROOM_RECHECK: Duration = Duration::from_millis(10);

/// Most lost fetches asked for at once (a fetch that failed is looked for until its jobs'
/// leases would have run out anyway: two leases, and the time a request may sit in a
/// socket buffer).
const MAX_LOST: usize = 64;

/// Longest wait, once shutdown began, for a fetch reply already on its way (and for handing its
/// jobs back). Past it the jobs stay leased until their lease expires, then run elsewhere.
const HAND_BACK_LIMIT: Duration = Duration::from_secs(2);

pub(crate) struct ConsumerLoop {
    pub(crate) shared: Arc<Shared>,
    /// The store's lease role: fetches, waits for ready jobs, and the jobs' fates.
    pub(crate) leases: Arc<dyn Leases>,
    pub(crate) listener: Arc<Listener>,
    pub(crate) topic: Topic,
    pub(crate) shard: u16,
    pub(crate) permits: Arc<Semaphore>,
    /// Names this loop's fetches in the store (this process and topic; the store's key is per
    /// shard), so that a later fetch takes back the jobs of one whose reply was lost.
    pub(crate) consumer: String,
    /// Fetches in a row that found the topic at its global concurrency: the wait for the ends
    /// in other processes grows with it.
    pub(crate) full_in_a_row: AtomicU32,
}

/// A consumer's name in the store: this process's worker id and topic, and 64 random bits, so
/// that no two consumer loops share one (two runtimes in one process, containers that share a
/// hostname and pid).
pub(crate) fn consumer_name(worker: &str, topic: &Topic) -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write(worker.as_bytes());
    h.write(topic.as_str().as_bytes());
    format!("{worker}:{topic}:{:016x}", h.finish())
}

/// This loop's fetches by number, and those whose reply did not arrive, each looked for until
/// its jobs' leases would have run out anyway.
struct Fetches {
    nonce: u64,
    /// When the current fetch was sent.
    sent: Instant,
    lost: Vec<(u64, Instant)>,
    look_for: Duration,
    /// After a failed fetch, one permit until a fetch works: the topic's permits are shared by
    /// its consumers on every shard, and a fetch from a stalled master holds what it took until
    /// the client's reply limit (10 s) ends it.
    failing: bool,
}

impl Fetches {
    fn new(lease: Duration) -> Fetches {
        Fetches {
            nonce: 0,
            sent: Instant::now(),
            lost: Vec::new(),
            look_for: lease * 2 + Duration::from_secs(20),
            failing: false,
        }
    }

    /// The next fetch: a new number, and the lost fetches still worth asking for.
    fn next(&mut self, consumer: &str) -> Fetcher {
        self.nonce += 1;
        self.sent = Instant::now();
        let now = self.sent;
        self.lost.retain(|(_, until)| *until > now);
        Fetcher::new(
            consumer,
            self.nonce,
            self.lost.iter().map(|(n, _)| *n).collect(),
        )
    }

    fn worked(&mut self) {
        self.failing = false;
    }

    /// The fetch failed, but Redis may have run it (and leased jobs to nobody): later fetches
    /// look for it.
    fn failed(&mut self) {
        self.failing = true;
        self.lost.push((self.nonce, self.sent + self.look_for));
        if self.lost.len() > MAX_LOST {
            self.lost.remove(0);
        }
    }
}

impl ConsumerLoop {
    pub(crate) async fn run(self) {
        let mut waiter: Box<dyn ReadyWaiter> = match self.shared.config.poll_interval {
            Some(every) => Box::new(Poll(every)),
            None => self.leases.ready_waiter(self.shard, &self.topic),
        };
        let mut health = Health::new(format!("consumer of {} shard {}", self.topic, self.shard));
        let mut resumed = self.shared.resumed.subscribe();
        let mut fetches = Fetches::new(self.shared.config.lease);
        let ends = self.shared.running.ends_of(&self.topic);
        loop {
            let Some(permits) = self.take_permits(fetches.failing).await else {
                return;
            };
            // A resume announced from now on wakes the wait below, even one announced before
            // the wait begins.
            resumed.borrow_and_update();
            // Likewise a lease of the topic in this process that ends from now on wakes a wait
            // for room under the topic's global concurrency.
            let ended = ends.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            let fetcher = fetches.next(&self.consumer);
            let Some(fetched) = self.fetch(permits.len(), &fetcher).await else {
                return;
            };
            let next = match fetched {
                Ok(fetched) => {
                    health.ok();
                    fetches.worked();
                    let waiting = Waiting {
                        ready: &mut *waiter,
                        resumed: &mut resumed,
                        health: &mut health,
                        ended: ended.as_mut(),
                    };
                    self.on_fetched(fetched, permits, waiting).await
                }
                Err(e) => {
                    drop(permits);
                    fetches.failed();
                    self.back_off(health.failed(&e)).await
                }
            };
            if next.is_break() {
                return;
            }
        }
    }

    /// Permits for the next fetch: waits for one, then takes those free (up to a batch), or
    /// only the one while fetches fail. `None` at shutdown.
    async fn take_permits(&self, failing: bool) -> Option<Vec<OwnedSemaphorePermit>> {
        let first = tokio::select! {
            _ = self.shared.stop.cancelled() => return None,
            p = self.permits.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => return None,
            },
        };
        let mut permits = vec![first];
        while !failing && permits.len() < MAX_BATCH {
            match self.permits.clone().try_acquire_owned() {
                Ok(p) => permits.push(p),
                Err(_) => break,
            }
        }
        Some(permits)
    }

    /// Leases up to `max` jobs. `None` when shutdown began meanwhile: whatever the fetch
    /// leased has been handed back.
    async fn fetch(&self, max: usize, fetcher: &Fetcher) -> Option<dq_core::Result<Fetched>> {
        let (stop, lease) = (&self.shared.stop, self.shared.config.lease);
        let fetch = self
            .leases
            .fetch_for(self.shard, &self.topic, max, lease, fetcher);
        tokio::pin!(fetch);
        let fetched = tokio::select! {
            biased;
            f = &mut fetch => f,
            _ = stop.cancelled() => {
                // Redis may have leased jobs to this call already: dropping the reply would
                // leave them leased to nobody until the lease expires (and count a run that
                // never happened). Let it arrive and hand the jobs back.
                let late = tokio::time::timeout(HAND_BACK_LIMIT, fetch).await;
                hand_back(self.leases.as_ref(), late).await;
                return None;
            }
        };
        if stop.is_cancelled() {
            hand_back(self.leases.as_ref(), Ok(fetched)).await;
            return None;
        }
        Some(fetched)
    }

    /// After a fetch that worked: waits out a pause, or for jobs when none came, or starts the
    /// jobs that did.
    async fn on_fetched(
        &self,
        fetched: Fetched,
        permits: Vec<OwnedSemaphorePermit>,
        waiting: Waiting<'_, '_>,
    ) -> ControlFlow<()> {
        self.say_taken_back(&fetched);
        if fetched.paused {
            drop(permits);
            return self.wait_out_pause(waiting.resumed).await;
        }
        if fetched.jobs.is_empty() {
            drop(permits);
            // Only jobs that could not be read (dead-lettered by the store): fetch again now.
            if !fetched.malformed.is_empty() {
                return ControlFlow::Continue(());
            }
            if fetched.at_capacity {
                return self.wait_for_room(waiting.ended).await;
            }
            if let Some(wait) = fetched.throttled {
                return self.wait_throttled(wait, waiting.resumed).await;
            }
            return self.wait_for_jobs(waiting.ready, waiting.health).await;
        }
        let (throttled, at_capacity) = (fetched.throttled, fetched.at_capacity);
        if !at_capacity {
            self.full_in_a_row.store(0, Ordering::Relaxed);
        }
        self.start_jobs(fetched, permits);
        match throttled {
            _ if at_capacity => self.wait_for_room(waiting.ended).await,
            Some(wait) => self.wait_throttled(wait, waiting.resumed).await,
            None => ControlFlow::Continue(()),
        }
    }

    /// As many of the topic's jobs run, in all processes, as its global concurrency allows,
    /// and more are ready: waits until a lease of the topic in this process ends (one of its
    /// jobs' fate was written), or for the ends in other processes, which are not announced:
    /// 10 ms after the first full fetch, twice as long after each next one in a row, up to
    /// 160 ms.
    async fn wait_for_room(&self, ended: Pin<&mut Notified<'_>>) -> ControlFlow<()> {
        crate::metrics::count(metric::FETCHES_AT_CAPACITY, self.topic.as_str());
        let in_a_row = self.full_in_a_row.fetch_add(1, Ordering::Relaxed).min(4);
        let recheck = ROOM_RECHECK * (1 << in_a_row);
        tokio::select! {
            _ = self.shared.stop.cancelled() => ControlFlow::Break(()),
            _ = ended => ControlFlow::Continue(()),
            _ = tokio::time::sleep(recheck) => ControlFlow::Continue(()),
        }
    }

    /// The topic's rate limit (or a hold) let out fewer jobs than there were permits while
    /// more are ready: waits until the next may start (the ready list has jobs, so a wait on
    /// it would return at once). At least half the 10 ms whose jobs the burst holds
    /// (`Rate::BURST_WINDOW`: one fetch then takes what came, rather than one fetch per start,
    /// and comes before the burst is full, which would waste the starts past it) and at most a
    /// second at a time, so that a rate changed or lifted meanwhile is seen; a
    /// resume announced meanwhile (the in-memory store's test clock moved past the hold) ends
    /// it too.
    async fn wait_throttled(
        &self,
        wait: Duration,
        resumed: &mut watch::Receiver<u64>,
    ) -> ControlFlow<()> {
        crate::metrics::count(metric::FETCHES_THROTTLED, self.topic.as_str());
        tokio::select! {
            _ = self.shared.stop.cancelled() => ControlFlow::Break(()),
            _ = resumed.changed() => ControlFlow::Continue(()),
            _ = tokio::time::sleep(wait.clamp(dq_core::Rate::BURST_WINDOW / 2, PAUSED_RECHECK)) => ControlFlow::Continue(()),
        }
    }

    fn say_taken_back(&self, fetched: &Fetched) {
        if fetched.held_back > 0 {
            let topic = self.topic.as_str();
            crate::metrics::count_n(metric::JOBS_HELD_BY_GROUP_RATE, topic, fetched.held_back);
        }
        if fetched.taken_back > 0 {
            let topic = self.topic.as_str();
            crate::metrics::count_n(metric::JOBS_TAKEN_BACK, topic, fetched.taken_back);
            tracing::info!(topic = %self.topic, shard = self.shard, jobs = fetched.taken_back, "took back jobs leased by a fetch whose reply was lost; they run now, no run counted");
        }
    }

    /// Paused by an operator: looks again when a resume is announced (the ready list may be
    /// full, so a blocking wait on it would return at once), or after a second should the
    /// announcement be lost.
    async fn wait_out_pause(&self, resumed: &mut watch::Receiver<u64>) -> ControlFlow<()> {
        tokio::select! {
            _ = self.shared.stop.cancelled() => ControlFlow::Break(()),
            _ = resumed.changed() => ControlFlow::Continue(()),
            _ = tokio::time::sleep(PAUSED_RECHECK) => ControlFlow::Continue(()),
        }
    }

    async fn wait_for_jobs(
        &self,
        waiter: &mut dyn ReadyWaiter,
        health: &mut Health,
    ) -> ControlFlow<()> {
        let waited = tokio::select! {
            _ = self.shared.stop.cancelled() => return ControlFlow::Break(()),
            w = waiter.wait(WAIT_SLICE) => w.map(|_| ()),
        };
        match waited {
            Ok(()) => ControlFlow::Continue(()),
            Err(e) => self.back_off(health.failed(&e)).await,
        }
    }

    /// Sleeps `delay` after a failure, unless shutdown begins first.
    async fn back_off(&self, delay: Duration) -> ControlFlow<()> {
        tokio::select! {
            _ = self.shared.stop.cancelled() => ControlFlow::Break(()),
            _ = tokio::time::sleep(delay) => ControlFlow::Continue(()),
        }
    }

    /// Each job in a task of its own, holding one of the permits.
    fn start_jobs(&self, fetched: Fetched, permits: Vec<OwnedSemaphorePermit>) {
        let now = fetched.now_us;
        for (job, permit) in fetched.jobs.into_iter().zip(permits) {
            let runner = Runner {
                shared: self.shared.clone(),
                leases: self.leases.clone(),
                listener: self.listener.clone(),
            };
            self.shared.jobs.spawn(runner.run(job, permit, now));
        }
    }
}

/// What a loop waits on when a fetch brought nothing to run, or was held back.
struct Waiting<'a, 'n> {
    ready: &'a mut dyn ReadyWaiter,
    resumed: &'a mut watch::Receiver<u64>,
    health: &'a mut Health,
    /// The next end of a lease of this process (registered before the fetch).
    ended: Pin<&'a mut Notified<'n>>,
}

/// Returns the jobs of a fetch that completed after shutdown began to the front of their ready
/// list at once, without counting a run.
async fn hand_back(
    leases: &dyn Leases,
    fetched: Result<dq_core::Result<Fetched>, tokio::time::error::Elapsed>,
) {
    let leased: Vec<LeaseRef> = match fetched {
        Ok(Ok(f)) => f.jobs.into_iter().map(|j| j.lease).collect(),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "shutdown: a fetch under way as it began failed; any jobs it leased run again when their lease expires");
            return;
        }
        Err(_) => {
            tracing::warn!(limit = ?HAND_BACK_LIMIT, "shutdown: a fetch reply did not arrive in time; any jobs it leased run again when their lease expires");
            return;
        }
    };
    if leased.is_empty() {
        return;
    }
    // Release pushes each job to the front in turn: the last one given goes first, so give
    // them in reverse to keep the fetch's order.
    let leased: Vec<LeaseRef> = leased.into_iter().rev().collect();
    match tokio::time::timeout(HAND_BACK_LIMIT, leases.release(&leased)).await {
        Ok(Ok(n)) => tracing::debug!(released = n, "shutdown: handed back jobs fetched as it began"),
        Ok(Err(e)) => tracing::warn!(error = %e, jobs = leased.len(), "shutdown: could not hand back jobs fetched as it began; they run again when their lease expires"),
        Err(_) => tracing::warn!(jobs = leased.len(), "shutdown: handing back jobs fetched as it began timed out; they run again when their lease expires"),
    }
}

/// The wait of a consumer in polling mode (`poll_interval`): a sleep, with no connection of its
/// own and no subscription.
#[derive(Debug)]
struct Poll(Duration);

#[async_trait::async_trait]
impl ReadyWaiter for Poll {
    async fn wait(&mut self, _: Duration) -> dq_core::Result<bool> {
        tokio::time::sleep(self.0).await;
        Ok(true)
    }
}
