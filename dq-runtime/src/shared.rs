//! State shared by every task of one runtime.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use dq_core::{Client, Config, LeaseRef, Store};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::extract::States;

#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) config: Config,
    /// Cancelled when shutdown starts: stop moving and fetching.
    pub(crate) stop: CancellationToken,
    /// Cancelled when the grace period is over: cancel running handlers.
    pub(crate) abort: CancellationToken,
    /// The job tasks, waited for at shutdown.
    pub(crate) jobs: TaskTracker,
    /// Leases of this process's jobs, from the start of the handler until the job's fate is
    /// written: renewed by the heartbeat, counted in the worker record.
    running: Mutex<HashMap<LeaseRef, Running>>,
    /// Leases of jobs cancelled at shutdown, released back to ready.
    interrupted: Mutex<Vec<LeaseRef>>,
    /// Finished jobs waiting to be acked in a batch.
    pub(crate) acks: mpsc::UnboundedSender<LeaseRef>,
    /// Outcomes (retry, dead letter) given up on at the end of shutdown, Redis not answering.
    gave_up: AtomicUsize,
    /// Bumped when some topic is resumed (by any process): paused consumers look again.
    pub(crate) resumed: watch::Sender<u64>,
    /// What listeners are handed: the runtime's client and the registered state.
    pub(crate) client: Client,
    pub(crate) states: Arc<States>,
}

/// Where a job of [`Shared::running`] stands.
#[derive(Debug)]
struct Running {
    stage: Stage,
    /// Cancelled when the lease is lost while the handler runs ([`JobContext::lease_lost`]).
    ///
    /// [`JobContext::lease_lost`]: crate::JobContext::lease_lost
    lost: CancellationToken,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// The handler runs.
    Handler,
    /// The handler returned; the job waits for its ack, retry or dead letter to be written.
    Settling,
    /// The lease was found lost while the handler ran (it expired, or Redis lost it): it is
    /// no longer renewed nor counted as running here, and its outcome will be refused.
    Lost,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding these locks cannot leave them inconsistent (single inserts and
    // removals), so a poisoned lock is still usable.
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Shared {
    pub(crate) fn new(
        store: Arc<dyn Store>,
        config: Config,
        acks: mpsc::UnboundedSender<LeaseRef>,
        client: Client,
        states: Arc<States>,
    ) -> Shared {
        Shared {
            store,
            config,
            stop: CancellationToken::new(),
            abort: CancellationToken::new(),
            jobs: TaskTracker::new(),
            running: Mutex::new(HashMap::new()),
            interrupted: Mutex::new(Vec::new()),
            acks,
            gave_up: AtomicUsize::new(0),
            resumed: watch::Sender::new(0),
            client,
            states,
        }
    }

    /// The handler starts; `lost` is cancelled if its lease is lost meanwhile.
    pub(crate) fn start_running(&self, lease: &LeaseRef, lost: CancellationToken) {
        let running = Running {
            stage: Stage::Handler,
            lost,
        };
        lock(&self.running).insert(lease.clone(), running);
    }

    /// The handler returned; the lease is renewed until the outcome is written.
    pub(crate) fn settling(&self, lease: &LeaseRef) {
        if let Some(r) = lock(&self.running).get_mut(lease) {
            if r.stage == Stage::Handler {
                r.stage = Stage::Settling;
            }
        }
    }

    /// The heartbeat found `lease` no longer held. True when that is news: its handler still
    /// runs and was not told yet (it is told now, through its [`JobContext`]).
    ///
    /// [`JobContext`]: crate::JobContext
    pub(crate) fn lease_lost(&self, lease: &LeaseRef) -> bool {
        let mut running = lock(&self.running);
        match running.get_mut(lease) {
            Some(r) if r.stage == Stage::Handler => {
                r.stage = Stage::Lost;
                r.lost.cancel();
                true
            }
            _ => false,
        }
    }

    /// The job's fate is written (or given up); true when its lease had been found lost.
    pub(crate) fn stop_running(&self, lease: &LeaseRef) -> bool {
        lock(&self.running)
            .remove(lease)
            .is_some_and(|r| r.stage == Stage::Lost)
    }

    /// The leases to renew: every job of this process that runs or settles, not those lost.
    pub(crate) fn running(&self) -> Vec<LeaseRef> {
        lock(&self.running)
            .iter()
            .filter(|(_, r)| r.stage != Stage::Lost)
            .map(|(l, _)| l.clone())
            .collect()
    }

    /// A job's retry or dead letter could not be written before shutdown gave up.
    pub(crate) fn gave_up(&self) {
        self.gave_up.fetch_add(1, Ordering::Relaxed);
    }

    /// Finished jobs whose outcome was not written: those still waiting for their ack, and
    /// those whose retry or dead letter was given up.
    pub(crate) fn unsettled(&self) -> usize {
        let running = lock(&self.running);
        let waiting = running
            .values()
            .filter(|r| r.stage == Stage::Settling)
            .count();
        waiting + self.gave_up.load(Ordering::Relaxed)
    }

    pub(crate) fn interrupted(&self, lease: LeaseRef) {
        lock(&self.interrupted).push(lease);
    }

    pub(crate) fn take_interrupted(&self) -> Vec<LeaseRef> {
        std::mem::take(&mut *lock(&self.interrupted))
    }
}
