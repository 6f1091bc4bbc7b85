//! The runtime's background chores: batched acks, the lease heartbeat and the reclaimer.
//!
//! Leases are short and renewed while handlers run (one call per heartbeat for all of this
//! process's running jobs), so a slow but alive worker keeps its jobs and a dead one (kill -9)
//! gives them up within about one lease; the reclaimer then puts them back to ready. Every job
//! therefore runs at least once.

use std::sync::Arc;
use std::time::Duration;

use dq_core::{LeaseRef, MAX_BATCH};
use tokio::sync::mpsc;

use crate::health::Health;
use crate::shared::Shared;

/// Acks finished jobs in batches: whatever has queued up while the previous call was in
/// flight goes in the next one, so acks cost one round trip per batch under load and add no
/// delay when idle. When `done` is cancelled (after the job tasks finished) it acks what is
/// left and ends.
pub(crate) async fn acker(
    shared: Arc<Shared>,
    mut rx: mpsc::UnboundedReceiver<LeaseRef>,
    done: tokio_util::sync::CancellationToken,
) {
    let mut health = Health::new("acker");
    let mut batch = Vec::with_capacity(MAX_BATCH);
    loop {
        let first = tokio::select! {
            biased;
            l = rx.recv() => l,
            _ = done.cancelled(), if !rx.is_closed() => {
                rx.close();
                continue;
            }
        };
        let Some(first) = first else { return };
        batch.push(first);
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(l) => batch.push(l),
                Err(_) => break,
            }
        }
        loop {
            match shared.store.ack(&batch).await {
                Ok(acked) => {
                    health.ok();
                    for lease in &batch {
                        shared.stop_running(lease);
                    }
                    for stale in &acked.stale {
                        tracing::warn!(topic = %stale.topic, id = %stale.id, "ack refused: the lease was taken over (it expired while the job ran), so the job may run again");
                    }
                    break;
                }
                Err(e) => {
                    // Leases keep being renewed while we wait: the acks are still valid later.
                    // Shutdown bounds this wait; unacked jobs then run again after their lease.
                    tokio::time::sleep(health.failed(&e)).await;
                }
            }
        }
        batch.clear();
    }
}

/// Renews the leases of this process's running jobs every third of the lease, and records the
/// worker as alive (for `dq workers`); removes that record when it ends.
pub(crate) async fn heartbeat(
    shared: Arc<Shared>,
    done: tokio_util::sync::CancellationToken,
    mut me: dq_core::WorkerInfo,
) {
    let lease = shared.config.lease;
    let mut health = Health::new("lease heartbeat");
    let mut tick = tokio::time::interval(lease / 3);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = done.cancelled() => {
                let _ = shared.store.unregister_worker(&me.id).await;
                return;
            }
            _ = tick.tick() => {}
        }
        let running = shared.running();
        me.running = running.len();
        me.last_seen_ms = dq_core::to_us(std::time::SystemTime::now()) / 1000;
        if let Err(e) = shared.store.register_worker(&me).await {
            tracing::debug!(error = %e, "could not record this worker's heartbeat");
        }
        if running.is_empty() {
            continue;
        }
        match shared.store.extend(&running, lease).await {
            Ok(lost) => {
                health.ok();
                // A job whose handler returned may have been acked since the snapshot: only
                // a running handler's lost lease is news (a refused ack is logged by the acker).
                for l in lost.iter().filter(|l| shared.handler_running(l)) {
                    tracing::warn!(topic = %l.topic, id = %l.id, "lease lost while the job runs (it expired before renewal); another worker may run it too");
                }
            }
            Err(e) => {
                health.failed(&e);
            }
        }
    }
}

/// Puts back jobs whose lease expired, in one shard, every half lease.
pub(crate) async fn reclaimer(shared: Arc<Shared>, shard: u16) {
    let every = (shared.config.lease / 2).max(Duration::from_millis(50));
    let mut health = Health::new(format!("reclaimer of shard {shard}"));
    loop {
        tokio::select! {
            _ = shared.stop.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
        loop {
            match shared.store.reclaim(shard, MAX_BATCH).await {
                Ok(r) => {
                    health.ok();
                    if r.requeued + r.dead > 0 {
                        tracing::warn!(
                            shard,
                            requeued = r.requeued,
                            dead_lettered = r.dead,
                            "reclaimed jobs whose lease expired (a worker died or stalled)"
                        );
                    }
                    if r.requeued + r.dead < MAX_BATCH {
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
