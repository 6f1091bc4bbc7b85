//! The memory store's jobs, queues and leases, changed by plain synchronous code under the
//! store's lock.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use super::ends::Waiter;
use super::events::EventLog;
use super::groups::Groups;
use super::ready::ReadyQueue;
use super::Event;
use crate::admin::{Throughput, TopicCounts, WorkerInfo};
use crate::envelope::Envelope;
use crate::events::EventKind;
use crate::job::{to_us, Due, JobInfo, JobState};
use crate::lease::LeaseRef;
use crate::name::{JobId, Topic};
use crate::rate::{Rate, Throttle};
use crate::result::Retention;

/// A job's place in the store: its topic and id.
pub(super) type Member = (Topic, JobId);

/// What is kept of a succeeded job while its topic's retention lasts.
#[derive(Debug)]
pub(super) struct DoneRecord {
    /// Its envelope as it was when it succeeded (`attempt`: the runs that failed before).
    pub(super) envelope: Envelope,
    /// What its handler returned, as JSON.
    pub(super) result: Option<Vec<u8>>,
    /// When it succeeded (us, the store's clock).
    pub(super) at: u64,
}

#[derive(Default)]
pub(super) struct State {
    pub(super) jobs: HashMap<Member, Envelope>,
    pub(super) delayed: BTreeSet<(u64, Member)>,
    pub(super) ready: HashMap<Topic, ReadyQueue>,
    /// Per topic, its groups: the jobs holding a slot, and those waiting for one (parked).
    pub(super) groups: HashMap<Topic, Groups>,
    /// Each topic's group concurrency, when set (1 otherwise).
    pub(super) group_concurrency: HashMap<Topic, u32>,
    /// Topics whose consumers should look again (a group let a job in), told by the store once
    /// its lock is released.
    pub(super) woken: Vec<Topic>,
    pub(super) inflight: BTreeSet<(u64, Member)>,
    /// Running jobs: lease deadline and token.
    pub(super) leases: HashMap<Member, (u64, u64)>,
    /// Running jobs a cancel asked to stop: the lease token the request applies to. An entry
    /// goes when the lease ends, whatever ends it.
    pub(super) cancels: HashMap<Member, u64>,
    /// The latest progress each running job reported (JSON); an entry goes with its lease
    /// ([`State::end_lease`]).
    pub(super) progress: HashMap<Member, Vec<u8>>,
    /// The last lease token given.
    pub(super) last_token: u64,
    pub(super) dead: HashMap<Topic, BTreeSet<(u64, JobId)>>,
    pub(super) died_at: HashMap<Member, u64>,
    pub(super) delayed_count: HashMap<Topic, u64>,
    pub(super) running_count: HashMap<Topic, u64>,
    pub(super) topics: BTreeSet<Topic>,
    pub(super) paused: BTreeSet<Topic>,
    /// The most runs each topic's listeners allow (the reclaimer's limit).
    pub(super) attempt_limits: HashMap<Topic, u32>,
    pub(super) workers: HashMap<String, WorkerInfo>,
    /// What happened to jobs, in order: kept only when `keep_history` (tests ask for it; the
    /// embedded default keeps none, so its memory stays bounded by what is pending).
    pub(super) history: Vec<Event>,
    pub(super) keep_history: bool,
    /// Per topic, a ring of 60 one-minute slots: (minute since the epoch, done, failed), as the
    /// Redis scripts keep them (lib.lua's `tally`).
    pub(super) throughput: HashMap<Topic, [(u64, u64, u64); 60]>,
    /// Ids reserved after their job succeeded: until when (us). Ended ones are dropped as
    /// pushes meet them.
    pub(super) unique: HashMap<Member, u64>,
    /// The reservation each pending job asked for (us), moved to `unique` when it succeeds.
    pub(super) unique_for: HashMap<Member, u64>,
    /// Periodic schedules: id -> spec (JSON), next tick, last fired tick (us).
    pub(super) schedules: std::collections::BTreeMap<String, String>,
    pub(super) schedule_next: HashMap<String, u64>,
    pub(super) schedule_last: HashMap<String, u64>,
    /// Each schedule's generation, and the latest (generation, tick) whose job was created.
    pub(super) schedule_gen: HashMap<String, u64>,
    pub(super) tick_fence: HashMap<String, (u64, u64)>,
    /// How long, and how many, records of succeeded jobs each topic keeps (none without).
    pub(super) retention: HashMap<Topic, Retention>,
    /// The most jobs each bounded topic may hold pending (delayed, ready and running).
    pub(super) max_pending: HashMap<Topic, u64>,
    /// The most jobs of each limited topic running at once (global concurrency).
    pub(super) global_concurrency: HashMap<Topic, u32>,
    /// The rate limits of the topics that have one.
    pub(super) rates: HashMap<Topic, Rate>,
    /// Each limited or held topic's start times so far (GCRA; see `dq_core::Rate`).
    pub(super) throttles: HashMap<Topic, Throttle>,
    /// The group rates of the topics that have one.
    pub(super) group_rates: HashMap<Topic, Rate>,
    /// Each group's start times so far under its topic's group rate, for the groups whose
    /// time has not passed (the others are dropped now and then: `State::group_turn`).
    pub(super) group_throttles: HashMap<Topic, GroupThrottles>,
    /// The records of succeeded jobs (never of a pending or dead one: a push of their id
    /// takes them out).
    pub(super) done: HashMap<Member, DoneRecord>,
    /// Per topic, its done records by when they succeeded, oldest first.
    pub(super) done_order: HashMap<Topic, BTreeSet<(u64, JobId)>>,
    /// Those waiting for a pending job's end (`Producer::wait_finished`), told what it was
    /// (see `ends`). An entry goes when the job ends, or when its last waiter gives up or
    /// runs out.
    pub(super) waiters: HashMap<Member, Vec<Waiter>>,
    /// The job events of the topics that have them on.
    pub(super) events: EventLog,
    /// Marks of the cancelled jobs of topics that keep their ends (when each was cancelled,
    /// us), for the waits that come after the cancel (see `ends`).
    pub(super) cancelled: HashMap<Member, u64>,
    /// Per topic, its marks in the order they were made, for the trim.
    pub(super) cancelled_order: HashMap<Topic, std::collections::VecDeque<(u64, JobId)>>,
    /// Workflows by id (see `workflows`).
    pub(super) workflows: HashMap<String, super::workflows::Workflow>,
    /// The workflow and step of each job of a step that has not ended (blocked ones too).
    pub(super) step_of: HashMap<Member, (String, String)>,
    /// The earliest due time a workflow's release made, for the movers (once the lock is
    /// released, as `woken`).
    pub(super) workflow_due: Option<u64>,
    /// Running jobs a workflow's cancel asked to stop, to announce once the lock is released.
    pub(super) workflow_cancels: Vec<Member>,
}

