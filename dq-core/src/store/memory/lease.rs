//! The workers' side of a job's life.

use std::collections::BTreeSet;

use super::ready::ReadyQueue;
use std::time::Duration;

use async_trait::async_trait;

use super::state::{due_of, State, Tally};
use super::waiters::{MemoryReadyWaiter, MemoryWakeListener};
use super::workflows::StepEnd;
use super::{lock, Event, MemoryStore};
use crate::error::Result;
use crate::events::EventKind;
use crate::job::{from_us, Due};
use crate::lease::{Acked, Fetched, LeaseRef, LeasedJob, Promoted, Reclaimed, Succeeded};
use crate::lease::{RunEnd, RunEnded};
use crate::name::Topic;
use crate::rate::Rate;
use crate::result::Retention;
use crate::store::policy::{batch_limit, lease_expired, promote_limit};
use crate::store::{Leases, ReadyWaiter, Wake, WakeListener};

/// Most done records an ack trims beyond one per job it acks.
const TRIM_PER_ACK: usize = 256;

impl MemoryStore {
    /// A failed run to retry (with its `error`), or a postponed one (`None`: the run does not
    /// count, the last error stays).
    fn retry_job(
        &self,
        lease: &LeaseRef,
        delay: Duration,
        error: Option<&str>,
    ) -> Result<RunEnded> {
        crate::lease::check_retry_delay(lease, delay)?;
        let now = self.now_us();
        let (ready, announce) = {
            let mut s = lock(&self.state);
            let Some(m) = s.holds(lease) else {
                return Ok(RunEnded::NotHeld);
            };
            if s.asked_to_cancel(&m, lease.token) {
                drop(s);
                return self.deleted_as_asked(lease);
            }
            let before = s.earliest();
            s.end_lease(&m);
            let due = due_of(Due::After(delay), now);
            let mut attempt = 0;
            if let Some(e) = s.jobs.get_mut(&m) {
                e.due_us = due;
                // A failed run counts; a postponed one does not.
                if let Some(error) = error {
                    e.attempt = e.attempt.saturating_add(1);
                    e.failed_run(error, e.attempt, now);
                }
                attempt = e.attempt;
            }
            let when = from_us(due);
            match error {
                Some(error) => {
                    s.events.emit(&m, attempt, now, || EventKind::Failed {
                        error: error.to_owned(),
                    });
                    s.events
                        .emit(&m, attempt, now, || EventKind::Retrying { due: when });
                }
                // The postponed run is the one after those counted.
                None => s.events.emit(&m, attempt.saturating_add(1), now, || {
                    EventKind::Postponed { due: when }
                }),
            }
            if error.is_some() {
                s.tally(&m.0, Tally::Failed, 1, now);
            }
            s.record(match error {
                Some(error) => Event::Retried {
                    topic: m.0.clone(),
                    id: m.1.clone(),
                    attempt,
                    error: error.to_owned(),
                },
                None => Event::Postponed {
                    topic: m.0.clone(),
                    id: m.1.clone(),
                },
            });
            let ready = s.place(m, due, now);
            (
                ready,
                s.earliest().filter(|a| before.is_none_or(|b| a < &b)),
            )
        };
        if ready {
            self.signal_ready(&lease.topic);
        }
        if let Some(due) = announce {
            let _ = self.wake.send(Wake::Due {
                shard: 0,
                due_us: due,
            });
        }
        Ok(RunEnded::Written)
    }

    /// A failed run to dead-letter with `error`.
    fn dead_letter_job(&self, lease: &LeaseRef, error: &str) -> Result<RunEnded> {
        let now = self.now_us();
        let mut s = lock(&self.state);
        let Some(m) = s.holds(lease) else {
            return Ok(RunEnded::NotHeld);
        };
        if s.asked_to_cancel(&m, lease.token) {
            drop(s);
            return self.deleted_as_asked(lease);
        }
        s.end_lease(&m);
        if let Some(e) = s.jobs.get_mut(&m) {
            e.attempt = e.attempt.saturating_add(1);
        }
        s.tally(&m.0, Tally::Failed, 1, now);
        s.kill(m.clone(), error.to_owned(), now);
        s.step_ended(&m, StepEnd::Failed(error.to_owned()), now);
        drop(s);
        self.flush_woken();
        Ok(RunEnded::Written)
    }

