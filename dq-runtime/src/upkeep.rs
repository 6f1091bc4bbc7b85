//! The runtime's background chores: batched acks, the lease heartbeat and the reclaimer.
//!
//! Leases are short and renewed while handlers run (one call per heartbeat for all of this
//! process's running jobs), so a slow but alive worker keeps its jobs and a dead one (kill -9)
//! gives them up within about one lease; the reclaimer then puts them back to ready. Every job
//! therefore runs at least once.
//!
//! A lease names the shard the store leased its job from (`LeaseRef::shard`): acks and
//! renewals are grouped by it, one lane per shard, without hashing the job again.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use dq_core::store::{Leases, Registry};
use dq_core::{metric, Acked, LeaseRef, Succeeded, Topic, WorkerInfo, MAX_BATCH};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::health::Health;
use crate::shared::Shared;

/// Longest wait, at shutdown, to remove this worker's record.
pub(crate) const UNREGISTER_LIMIT: Duration = Duration::from_secs(2);

/// How soon after a lease runs out the reclaimer looks (the store's clock and this process'
/// timers are not in step to the microsecond).
const RECLAIM_AFTER_EXPIRY: Duration = Duration::from_millis(2);

/// The shortest wait between two looks of a shard's reclaimer when leases run out one after
/// another (each look takes back those that ran out, and says when the next one does).
const RECLAIM_AT_MOST_EVERY: Duration = Duration::from_millis(5);

/// A reclaimer's regular period is half the lease, and no shorter than this.
const SHORTEST_RECLAIM_PERIOD: Duration = Duration::from_millis(50);

/// How long one shard's renewal (or the worker record) may take: under a third of the lease,
/// so that a stalled master cannot hold up the next heartbeat.
pub(crate) fn renewal_limit(lease: Duration) -> Duration {
    lease / 4
}

/// Acks finished jobs in batches, each with its handler's value (`Leases::ack_succeeded`), one
/// lane per shard: whatever has queued up for a shard while its previous call was in flight
/// goes in the next one, so acks cost one round trip per batch under load and add no delay
/// when idle. A shard that fails or stalls holds up only its own
/// acks, and only its own batch is tried again (a batch acked on one shard is never sent
/// twice, which would report its jobs as "ack refused"). When `done` is cancelled (after the
/// job tasks finished) it acks what is left and ends. The acks of `retained` topics (whose
/// listeners have a retention) are counted as results kept.
pub(crate) async fn acker(
    shared: Arc<Shared>,
    leases: Arc<dyn Leases>,
    mut rx: mpsc::UnboundedReceiver<Succeeded>,
    retained: Arc<HashSet<Topic>>,
    done: CancellationToken,
) {
    let mut lanes: HashMap<u16, mpsc::UnboundedSender<Succeeded>> = HashMap::new();
    // Dropping the set (the acker aborted at the end of shutdown) aborts the lanes too.
    let mut lane_tasks = JoinSet::new();
    loop {
        let next = tokio::select! {
            biased;
            l = rx.recv() => l,
            _ = done.cancelled(), if !rx.is_closed() => {
                rx.close();
                continue;
            }
        };
        let Some(succeeded) = next else { break };
        let shard = succeeded.lease.shard;
        let lane = lanes.entry(shard).or_insert_with(|| {
            let (tx, lane_rx) = mpsc::unbounded_channel();
            let acks_of_shard = AckLane {
                shared: shared.clone(),
                leases: leases.clone(),
                retained: retained.clone(),
                shard,
            };
            lane_tasks.spawn(acks_of_shard.run(lane_rx));
            tx
        });
        let _ = lane.send(succeeded);
    }
    drop(lanes);
    while lane_tasks.join_next().await.is_some() {}
}

/// One shard's lane of the acker.
struct AckLane {
    shared: Arc<Shared>,
    leases: Arc<dyn Leases>,
    /// The topics whose listeners have a retention: their acks keep records.
    retained: Arc<HashSet<Topic>>,
    shard: u16,
}