/// Which tally of [`State::tally`] a run adds to.
#[derive(Clone, Copy)]
pub(super) enum Tally {
    Done,
    Failed,
}

/// A topic's groups' start times under its group rate.
#[derive(Debug, Default)]
pub(super) struct GroupThrottles {
    pub(super) by_group: HashMap<String, Throttle>,
    /// The due time last given to a job of each group held back.
    last_due: HashMap<String, u64>,
    /// Looks so far, to drop the groups whose time has passed now and then.
    looks: u64,
}

pub(super) fn due_of(when: Due, now: u64) -> u64 {
    match when {
        Due::After(d) => now.saturating_add(micros(d)),
        Due::At(t) => to_us(t),
    }
}

/// `d` in microseconds (saturating).
pub(super) fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

impl State {
    /// How long `topic`'s rate limit, or a hold, keeps its next start back at `now`, when it
    /// does.
    pub(super) fn held_back(&self, topic: &Topic, now: u64) -> Option<Duration> {
        let throttle = self.throttles.get(topic)?;
        let rate = self.rates.get(topic).map(|r| r.gcra_us());
        match throttle.allows(rate, now, 1) {
            (0, wait) => wait,
            _ => None,
        }
    }

    /// Adds to the history, when it is kept.
    pub(super) fn record(&mut self, event: Event) {
        if self.keep_history {
            self.history.push(event);
        }
    }

    /// Starts a schedule's next generation: above its last, and the clock (as the Redis
    /// store's `schedule_put.lua`).
    pub(super) fn new_generation(&mut self, id: &str, now: u64) {
        let old = self.schedule_gen.get(id).copied().unwrap_or(0);
        self.schedule_gen
            .insert(id.to_owned(), old.saturating_add(1).max(now));
    }

