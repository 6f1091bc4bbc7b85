//! [`RunningLeases`]: the leases of this process's jobs from the start of their handler until
//! their fate is written. The heartbeat renews them, the worker record counts them, shutdown
//! releases the cancelled ones and reports those whose fate could not be written, and a cancel
//! of a running job (announced by the store, or found by the heartbeat) is told to its handler.
//!
//! Only this module locks the map: the job tasks, the acker, the heartbeat and shutdown change
//! it through the methods below, each one step under the lock.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use dq_core::{JobId, LeaseRef, Topic};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Default)]
pub(crate) struct RunningLeases {
    leases: Mutex<HashMap<LeaseRef, Running>>,
    /// Leases of jobs cancelled at shutdown, released back to ready.
    interrupted: Mutex<Vec<LeaseRef>>,
    /// Outcomes (retry, dead letter) given up on at the end of shutdown, Redis not answering.
    gave_up: AtomicUsize,
    /// Per topic, told each time a job's fate is written and its lease ends: consumers of a
    /// topic at its global concurrency fetch again.
    ended: Mutex<HashMap<Topic, Arc<Notify>>>,
}

/// Where a running job stands.
#[derive(Debug)]
struct Running {
    stage: Stage,
    /// Cancelled when the lease is lost while the handler runs ([`JobContext::lease_lost`]).
    ///
    /// [`JobContext::lease_lost`]: crate::JobContext::lease_lost
    lost: CancellationToken,
    /// Cancelled when a cancel asks the job to stop ([`JobContext::cancelled`]).
    ///
    /// [`JobContext::cancelled`]: crate::JobContext::cancelled
    cancel: CancellationToken,
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

impl RunningLeases {
    /// The handler starts; `lost` is cancelled if its lease is lost meanwhile, `cancel` if a
    /// cancel asks the job to stop.
    pub(crate) fn start(
        &self,
        lease: &LeaseRef,
        lost: CancellationToken,
        cancel: CancellationToken,
    ) {
        let running = Running {
            stage: Stage::Handler,
            lost,
            cancel,
        };
        lock(&self.leases).insert(lease.clone(), running);
    }

    /// The handler returned; the lease is renewed until the outcome is written.
    pub(crate) fn settling(&self, lease: &LeaseRef) {
        if let Some(r) = lock(&self.leases).get_mut(lease) {
            if r.stage == Stage::Handler {
                r.stage = Stage::Settling;
            }
        }
    }

    /// The heartbeat found `lease` no longer held. True when that is news: its handler still
    /// runs and was not told yet (it is told now, through its [`JobContext`]).
    ///
    /// [`JobContext`]: crate::JobContext
    pub(crate) fn lost(&self, lease: &LeaseRef) -> bool {
        let mut leases = lock(&self.leases);
        match leases.get_mut(lease) {
            Some(r) if r.stage == Stage::Handler => {
                r.stage = Stage::Lost;
                r.lost.cancel();
                true
            }
            _ => false,
        }
    }

    /// A cancel asked job `topic:id` to stop. True when that is news: its handler runs here and
    /// was not told yet (it is told now, through its [`JobContext`]). A job whose handler
    /// returned already takes the fate its run decided.
    ///
    /// [`JobContext`]: crate::JobContext
    pub(crate) fn cancel(&self, topic: &Topic, id: &JobId) -> bool {
        let leases = lock(&self.leases);
        let mut news = false;
        for (lease, r) in leases.iter() {
            if lease.topic == *topic
                && lease.id == *id
                && r.stage == Stage::Handler
                && !r.cancel.is_cancelled()
            {
                r.cancel.cancel();
                news = true;
            }
        }
        news
    }

    /// The job's fate is written (or given up); true when its lease had been found lost.
    pub(crate) fn stop(&self, lease: &LeaseRef) -> bool {
        let lost = lock(&self.leases)
            .remove(lease)
            .is_some_and(|r| r.stage == Stage::Lost);
        if let Some(ended) = lock(&self.ended).get(&lease.topic) {
            ended.notify_waiters();
        }
        lost
    }

    /// The acks of `topics`' jobs are on their way to the store: the consumers waiting for room
    /// under a global concurrency may fetch now. Their fetch goes to Redis on the same
    /// connection behind the ack, which Redis runs first, so it finds the acked jobs' slots free
    /// one round trip sooner than a fetch sent when the ack's reply is back (a fetch that
    /// overtakes it only finds the topic full again, and waits for [`stop`](Self::stop)).
    pub(crate) fn acks_sent<'t>(&self, topics: impl IntoIterator<Item = &'t Topic>) {
        let ended = lock(&self.ended);
        for topic in topics {
            if let Some(n) = ended.get(topic) {
                n.notify_waiters();
            }
        }
    }

