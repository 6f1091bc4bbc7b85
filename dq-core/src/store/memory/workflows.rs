//! Workflows in the memory store: each workflow's steps, and which step each job is, settled
//! under the store's lock by the same call that ends a job (as the Redis scripts do, lib.lua's
//! workflows).

use async_trait::async_trait;

use super::produce::store_job;
use super::state::Behind;
use super::state::{Member, State};
use super::{lock, MemoryStore};
use crate::error::{Error, Result};
use crate::events::EventKind;
use crate::job::{JobInfo, JobState, NewJob};
use crate::name::{JobId, Topic};
use crate::store::Workflows;
use crate::workflow::{
    NewWorkflow, OnFailure, StepInfo, StepRef, StepState, WorkflowInfo, WorkflowOutcome,
};

/// How a step's job ended.
pub(super) enum StepEnd {
    /// Succeeded, with its handler's value.
    Succeeded(Option<Vec<u8>>),
    /// Dead-lettered, with its error.
    Failed(String),
    /// Cancelled.
    Cancelled,
}

/// One workflow.
#[derive(Debug)]
pub(super) struct Workflow {
    created: u64,
    keep: u64,
    ended: Option<u64>,
    cancelled: bool,
    steps: Vec<WorkflowStep>,
    /// The step whose end was settled last (the one a `workflow_ended` event names).
    last: Option<usize>,
    /// Whether its end was announced.
    announced: bool,
}

#[derive(Debug)]
struct WorkflowStep {
    name: String,
    member: Member,
    state: StepState,
    /// Dependencies not ended yet (for a blocked step).
    waiting: usize,
    after: Vec<(String, OnFailure)>,
    dependents: Vec<(String, OnFailure)>,
    /// The job of a blocked step, pushed when it is released.
    job: Option<NewJob>,
    value: Option<Vec<u8>>,
    error: Option<String>,
}

/// What ending a step does besides its own state: steps to release, blocked steps cancelled
/// (their jobs never existed), jobs of pending steps to cancel (the workflow was cancelled).
#[derive(Default)]
struct Effects {
    release: Vec<usize>,
    dropped: Vec<Member>,
    stop: Vec<Member>,
}

impl Workflow {
    fn index(&self, name: &str) -> Option<usize> {
        self.steps.iter().position(|s| s.name == name)
    }

    /// Ends step `i` and settles its dependents, as lib.lua's `workflow_end` does.
    fn end_step(&mut self, i: usize, end: StepEnd, now: u64, fx: &mut Effects) {
        if self.steps[i].state.is_end() {
            return;
        }
        let ok = matches!(end, StepEnd::Succeeded(_));
        self.last = Some(i);
        let step = &mut self.steps[i];
        match end {
            StepEnd::Succeeded(value) => {
                step.state = StepState::Succeeded;
                step.value = value;
            }
            StepEnd::Failed(error) => {
                step.state = StepState::Failed;
                step.error = Some(error);
            }
            StepEnd::Cancelled => step.state = StepState::Cancelled,
        }
        let mut queue = vec![(i, ok)];
        while let Some((i, ok)) = queue.pop() {
            for (child, policy) in self.steps[i].dependents.clone() {
                let Some(c) = self.index(&child) else {
                    continue;
                };
                if self.steps[c].state != StepState::Blocked {
                    continue;
                }
                if ok || policy == OnFailure::Run {
                    let step = &mut self.steps[c];
                    step.waiting = step.waiting.saturating_sub(1);
                    if step.waiting == 0 && !self.cancelled {
                        step.state = StepState::Pending;
                        fx.release.push(c);
                    }
                } else if policy == OnFailure::Cancel {
                    self.last = Some(c);
                    self.steps[c].state = StepState::Cancelled;
                    fx.dropped.push(self.steps[c].member.clone());
                    queue.push((c, false));
                } else {
                    self.cancel_all(fx);
                }
            }
        }
        self.check_ended(now);
    }

    /// Cancels the workflow: blocked steps (and those about to be released) are cancelled,
    /// pending ones' jobs are to be cancelled. Returns how many steps that touched.
    fn cancel_all(&mut self, fx: &mut Effects) -> usize {
        self.cancelled = true;
        let mut n = 0;
        for i in 0..self.steps.len() {
            let releasing = fx.release.contains(&i);
            let step = &mut self.steps[i];
            match step.state {
                StepState::Blocked => {}
                StepState::Pending if releasing => fx.release.retain(|&r| r != i),
                StepState::Pending => {
                    fx.stop.push(step.member.clone());
                    n += 1;
                    continue;
                }
                _ => continue,
            }
            step.state = StepState::Cancelled;
            step.job = None;
            fx.dropped.push(step.member.clone());
            self.last = Some(i);
            n += 1;
        }
        n
    }

    fn check_ended(&mut self, now: u64) {
        if self.ended.is_none() && self.steps.iter().all(|s| s.state.is_end()) {
            self.ended = Some(now);
        }
    }