    /// Counts `n` runs of `topic` that ended at `now` (us) in the minute's slot.
    pub(super) fn tally(&mut self, topic: &Topic, what: Tally, n: u64, now: u64) {
        let minute = now / 60_000_000;
        let ring = self
            .throughput
            .entry(topic.clone())
            .or_insert([(u64::MAX, 0, 0); 60]);
        let slot = &mut ring[usize::try_from(minute % 60).unwrap_or(0)];
        if slot.0 != minute {
            *slot = (minute, 0, 0);
        }
        match what {
            Tally::Done => slot.1 += n,
            Tally::Failed => slot.2 += n,
        }
    }

    /// `topic`'s tallies of the last hour before `now` (us).
    pub(super) fn throughput(&self, topic: &Topic, now: u64) -> Throughput {
        let now_minute = now / 60_000_000;
        let found = self.throughput.get(topic).into_iter().flatten();
        let recent = found.filter(|t| t.0 <= now_minute && t.0 + 60 > now_minute);
        Throughput::from_tallies(now_minute, recent.copied())
    }

    /// Whether a job of `group` may start at `now` under its topic's group `rate` (counting
    /// the start when it may: `None`), or when it may: at its group's next turn and a turn after
    /// the job of its group held back last (as the Redis store's fetch.lua).
    pub(super) fn group_turn(
        &mut self,
        topic: &Topic,
        group: &str,
        rate: (f64, f64),
        now: u64,
    ) -> Option<u64> {
        let throttles = self.group_throttles.entry(topic.clone()).or_default();
        // Now and then, the groups whose times have passed go: they start afresh as they are.
        throttles.looks += 1;
        if throttles.looks.is_multiple_of(1024) {
            throttles.by_group.retain(|_, t| t.tat_us > now as f64);
            throttles.last_due.retain(|_, due| *due > now);
        }
        let throttle = throttles.by_group.entry(group.to_owned()).or_default();
        match throttle.allows(Some(rate), now, 1) {
            (0, wait) => {
                let turn = now.saturating_add(micros(wait.unwrap_or_default()));
                let last = throttles.last_due.entry(group.to_owned()).or_default();
                let next = if *last == 0 {
                    turn
                } else {
                    turn.max((*last as f64 + rate.0).ceil() as u64)
                };
                *last = next;
                Some(next)
            }
            _ => {
                throttle.took(Some(rate), now, 1);
                None
            }
        }
    }

    pub(super) fn earliest(&self) -> Option<u64> {
        self.delayed.first().map(|(due, _)| *due)
    }

    pub(super) fn bump(map: &mut HashMap<Topic, u64>, topic: &Topic, up: bool) {
        let n = map.entry(topic.clone()).or_default();
        *n = if up { *n + 1 } else { n.saturating_sub(1) };
    }

    /// Puts a job where its due time says: when due, into its topic's ready jobs through its
    /// group ([`State::enter`]); returns true when it went to ready.
    pub(super) fn place(&mut self, m: Member, due: u64, now: u64) -> bool {
        if due <= now {
            self.enter(m)
        } else {
            State::bump(&mut self.delayed_count, &m.0, true);
            self.delayed.insert((due, m));
            false
        }
    }

    /// Places a pushed job as [`State::place`] does, except that a grouped job due now does
    /// not pass the jobs that fell due before it and wait for the mover (`behind`, read once
    /// per call before it changed anything): the mover moves those first, here, in the order
    /// they fell due (push.lua keeps the job waiting in the delayed set behind them instead).
    pub(super) fn place_pushed(
        &mut self,
        m: Member,
        due: u64,
        now: u64,
        behind: &mut Behind,
    ) -> bool {
        let grouped = self.jobs.get(&m).is_some_and(|e| e.group.is_some());
        if due <= now && grouped && behind.mover {
            let (_, moved) = self.promote_due(now, usize::MAX);
            behind.mover = false;
            behind
                .moved
                .extend(moved.into_iter().map(|(topic, _)| topic));
        }
        self.place(m, due, now)
    }

