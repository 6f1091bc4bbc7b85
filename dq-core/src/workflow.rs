//! Workflows: jobs that wait for other jobs ([`Client::workflow`](crate::Client::workflow)).
//!
//! A workflow is a set of jobs, its steps, each named within it, with dependencies between
//! them: a step runs only once every step it comes after has ended, as its dependency's failure
//! policy ([`OnFailure`]) says. The whole set is stored in one atomic step (all or nothing);
//! steps with no dependency are pushed at once, the others wait, blocked, and each is released
//! by the very store step that ends its last dependency (the ack, the dead letter, the cancel),
//! so a fan-in becomes ready exactly once, whichever processes end its dependencies and
//! whenever a worker dies.
//!
//! The types here are what a store takes and reports; the builder users call is
//! [`WorkflowBuilder`](crate::WorkflowBuilder).

use std::time::Duration;

use crate::error::{Error, Result};
use crate::job::NewJob;
use crate::name::{JobId, Topic};

/// The most steps one workflow may have (the store writes a workflow in one atomic step).
pub const MAX_STEPS: usize = 1000;

/// The longest step name: a step's job id is `<workflow id>.<step>`, within the id's 256 bytes.
pub const MAX_STEP_NAME_LEN: usize = 64;

/// The longest workflow id (see [`MAX_STEP_NAME_LEN`]).
pub const MAX_WORKFLOW_ID_LEN: usize = 128;

/// How long a workflow's record (its steps' states, values and errors) is kept after its last
/// step ended, unless [`WorkflowBuilder::keep`](crate::WorkflowBuilder::keep) says otherwise.
pub const DEFAULT_WORKFLOW_KEEP: Duration = Duration::from_secs(86_400);

/// What becomes of a step when one of the steps it comes after fails (is dead-lettered) or is
/// cancelled.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OnFailure {
    /// The step is cancelled, never run, and so are the steps after it whose own policy says
    /// so (the default: "ship only if the charge succeeded").
    #[default]
    Cancel,
    /// The step runs all the same, once its other dependencies have ended, and reads the
    /// failure from its dependencies ("refund if the charge or the stock check failed").
    Run,
    /// The whole workflow is cancelled: every step that has not run is cancelled, and a
    /// running one is asked to stop, as [`Client::cancel_workflow`](crate::Client::cancel_workflow) does.
    CancelWorkflow,
}

impl OnFailure {
    /// The letter the stores keep: `c`, `r` or `w`.
    pub fn code(self) -> char {
        match self {
            OnFailure::Cancel => 'c',
            OnFailure::Run => 'r',
            OnFailure::CancelWorkflow => 'w',
        }
    }

    /// Reads [`OnFailure::code`]'s letter (an unknown one: [`OnFailure::Cancel`]).
    pub fn from_code(code: char) -> OnFailure {
        match code {
            'r' => OnFailure::Run,
            'w' => OnFailure::CancelWorkflow,
            _ => OnFailure::Cancel,
        }
    }

    /// `cancel`, `run` or `cancel-workflow`, as the CLI and the dashboard show it.
    pub fn as_str(self) -> &'static str {
        match self {
            OnFailure::Cancel => "cancel",
            OnFailure::Run => "run",
            OnFailure::CancelWorkflow => "cancel-workflow",
        }
    }
}

/// One step of a workflow as a store takes it.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct NewStep {
    /// Its name within the workflow.
    pub name: String,
    /// Its job. Its due time ([`Due::After`](crate::Due::After)) counts from when the step is
    /// released: from the push for a step with no dependency, from the end of its last
    /// dependency for the others.
    pub job: NewJob,
    /// The steps it comes after, each with what its failure does to this one.
    pub after: Vec<(String, OnFailure)>,
}

impl NewStep {
    /// A step `name` running `job` after the steps `after`.
    pub fn new(name: String, job: NewJob, after: Vec<(String, OnFailure)>) -> NewStep {
        NewStep { name, job, after }
    }

    /// The delay from its release (us).
    pub fn delay_us(&self) -> u64 {
        release_delay_us(self.job.due)
    }
}

/// A step's delay from its release (us): its `Due::After`; a due instant (refused for a step by
/// [`NewWorkflow::check`]) counts as none.
pub fn release_delay_us(due: crate::Due) -> u64 {
    match due {
        crate::Due::After(d) => u64::try_from(d.as_micros()).unwrap_or(u64::MAX),
        crate::Due::At(_) => 0,
    }
}