impl AckLane {
    /// Acks the shard's finished jobs until its sender is gone and its queue is empty.
    async fn run(self, mut rx: mpsc::UnboundedReceiver<Succeeded>) {
        let mut health = Health::new(format!("acker of shard {}", self.shard));
        let mut batch = Vec::with_capacity(MAX_BATCH);
        while let Some(first) = rx.recv().await {
            batch.push(first);
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(l) => batch.push(l),
                    Err(_) => break,
                }
            }
            let mut sent = false;
            loop {
                let ack = self.leases.ack_succeeded(&batch);
                tokio::pin!(ack);
                let reply = if sent {
                    ack.await
                } else {
                    sent = true;
                    match poll_once(ack.as_mut()).await {
                        Some(reply) => reply,
                        None => {
                            // The ack is on its way (its request is queued on the connection).
                            let topics: HashSet<&Topic> =
                                batch.iter().map(|s| &s.lease.topic).collect();
                            self.shared.running.acks_sent(topics);
                            ack.await
                        }
                    }
                };
                match reply {
                    Ok(acked) => {
                        health.ok();
                        acked_batch(&self.shared, &batch, &acked);
                        count_kept(&batch, &acked, &self.retained);
                        break;
                    }
                    Err(e) => {
                        // Leases keep being renewed while we wait: the acks are still valid
                        // later. Shutdown bounds this wait; unacked jobs then run again after
                        // their lease.
                        tokio::time::sleep(health.failed(&e)).await;
                    }
                }
            }
            batch.clear();
        }
    }
}

/// Polls `f` once: its output if it is ready, else `None` (it has started: a store call has
/// queued its request).
async fn poll_once<F: std::future::Future + Unpin>(f: F) -> Option<F::Output> {
    let mut f = f;
    std::future::poll_fn(|cx| {
        std::task::Poll::Ready(match std::pin::Pin::new(&mut f).poll(cx) {
            std::task::Poll::Ready(out) => Some(out),
            std::task::Poll::Pending => None,
        })
    })
    .await
}

/// The batch is acked: its jobs stop running here. A refused ack is news only when the
/// heartbeat did not already say the lease was lost.
fn acked_batch(shared: &Shared, batch: &[Succeeded], acked: &Acked) {
    let mut told = HashSet::new();
    for Succeeded { lease, .. } in batch {
        if shared.running.stop(lease) {
            told.insert(lease);
        }
    }
    for stale in acked.stale.iter().filter(|l| !told.contains(l)) {
        tracing::warn!(topic = %stale.topic, id = %stale.id, "ack refused: the lease was taken over (it expired while the job ran), so the job may run again");
    }
}

/// Counts the jobs of the batch that were acked (not refused) with their record kept: those of
/// the `retained` topics.
fn count_kept(batch: &[Succeeded], acked: &Acked, retained: &HashSet<Topic>) {
    if retained.is_empty() {
        return;
    }
    let refused: HashSet<&LeaseRef> = acked.stale.iter().collect();
    let mut kept: HashMap<&Topic, usize> = HashMap::new();
    for Succeeded { lease, .. } in batch {
        if retained.contains(&lease.topic) && !refused.contains(lease) {
            *kept.entry(&lease.topic).or_default() += 1;
        }
    }
    for (topic, n) in kept {
        crate::metrics::count_n(metric::RESULTS_KEPT, topic.as_str(), n);
    }
}

/// Renews the leases of this process's running jobs every third of the lease, and records the
/// worker as alive (for `dq workers`); removes that record when it ends. Beside each renewal it
/// reads which of the jobs a cancel asked to stop (`Leases::cancel_requests`), in case the
/// store's announcement of the cancel reached nobody.
///
/// Each shard is renewed on its own, at once and with a time limit under a third of the lease,
/// and the worker record is written beside the renewals rather than before them: a master that
/// stalls (a long command, a failover in progress) delays only the renewal of its own jobs, so
/// jobs on healthy masters never lose their lease and run a second time elsewhere.
pub(crate) struct Heartbeat {
    pub(crate) shared: Arc<Shared>,
    pub(crate) leases: Arc<dyn Leases>,
    /// Where this worker's record is kept.
    pub(crate) registry: Arc<dyn Registry>,
    pub(crate) me: WorkerInfo,
}