    /// Moves the delayed jobs due by `now` into line (their groups' or the ready jobs), at most
    /// `limit`, in the order they fell due: what the mover does. How many, and how many of
    /// each topic.
    pub(super) fn promote_due(&mut self, now: u64, limit: usize) -> (usize, Vec<(Topic, usize)>) {
        let mut moved: Vec<(Topic, usize)> = Vec::new();
        let mut count = 0;
        while count < limit {
            let Some((due, _)) = self.delayed.first() else {
                break;
            };
            if *due > now {
                break;
            }
            let Some((_, m)) = self.delayed.pop_first() else {
                break;
            };
            State::bump(&mut self.delayed_count, &m.0, false);
            // No run on `promoted`, as on Redis (events.rs says why).
            self.events.emit(&m, 0, now, || EventKind::Promoted);
            match moved.iter_mut().find(|(t, _)| *t == m.0) {
                Some((_, n)) => *n += 1,
                None => moved.push((m.0.clone(), 1)),
            }
            self.enter(m);
            count += 1;
        }
        (count, moved)
    }

    /// The priority of a stored job (0 for one not stored).
    fn priority_of(&self, m: &Member) -> i8 {
        self.jobs.get(m).map_or(0, |e| e.priority)
    }

    /// A topic's group concurrency (1 unless set).
    pub(super) fn group_limit(&self, topic: &Topic) -> u32 {
        self.group_concurrency.get(topic).copied().unwrap_or(1)
    }

    /// Lets a stored job that is due into its topic's ready jobs (last in line): a job of a
    /// group takes one of its group's slots, or waits for one, parked (false: it did not go to
    /// ready). A job holding a slot already (a retry, a postponement) goes in as it is.
    pub(super) fn enter(&mut self, m: Member) -> bool {
        if let Some(group) = self.jobs.get(&m).and_then(|e| e.group.clone()) {
            let limit = self.group_limit(&m.0);
            let groups = self.groups.entry(m.0.clone()).or_default();
            if !groups.enter(&group, &m.1, limit) {
                return false;
            }
        }
        self.make_ready(m);
        true
    }

    /// Job `m` ended (succeeded, dead-lettered, cancelled): its group's slot, if it held one,
    /// comes back, and the job its group lets in next goes to ready, last in line (its topic's
    /// consumers are woken once the store's lock is released).
    pub(super) fn leave(&mut self, m: &Member) {
        let limit = self.group_limit(&m.0);
        let Some(groups) = self.groups.get_mut(&m.0) else {
            return;
        };
        let admitted = groups.leave(&m.1, limit);
        if admitted.is_empty() {
            return;
        }
        for id in admitted {
            self.make_ready((m.0.clone(), id));
        }
        self.woken.push(m.0.clone());
    }

    /// Gives back the slot job `m` holds unless it holds one of `group` (a replace that moves
    /// a job to another group, or out of groups).
    pub(super) fn leave_unless_in(&mut self, m: &Member, group: Option<&str>) {
        let held = self.groups.get(&m.0).and_then(|g| g.group_held_by(&m.1));
        if held.is_some_and(|g| Some(g) != group) {
            self.leave(m);
        }
    }

    /// Adds a stored job to its topic's ready jobs, last of its priority.
    pub(super) fn make_ready(&mut self, m: Member) {
        let priority = self.priority_of(&m);
        self.ready.entry(m.0).or_default().push_back(m.1, priority);
    }

    /// Puts a stored job back first in line of its priority (released, or reclaimed).
    pub(super) fn ready_again(&mut self, m: Member) {
        let priority = self.priority_of(&m);
        self.ready.entry(m.0).or_default().push_front(m.1, priority);
    }

    /// Takes a not-started job out of delayed, ready, or its group's parked jobs. A slot of
    /// its group it holds stays held ([`State::leave`] gives it back).
    pub(super) fn unplace(&mut self, m: &Member) {
        let due = self.jobs.get(m).map_or(0, |e| e.due_us);
        if self.delayed.remove(&(due, m.clone())) {
            State::bump(&mut self.delayed_count, &m.0, false);
        } else if !self.groups.get_mut(&m.0).is_some_and(|g| g.unpark(&m.1)) {
            if let Some(q) = self.ready.get_mut(&m.0) {
                q.remove(&m.1);
            }
        }
    }

    /// Deletes a job that has not started (delayed, ready or parked), as a cancel does.
    pub(super) fn cancel_waiting(&mut self, m: &Member, now: u64) {
        self.unplace(m);
        // A job holding a slot of its group (ready, or waiting for a retry) gives it back.
        self.leave(m);
        self.delete_cancelled(m, now);
    }