    /// Deletes a running job whose cancel was requested against `lease`, as its run ended
    /// without success (`delete_asked`).
    fn deleted_as_asked(&self, lease: &LeaseRef) -> Result<RunEnded> {
        Ok(if self.delete_asked(lease)? {
            RunEnded::Cancelled
        } else {
            RunEnded::NotHeld
        })
    }

    /// Puts `leases`' jobs back to the front of their ready lists; how many were, and how
    /// many were deleted as cancelled instead (their cancel requested against the lease).
    fn release_runs(&self, leases: &[LeaseRef]) -> Result<(usize, usize)> {
        let mut topics = BTreeSet::new();
        let (mut n, mut cancelled) = (0, 0);
        let now = self.now_us();
        let mut asked = Vec::new();
        {
            let mut s = lock(&self.state);
            for l in leases {
                let Some(m) = s.holds(l) else { continue };
                if s.asked_to_cancel(&m, l.token) {
                    asked.push(l);
                    continue;
                }
                s.end_lease(&m);
                let run = s.jobs.get(&m).map_or(1, |e| e.attempt.saturating_add(1));
                s.events.emit(&m, run, now, || EventKind::Released);
                topics.insert(m.0.clone());
                s.ready_again(m);
                n += 1;
            }
        }
        for t in &topics {
            self.signal_ready(t);
        }
        for l in asked {
            cancelled += usize::from(self.delete_asked(l)?);
        }
        Ok((n, cancelled))
    }
}

#[async_trait]
impl Leases for MemoryStore {
    async fn promote(&self, _shard: u16, limit: usize) -> Result<Promoted> {
        let limit = promote_limit(limit);
        let now = self.now_us();
        let (count, moved, next) = {
            let mut s = lock(&self.state);
            let (count, moved) = s.promote_due(now, limit);
            (count, moved, s.earliest())
        };
        for (t, _) in &moved {
            self.signal_ready(t);
        }
        Ok(Promoted {
            moved: count,
            topics: moved,
            next_due_us: next,
            now_us: now,
        })
    }

