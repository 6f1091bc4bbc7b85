//! The writes about a running job besides its end: progress, cancel requests, the deletion of
//! a cancelled run.

use super::{lock, MemoryStore};
use crate::error::Result;
use crate::events::EventKind;
use crate::lease::LeaseRef;

impl MemoryStore {
    /// Records `value` as the progress of the job `lease` runs, with its event; false when the
    /// lease is no longer held.
    pub(super) fn record_progress(&self, lease: &LeaseRef, value: &[u8]) -> Result<bool> {
        crate::lease::check_progress(lease, value)?;
        let mut s = lock(&self.state);
        let Some(m) = s.holds(lease) else {
            return Ok(false);
        };
        let run = s.jobs.get(&m).map_or(1, |e| e.attempt.saturating_add(1));
        let now = self.now_us();
        s.events.emit(&m, run, now, || EventKind::Progress {
            value: value.to_vec(),
        });
        s.progress.insert(m, value.to_vec());
        Ok(true)
    }

    /// Those of `leases` with a cancel request made against that very lease.
    pub(super) fn read_cancel_requests(&self, leases: &[LeaseRef]) -> Result<Vec<LeaseRef>> {
        let s = lock(&self.state);
        Ok(leases
            .iter()
            .filter(|l| {
                let m = (l.topic.clone(), l.id.clone());
                s.cancels.get(&m) == Some(&l.token)
            })
            .cloned()
            .collect())
    }

    /// Deletes as cancelled the job of `lease`, a run that ended without success after a
    /// cancel was requested against its lease (`cancel_running`; and a retry, a postpone, a
    /// dead letter, a release or a reclaim of such a run, which neither puts the job back nor
    /// dead-letters it), and tells those waiting for its end; false when the lease is no longer
    /// held.
    pub(super) fn delete_asked(&self, lease: &LeaseRef) -> Result<bool> {
        let deleted = self.delete_cancelled_run(lease);
        self.flush_woken();
        deleted
    }

    /// Deletes the running job `lease` names, its cancel requested, and tells those waiting
    /// for its end; false when the lease is no longer held.
    pub(super) fn delete_cancelled_run(&self, lease: &LeaseRef) -> Result<bool> {
        let mut s = lock(&self.state);
        let Some(m) = s.holds(lease) else {
            return Ok(false);
        };
        s.end_lease(&m);
        s.leave(&m);
        let run = s.jobs.remove(&m).map_or(1, |e| e.attempt.saturating_add(1));
        s.unique_for.remove(&m);
        let now = self.now_us();
        s.events.emit(&m, run, now, || EventKind::Cancelled);
        // Those waiting for it hear it was cancelled, as after a cancel of a pending job.
        s.bury(&m, now);
        s.wake_waiters(&m);
        s.step_ended(&m, super::workflows::StepEnd::Cancelled, now);
        Ok(true)
    }
}