    /// Deletes a cancelled job that is not running (waiting, or dead), tells those waiting
    /// for it, and ends its workflow step.
    pub(super) fn delete_cancelled(&mut self, m: &Member, now: u64) {
        let attempt = self.jobs.remove(m).map_or(0, |e| e.attempt);
        self.unique_for.remove(m);
        self.events.emit(m, attempt, now, || EventKind::Cancelled);
        // Those waiting for it hear it was cancelled.
        self.bury(m, now);
        self.wake_waiters(m);
        self.step_ended(m, super::workflows::StepEnd::Cancelled, now);
    }

    /// Whether `m` waits in the delayed set.
    pub(super) fn is_delayed(&self, m: &Member) -> bool {
        self.jobs
            .get(m)
            .is_some_and(|e| self.delayed.contains(&(e.due_us, m.clone())))
    }

    /// Whether job `m` waits for a slot of its group.
    pub(super) fn is_parked(&self, m: &Member) -> bool {
        self.groups.get(&m.0).is_some_and(|g| g.is_parked(&m.1))
    }

    pub(super) fn counts(&self, topic: &Topic) -> TopicCounts {
        TopicCounts {
            delayed: self.delayed_count.get(topic).copied().unwrap_or(0),
            ready: self.ready.get(topic).map_or(0, |q| q.len() as u64)
                + self.groups.get(topic).map_or(0, |g| g.parked_len() as u64),
            running: self.running_count.get(topic).copied().unwrap_or(0),
            dead: self.dead.get(topic).map_or(0, |d| d.len() as u64),
            done: self.done_order.get(topic).map_or(0, |o| o.len() as u64),
        }
    }

    pub(super) fn holds(&self, l: &LeaseRef) -> Option<Member> {
        let m = (l.topic.clone(), l.id.clone());
        let held = self.leases.get(&m).is_some_and(|&(_, t)| t == l.token);
        held.then_some(m)
    }

    /// Whether a cancel was requested against the lease `token` of job `m`.
    pub(super) fn asked_to_cancel(&self, m: &Member, token: u64) -> bool {
        self.cancels.get(m) == Some(&token)
    }

    /// Ends the lease of job `m`: it is no longer running, and its progress goes.
    pub(super) fn end_lease(&mut self, m: &Member) {
        self.cancels.remove(m);
        self.progress.remove(m);
        if let Some((deadline, _)) = self.leases.remove(m) {
            self.inflight.remove(&(deadline, m.clone()));
            State::bump(&mut self.running_count, &m.0, false);
        }
    }

    /// Dead-letters job `m` (its workflow step is ended by the caller, after its own events, as
    /// the Redis scripts order them).
    pub(super) fn kill(&mut self, m: Member, error: String, now: u64) {
        self.leave(&m);
        if let Some(e) = self.jobs.get_mut(&m) {
            e.failed_run(&error, e.attempt, now);
        }
        self.dead
            .entry(m.0.clone())
            .or_default()
            .insert((now, m.1.clone()));
        self.died_at.insert(m.clone(), now);
        self.wake_waiters(&m);
        let attempt = self.jobs.get(&m).map_or(0, |e| e.attempt);
        self.events.emit(&m, attempt, now, || EventKind::Dead {
            error: error.clone(),
        });
        self.record(Event::DeadLettered {
            topic: m.0,
            id: m.1,
            error,
        });
    }

    /// Keeps the record of job `m`, which succeeded at `now` with `result`.
    pub(super) fn keep_done(
        &mut self,
        m: Member,
        envelope: Envelope,
        result: Option<Vec<u8>>,
        now: u64,
    ) {
        let order = self.done_order.entry(m.0.clone()).or_default();
        order.insert((now, m.1.clone()));
        let record = DoneRecord {
            envelope,
            result,
            at: now,
        };
        if let Some(old) = self.done.insert(m.clone(), record) {
            if old.at != now {
                order.remove(&(old.at, m.1));
            }
        }
    }