    async fn fetch(&self, shard: u16, topic: &Topic, max: usize, ttl: Duration) -> Result<Fetched> {
        let max = batch_limit(max);
        let now = self.now_us();
        let deadline = now.saturating_add(u64::try_from(ttl.as_micros()).unwrap_or(u64::MAX));
        let mut s = lock(&self.state);
        let mut out = Fetched {
            now_us: now,
            ..Fetched::default()
        };
        if s.paused.contains(topic) {
            out.paused = true;
            return Ok(out);
        }
        let rate = s.rates.get(topic).map(|r| r.gcra_us());
        let group_rate = s.group_rates.get(topic).map(|r| r.gcra_us());
        let before = s.earliest();
        let throttle = s.throttles.get(topic).copied().unwrap_or_default();
        let (mut max, throttled) = throttle.allows(rate, now, max);
        let mut at_capacity = false;
        if let Some(&limit) = s.global_concurrency.get(topic) {
            let running = s.running_count.get(topic).copied().unwrap_or(0);
            let room = usize::try_from(u64::from(limit).saturating_sub(running)).unwrap_or(0);
            if room < max {
                (max, at_capacity) = (room, true);
            }
        }
        // The jobs held back by their group's rate count against `max` as the leased ones do
        // (as the Redis store's fetch looks at `max` ready jobs at most).
        let mut held_back = 0;
        while out.jobs.len() + held_back < max {
            let Some(id) = s.ready.get_mut(topic).and_then(ReadyQueue::pop_front) else {
                break;
            };
            let m = (topic.clone(), id.clone());
            let Some(group) = s.jobs.get(&m).map(|e| e.group.clone()) else {
                continue;
            };
            // A job whose group has used its group rate waits, delayed until its group may
            // start again, keeping its group's slot (its promotion lets it back in line).
            if let (Some(rate), Some(group)) = (group_rate, group) {
                if let Some(due) = s.group_turn(topic, &group, rate, now) {
                    let mut run = 1;
                    if let Some(e) = s.jobs.get_mut(&m) {
                        e.due_us = due;
                        run = e.attempt.saturating_add(1);
                    }
                    s.events
                        .emit(&m, run, now, || EventKind::Postponed { due: from_us(due) });
                    State::bump(&mut s.delayed_count, topic, true);
                    s.delayed.insert((due, m));
                    held_back += 1;
                    continue;
                }
            }
            let Some(env) = s.jobs.get_mut(&m) else {
                continue;
            };
            // The stored envelope counts the runs that ended without success; the one handed
            // over counts this run, as the Redis store's does.
            let mut envelope = env.clone();
            envelope.attempt = envelope.attempt.saturating_add(1);
            s.last_token += 1;
            let token = s.last_token;
            s.inflight.insert((deadline, m.clone()));
            s.events
                .emit(&m, envelope.attempt, now, || EventKind::Started);
            s.leases.insert(m, (deadline, token));
            State::bump(&mut s.running_count, topic, true);
            out.jobs.push(LeasedJob {
                lease: LeaseRef {
                    topic: topic.clone(),
                    id,
                    token,
                    shard,
                },
                envelope,
            });
        }
        if rate.is_some() && !out.jobs.is_empty() {
            let throttle = s.throttles.entry(topic.clone()).or_default();
            throttle.took(rate, now, out.jobs.len());
        }
        // Jobs held back by their group rate may have made a new earliest due time.
        if let Some(due) = s.earliest().filter(|a| before.is_none_or(|b| a < &b)) {
            let _ = self.wake.send(Wake::Due {
                shard: 0,
                due_us: due,
            });
        }
        // Only worth a wait when jobs are left behind: with none, the consumer waits for one.
        if s.ready.get(topic).is_some_and(|q| !q.is_empty()) {
            // Throttled when the rate let out fewer than asked: not when jobs held back by their
            // group's rate left starts unused.
            out.throttled = if held_back > 0 { None } else { throttled };
            out.held_back = held_back;
            // Full when the jobs leased took the room: not when jobs held back by their
            // group's rate left some of it unused.
            out.at_capacity = at_capacity && out.jobs.len() >= max;
        }
        Ok(out)
    }

    async fn ack_succeeded(&self, done: &[Succeeded]) -> Result<Acked> {
        let now = self.now_us();
        let mut s = lock(&self.state);
        let mut out = Acked::default();
        let mut topics = BTreeSet::new();
        // The workflow steps of the jobs acked end after the whole call's own events, as
        // ack.lua settles them.
        let mut ended = Vec::new();
        for d in done {
            let l = &d.lease;
            let Some(m) = s.holds(l) else {
                out.stale.push(l.clone());
                continue;
            };
            s.end_lease(&m);
            s.leave(&m);
            s.tally(&m.0, Tally::Done, 1, now);
            if let Some(hold) = s.unique_for.remove(&m) {
                s.unique.insert(m.clone(), now.saturating_add(hold));
            }
            let envelope = s.jobs.remove(&m);
            let attempt = envelope.as_ref().map_or(0, |e| e.attempt.saturating_add(1));
            let kept = s.retention.contains_key(&m.0);
            s.events.emit(&m, attempt, now, || EventKind::Succeeded {
                value: d.result.clone().filter(|_| kept),
            });
            if let (Some(envelope), true) = (envelope, kept) {
                s.keep_done(m.clone(), envelope, d.result.clone(), now);
            }
            // Before the trim below: a waiter is told the value even when a count of 0 drops
            // the record at once.
            s.wake_waiters(&m);
            ended.push((m.clone(), d.result.clone()));
            if kept || s.done_order.contains_key(&m.0) {
                topics.insert(m.0.clone());
            }
            s.record(Event::Acked {
                topic: m.0,
                id: m.1,
                attempt,
            });
            out.acked += 1;
        }
        for (m, value) in ended {
            s.step_ended(&m, StepEnd::Succeeded(value), now);
        }
        // Bounded: one record per job acked here and a few hundred more, so the records past
        // the retention (older than its age, say) go over a few calls, and the count holds.
        let mut budget = out.acked.saturating_add(TRIM_PER_ACK);
        for t in &topics {
            budget = budget.saturating_sub(s.trim_done(t, now, budget));
        }
        drop(s);
        self.flush_woken();
        Ok(out)
    }