    /// Told at each [`stop`](Self::stop) of a lease of `topic`: one of its jobs in this process
    /// ended, so the topic may have room under its global concurrency. A waiter registers
    /// (`Notified::enable`) before the fetch that finds the topic full, so that an end
    /// meanwhile is not missed.
    pub(crate) fn ends_of(&self, topic: &Topic) -> Arc<Notify> {
        lock(&self.ended).entry(topic.clone()).or_default().clone()
    }

    /// Shutdown cancelled the job's handler: it stops running here and its lease is kept for
    /// [`take_interrupted`](Self::take_interrupted), which puts it back to ready.
    pub(crate) fn interrupted(&self, lease: LeaseRef) {
        self.stop(&lease);
        lock(&self.interrupted).push(lease);
    }

    pub(crate) fn take_interrupted(&self) -> Vec<LeaseRef> {
        std::mem::take(&mut *lock(&self.interrupted))
    }

    /// The leases to renew: every job of this process that runs or settles, not those lost.
    pub(crate) fn to_renew(&self) -> Vec<LeaseRef> {
        lock(&self.leases)
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
        let waiting = lock(&self.leases)
            .values()
            .filter(|r| r.stage == Stage::Settling)
            .count();
        waiting + self.gave_up.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dq_core::{JobId, Topic};

    fn lease(id: &str) -> LeaseRef {
        LeaseRef {
            topic: Topic::new("t").unwrap(),
            id: JobId::new(id).unwrap(),
            token: 1,
            shard: 0,
        }
    }

    #[test]
    fn a_lost_lease_is_told_to_its_handler_once_and_renewed_no_more() {
        let running = RunningLeases::default();
        let told = CancellationToken::new();
        running.start(&lease("a"), told.clone(), CancellationToken::new());
        running.start(
            &lease("b"),
            CancellationToken::new(),
            CancellationToken::new(),
        );
        assert!(running.lost(&lease("a")));
        assert!(told.is_cancelled());
        assert!(!running.lost(&lease("a")), "said once");
        assert_eq!(running.to_renew(), vec![lease("b")]);
        assert!(running.stop(&lease("a")), "stop says the lease was lost");
        assert!(!running.stop(&lease("b")));
    }

    #[test]
    fn a_settling_job_is_renewed_and_counted_unsettled_but_its_lease_is_not_lost_news() {
        let running = RunningLeases::default();
        running.start(
            &lease("a"),
            CancellationToken::new(),
            CancellationToken::new(),
        );
        running.settling(&lease("a"));
        assert!(!running.lost(&lease("a")), "its handler returned already");
        assert_eq!(running.to_renew(), vec![lease("a")]);
        running.gave_up();
        assert_eq!(running.unsettled(), 2);
    }

    #[test]
    fn a_cancel_is_told_to_the_running_handler_of_that_job_once_and_not_after_it_returned() {
        let running = RunningLeases::default();
        let (a, b) = (CancellationToken::new(), CancellationToken::new());
        running.start(&lease("a"), CancellationToken::new(), a.clone());
        running.start(&lease("b"), CancellationToken::new(), b.clone());
        let (t, id) = (Topic::new("t").unwrap(), JobId::new("a").unwrap());
        assert!(running.cancel(&t, &id));
        assert!(a.is_cancelled() && !b.is_cancelled(), "only job a is told");
        assert!(!running.cancel(&t, &id), "said once");
        assert!(
            !running.cancel(&t, &JobId::new("gone").unwrap()),
            "not running here"
        );
        running.settling(&lease("b"));
        assert!(
            !running.cancel(&t, &JobId::new("b").unwrap()),
            "b returned already"
        );
        assert!(!b.is_cancelled());
        assert_eq!(running.to_renew().len(), 2, "a cancel renews as before");
    }

    #[test]
    fn an_interrupted_job_leaves_the_renewed_set_and_waits_for_release() {
        let running = RunningLeases::default();
        running.start(
            &lease("a"),
            CancellationToken::new(),
            CancellationToken::new(),
        );
        running.interrupted(lease("a"));
        assert!(running.to_renew().is_empty());
        assert_eq!(running.take_interrupted(), vec![lease("a")]);
        assert!(running.take_interrupted().is_empty());
    }
}