    /// Takes out the record of job `m`, if it is kept; true when it was.
    pub(super) fn forget_done(&mut self, m: &Member) -> bool {
        let Some(old) = self.done.remove(m) else {
            return false;
        };
        if let Some(order) = self.done_order.get_mut(&m.0) {
            order.remove(&(old.at, m.1.clone()));
            if order.is_empty() {
                self.done_order.remove(&m.0);
            }
        }
        true
    }

    /// Drops `topic`'s done records past its retention as of `now` (all of them when it has
    /// none), the oldest first, at most `budget` of them; returns how many went. A record goes
    /// when it is older than the retention's age, or when `count` newer ones are kept.
    pub(super) fn trim_done(&mut self, topic: &Topic, now: u64, budget: usize) -> usize {
        let retention = self.retention.get(topic).copied();
        let Some(order) = self.done_order.get_mut(topic) else {
            return 0;
        };
        let mut dropped = 0;
        while dropped < budget {
            let Some(&(at, _)) = order.first() else {
                break;
            };
            let past = retention.is_none_or(|r| {
                order.len() as u64 > r.count || now.saturating_sub(at) > micros(r.age)
            });
            if !past {
                break;
            }
            let Some((_, id)) = order.pop_first() else {
                break;
            };
            self.done.remove(&(topic.clone(), id));
            dropped += 1;
        }
        if order.is_empty() {
            self.done_order.remove(topic);
        }
        dropped
    }

    pub(super) fn info(&self, m: &Member) -> Option<JobInfo> {
        let Some(env) = self.jobs.get(m) else {
            if let Some(blocked) = self.blocked_info(m) {
                return Some(blocked);
            }
            let record = self.done.get(m)?;
            let mut info = JobInfo::from_envelope(
                m.0.clone(),
                m.1.clone(),
                JobState::Done,
                record.envelope.clone(),
                Some(record.at),
            );
            info.result = record.result.clone();
            return Some(info);
        };
        let mut env = env.clone();
        let (state, score) = if self.delayed.contains(&(env.due_us, m.clone())) {
            (JobState::Delayed, None)
        } else if let Some((d, _)) = self.leases.get(m) {
            (JobState::Running, Some(*d))
        } else if let Some(d) = self.died_at.get(m) {
            (JobState::Dead, Some(*d))
        } else {
            (JobState::Ready, None)
        };
        if state == JobState::Running {
            // A running job is on the run after the ones its envelope counts.
            env.attempt = env.attempt.saturating_add(1);
        }
        let mut info = JobInfo::from_envelope(m.0.clone(), m.1.clone(), state, env, score);
        if state == JobState::Running {
            info.progress = self.progress.get(m).cloned();
            let token = self.leases.get(m).map(|(_, token)| token);
            info.cancel_requested = token.is_some() && self.cancels.get(m) == token;
        }
        Some(info)
    }
}

/// Whether a job fell due and the mover has not moved it yet, as one call found it before it
/// changed anything, and the topics whose jobs a call moved for that reason (see
/// [`State::place_pushed`]).
#[derive(Debug, Default)]
pub(super) struct Behind {
    pub(super) mover: bool,
    pub(super) moved: Vec<Topic>,
}

