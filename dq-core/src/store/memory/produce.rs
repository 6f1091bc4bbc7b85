//! Creating and changing jobs that have not started.

use async_trait::async_trait;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;

use super::events::MemoryEventFeed;
use super::state::{due_of, micros, Behind, Member, State};
use super::workflows::StepEnd;
use super::{lock, Event, MemoryStore};
use crate::admin::ChangeOutcome;
use crate::envelope::Envelope;
use crate::error::Result;
use crate::events::{EventCursor, EventKind};
use crate::job::{from_us, Due, JobInfo, NewJob, OnConflict, PushOutcome};
use crate::name::{JobId, Topic};
use crate::result::Waited;
use crate::store::{EventFeed, Producer, Wake};

/// What pushing `job` (member `m`) does, given what the store holds: a tick a later
/// generation fenced off, an id still reserved by `unique_for`, a pending job of the same id
/// (kept, replaced, or running). A dead letter of the same id is taken out of the dead set here
/// (its envelope is overwritten by the new job), and so is the done record of a job of the same
/// id that succeeded: neither blocks its id.
fn outcome_of(s: &mut State, job: &NewJob, m: &Member, now: u64, replace: bool) -> PushOutcome {
    let reserved = s.unique.get(m).copied().filter(|&until| until > now);
    let stored = job
        .fence
        .as_ref()
        .and_then(|f| s.tick_fence.get(&f.schedule).copied());
    let fenced = job.fence.as_ref().filter(|f| !f.is_after(stored));
    if let (Some(f), Some((generation, _))) = (fenced, stored) {
        return if f.generation < generation {
            PushOutcome::Superseded { generation }
        } else {
            PushOutcome::AlreadyPending
        };
    }
    if let (Some(until), false) = (reserved, s.jobs.contains_key(m)) {
        return PushOutcome::Unique {
            left: std::time::Duration::from_micros(until - now),
        };
    }
    if !s.jobs.contains_key(m) {
        s.forget_done(m);
        return PushOutcome::Created;
    }
    if let Some(died) = s.died_at.remove(m) {
        if let Some(d) = s.dead.get_mut(&m.0) {
            d.remove(&(died, m.1.clone()));
        }
        PushOutcome::Created
    } else if s.leases.contains_key(m) {
        if replace {
            PushOutcome::Running
        } else {
            PushOutcome::AlreadyPending
        }
    } else if !replace {
        PushOutcome::AlreadyPending
    } else {
        s.unplace(m);
        // A replace into another group (or none) gives the old group's slot back.
        s.leave_unless_in(m, job.group.as_deref());
        PushOutcome::Replaced
    }
}

/// Whether pushing `job` (member `m`) would create a job, as [`outcome_of`] decides without
/// changing anything: not fenced off, not reserved, and no pending job of its id (a dead
/// letter's id makes a new job).
fn creates(s: &State, job: &NewJob, m: &Member, now: u64) -> bool {
    let exists = s.jobs.contains_key(m);
    let reserved = !exists && s.unique.get(m).is_some_and(|&until| until > now);
    let fenced = job
        .fence
        .as_ref()
        .is_some_and(|f| !f.is_after(s.tick_fence.get(&f.schedule).copied()));
    !fenced && !reserved && (!exists || s.died_at.contains_key(m))
}

/// The bound of `topic` when it holds as many pending jobs as it allows.
fn full(s: &State, topic: &Topic) -> Option<u64> {
    let max = s.max_pending.get(topic).copied()?;
    let c = s.counts(topic);
    (c.delayed + c.ready + c.running >= max).then_some(max)
}

