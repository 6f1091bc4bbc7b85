//! Workflows as the store keeps them: the [`Workflows`] role.

use async_trait::async_trait;

use super::Sharded;
use crate::error::Result;
use crate::name::{JobId, Topic};
use crate::workflow::{NewWorkflow, StepRef, WorkflowInfo, WorkflowOutcome};

/// Jobs that wait for other jobs ([`crate::workflow`]).
///
/// A workflow lives in one shard, with all its steps' jobs, so that one atomic step sees
/// everything a fan-in needs: the store step that ends a job (ack, dead letter, reclaim of a
/// last attempt, cancel) also ends its step, and releases each dependent whose last dependency
/// that was, exactly once. A store of several shards refuses workflows
/// ([`Error::InvalidPush`](crate::Error::InvalidPush)).
#[async_trait]
pub trait Workflows: Sharded {
    /// Stores a workflow ([`NewWorkflow::check`]ed by the caller) in one atomic step: its steps
    /// with no dependency are pushed, the others wait, blocked. A workflow of the same id that
    /// exists (running, or ended and still kept) is left as it is
    /// ([`WorkflowOutcome::AlreadyExists`]). A step whose job id is already taken by a pending
    /// job refuses the whole workflow ([`Error::InvalidPush`](crate::Error::InvalidPush)),
    /// nothing stored.
    async fn push_workflow(&self, flow: &NewWorkflow) -> Result<WorkflowOutcome>;

    /// The workflow `id`, `None` when there is none (never pushed, or ended longer ago than
    /// it is kept).
    async fn workflow(&self, id: &str) -> Result<Option<WorkflowInfo>>;

    /// Cancels the workflow `id`: its blocked steps are cancelled, its steps whose jobs wait
    /// (delayed or ready) are deleted, its running ones asked to stop (as
    /// [`Producer::cancel`](super::Producer::cancel) does), and no step is released any more.
    /// Returns how many steps this cancelled or asked to stop, `None` when there is no such
    /// workflow.
    async fn cancel_workflow(&self, id: &str) -> Result<Option<usize>>;

    /// The workflow and step the job `topic`/`id` is a step of, while it has not ended.
    async fn step_of(&self, topic: &Topic, id: &JobId) -> Result<Option<StepRef>>;
}