/// What one call of a beat did: `None` for the worker record (its failures go to the debug
/// log only), else a shard's renewal: the shard, how many jobs, and the leases found lost.
type Renewal = Option<(u16, usize, dq_core::Result<Vec<LeaseRef>>)>;

impl Heartbeat {
    pub(crate) async fn run(mut self, done: CancellationToken) {
        let mut health: HashMap<u16, Health> = HashMap::new();
        let mut tick = tokio::time::interval(self.shared.config.lease / 3);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = done.cancelled() => return self.unregister().await,
                _ = tick.tick() => {}
            }
            let mut calls = self.beat();
            while let Some(joined) = calls.join_next().await {
                let Ok(Some((shard, jobs, renewed))) = joined else {
                    continue;
                };
                let health = health
                    .entry(shard)
                    .or_insert_with(|| Health::new(format!("lease renewal on shard {shard}")));
                self.renewed(shard, jobs, renewed, health);
            }
        }
    }

    /// Bounded: with Redis unreachable the record expires by itself in a minute.
    async fn unregister(&self) {
        let unregister = self.registry.unregister_worker(&self.me.id);
        let _ = tokio::time::timeout(UNREGISTER_LIMIT, unregister).await;
    }

    /// Starts this beat's calls, each in a task of its own: the worker record, and the renewal
    /// of each shard's leases.
    fn beat(&mut self) -> JoinSet<Renewal> {
        let lease = self.shared.config.lease;
        let limit = renewal_limit(lease);
        let running = self.shared.running.to_renew();
        self.me.running = running.len();
        self.me.last_seen_ms = dq_core::to_us(SystemTime::now()) / 1000;
        let mut calls = JoinSet::new();
        let (registry, record) = (self.registry.clone(), self.me.clone());
        calls.spawn(async move {
            record_worker(registry.as_ref(), &record, limit).await;
            None
        });
        for (shard, leases) in by_shard(running) {
            let store = self.leases.clone();
            let shared = self.shared.clone();
            calls.spawn(async move {
                let renewed = renew(store.as_ref(), &leases, lease, limit).await;
                if renewed.is_ok() {
                    // On its own: a slow read must not hold up the next beat's renewals.
                    tokio::spawn(cancel_requests(shared, store, leases.clone(), limit));
                }
                Some((shard, leases.len(), renewed))
            });
        }
        calls
    }

    /// What a shard's renewal says: lost leases are told to their handlers, once each.
    fn renewed(
        &self,
        shard: u16,
        jobs: usize,
        renewed: dq_core::Result<Vec<LeaseRef>>,
        health: &mut Health,
    ) {
        match renewed {
            Ok(lost) => {
                health.ok();
                // A job whose handler returned may have been acked since the snapshot: only a
                // running handler's lost lease is news (a refused ack is logged by the acker).
                // Said once per job: it is renewed no more, and its handler is told.
                for l in lost.iter().filter(|l| self.shared.running.lost(l)) {
                    crate::metrics::count(dq_core::metric::LEASES_LOST, l.topic.as_str());
                    tracing::warn!(topic = %l.topic, id = %l.id, "lease lost while the job runs (it expired before a renewal got through, or Redis lost it in a restart or failover): another worker may run it too, and this run's outcome will be refused; the handler sees it in JobContext::lease_lost");
                }
            }
            Err(e) => {
                tracing::debug!(
                    shard,
                    jobs,
                    "lease renewal failed on this shard; the next heartbeat tries again"
                );
                health.failed(&e);
            }
        }
    }
}