/// Stores `job` as member `m`: its envelope, its tick's fence, its `unique_for` reservation,
/// and its place in the delayed or ready set. True when it is ready now.
pub(super) fn store_job(
    s: &mut State,
    job: NewJob,
    m: Member,
    now: u64,
    behind: &mut Behind,
) -> bool {
    if let Some(f) = &job.fence {
        s.tick_fence
            .insert(f.schedule.clone(), (f.generation, f.tick_us));
    }
    s.unique.remove(&m);
    match job.unique_for {
        Some(hold) => {
            let us = u64::try_from(hold.as_micros()).unwrap_or(u64::MAX).max(1);
            s.unique_for.insert(m.clone(), us)
        }
        None => s.unique_for.remove(&m),
    };
    let due = due_of(job.due, now);
    s.jobs.insert(
        m.clone(),
        Envelope {
            attempt: 0,
            max_attempts: job.max_attempts,
            created_us: now,
            due_us: due,
            last_error: None,
            errors: Vec::new(),
            trace: job.trace,
            priority: job.priority,
            group: job.group,
            payload: job.payload,
        },
    );
    s.topics.insert(m.0.clone());
    s.record(Event::Pushed {
        topic: m.0.clone(),
        id: m.1.clone(),
    });
    s.events.emit(&m, 0, now, || EventKind::Pushed {
        due: (due > now).then(|| from_us(due)),
    });
    s.place_pushed(m, due, now, behind)
}

#[async_trait]
impl Producer for MemoryStore {
    async fn push(&self, jobs: Vec<NewJob>, on_conflict: OnConflict) -> Result<Vec<PushOutcome>> {
        jobs.iter().try_for_each(crate::job::check_priority)?;
        let now = self.now_us();
        let replace = on_conflict == OnConflict::Replace;
        let mut out = Vec::with_capacity(jobs.len());
        let mut ready_topics = BTreeSet::new();
        let announce = {
            let mut s = lock(&self.state);
            let before = s.earliest();
            let mut behind = Behind::at(&s, now);
            // Ended reservations go now and then (the Redis store trims them on every push).
            if s.unique.len() > 10_000 {
                s.unique.retain(|_, until| *until > now);
            }
            for job in jobs {
                let m = (job.topic.clone(), job.id.clone());
                let blocked = s.is_blocked_step(&m);
                let outcome = match full(&s, &m.0) {
                    // The id of a blocked workflow step is taken (a reservation says so first).
                    _ if blocked && !creates(&s, &job, &m, now) => {
                        outcome_of(&mut s, &job, &m, now, replace)
                    }
                    _ if blocked => PushOutcome::AlreadyPending,
                    Some(max_pending) if creates(&s, &job, &m, now) => {
                        PushOutcome::Full { max_pending }
                    }
                    _ => outcome_of(&mut s, &job, &m, now, replace),
                };
                if matches!(outcome, PushOutcome::Created | PushOutcome::Replaced)
                    && store_job(&mut s, job, m.clone(), now, &mut behind)
                {
                    ready_topics.insert(m.0);
                }
                out.push(outcome);
            }
            ready_topics.extend(behind.moved);
            let after = s.earliest();
            after.filter(|a| before.is_none_or(|b| a < &b))
        };
        for t in &ready_topics {
            self.signal_ready(t);
        }
        if let Some(due) = announce {
            let _ = self.wake.send(Wake::Due {
                shard: 0,
                due_us: due,
            });
        }
        Ok(out)
    }

    async fn cancel(&self, topic: &Topic, id: &JobId) -> Result<ChangeOutcome> {
        let mut s = lock(&self.state);
        let m = (topic.clone(), id.clone());
        if s.is_blocked_step(&m) {
            // A blocked step of a workflow: it ends, cancelled, and its dependents follow.
            s.step_ended(&m, StepEnd::Cancelled, self.now_us());
            drop(s);
            self.flush_woken();
            return Ok(ChangeOutcome::Done);
        }
        if !s.jobs.contains_key(&m) {
            // A done record goes as a dead letter does.
            return Ok(if s.forget_done(&m) {
                ChangeOutcome::Done
            } else {
                ChangeOutcome::NotFound
            });
        }
        if let Some(&(_, token)) = s.leases.get(&m) {
            // Running: its worker is asked to stop it (and deletes it unless the run succeeds).
            s.cancels.insert(m, token);
            let _ = self.wake.send(Wake::Cancel {
                topic: topic.clone(),
                id: id.clone(),
            });
            return Ok(ChangeOutcome::CancelRequested);
        }
        if let Some(died) = s.died_at.remove(&m) {
            if let Some(d) = s.dead.get_mut(topic) {
                d.remove(&(died, id.clone()));
            }
            s.delete_cancelled(&m, self.now_us());
        } else {
            s.cancel_waiting(&m, self.now_us());
        }
        drop(s);
        self.flush_woken();
        Ok(ChangeOutcome::Done)
    }