    async fn retry(&self, lease: &LeaseRef, delay: Duration, error: &str) -> Result<bool> {
        Ok(self.retry_job(lease, delay, Some(error))? != RunEnded::NotHeld)
    }

    async fn postpone(&self, lease: &LeaseRef, delay: Duration) -> Result<bool> {
        Ok(self.retry_job(lease, delay, None)? != RunEnded::NotHeld)
    }

    async fn dead_letter(&self, lease: &LeaseRef, error: &str) -> Result<bool> {
        Ok(self.dead_letter_job(lease, error)? != RunEnded::NotHeld)
    }

    async fn end_run(&self, lease: &LeaseRef, end: RunEnd<'_>) -> Result<RunEnded> {
        match end {
            RunEnd::Retry { delay, error } => self.retry_job(lease, delay, Some(error)),
            RunEnd::Postpone { delay } => self.retry_job(lease, delay, None),
            RunEnd::DeadLetter { error } => self.dead_letter_job(lease, error),
            RunEnd::Release => {
                let (released, cancelled) = self.release_runs(std::slice::from_ref(lease))?;
                Ok(RunEnded::of_release(released, cancelled))
            }
        }
    }

    async fn release(&self, leases: &[LeaseRef]) -> Result<usize> {
        let (released, cancelled) = self.release_runs(leases)?;
        Ok(released + cancelled)
    }

    async fn progress(&self, lease: &LeaseRef, value: &[u8]) -> Result<bool> {
        self.record_progress(lease, value)
    }

    async fn extend(&self, leases: &[LeaseRef], lease: Duration) -> Result<Vec<LeaseRef>> {
        let deadline = self
            .now_us()
            .saturating_add(u64::try_from(lease.as_micros()).unwrap_or(u64::MAX));
        let mut s = lock(&self.state);
        let mut lost = Vec::new();
        for l in leases {
            match s.holds(l) {
                Some(m) => {
                    if let Some((old, _)) = s.leases.insert(m.clone(), (deadline, l.token)) {
                        s.inflight.remove(&(old, m.clone()));
                    }
                    s.inflight.insert((deadline, m));
                }
                None => lost.push(l.clone()),
            }
        }
        Ok(lost)
    }

    async fn cancel_requests(&self, leases: &[LeaseRef]) -> Result<Vec<LeaseRef>> {
        self.read_cancel_requests(leases)
    }

    async fn cancel_running(&self, lease: &LeaseRef) -> Result<bool> {
        self.delete_asked(lease)
    }

