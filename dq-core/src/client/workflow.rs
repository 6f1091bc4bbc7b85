//! Workflows: [`Client::workflow`] and the builder it returns.

use std::time::Duration;

use serde::Serialize;

use super::{Client, PushBuilder};
use crate::error::{Error, Result};
use crate::message::Message;
use crate::workflow::{
    NewStep, NewWorkflow, OnFailure, StepRef, WorkflowInfo, WorkflowOutcome, DEFAULT_WORKFLOW_KEEP,
};

impl Client {
    /// Starts a workflow `id`: jobs, its steps, that run once the steps they come after have
    /// succeeded, pushed together in one atomic step. "Charge the card and check the stock;
    /// when both have succeeded, ship 10 minutes later; if either fails, refund":
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use dq_core::workflow::OnFailure;
    /// # async fn f(client: dq_core::Client) -> dq_core::Result<()> {
    /// # let order = serde_json::json!({ "order": 42 });
    /// let mut flow = client.workflow("checkout-42");
    /// flow.step_to("charge", "charge-card", &order);
    /// flow.step_to("stock", "check-stock", &order);
    /// flow.step_to("ship", "ship-order", &order)
    ///     .after("charge")
    ///     .after("stock")
    ///     .delay(Duration::from_secs(600));
    /// flow.step_to("refund", "refund-order", &order)
    ///     .after_with("charge", OnFailure::Run)
    ///     .after_with("stock", OnFailure::Run);
    /// flow.push().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// Each step is a job of its topic, run by that topic's listener as any job, with the id
    /// `<workflow id>.<step name>`; its handler reads what the steps it comes after returned
    /// with `JobContext::dependencies`. A step runs only when every step it comes after has
    /// ended: when one fails (is dead-lettered) or is cancelled, its [`OnFailure`] decides. A
    /// `delay` counts from the step's release (the end of its last dependency). A workflow
    /// of the same id that exists is left as it is ([`WorkflowOutcome::AlreadyExists`]).
    ///
    /// Workflows need a namespace of one shard (the default on one Redis; on a cluster give
    /// them a namespace of their own with `shards(1)`): all of a workflow's
    /// bookkeeping lives where one script sees it.
    pub fn workflow(&self, id: impl Into<String>) -> WorkflowBuilder {
        WorkflowBuilder {
            client: self.clone(),
            id: id.into(),
            steps: Vec::new(),
            keep: DEFAULT_WORKFLOW_KEEP,
        }
    }

    /// The workflow `id`: each step's state, and its value or error once it ended. `None`
    /// when there is none (never pushed, or ended longer ago than it is kept).
    pub async fn workflow_status(&self, id: &str) -> Result<Option<WorkflowInfo>> {
        self.store.workflow(id).await
    }

    /// The workflow and step the job `topic`/`id` is a step of, while the step has not ended
    /// (what `JobContext::dependencies` starts from).
    pub async fn workflow_step(&self, topic: &str, id: &str) -> Result<Option<StepRef>> {
        let (topic, id) = (crate::Topic::new(topic)?, crate::JobId::new(id)?);
        self.store.step_of(&topic, &id).await
    }

    /// Cancels the workflow `id`: what has not run is cancelled (blocked steps, and the jobs
    /// of steps that wait), a running step is asked to stop (as [`Client::cancel`] asks), and
    /// no step starts after this. Returns how many steps it cancelled or asked to stop, `None`
    /// when there is no such workflow.
    pub async fn cancel_workflow(&self, id: &str) -> Result<Option<usize>> {
        self.store.cancel_workflow(id).await
    }
}

/// A workflow being prepared ([`Client::workflow`]); [`push`](WorkflowBuilder::push) stores it.
#[must_use = "a workflow does nothing until it is pushed"]
pub struct WorkflowBuilder {
    client: Client,
    id: String,
    steps: Vec<Step>,
    keep: Duration,
}

impl std::fmt::Debug for WorkflowBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkflowBuilder")
            .field("id", &self.id)
            .field("steps", &self.steps.len())
            .field("keep", &self.keep)
            .finish_non_exhaustive()
    }
}

/// One step of a workflow being prepared: its dependencies and the options of its job.
pub struct Step {
    name: String,
    push: Option<PushBuilder>,
    after: Vec<(String, OnFailure)>,
}