/// The leases to renew, by the shard the store leased each from.
fn by_shard(running: Vec<LeaseRef>) -> HashMap<u16, Vec<LeaseRef>> {
    let mut by_shard: HashMap<u16, Vec<LeaseRef>> = HashMap::new();
    for l in running {
        by_shard.entry(l.shard).or_default().push(l);
    }
    by_shard
}

async fn record_worker(registry: &dyn Registry, record: &WorkerInfo, limit: Duration) {
    match tokio::time::timeout(limit, registry.register_worker(record)).await {
        Ok(Err(e)) => tracing::debug!(error = %e, "could not record this worker's heartbeat"),
        Err(_) => tracing::debug!(?limit, "recording this worker's heartbeat timed out"),
        Ok(Ok(())) => {}
    }
}

/// Renews one shard's `leases` for another `lease`, within `limit`; returns those lost.
async fn renew(
    store: &dyn Leases,
    leases: &[LeaseRef],
    lease: Duration,
    limit: Duration,
) -> dq_core::Result<Vec<LeaseRef>> {
    match tokio::time::timeout(limit, store.extend(leases, lease)).await {
        Ok(renewed) => renewed,
        Err(_) => Err(dq_core::Error::Timeout {
            op: "renew leases",
            after: limit,
        }),
    }
}

/// Tells the handlers of those of `leases` whose job a cancel asked to stop, within `limit`: the
/// way a cancel reaches its worker when the store's announcement ([`dq_core::Wake::Cancel`])
/// was lost.
async fn cancel_requests(
    shared: Arc<Shared>,
    store: Arc<dyn Leases>,
    leases: Vec<LeaseRef>,
    limit: Duration,
) {
    match tokio::time::timeout(limit, store.cancel_requests(&leases)).await {
        Ok(Ok(asked)) => {
            for l in asked
                .iter()
                .filter(|l| shared.running.cancel(&l.topic, &l.id))
            {
                tracing::info!(topic = %l.topic, id = %l.id, "a cancel asked this running job to stop (found at the lease renewal); its handler sees it in JobContext::cancelled");
            }
        }
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "could not read the cancel requests of running jobs; the next heartbeat tries again")
        }
        Err(_) => tracing::debug!(
            ?limit,
            "reading the cancel requests of running jobs timed out; the next heartbeat tries again"
        ),
    }
}

/// Puts back jobs whose lease expired, in one shard: it looks at start, then when the shard's
/// next lease runs out (as the store says, and 2 ms more) and at least every half lease, so
/// that a job whose worker died runs again, and the slot it held comes back, within its lease
/// of the death (the last renewal came before it) and a few ms, not up to half a lease later.
/// That holds for leases this process knew of at its last look: a lease shorter than half of
/// this process's own, taken elsewhere after that look, waits for the next one.
pub(crate) async fn reclaimer(shared: Arc<Shared>, leases: Arc<dyn Leases>, shard: u16) {
    let every = (shared.config.lease / 2).max(SHORTEST_RECLAIM_PERIOD);
    let mut health = Health::new(format!("reclaimer of shard {shard}"));
    // A process that starts looks at once: a worker that died may have left jobs behind.
    let mut wait = Duration::ZERO;
    loop {
        tokio::select! {
            _ = shared.stop.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
        wait = every;
        loop {
            match leases.reclaim(shard, MAX_BATCH).await {
                Ok(r) => {
                    health.ok();
                    if let Some(next) = r.next_expiry {
                        wait = wait.min((next + RECLAIM_AFTER_EXPIRY).max(RECLAIM_AT_MOST_EVERY));
                    }
                    if r.requeued + r.dead + r.cancelled > 0 {
                        tracing::warn!(
                            shard,
                            requeued = r.requeued,
                            dead_lettered = r.dead,
                            cancelled = r.cancelled,
                            "reclaimed jobs whose lease expired (a worker died or stalled)"
                        );
                    }
                    if r.requeued + r.dead + r.cancelled < MAX_BATCH {
                        break;
                    }
                }
                Err(e) => {
                    health.failed(&e);
                    break;
                }
            }
        }
    }
}