/// A workflow as a store takes it: checked by [`NewWorkflow::check`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct NewWorkflow {
    /// Its id (the rules of a job id, at most [`MAX_WORKFLOW_ID_LEN`] bytes).
    pub id: String,
    /// Its steps, in the order they were added.
    pub steps: Vec<NewStep>,
    /// How long its record is kept once its last step has ended.
    pub keep: Duration,
}

impl NewWorkflow {
    /// A workflow `id` of `steps`, kept `keep` after it ends.
    pub fn new(id: String, steps: Vec<NewStep>, keep: Duration) -> NewWorkflow {
        NewWorkflow { id, steps, keep }
    }

    /// The job id of step `name` of workflow `id`: `<id>.<name>`.
    pub fn job_id(id: &str, name: &str) -> String {
        format!("{id}.{name}")
    }

    /// Refuses a workflow a store could not keep exactly: no step, too many, a bad or repeated
    /// name, a dependency on a step it does not have, a cycle, or a step whose job uses what
    /// workflows do not support yet (a group, `unique_for`, a schedule's fence, a due instant).
    pub fn check(&self) -> Result<()> {
        let bad = |reason: String| Error::InvalidPush {
            topic: self
                .steps
                .first()
                .map_or_else(String::new, |s| s.job.topic.to_string()),
            reason: format!("workflow {:?}: {reason}", self.id),
        };
        if let Some(problem) = dq_syntax::id_problem(&self.id) {
            return Err(bad(format!("the workflow id is not valid: {problem}")));
        }
        if self.id.len() > MAX_WORKFLOW_ID_LEN {
            return Err(bad(format!(
                "a workflow id is at most {MAX_WORKFLOW_ID_LEN} bytes long"
            )));
        }
        if self.steps.is_empty() {
            return Err(bad("a workflow needs at least one step".into()));
        }
        if self.steps.len() > MAX_STEPS {
            return Err(bad(format!(
                "{} steps: a workflow has at most {MAX_STEPS}",
                self.steps.len()
            )));
        }
        let mut index = std::collections::HashMap::new();
        for (i, step) in self.steps.iter().enumerate() {
            if let Some(problem) = step_name_problem(&step.name) {
                return Err(bad(format!("step {:?}: {problem}", step.name)));
            }
            if index.insert(step.name.as_str(), i).is_some() {
                return Err(bad(format!("two steps are named {:?}", step.name)));
            }
            let id = NewWorkflow::job_id(&self.id, &step.name);
            if step.job.id.as_str() != id {
                return Err(bad(format!(
                    "step {:?}: its job id is {:?}, and a step's job id is <workflow id>.<step> ({id:?})",
                    step.name, step.job.id
                )));
            }
            let job = &step.job;
            let unsupported = if job.group.is_some() {
                Some("a group")
            } else if job.unique_for.is_some() {
                Some("unique_for")
            } else if job.fence.is_some() {
                Some("a schedule's tick")
            } else if matches!(job.due, crate::Due::At(_)) {
                Some("a due instant (`at`; use `delay`, which counts from the step's release)")
            } else {
                None
            };
            if let Some(what) = unsupported {
                return Err(bad(format!(
                    "step {:?}: a workflow step cannot have {what} in this release",
                    step.name
                )));
            }
        }
        for step in &self.steps {
            let mut seen = std::collections::HashSet::new();
            for (dep, _) in &step.after {
                if !index.contains_key(dep.as_str()) {
                    return Err(bad(format!(
                        "step {:?} comes after {dep:?}, which is not a step of the workflow",
                        step.name
                    )));
                }
                if dep == &step.name {
                    return Err(bad(format!("step {:?} comes after itself", step.name)));
                }
                if !seen.insert(dep.as_str()) {
                    return Err(bad(format!(
                        "step {:?} comes after {dep:?} twice",
                        step.name
                    )));
                }
            }
        }
        // A cycle would leave its steps blocked for ever: Kahn's algorithm must take them all.
        let mut waiting: Vec<usize> = self.steps.iter().map(|s| s.after.len()).collect();
        let mut next: Vec<usize> = (0..self.steps.len()).filter(|&i| waiting[i] == 0).collect();
        let mut taken = 0;
        while let Some(i) = next.pop() {
            taken += 1;
            for (j, step) in self.steps.iter().enumerate() {
                if step.after.iter().any(|(d, _)| d == &self.steps[i].name) {
                    waiting[j] -= 1;
                    if waiting[j] == 0 {
                        next.push(j);
                    }
                }
            }
        }
        if taken < self.steps.len() {
            let stuck: Vec<&str> = (0..self.steps.len())
                .filter(|&i| waiting[i] > 0)
                .map(|i| self.steps[i].name.as_str())
                .collect();
            return Err(bad(format!(
                "its dependencies go round in a cycle, so these steps could never run: {}",
                stuck.join(", ")
            )));
        }
        Ok(())
    }