impl std::fmt::Debug for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Step")
            .field("name", &self.name)
            .field("after", &self.after)
            .finish_non_exhaustive()
    }
}

impl Step {
    fn with(&mut self, change: impl FnOnce(PushBuilder) -> PushBuilder) -> &mut Step {
        self.push = self.push.take().map(change);
        self
    }

    /// Runs after step `name` has succeeded; if it fails or is cancelled, this step is
    /// cancelled ([`OnFailure::Cancel`]).
    pub fn after(&mut self, name: &str) -> &mut Step {
        self.after_with(name, OnFailure::Cancel)
    }

    /// Runs after step `name` has ended; `on_failure` says what its failure or cancel does.
    pub fn after_with(&mut self, name: &str, on_failure: OnFailure) -> &mut Step {
        self.after.push((name.to_owned(), on_failure));
        self
    }

    /// Due this long after the step is released: after the push for a step with no
    /// dependency, after its last dependency ended for the others.
    pub fn delay(&mut self, delay: Duration) -> &mut Step {
        self.with(|p| p.delay(delay))
    }

    /// Retries after a failed first run before the step's job is dead-lettered (default 2).
    pub fn max_retries(&mut self, retries: u32) -> &mut Step {
        self.with(|p| p.max_retries(retries))
    }

    /// The job's priority within its topic ([`PushBuilder::priority`]).
    pub fn priority(&mut self, priority: i8) -> &mut Step {
        self.with(|p| p.priority(priority))
    }
}

impl WorkflowBuilder {
    /// Adds step `name` (letters, digits, `-`, `_`, `.`; at most 64 bytes, unique within the
    /// workflow) with `message` for its topic's listener.
    pub fn step<M: Message>(&mut self, name: &str, message: M) -> &mut Step {
        let push = self.client.push(message);
        self.add(name, push)
    }

    /// Like [`WorkflowBuilder::step`] for any serializable value, to a topic named at run time.
    pub fn step_to<T: Serialize + ?Sized>(
        &mut self,
        name: &str,
        topic: &str,
        message: &T,
    ) -> &mut Step {
        let push = self.client.push_to(topic, message);
        self.add(name, push)
    }

    fn add(&mut self, name: &str, push: PushBuilder) -> &mut Step {
        let push = push.id(NewWorkflow::job_id(&self.id, name));
        self.steps.push(Step {
            name: name.to_owned(),
            push: Some(push),
            after: Vec::new(),
        });
        let last = self.steps.len() - 1;
        &mut self.steps[last]
    }

    /// Keeps the workflow's record (its steps' states, values and errors) for `keep` after its
    /// last step ended (default one day, [`DEFAULT_WORKFLOW_KEEP`]).
    pub fn keep(&mut self, keep: Duration) -> &mut WorkflowBuilder {
        self.keep = keep;
        self
    }

    /// The workflow as the store takes it, checked: every step's job as a push checks it, and
    /// the graph (no cycle, no unknown step; [`NewWorkflow::check`]).
    pub fn build(self) -> Result<NewWorkflow> {
        let config = self.client.config.clone();
        let mut steps = Vec::with_capacity(self.steps.len());
        for step in self.steps {
            let Some(push) = step.push else { continue };
            steps.push(NewStep::new(step.name, push.into_job(&config)?, step.after));
        }
        let flow = NewWorkflow::new(self.id, steps, self.keep);
        flow.check()?;
        Ok(flow)
    }

    /// Stores the workflow, all or nothing: its steps with no dependency are pushed, the
    /// others wait for theirs. Refused before anything is stored
    /// ([`Error::InvalidPush`]) when a step is invalid, the graph has a cycle or names a step
    /// it does not have, a step's job id is taken by a pending job, or the namespace has more
    /// than one shard.
    pub async fn push(self) -> Result<WorkflowOutcome> {
        let store = self.client.store.clone();
        let flow = self.build()?;
        if store.shards() > 1 {
            return Err(Error::InvalidPush {
                topic: flow.steps[0].job.topic.to_string(),
                reason: format!(
                    "workflow {:?}: workflows need a namespace of one shard, and this one has {} (give workflows a namespace of their own with shards(1))",
                    flow.id,
                    store.shards()
                ),
            });
        }
        store.push_workflow(&flow).await
    }
}