impl Behind {
    /// What `s` says at `now`, before a call changes it.
    pub(super) fn at(s: &State, now: u64) -> Behind {
        Behind {
            mover: s.earliest().is_some_and(|due| due <= now),
            moved: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::result::Waited;

    fn member(id: &str) -> Member {
        (Topic::new("t").unwrap(), JobId::new(id).unwrap())
    }

    /// A state holding one stored job `id` due at `due`, placed as of time 100.
    fn with_job(id: &str, due: u64) -> (State, Member) {
        let mut s = State {
            keep_history: true,
            ..State::default()
        };
        let m = member(id);
        s.jobs.insert(
            m.clone(),
            Envelope {
                attempt: 0,
                max_attempts: 3,
                created_us: 0,
                due_us: due,
                last_error: None,
                errors: Vec::new(),
                trace: None,
                priority: 0,
                group: None,
                payload: b"{}".to_vec(),
            },
        );
        s.place(m.clone(), due, 100);
        (s, m)
    }

    #[test]
    fn a_schedules_generation_grows_past_its_last_and_the_clock() {
        let mut s = State::default();
        s.new_generation("beat", 1_000);
        assert_eq!(s.schedule_gen["beat"], 1_000, "from the clock");
        s.new_generation("beat", 1_000);
        assert_eq!(
            s.schedule_gen["beat"], 1_001,
            "past the last when the clock stands"
        );
        s.new_generation("beat", 500);
        assert_eq!(
            s.schedule_gen["beat"], 1_002,
            "past the last when the clock went back"
        );
    }

    #[test]
    fn a_tick_is_after_the_fence_only_in_a_later_tick_or_generation() {
        let tick = |generation, tick_us| crate::store::FiredTick {
            schedule: "beat".into(),
            generation,
            tick_us,
        };
        assert!(tick(1, 10).is_after(None), "nothing created yet");
        assert!(tick(1, 11).is_after(Some((1, 10))));
        assert!(!tick(1, 10).is_after(Some((1, 10))), "the same tick");
        assert!(!tick(1, 9).is_after(Some((1, 10))), "an earlier tick");
        assert!(
            tick(2, 1).is_after(Some((1, 10))),
            "a new generation, any tick"
        );
        assert!(!tick(1, 99).is_after(Some((2, 1))), "an old generation");
    }

    #[test]
    fn a_due_job_is_placed_in_ready_and_a_later_one_in_delayed() {
        let (s, m) = with_job("now", 100);
        assert_eq!(s.counts(&m.0).ready, 1);
        assert_eq!(s.info(&m).unwrap().state, JobState::Ready);
        let (s, m) = with_job("later", 200);
        assert_eq!((s.counts(&m.0).delayed, s.earliest()), (1, Some(200)));
        assert_eq!(s.info(&m).unwrap().state, JobState::Delayed);
    }

    #[test]
    fn unplace_takes_a_job_out_of_delayed_or_ready_and_its_count_with_it() {
        for due in [100, 200] {
            let (mut s, m) = with_job("j", due);
            s.unplace(&m);
            assert_eq!(s.counts(&m.0), TopicCounts::default(), "due {due}");
            assert_eq!(s.earliest(), None);
        }
    }

    #[test]
    fn a_running_job_is_on_the_run_after_those_its_envelope_counts() {
        let (mut s, m) = with_job("j", 100);
        s.ready.clear();
        s.leases.insert(m.clone(), (500, 7));
        s.inflight.insert((500, m.clone()));
        State::bump(&mut s.running_count, &m.0, true);
        let info = s.info(&m).unwrap();
        assert_eq!((info.state, info.attempt), (JobState::Running, 1));
        let lease = LeaseRef {
            topic: m.0.clone(),
            id: m.1.clone(),
            token: 7,
            shard: 0,
        };
        assert_eq!(s.holds(&lease), Some(m.clone()));
        assert_eq!(
            s.holds(&LeaseRef { token: 8, ..lease }),
            None,
            "another token"
        );
        s.progress.insert(m.clone(), b"0.5".to_vec());
        assert_eq!(s.info(&m).unwrap().progress.as_deref(), Some(&b"0.5"[..]));
        s.end_lease(&m);
        assert!(s.inflight.is_empty());
        assert_eq!(s.counts(&m.0).running, 0);
        assert!(s.progress.is_empty(), "its progress went with its lease");
    }

    #[test]
    fn no_history_is_kept_unless_asked_for() {
        let mut s = State::default();
        s.record(Event::Pushed {
            topic: member("j").0,
            id: member("j").1,
        });
        assert!(s.history.is_empty());
    }

    #[test]
    fn a_killed_job_is_dead_with_its_error_and_in_the_history() {
        let (mut s, m) = with_job("j", 100);
        s.ready.clear();
        s.kill(m.clone(), "boom".into(), 300);
        let info = s.info(&m).unwrap();
        assert_eq!(info.state, JobState::Dead);
        assert_eq!(info.last_error.as_deref(), Some("boom"));
        assert_eq!(s.counts(&m.0).dead, 1);
        assert!(
            matches!(s.history.last(), Some(Event::DeadLettered { error, .. }) if error == "boom")
        );
    }

    fn envelope() -> Envelope {
        Envelope {
            attempt: 0,
            max_attempts: 3,
            created_us: 0,
            due_us: 0,
            last_error: None,
            errors: Vec::new(),
            trace: None,
            priority: 0,
            group: None,
            payload: b"{}".to_vec(),
        }
    }

    #[test]
    fn done_records_go_past_the_count_oldest_first_and_past_the_age_a_budget_at_a_time() {
        let mut s = State::default();
        let t = member("a").0;
        let retention = Retention {
            age: std::time::Duration::from_micros(1_000),
            count: 2,
        };
        s.retention.insert(t.clone(), retention);
        for (at, id) in [(100, "a"), (101, "b"), (102, "c")] {
            s.keep_done(member(id), envelope(), Some(b"1".to_vec()), at);
        }
        assert_eq!(s.trim_done(&t, 102, 10), 1, "a: two newer ones are kept");
        assert!(s.info(&member("a")).is_none());
        let b = s.info(&member("b")).unwrap();
        assert_eq!((b.state, b.result), (JobState::Done, Some(b"1".to_vec())));
        assert_eq!(s.trim_done(&t, 1_101, 10), 0, "b is not older than the age");
        assert_eq!(s.trim_done(&t, 5_000, 1), 1, "b: the budget leaves c");
        assert_eq!(s.trim_done(&t, 5_000, 10), 1, "c");
        assert!(s.done.is_empty() && s.done_order.is_empty());
    }

    #[test]
    fn a_topic_without_retention_loses_its_done_records_and_a_forgotten_one_goes() {
        let mut s = State::default();
        s.keep_done(member("a"), envelope(), None, 100);
        s.keep_done(member("b"), envelope(), None, 101);
        assert!(s.forget_done(&member("b")));
        assert!(!s.forget_done(&member("b")), "only once");
        assert_eq!(s.trim_done(&member("a").0, 100, 10), 1, "no retention");
        assert!(s.done.is_empty() && s.done_order.is_empty());
    }

    #[test]
    fn a_wait_answers_at_once_unless_the_job_is_pending() {
        let (mut s, m) = with_job("j", 100);
        assert!(
            s.wait_answer(&m).is_none(),
            "pending, no retention yet: it goes on"
        );
        let unknown = s.wait_answer(&member("never"));
        assert!(matches!(unknown, Some(Waited::NotKept)), "{unknown:?}");
        s.retention.insert(
            m.0.clone(),
            Retention::for_age(std::time::Duration::from_secs(60)),
        );
        assert!(s.wait_answer(&m).is_none(), "pending: the wait goes on");
        let unknown = s.wait_answer(&member("never"));
        assert!(matches!(unknown, Some(Waited::NotFound)));
    }

    #[test]
    fn waiters_are_told_the_end_and_those_that_gave_up_are_forgotten() {
        let (mut s, m) = with_job("j", 100);
        s.retention.insert(
            m.0.clone(),
            Retention::for_age(std::time::Duration::from_secs(60)),
        );
        let mut rx = s.add_waiter(&m, None);
        let gone_rx = s.add_waiter(&m, None);
        drop(gone_rx);
        s.forget_gone_waiters(&m);
        assert_eq!(s.waiters[&m].len(), 1);
        s.ready.clear();
        s.kill(m.clone(), "boom".into(), 300);
        assert!(s.waiters.is_empty());
        match rx.try_recv() {
            Ok(Waited::Finished(info)) => assert_eq!(info.state, JobState::Dead),
            other => panic!("told {other:?}"),
        }
    }

    #[test]
    fn throughput_keeps_the_last_hour_and_reuses_a_slot_an_hour_later() {
        const MINUTE: u64 = 60_000_000;
        let mut s = State::default();
        let t = Topic::new("t").unwrap();
        s.tally(&t, Tally::Done, 2, 1010 * MINUTE);
        s.tally(&t, Tally::Failed, 1, 1010 * MINUTE + 5);
        s.tally(&t, Tally::Done, 1, 1011 * MINUTE);
        let hour = s.throughput(&t, 1011 * MINUTE);
        assert_eq!((hour.done(), hour.failed()), (3, 1));
        assert_eq!(hour.minutes.len(), 60);
        assert_eq!(
            hour.minutes[58].done, 2,
            "minute 1010 is the one before last"
        );
        // An hour on, minute 1070 takes minute 1010's slot: the old tallies are gone.
        s.tally(&t, Tally::Failed, 4, 1070 * MINUTE);
        let later = s.throughput(&t, 1070 * MINUTE);
        assert_eq!(
            (later.done(), later.failed()),
            (1, 4),
            "only minutes 1011 and 1070"
        );
    }
}