    /// Each step's dependents: for step `i`, the steps that come after it, with their policy.
    pub fn dependents(&self) -> Vec<Vec<(String, OnFailure)>> {
        self.steps
            .iter()
            .map(|s| {
                self.steps
                    .iter()
                    .filter_map(|t| {
                        t.after
                            .iter()
                            .find(|(d, _)| d == &s.name)
                            .map(|(_, p)| (t.name.clone(), *p))
                    })
                    .collect()
            })
            .collect()
    }
}

/// Why `name` cannot name a step, or `None`: 1 to 64 bytes of letters, digits, `-`, `_`, `.`.
pub fn step_name_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        return Some("a step name must not be empty");
    }
    if name.len() > MAX_STEP_NAME_LEN {
        return Some("a step name is at most 64 bytes long");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        return Some("a step name is made of ASCII letters, digits, '-', '_' and '.'");
    }
    None
}

/// What a workflow push did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WorkflowOutcome {
    /// The workflow was stored: its steps with no dependency are pushed, the others wait.
    Created,
    /// A workflow with this id exists (running, or ended and still kept): nothing was stored,
    /// so a push retried after a lost reply cannot create a second one.
    AlreadyExists,
}

/// Where a step is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StepState {
    /// Waiting for the steps it comes after; its job is not pushed yet.
    Blocked,
    /// Its job is pushed: delayed, ready or running (its job's status says which).
    Pending,
    /// Its job succeeded.
    Succeeded,
    /// Its job was dead-lettered.
    Failed,
    /// Cancelled: by a cancel of its job or of the workflow, or because a step it came after
    /// failed.
    Cancelled,
}

impl StepState {
    /// The letter the stores keep: `b`, `p`, `d`, `f` or `c`.
    pub fn from_code(code: &str) -> Option<StepState> {
        Some(match code {
            "b" => StepState::Blocked,
            "p" => StepState::Pending,
            "d" => StepState::Succeeded,
            "f" => StepState::Failed,
            "c" => StepState::Cancelled,
            _ => return None,
        })
    }

    /// `blocked`, `pending`, `succeeded`, `failed` or `cancelled`.
    pub fn as_str(self) -> &'static str {
        match self {
            StepState::Blocked => "blocked",
            StepState::Pending => "pending",
            StepState::Succeeded => "succeeded",
            StepState::Failed => "failed",
            StepState::Cancelled => "cancelled",
        }
    }

    /// Whether the step has ended (succeeded, failed or cancelled).
    pub fn is_end(self) -> bool {
        matches!(
            self,
            StepState::Succeeded | StepState::Failed | StepState::Cancelled
        )
    }
}

/// Where a workflow is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WorkflowState {
    /// Some step has not ended.
    Running,
    /// Every step succeeded.
    Succeeded,
    /// Every step ended, and one failed (is dead-lettered).
    Failed,
    /// Every step ended, and the workflow or one of its steps was cancelled (none failed).
    Cancelled,
}

impl WorkflowState {
    /// Reads [`WorkflowState::as_str`]'s words.
    pub fn from_name(name: &str) -> Option<WorkflowState> {
        Some(match name {
            "running" => WorkflowState::Running,
            "succeeded" => WorkflowState::Succeeded,
            "failed" => WorkflowState::Failed,
            "cancelled" => WorkflowState::Cancelled,
            _ => return None,
        })
    }

    /// `running`, `succeeded`, `failed` or `cancelled`.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkflowState::Running => "running",
            WorkflowState::Succeeded => "succeeded",
            WorkflowState::Failed => "failed",
            WorkflowState::Cancelled => "cancelled",
        }
    }
}

/// One step of a workflow as a store reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct StepInfo {
    /// Its name within the workflow.
    pub name: String,
    /// Its job's topic.
    pub topic: Topic,
    /// Its job's id (`<workflow id>.<name>`).
    pub id: JobId,
    /// Where it is.
    pub state: StepState,
    /// The steps it comes after, with their policies.
    pub after: Vec<(String, OnFailure)>,
    /// What its handler returned (JSON), once it succeeded with a value.
    pub value: Option<Vec<u8>>,
    /// The error that killed it, once it failed.
    pub error: Option<String>,
}

/// A workflow as a store reports it ([`Client::workflow_status`](crate::Client::workflow_status)).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkflowInfo {
    /// Its id.
    pub id: String,
    /// Where it is.
    pub state: WorkflowState,
    /// When it was pushed (us, the store's clock).
    pub created_us: u64,
    /// When its last step ended (us), once it has.
    pub ended_us: Option<u64>,
    /// Whether it was cancelled as a whole (a cancel of the workflow, or a failure under
    /// [`OnFailure::CancelWorkflow`]).
    pub cancelled: bool,
    /// Its steps, in the order they were added.
    pub steps: Vec<StepInfo>,
}