    fn info(&self, id: &str) -> WorkflowInfo {
        let steps: Vec<StepInfo> = self
            .steps
            .iter()
            .map(|s| StepInfo {
                name: s.name.clone(),
                topic: s.member.0.clone(),
                id: s.member.1.clone(),
                state: s.state,
                after: s.after.clone(),
                value: s.value.clone(),
                error: s.error.clone(),
            })
            .collect();
        WorkflowInfo {
            id: id.to_owned(),
            state: WorkflowInfo::state_of(&steps, self.cancelled),
            created_us: self.created,
            ended_us: self.ended,
            cancelled: self.cancelled,
            steps,
        }
    }
}

impl State {
    /// The job `m` ended: when it is a step of a workflow, its step ends with it, and what that
    /// does follows (dependents released or cancelled, the workflow cancelled).
    pub(super) fn step_ended(&mut self, m: &Member, end: StepEnd, now: u64) {
        let Some((wf, name)) = self.step_of.remove(m) else {
            return;
        };
        let mut fx = Effects::default();
        let Some(flow) = self.workflows.get_mut(&wf) else {
            return;
        };
        let Some(i) = flow.index(&name) else {
            return;
        };
        // A blocked step ends only cancelled (it has no job to end otherwise): announced as the
        // steps it drops are.
        if flow.steps[i].state == StepState::Blocked {
            fx.dropped.push(m.clone());
        }
        flow.end_step(i, end, now, &mut fx);
        self.apply(&wf, fx, now);
    }

    /// Carries out what a step's end or a workflow's cancel decided.
    fn apply(&mut self, wf: &str, fx: Effects, now: u64) {
        // The blocked steps cancelled: marked cancelled in a topic that keeps its ends, and
        // their waits told, as Redis announces them (lib.lua's workflow_write).
        for m in &fx.dropped {
            self.step_of.remove(m);
            self.bury(m, now);
            self.wake_waiters(m);
        }
        for i in fx.release {
            let Some(flow) = self.workflows.get_mut(wf) else {
                break;
            };
            let Some(job) = flow.steps[i].job.take() else {
                continue;
            };
            let m = flow.steps[i].member.clone();
            let created = flow.created;
            self.release_job(job, m, now, created);
        }
        for m in fx.stop {
            self.stop_job(&m, now);
        }
        self.announce_end(wf, now);
    }

    /// Announces a workflow that just ended on the stream of its last step's topic (once).
    fn announce_end(&mut self, wf: &str, now: u64) {
        let Some(flow) = self.workflows.get_mut(wf) else {
            return;
        };
        if flow.ended.is_none() || flow.announced {
            return;
        }
        flow.announced = true;
        let Some(last) = flow.last else {
            return;
        };
        let info = flow.info(wf);
        let m = flow.steps[last].member.clone();
        self.events.emit(&m, 0, now, || EventKind::WorkflowEnded {
            workflow: wf.to_owned(),
            state: info.state,
        });
    }

    /// Pushes a step's job, due its delay from now; its envelope says it was created when its
    /// workflow was pushed (`created`), as on Redis.
    fn release_job(&mut self, job: NewJob, m: Member, now: u64, created: u64) {
        let before = self.earliest();
        let topic = m.0.clone();
        // (A workflow's steps have no group: nothing waits behind the mover.)
        if store_job(self, job, m.clone(), now, &mut Behind::default()) {
            self.woken.push(topic);
        }
        if let Some(e) = self.jobs.get_mut(&m) {
            e.created_us = created;
        }
        if let Some(due) = self.earliest().filter(|a| before.is_none_or(|b| a < &b)) {
            self.workflow_due = Some(self.workflow_due.map_or(due, |d| d.min(due)));
        }
    }

    /// Cancels the job of a pending step of a cancelled workflow: a waiting one is deleted
    /// (and its step ends), a running one is asked to stop.
    fn stop_job(&mut self, m: &Member, now: u64) {
        if !self.jobs.contains_key(m) || self.died_at.contains_key(m) {
            return;
        }
        if let Some(&(_, token)) = self.leases.get(m) {
            self.cancels.insert(m.clone(), token);
            self.workflow_cancels.push(m.clone());
            return;
        }
        self.cancel_waiting(m, now);
    }

    /// A job just taken back from its dead worker (reclaim), ready again: when its workflow is
    /// cancelled it does not run again, it is deleted and its step cancelled (as on Redis).
    pub(super) fn taken_back(&mut self, m: &Member, now: u64) {
        let cancelled = self
            .step_of
            .get(m)
            .and_then(|(wf, _)| self.workflows.get(wf))
            .is_some_and(|f| f.cancelled);
        if cancelled && self.jobs.contains_key(m) && !self.leases.contains_key(m) {
            self.cancel_waiting(m, now);
        }
    }

    /// The record of a blocked step's job, for `status`.
    pub(super) fn blocked_info(&self, m: &Member) -> Option<JobInfo> {
        let (wf, name) = self.step_of.get(m)?;
        let flow = self.workflows.get(wf)?;
        let step = &flow.steps[flow.index(name)?];
        let job = step.job.as_ref()?;
        let delay = crate::workflow::release_delay_us(job.due);
        let envelope = crate::envelope::Envelope {
            attempt: 0,
            max_attempts: job.max_attempts,
            created_us: flow.created,
            due_us: flow.created.saturating_add(delay),
            last_error: None,
            errors: Vec::new(),
            trace: job.trace.clone(),
            priority: job.priority,
            group: None,
            payload: job.payload.clone(),
        };
        Some(JobInfo::from_envelope(
            m.0.clone(),
            m.1.clone(),
            JobState::Blocked,
            envelope,
            None,
        ))
    }

