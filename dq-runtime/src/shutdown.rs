//! Graceful shutdown: stop fetching, let running handlers finish within the grace period,
//! put the rest back to ready, flush the acks, run the hooks, and report what happened.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dq_core::store::Leases;
use dq_core::LeaseRef;

use crate::chores::Chores;
use crate::shared::Shared;
use crate::upkeep::{renewal_limit, UNREGISTER_LIMIT};

/// A hook run at shutdown, after the handlers stopped (`RuntimeBuilder::on_shutdown`).
pub(crate) type Hook = Box<dyn FnOnce() -> Pin<Box<dyn Future<Output = ()> + Send>> + Send>;

/// How long cancelled handlers get to stop at the end of the grace period: code that blocks
/// between two awaits only sees the cancellation at its next await.
const ABORT_LIMIT: Duration = Duration::from_secs(5);

/// How long shutdown waits for each of its last store calls: putting cancelled jobs back to
/// ready, then writing the queued acks (beside removing the worker's record).
const FLUSH_LIMIT: Duration = Duration::from_secs(5);

/// How long each shutdown hook may run.
pub const HOOK_DEADLINE: Duration = Duration::from_secs(5);

/// What a graceful shutdown did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShutdownReport {
    /// Handlers that were running when shutdown began and finished within the grace period.
    pub finished: usize,
    /// Handlers cancelled at the end of the grace period; their jobs went back to ready.
    pub released: usize,
    /// Jobs whose handler returned but whose outcome (ack, retry or dead letter) could not be
    /// written before shutdown ended, because Redis did not answer. Nothing is lost: they run
    /// again when their lease expires, so a handler that finished may run a second time.
    pub unacked: usize,
    /// Shutdown hooks that ran to completion.
    pub hooks_completed: usize,
    /// Shutdown hooks that overran their deadline.
    pub hooks_timed_out: usize,
    /// Shutdown hooks that panicked (the hooks after them still ran).
    pub hooks_failed: usize,
}

/// Shuts the runtime down when told to.
pub(crate) struct Supervisor {
    pub(crate) shared: Arc<Shared>,
    /// The store's lease role: the jobs of cancelled handlers go back to ready through it.
    pub(crate) leases: Arc<dyn Leases>,
    pub(crate) chores: Chores,
    pub(crate) hooks: Vec<(String, Hook)>,
}

impl Supervisor {
    /// Stop fetching and moving (blocking connections are dropped, not waited on), let running
    /// handlers finish within the grace period, cancel the rest and put their jobs back to
    /// ready, flush acks, run the hooks.
    pub(crate) async fn shut_down(self) -> ShutdownReport {
        let started = Instant::now();
        let Supervisor {
            shared,
            leases,
            chores,
            hooks,
        } = self;
        shared.stop.cancel();
        for chore in chores.loops {
            let _ = chore.await;
        }
        let running = shared.running.to_renew().len();
        tracing::info!(running, grace = ?shared.config.shutdown_grace, "shutting down: waiting for running handlers");
        wait_for_handlers(&shared).await;
        let interrupted = shared.running.take_interrupted();
        let released = put_back(leases.as_ref(), &interrupted).await;
        // The job tasks are done: the acker acks what is queued and ends, within a bound
        // whatever state Redis is in. The heartbeat goes on renewing the leases of the jobs
        // waiting for their ack meanwhile (an ack after its lease expired would be refused and
        // the job run again), then removes this worker's record.
        chores.acker.close(FLUSH_LIMIT).await;
        // The slots of a global concurrency kept for fetches that will not come go back now
        // (bounded: they come back anyway when their grant runs out).
        let _ = tokio::time::timeout(FLUSH_LIMIT, leases.give_back_kept()).await;
        let heartbeat_limit = renewal_limit(shared.config.lease) + UNREGISTER_LIMIT;
        chores.heartbeat.close(heartbeat_limit).await;
        let unacked = shared.running.unsettled();
        if unacked > 0 {
            tracing::error!(jobs = unacked, limit = ?FLUSH_LIMIT, "shutdown: the outcome of finished jobs could not be written (is Redis reachable?); they will run again after their leases expire");
        }
        let mut report = ShutdownReport {
            finished: running.saturating_sub(interrupted.len()),
            released,
            unacked,
            ..ShutdownReport::default()
        };
        run_hooks(hooks, &mut report).await;
        tracing::info!(
            finished = report.finished, released = report.released, unacked = report.unacked,
            hooks = report.hooks_completed, took = ?started.elapsed(),
            "dq runtime stopped"
        );
        report
    }
}

/// Lets the job tasks finish within the grace period, then cancels those still running and
/// waits (a bounded time) for them to stop.
async fn wait_for_handlers(shared: &Shared) {
    shared.jobs.close();
    let grace = shared.config.shutdown_grace;
    if tokio::time::timeout(grace, shared.jobs.wait())
        .await
        .is_ok()
    {
        return;
    }
    tracing::warn!("grace period over: cancelling the handlers still running");
    shared.abort.cancel();
    if tokio::time::timeout(ABORT_LIMIT, shared.jobs.wait())
        .await
        .is_err()
    {
        tracing::error!(limit = ?ABORT_LIMIT, "handlers still running after they were cancelled (they block the thread between awaits); their jobs stay leased and run again when the lease expires");
    }
}

/// Puts the jobs of cancelled handlers back to ready; returns how many.
async fn put_back(leases: &dyn Leases, interrupted: &[LeaseRef]) -> usize {
    if interrupted.is_empty() {
        return 0;
    }
    match tokio::time::timeout(FLUSH_LIMIT, leases.release(interrupted)).await {
        Ok(Ok(n)) => n,
        Ok(Err(e)) => {
            tracing::error!(error = %e, jobs = interrupted.len(), "could not put cancelled jobs back to ready; they will run again when their leases expire");
            0
        }
        Err(_) => {
            tracing::error!(limit = ?FLUSH_LIMIT, jobs = interrupted.len(), "putting cancelled jobs back to ready timed out; they will run again when their leases expire");
            0
        }
    }
}

/// Runs the hooks in order, each with [`HOOK_DEADLINE`], and counts how each ended.
async fn run_hooks(hooks: Vec<(String, Hook)>, report: &mut ShutdownReport) {
    for (name, hook) in hooks {
        // In a task of its own, so that a hook that panics is reported, not the end of
        // the shutdown (and of the report).
        let mut task = tokio::spawn(hook());
        match tokio::time::timeout(HOOK_DEADLINE, &mut task).await {
            Ok(Ok(())) => report.hooks_completed += 1,
            Ok(Err(e)) => {
                report.hooks_failed += 1;
                tracing::error!(hook = %name, error = %e, "shutdown hook panicked; the next hooks run");
            }
            Err(_) => {
                task.abort();
                report.hooks_timed_out += 1;
                tracing::warn!(hook = %name, deadline = ?HOOK_DEADLINE, "shutdown hook overran its deadline");
            }
        }
    }
}
