//! The mover: one per shard per process. It moves due jobs from the delayed set to their ready
//! lists in bounded batches, then sleeps on a tokio timer until the earliest due time it knows
//! (the seed's `nextTime`). A push that makes a new earliest job, from this process or any
//! other, is announced on the shard's `wake` channel and shortens the sleep (Redisson's trick),
//! so a job pushed on host A fires on time while only host B runs. The safety tick bounds the
//! damage of a lost announcement. Redis' blocking timeouts are never used as clocks: they are
//! checked only every 1000/hz ms, which is where BullMQ's lateness floor comes from.
//!
//! Due times are Redis `TIME` microseconds; the mover maps them to local instants through the
//! Redis clock reading of its last call, so skew between hosts does not matter.

use std::sync::Arc;
use std::time::Duration;

use dq_core::store::Leases;
use dq_core::Wake;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::health::Health;
use crate::shared::Shared;

/// Jobs moved by the first promotion after a sleep.
const FIRST_BATCH: usize = 128;

pub(crate) struct Mover {
    pub(crate) shared: Arc<Shared>,
    /// The store's lease role, whose `promote` makes due jobs ready.
    pub(crate) leases: Arc<dyn Leases>,
    pub(crate) shard: u16,
    pub(crate) wake: mpsc::Receiver<u64>,
}

impl Mover {
    pub(crate) async fn run(mut self) {
        let full = self.shared.config.promote_batch;
        // After a sleep the first call moves a small batch, so the first due jobs reach the
        // workers while the rest are still being moved; then full batches while more are due.
        let first = full.min(FIRST_BATCH);
        let mut batch = first;
        let tick = self.shared.config.safety_tick;
        let mut health = Health::new(format!("mover of shard {}", self.shard));
        loop {
            let sent = Instant::now();
            let promoted = tokio::select! {
                _ = self.shared.stop.cancelled() => return,
                r = self.leases.promote(self.shard, batch) => r,
            };
            let p = match promoted {
                Ok(p) => {
                    health.ok();
                    p
                }
                Err(e) => {
                    let delay = health.failed(&e);
                    tokio::select! {
                        _ = self.shared.stop.cancelled() => return,
                        _ = tokio::time::sleep(delay) => continue,
                    }
                }
            };
            if p.moved > 0 {
                tracing::trace!(shard = self.shard, moved = p.moved, "promoted due jobs");
            }
            if p.moved >= batch {
                batch = full;
                continue; // more are due right now
            }
            batch = first;
            // Local instant of a Redis due time, through this call's clock reading.
            let local = |due_us: u64| sent + Duration::from_micros(due_us.saturating_sub(p.now_us));
            let mut deadline = sent + tick;
            if let Some(due) = p.next_due_us {
                deadline = deadline.min(local(due));
            }
            loop {
                tokio::select! {
                    _ = self.shared.stop.cancelled() => return,
                    _ = sleep_until_precisely(deadline) => break,
                    announced = self.wake.recv() => match announced {
                        Some(due) => {
                            let at = local(due);
                            if at <= Instant::now() {
                                break;
                            }
                            deadline = deadline.min(at);
                        }
                        None => return,
                    },
                }
            }
        }
    }
}

/// Sleeps until `deadline` to within about 0.1 ms. tokio's timer has a 1 ms resolution and
/// rounds up, which alone would make a job up to 1 ms late; the last 2 ms are slept on a
/// blocking-pool thread with the OS's high-resolution sleep instead (never a busy loop).
/// If the select around this is woken first, the short OS sleep ends on its own.
async fn sleep_until_precisely(deadline: Instant) {
    const FINE: Duration = Duration::from_millis(2);
    if deadline.saturating_duration_since(Instant::now()) > FINE + Duration::from_millis(1) {
        tokio::time::sleep_until(deadline - FINE).await;
    }
    let left = deadline.saturating_duration_since(Instant::now());
    if !left.is_zero() {
        let _ = tokio::task::spawn_blocking(move || std::thread::sleep(left)).await;
    }
}

/// Routes wake announcements from the store to the shards' movers (resumed topics to the
/// consumers waiting out a pause, cancels of running jobs to their handlers); resubscribes with
/// backoff when the subscription breaks. After every subscription, the first one included, it
/// wakes every mover: a push announced before the subscription was in place (right after
/// start-up, or while it was broken) reached nobody. A cancel announced meanwhile is found by
/// the heartbeat.
pub(crate) async fn route_wakeups(
    shared: Arc<Shared>,
    leases: Arc<dyn Leases>,
    movers: Vec<mpsc::Sender<u64>>,
) {
    let mut health = Health::new("wake subscription");
    loop {
        let listener = tokio::select! {
            _ = shared.stop.cancelled() => return,
            l = leases.wake_listener() => l,
        };
        let mut listener = match listener {
            Ok(l) => {
                health.ok();
                for m in &movers {
                    let _ = m.try_send(0);
                }
                l
            }
            Err(e) => {
                let delay = health.failed(&e);
                tokio::select! {
                    _ = shared.stop.cancelled() => return,
                    _ = tokio::time::sleep(delay) => continue,
                }
            }
        };
        loop {
            let next = tokio::select! {
                _ = shared.stop.cancelled() => return,
                n = listener.next() => n,
            };
            match next {
                Ok(Wake::Due { shard, due_us }) => {
                    if let Some(m) = movers.get(usize::from(shard)) {
                        // A full queue already holds an earlier wake-up: dropping is safe.
                        let _ = m.try_send(due_us);
                    }
                }
                Ok(Wake::Resumed(topic)) => {
                    tracing::debug!(%topic, "topic resumed: paused consumers look again");
                    shared.resumed.send_modify(|n| *n = n.wrapping_add(1));
                }
                Ok(Wake::Cancel { topic, id }) => {
                    // Most processes do not run the job: only the one that does says so.
                    if shared.running.cancel(&topic, &id) {
                        tracing::info!(%topic, %id, "a cancel asked this running job to stop; its handler sees it in JobContext::cancelled");
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    health.failed(&e);
                    break;
                }
            }
        }
    }
}