    async fn reclaim(&self, _shard: u16, limit: usize) -> Result<Reclaimed> {
        let limit = batch_limit(limit);
        let now = self.now_us();
        let mut out = Reclaimed::default();
        let mut topics = BTreeSet::new();
        let mut asked = Vec::new();
        {
            let mut s = lock(&self.state);
            let mut expired = Vec::new();
            while expired.len() < limit {
                match s.inflight.first() {
                    Some((deadline, _)) if *deadline <= now => {
                        if let Some(entry) = s.inflight.pop_first() {
                            expired.push(entry.1);
                        }
                    }
                    _ => break,
                }
            }
            // The jobs whose cancel was requested against their lease are deleted as cancelled
            // below (as reclaim.lua leaves them to the store).
            expired.retain(|m| {
                let token = s.leases.get(m).map(|&(_, token)| token);
                match token.filter(|&token| s.asked_to_cancel(m, token)) {
                    Some(token) => {
                        asked.push(LeaseRef {
                            topic: m.0.clone(),
                            id: m.1.clone(),
                            token,
                            shard: 0,
                        });
                        false
                    }
                    None => true,
                }
            });
            // The workflow steps of the jobs dead-lettered end after the call's own changes, and
            // the jobs taken back are then deleted when their workflow is cancelled, as
            // reclaim.lua settles them.
            let (mut died, mut requeued) = (Vec::new(), Vec::new());
            // Backwards, so the job that expired first ends up first in line.
            for m in expired.into_iter().rev() {
                s.leases.remove(&m);
                s.cancels.remove(&m);
                s.progress.remove(&m);
                State::bump(&mut s.running_count, &m.0, false);
                s.tally(&m.0, Tally::Failed, 1, now);
                let limit = s.attempt_limits.get(&m.0).copied();
                let Some(e) = s.jobs.get_mut(&m) else {
                    continue;
                };
                e.attempt = e.attempt.saturating_add(1);
                let max = limit.unwrap_or(e.max_attempts);
                if e.attempt >= max {
                    let error = lease_expired(e.attempt, Some(max));
                    died.push((m.clone(), error.clone()));
                    s.kill(m, error, now);
                    out.dead += 1;
                } else {
                    e.failed_run(&lease_expired(e.attempt, None), e.attempt, now);
                    let run = e.attempt;
                    s.events.emit(&m, run, now, || EventKind::Stalled);
                    topics.insert(m.0.clone());
                    requeued.push(m.clone());
                    s.ready_again(m);
                    out.requeued += 1;
                }
            }
            for (m, error) in died {
                s.step_ended(&m, StepEnd::Failed(error), now);
            }
            for m in requeued {
                s.taken_back(&m, now);
                if !s.jobs.contains_key(&m) {
                    out.requeued -= 1;
                }
            }
        }
        for t in &topics {
            self.signal_ready(t);
        }
        for l in &asked {
            out.cancelled += usize::from(self.delete_asked(l)?);
        }
        out.next_expiry = lock(&self.state)
            .inflight
            .iter()
            .map(|(deadline, _)| *deadline)
            .find(|&deadline| deadline > now)
            .map(|deadline| Duration::from_micros(deadline - now));
        self.flush_woken();
        Ok(out)
    }

    async fn set_attempt_limit(&self, topic: &Topic, max_attempts: Option<u32>) -> Result<()> {
        let mut s = lock(&self.state);
        match max_attempts {
            Some(max) => s.attempt_limits.insert(topic.clone(), max.max(1)),
            None => s.attempt_limits.remove(topic),
        };
        Ok(())
    }

    async fn set_retention(&self, topic: &Topic, retention: Option<Retention>) -> Result<()> {
        let mut s = lock(&self.state);
        match retention {
            Some(r) => s.retention.insert(topic.clone(), r),
            None => {
                // A topic that keeps nothing forgets what it kept, as the Redis store does
                // (forget_done.lua).
                s.forget_cancelled(topic);
                let was = s.retention.remove(topic);
                s.trim_done(topic, 0, usize::MAX);
                // Those waiting for its pending jobs wait on: each is told `NotKept` when its
                // job ends.
                was
            }
        };
        Ok(())
    }

    async fn set_events(&self, topic: &Topic, cap: Option<u64>) -> Result<()> {
        lock(&self.state).events.set_cap(topic, cap);
        Ok(())
    }

    async fn max_pending(&self, topic: &Topic) -> Result<Option<u64>> {
        Ok(lock(&self.state).max_pending.get(topic).copied())
    }

    async fn set_max_pending(&self, topic: &Topic, max: Option<u64>) -> Result<()> {
        let mut s = lock(&self.state);
        match max {
            Some(max) => s.max_pending.insert(topic.clone(), max),
            None => s.max_pending.remove(topic),
        };
        Ok(())
    }