    async fn reschedule(&self, topic: &Topic, id: &JobId, when: Due) -> Result<ChangeOutcome> {
        let now = self.now_us();
        let m = (topic.clone(), id.clone());
        let (went_ready, announce, moved) = {
            let mut s = lock(&self.state);
            if !s.jobs.contains_key(&m) || s.died_at.contains_key(&m) {
                return Ok(ChangeOutcome::NotFound);
            }
            if s.leases.contains_key(&m) {
                return Ok(ChangeOutcome::Running);
            }
            let before = s.earliest();
            let due = due_of(when, now);
            // A delayed grouped job to run now waits behind the jobs the mover has not moved
            // yet, as a push does (reschedule.lua).
            let mut behind = Behind::at(&s, now);
            behind.mover &= s.is_delayed(&m);
            if due <= now && s.is_parked(&m) {
                // Waiting for a slot of its group already: it keeps its place there.
                if let Some(e) = s.jobs.get_mut(&m) {
                    e.due_us = due;
                }
                return Ok(ChangeOutcome::Done);
            }
            s.unplace(&m);
            if let Some(e) = s.jobs.get_mut(&m) {
                e.due_us = due;
            }
            let ready = s.place_pushed(m.clone(), due, now, &mut behind);
            (
                ready,
                s.earliest().filter(|a| before.is_none_or(|b| a < &b)),
                behind.moved,
            )
        };
        if went_ready {
            self.signal_ready(topic);
        }
        for t in &moved {
            self.signal_ready(t);
        }
        if let Some(due) = announce {
            let _ = self.wake.send(Wake::Due {
                shard: 0,
                due_us: due,
            });
        }
        Ok(ChangeOutcome::Done)
    }

    async fn status(&self, topic: &Topic, id: &JobId) -> Result<Option<JobInfo>> {
        Ok(lock(&self.state).info(&(topic.clone(), id.clone())))
    }

    async fn event_feed(&self, topic: &Topic, after: &EventCursor) -> Result<Box<dyn EventFeed>> {
        Ok(Box::new(MemoryEventFeed::open(self, topic, after)))
    }

    /// Registers the wait under the store's lock, in the same step that finds the job
    /// pending, so no end is missed; the end (ack, dead letter, the reclaimer's dead letter,
    /// cancel) tells the waiter what became of the job, and nothing polls.
    ///
    /// On a store with a manual clock ([`MemoryStore::with_manual_clock`]) `timeout` counts
    /// that clock: [`MemoryStore::advance`] to the deadline or past it ends the wait
    /// (`TimedOut`), before any job the move made due can run. Real time bounds it too (tokio's
    /// timer, as on the system clock), so that a wait the clock never reaches still ends.
    async fn wait_finished(&self, topic: &Topic, id: &JobId, timeout: Duration) -> Result<Waited> {
        let m = (topic.clone(), id.clone());
        let rx = {
            let mut s = lock(&self.state);
            if let Some(answer) = s.wait_answer(&m) {
                return Ok(answer);
            }
            if timeout.is_zero() {
                return Ok(Waited::TimedOut);
            }
            let until = self
                .is_manual()
                .then(|| self.now_us().saturating_add(micros(timeout)));
            s.add_waiter(&m, until)
        };
        let mut waiting = Waiting {
            state: Arc::clone(&self.state),
            m,
            rx,
        };
        let woken = tokio::time::timeout(timeout, &mut waiting.rx).await;
        let answer = match woken {
            Ok(Ok(answer)) => answer,
            // Its sender went without a word (it cannot: an end always answers): look again.
            Ok(Err(_)) => {
                let s = lock(&self.state);
                s.wait_answer(&waiting.m).unwrap_or(Waited::TimedOut)
            }
            Err(_) => Waited::TimedOut,
        };
        // `waiting` goes here, and its drop takes the lock: none is held now.
        Ok(answer)
    }
}

/// A wait registered in the store, taken out when it ends or is dropped, so waits that time
/// out on a job still pending leave nothing behind.
struct Waiting {
    state: Arc<Mutex<State>>,
    m: Member,
    rx: oneshot::Receiver<Waited>,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.rx.close();
        lock(&self.state).forget_gone_waiters(&self.m);
    }
}
