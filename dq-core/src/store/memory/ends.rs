//! Waits for a job's end (`Producer::wait_finished`): who waits for which job, what each is
//! told, and when a wait on a manual clock runs out.
//!
//! A wait is answered once, by whichever comes first under the store's lock: the step that
//! ends its job (ack, dead letter, the reclaimer's dead letter, cancel) or, on a store with a
//! manual clock, the move of that clock to the wait's deadline or past it
//! ([`MemoryStore::advance`](super::MemoryStore::advance)). Deciding both under the lock keeps
//! the answer the one time would give: a clock moved in one step from before a job's due time
//! to after a wait's deadline ends the wait before the job can run, and a job that ended before
//! the move has told its waiters already.

use tokio::sync::oneshot;

use super::state::{Member, State};
use crate::result::Waited;

/// One wait for a job's end.
#[derive(Debug)]
pub(super) struct Waiter {
    tx: oneshot::Sender<Waited>,
    /// When it runs out on the store's manual clock (us); `None` on the system clock, where
    /// tokio's timer bounds it.
    until_us: Option<u64>,
}

impl State {
    /// What a wait for job `m` answers now: its record when it is done or dead; `None` while it
    /// is pending, or a blocked workflow step that will be (then the wait goes on, whether or
    /// not its topic keeps its ends yet: a runtime that records the retention may start before
    /// it ends); once it is neither,
    /// `NotKept` when its topic keeps no records, `Cancelled` when it was cancelled within the
    /// retention, `NotFound` otherwise.
    pub(super) fn wait_answer(&self, m: &Member) -> Option<Waited> {
        if self.done.contains_key(m) || self.died_at.contains_key(m) {
            return self.info(m).map(|info| Waited::Finished(Box::new(info)));
        }
        if self.jobs.contains_key(m) || self.is_blocked_step(m) {
            None
        } else if !self.retention.contains_key(&m.0) {
            Some(Waited::NotKept)
        } else if self.cancelled.contains_key(m) {
            Some(Waited::Cancelled)
        } else {
            Some(Waited::NotFound)
        }
    }

    /// Marks job `m` cancelled at `now` when its topic keeps its ends, as Redis does
    /// (`cancelled:<topic>`), and drops the marks past the topic's retention (older than its
    /// age, or beyond its count).
    pub(super) fn bury(&mut self, m: &Member, now: u64) {
        let Some(r) = self.retention.get(&m.0).copied() else {
            return;
        };
        self.cancelled.insert(m.clone(), now);
        let order = self.cancelled_order.entry(m.0.clone()).or_default();
        order.push_back((now, m.1.clone()));
        let oldest = now.saturating_sub(u64::try_from(r.age.as_micros()).unwrap_or(u64::MAX));
        let count = usize::try_from(r.count).unwrap_or(usize::MAX).max(1);
        while let Some((at, id)) = order.front().cloned() {
            if at >= oldest && order.len() <= count {
                break;
            }
            order.pop_front();
            let gone = (m.0.clone(), id);
            // A job cancelled again since has a later mark, which stays.
            if self.cancelled.get(&gone) == Some(&at) {
                self.cancelled.remove(&gone);
            }
        }
    }

    /// Forgets the marks of `topic`'s cancelled jobs (its retention was taken away).
    pub(super) fn forget_cancelled(&mut self, topic: &crate::name::Topic) {
        for (_, id) in self.cancelled_order.remove(topic).unwrap_or_default() {
            self.cancelled.remove(&(topic.clone(), id));
        }
    }

    /// Registers a wait for job `m`, running out at `until_us` on a manual clock (`None`: no
    /// deadline here); the receiver is told the answer.
    pub(super) fn add_waiter(
        &mut self,
        m: &Member,
        until_us: Option<u64>,
    ) -> oneshot::Receiver<Waited> {
        self.forget_gone_waiters(m);
        let (tx, rx) = oneshot::channel();
        self.waiters
            .entry(m.clone())
            .or_default()
            .push(Waiter { tx, until_us });
        rx
    }

    /// Tells those waiting for job `m` what became of it, once it ended (acked, dead,
    /// cancelled): they are taken out of the waiters.
    pub(super) fn wake_waiters(&mut self, m: &Member) {
        if !self.waiters.contains_key(m) {
            return;
        }
        let Some(answer) = self.wait_answer(m) else {
            return;
        };
        for waiter in self.waiters.remove(m).unwrap_or_default() {
            let _ = waiter.tx.send(answer.clone());
        }
    }

    /// Takes out the waiters for job `m` that gave up (timed out or dropped).
    pub(super) fn forget_gone_waiters(&mut self, m: &Member) {
        if let Some(waiting) = self.waiters.get_mut(m) {
            waiting.retain(|w| !w.tx.is_closed());
            if waiting.is_empty() {
                self.waiters.remove(m);
            }
        }
    }

    /// Tells the waits whose deadline on the manual clock is `now_us` or earlier that they ran
    /// out (`TimedOut`), and takes them out. Only a manual clock's move calls it; every wait
    /// is looked at, which a test's handful of waits makes cheap.
    pub(super) fn expire_waits(&mut self, now_us: u64) {
        self.waiters.retain(|_, waiting| {
            let (expired, kept): (Vec<Waiter>, Vec<Waiter>) = std::mem::take(waiting)
                .into_iter()
                .partition(|w| w.until_us.is_some_and(|until| until <= now_us));
            for waiter in expired {
                let _ = waiter.tx.send(Waited::TimedOut);
            }
            *waiting = kept;
            !waiting.is_empty()
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::name::{JobId, Topic};

    fn member(id: &str) -> Member {
        (Topic::new("t").unwrap(), JobId::new(id).unwrap())
    }

    #[test]
    fn a_wait_on_the_manual_clock_runs_out_when_the_clock_reaches_its_deadline() {
        let mut s = State::default();
        let (m, other) = (member("j"), member("k"));
        let mut on_manual = s.add_waiter(&m, Some(1_000));
        let mut on_system = s.add_waiter(&m, None);
        let mut later = s.add_waiter(&other, Some(2_000));

        s.expire_waits(999);
        assert!(on_manual.try_recv().is_err(), "not yet");
        s.expire_waits(1_000);
        assert!(matches!(on_manual.try_recv(), Ok(Waited::TimedOut)));
        assert!(on_system.try_recv().is_err(), "no deadline on this clock");
        assert!(later.try_recv().is_err(), "its deadline is later");
        assert_eq!(s.waiters[&m].len(), 1, "the one that ran out is gone");

        s.expire_waits(5_000);
        assert!(matches!(later.try_recv(), Ok(Waited::TimedOut)));
        assert!(!s.waiters.contains_key(&other), "no waiter left for k");
    }
}
