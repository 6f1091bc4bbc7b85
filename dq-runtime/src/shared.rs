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
    /// Leases of running jobs, renewed by the heartbeat; `true` once the handler has returned
    /// and the job waits for its ack, retry or dead letter to be written.
    running: Mutex<HashMap<LeaseRef, bool>>,
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

    pub(crate) fn start_running(&self, lease: &LeaseRef) {
        lock(&self.running).insert(lease.clone(), false);
    }

    /// The handler returned; the lease is renewed until the outcome is written.
    pub(crate) fn settling(&self, lease: &LeaseRef) {
        if let Some(settling) = lock(&self.running).get_mut(lease) {
            *settling = true;
        }
    }

    /// True while the job's handler runs (not once it returned).
    pub(crate) fn handler_running(&self, lease: &LeaseRef) -> bool {
        lock(&self.running).get(lease) == Some(&false)
    }

    pub(crate) fn stop_running(&self, lease: &LeaseRef) {
        lock(&self.running).remove(lease);
    }

    pub(crate) fn running(&self) -> Vec<LeaseRef> {
        lock(&self.running).keys().cloned().collect()
    }

    /// A job's retry or dead letter could not be written before shutdown gave up.
    pub(crate) fn gave_up(&self) {
        self.gave_up.fetch_add(1, Ordering::Relaxed);
    }

    /// Finished jobs whose outcome was not written: those still waiting for their ack, and
    /// those whose retry or dead letter was given up.
    pub(crate) fn unsettled(&self) -> usize {
        let waiting = lock(&self.running).values().filter(|&&s| s).count();
        waiting + self.gave_up.load(Ordering::Relaxed)
    }

    pub(crate) fn interrupted(&self, lease: LeaseRef) {
        lock(&self.interrupted).push(lease);
    }

    pub(crate) fn take_interrupted(&self) -> Vec<LeaseRef> {
        std::mem::take(&mut *lock(&self.interrupted))
    }
}