    /// Whether `m` is the job of a blocked step (its id is taken: a push of it is kept). Read
    /// from the step's state: a pending step whose job was just deleted (cancelled, its step
    /// not yet ended) is not blocked, and the waits for it are answered.
    pub(super) fn is_blocked_step(&self, m: &Member) -> bool {
        if self.jobs.contains_key(m) {
            return false;
        }
        let Some((wf, name)) = self.step_of.get(m) else {
            return false;
        };
        self.workflows.get(wf).is_some_and(|f| {
            f.index(name)
                .is_some_and(|i| f.steps[i].state == StepState::Blocked)
        })
    }

    /// Drops the workflows that ended longer ago than they are kept.
    fn forget_ended_workflows(&mut self, now: u64) {
        self.workflows
            .retain(|_, f| f.ended.is_none_or(|e| e.saturating_add(f.keep) > now));
    }
}

#[async_trait]
impl Workflows for MemoryStore {
    async fn push_workflow(&self, flow: &NewWorkflow) -> Result<WorkflowOutcome> {
        flow.check()?;
        flow.steps
            .iter()
            .try_for_each(|s| crate::job::check_priority(&s.job))?;
        let now = self.now_us();
        {
            let mut s = lock(&self.state);
            s.forget_ended_workflows(now);
            if s.workflows.contains_key(&flow.id) {
                return Ok(WorkflowOutcome::AlreadyExists);
            }
            let members: Vec<Member> = flow
                .steps
                .iter()
                .map(|st| (st.job.topic.clone(), st.job.id.clone()))
                .collect();
            // A job of the id, pending, dead or kept as succeeded, refuses the workflow (as
            // on Redis, where such a job's envelope is in `jobs`).
            if let Some(m) = members.iter().find(|m| {
                s.step_of.contains_key(*m) || s.jobs.contains_key(*m) || s.done.contains_key(*m)
            }) {
                return Err(Error::InvalidPush {
                    topic: m.0.to_string(),
                    reason: format!(
                        "workflow {:?}: job {} exists already (pending, dead-lettered or kept as succeeded), and a step's job id is <workflow id>.<step>; nothing was stored (use a new workflow id)",
                        flow.id, m.1
                    ),
                });
            }
            let dependents = flow.dependents();
            let steps = flow
                .steps
                .iter()
                .zip(dependents)
                .zip(&members)
                .map(|((st, dependents), m)| WorkflowStep {
                    name: st.name.clone(),
                    member: m.clone(),
                    state: if st.after.is_empty() {
                        StepState::Pending
                    } else {
                        StepState::Blocked
                    },
                    waiting: st.after.len(),
                    after: st.after.clone(),
                    dependents,
                    job: (!st.after.is_empty()).then(|| st.job.clone()),
                    value: None,
                    error: None,
                })
                .collect();
            s.workflows.insert(
                flow.id.clone(),
                Workflow {
                    created: now,
                    keep: u64::try_from(flow.keep.as_micros()).unwrap_or(u64::MAX),
                    ended: None,
                    cancelled: false,
                    steps,
                    last: None,
                    announced: false,
                },
            );
            for (st, m) in flow.steps.iter().zip(&members) {
                s.step_of
                    .insert(m.clone(), (flow.id.clone(), st.name.clone()));
                if st.after.is_empty() {
                    s.release_job(st.job.clone(), m.clone(), now, now);
                }
            }
        }
        self.flush_woken();
        Ok(WorkflowOutcome::Created)
    }

    async fn workflow(&self, id: &str) -> Result<Option<WorkflowInfo>> {
        let now = self.now_us();
        let mut s = lock(&self.state);
        s.forget_ended_workflows(now);
        Ok(s.workflows.get(id).map(|f| f.info(id)))
    }

    async fn cancel_workflow(&self, id: &str) -> Result<Option<usize>> {
        let now = self.now_us();
        let n = {
            let mut s = lock(&self.state);
            s.forget_ended_workflows(now);
            let mut fx = Effects::default();
            let Some(flow) = s.workflows.get_mut(id) else {
                return Ok(None);
            };
            if flow.ended.is_some() {
                // An ended workflow is left as it ended.
                return Ok(Some(0));
            }
            let n = flow.cancel_all(&mut fx);
            flow.check_ended(now);
            s.apply(id, fx, now);
            n
        };
        self.flush_woken();
        Ok(Some(n))
    }

    async fn step_of(&self, topic: &Topic, id: &JobId) -> Result<Option<StepRef>> {
        let s = lock(&self.state);
        Ok(s.step_of
            .get(&(topic.clone(), id.clone()))
            .map(|(workflow, step)| StepRef {
                workflow: workflow.clone(),
                step: step.clone(),
            }))
    }
}