impl StepInfo {
    /// A step's record (for stores).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        name: String,
        topic: Topic,
        id: JobId,
        state: StepState,
        after: Vec<(String, OnFailure)>,
        value: Option<Vec<u8>>,
        error: Option<String>,
    ) -> StepInfo {
        StepInfo {
            name,
            topic,
            id,
            state,
            after,
            value,
            error,
        }
    }
}

impl WorkflowInfo {
    /// A workflow's record (for stores), its state made from its steps.
    pub fn new(
        id: String,
        created_us: u64,
        ended_us: Option<u64>,
        cancelled: bool,
        steps: Vec<StepInfo>,
    ) -> WorkflowInfo {
        WorkflowInfo {
            id,
            state: WorkflowInfo::state_of(&steps, cancelled),
            created_us,
            ended_us,
            cancelled,
            steps,
        }
    }

    /// Its step `name`.
    pub fn step(&self, name: &str) -> Option<&StepInfo> {
        self.steps.iter().find(|s| s.name == name)
    }

    /// The state its steps and cancel flag make.
    pub fn state_of(steps: &[StepInfo], cancelled: bool) -> WorkflowState {
        if steps.iter().any(|s| !s.state.is_end()) {
            WorkflowState::Running
        } else if steps.iter().any(|s| s.state == StepState::Failed) {
            WorkflowState::Failed
        } else if cancelled || steps.iter().any(|s| s.state == StepState::Cancelled) {
            WorkflowState::Cancelled
        } else {
            WorkflowState::Succeeded
        }
    }
}

/// Where a step's job belongs: its workflow and its name there.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct StepRef {
    /// The workflow's id.
    pub workflow: String,
    /// The step's name.
    pub step: String,
}

impl StepRef {
    /// Reads the stores' `<workflow>:<step>` (`None` when it has no colon).
    pub fn parse(text: &str) -> Option<StepRef> {
        let (workflow, step) = text.split_once(':')?;
        Some(StepRef {
            workflow: workflow.to_owned(),
            step: step.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::{Due, NewJob};

    fn step(name: &str, after: &[&str]) -> NewStep {
        let job = NewJob {
            topic: Topic::new("t").unwrap(),
            id: JobId::new(format!("w.{name}")).unwrap(),
            due: Due::default(),
            max_attempts: 1,
            unique_for: None,
            fence: None,
            trace: None,
            priority: 0,
            group: None,
            id_drawn: false,
            payload: b"{}".to_vec(),
        };
        NewStep::new(
            name.into(),
            job,
            after
                .iter()
                .map(|d| ((*d).to_owned(), OnFailure::Cancel))
                .collect(),
        )
    }

    fn flow(steps: Vec<NewStep>) -> NewWorkflow {
        NewWorkflow::new("w".into(), steps, DEFAULT_WORKFLOW_KEEP)
    }

    #[test]
    fn a_diamond_is_accepted_and_each_step_knows_its_dependents() {
        let f = flow(vec![
            step("a", &[]),
            step("b", &["a"]),
            step("c", &["a"]),
            step("d", &["b", "c"]),
        ]);
        f.check().unwrap();
        let deps = f.dependents();
        assert_eq!(deps[0].len(), 2);
        assert_eq!(deps[3].len(), 0);
    }

    #[test]
    fn a_cycle_an_unknown_dependency_and_a_repeated_name_are_refused() {
        let cycle = flow(vec![step("a", &["b"]), step("b", &["a"]), step("c", &[])]);
        let e = cycle.check().unwrap_err().to_string();
        assert!(e.contains("cycle") && e.contains("a, b"), "{e}");
        let unknown = flow(vec![step("a", &["x"])]);
        assert!(unknown.check().unwrap_err().to_string().contains("\"x\""));
        let twice = flow(vec![step("a", &[]), step("a", &[])]);
        assert!(twice.check().unwrap_err().to_string().contains("two steps"));
        assert!(flow(vec![]).check().is_err());
        assert!(flow(vec![step("a,b", &[])]).check().is_err());
    }

    #[test]
    fn a_step_whose_job_id_is_not_the_workflows_and_its_name_is_refused() {
        let mut s = step("a", &[]);
        s.job.id = JobId::new("other").unwrap();
        let e = flow(vec![s]).check().unwrap_err().to_string();
        assert!(e.contains("\"w.a\""), "{e}");
    }
}