    async fn set_rate(&self, topic: &Topic, rate: Option<Rate>) -> Result<()> {
        let mut s = lock(&self.state);
        let before = match rate {
            Some(rate) => s.rates.insert(topic.clone(), rate),
            None => s.rates.remove(topic),
        };
        // A new rate starts afresh (a hold stays); the same one declared again (at every
        // runtime start) keeps where the limit stands.
        if before != rate {
            if let Some(t) = s.throttles.get_mut(topic) {
                t.tat_us = 0.0;
            }
        }
        Ok(())
    }

    async fn rate(&self, topic: &Topic) -> Result<Option<Rate>> {
        Ok(lock(&self.state).rates.get(topic).copied())
    }

    async fn set_global_concurrency(&self, topic: &Topic, max: Option<u32>) -> Result<()> {
        let mut s = lock(&self.state);
        match max {
            Some(max) => s.global_concurrency.insert(topic.clone(), max),
            None => s.global_concurrency.remove(topic),
        };
        Ok(())
    }

    async fn global_concurrency(&self, topic: &Topic) -> Result<Option<u32>> {
        Ok(lock(&self.state).global_concurrency.get(topic).copied())
    }

    async fn set_group_concurrency(&self, topic: &Topic, max: Option<u32>) -> Result<()> {
        {
            let mut s = lock(&self.state);
            match max {
                Some(max) => s.group_concurrency.insert(topic.clone(), max.max(1)),
                None => s.group_concurrency.remove(topic),
            };
            // A higher limit lets the parked jobs it makes room for in at once.
            let limit = s.group_limit(topic);
            let admitted = s
                .groups
                .get_mut(topic)
                .map(|g| g.admit_all(limit))
                .unwrap_or_default();
            for id in admitted {
                s.make_ready((topic.clone(), id));
            }
        }
        self.signal_ready(topic);
        Ok(())
    }

    async fn set_group_rate(&self, topic: &Topic, rate: Option<Rate>) -> Result<()> {
        let mut s = lock(&self.state);
        let before = match rate {
            Some(rate) => s.group_rates.insert(topic.clone(), rate),
            None => s.group_rates.remove(topic),
        };
        // A new rate starts afresh; the same one declared again (at every runtime start)
        // keeps where each group stands.
        if before != rate {
            s.group_throttles.remove(topic);
        }
        Ok(())
    }

    async fn group_rate(&self, topic: &Topic) -> Result<Option<Rate>> {
        Ok(lock(&self.state).group_rates.get(topic).copied())
    }

    async fn group_concurrency(&self, topic: &Topic) -> Result<Option<u32>> {
        Ok(lock(&self.state).group_concurrency.get(topic).copied())
    }

    async fn hold_ends_us(&self, topic: &Topic) -> Result<Option<u64>> {
        let now = self.now_us();
        let s = lock(&self.state);
        Ok(s.throttles
            .get(topic)
            .map(|t| t.hold_us)
            .filter(|end| *end > now))
    }

    async fn hold(&self, topic: &Topic, duration: Duration) -> Result<()> {
        let now = self.now_us();
        lock(&self.state)
            .throttles
            .entry(topic.clone())
            .or_default()
            .hold(now, duration);
        Ok(())
    }

    async fn lift_hold(&self, topic: &Topic) -> Result<bool> {
        let now = self.now_us();
        let lifted = lock(&self.state)
            .throttles
            .get_mut(topic)
            .is_some_and(|t| t.lift_hold(now));
        if lifted {
            // Consumers waiting it out look again now.
            let _ = self.wake.send(crate::store::Wake::Resumed(topic.clone()));
        }
        Ok(lifted)
    }

    fn ready_waiter(&self, _shard: u16, topic: &Topic) -> Box<dyn ReadyWaiter> {
        Box::new(MemoryReadyWaiter {
            store: self.clone(),
            topic: topic.clone(),
            rx: self.ready_receiver(topic),
        })
    }

    async fn wake_listener(&self) -> Result<Box<dyn WakeListener>> {
        Ok(Box::new(MemoryWakeListener {
            rx: self.wake.subscribe(),
        }))
    }
}
