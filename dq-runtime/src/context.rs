//! [`JobContext`]: what a handler may know about the job it runs.

use std::future::Future;
use std::sync::Arc;
use std::time::SystemTime;

use dq_core::store::Leases;
use dq_core::{Client, Config, Error, JobId, LeaseRef, MemoryStore, Topic};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::states::States;

/// The job a handler is running: its identity, attempt and times, its raw payload, and what
/// the runtime can hand a listener (registered state, the client). Take it as an argument of
/// the handler when you need it, or read it in your own [`FromJob`](crate::FromJob).
#[derive(Clone, Debug)]
pub struct JobContext {
    pub(crate) topic: Topic,
    pub(crate) id: JobId,
    pub(crate) attempt: u32,
    pub(crate) max_attempts: u32,
    pub(crate) due: SystemTime,
    pub(crate) enqueued: SystemTime,
    pub(crate) last_error: Option<String>,
    pub(crate) shutdown: CancellationToken,
    pub(crate) lease_lost: CancellationToken,
    pub(crate) cancel: CancellationToken,
    pub(crate) payload: Arc<Vec<u8>>,
    pub(crate) states: Arc<States>,
    pub(crate) client: Client,
    /// Where [`JobContext::progress`] writes: the run's lease and the store's lease role
    /// (`None` in a [`JobContext::for_test`] context, which has no run).
    pub(crate) progress_to: Option<ProgressTo>,
}

/// The run a context belongs to, as a progress report needs it.
#[derive(Clone, Debug)]
pub(crate) struct ProgressTo {
    pub(crate) lease: LeaseRef,
    pub(crate) leases: Arc<dyn Leases>,
}

impl JobContext {
    /// A context for calling a handler or an extractor directly, in a unit test: attempt 1 of
    /// 3, due now, an empty payload, no state, and a client on a fresh in-memory store (see
    /// the `with_*` methods to change them). It belongs to no run: its
    /// [`progress`](JobContext::progress) checks the value and writes nothing.
    pub fn for_test(topic: &str, id: &str) -> dq_core::Result<JobContext> {
        let now = SystemTime::now();
        let client = Client::new(Arc::new(MemoryStore::new()), Config::builder().build()?);
        Ok(JobContext {
            topic: Topic::new(topic)?,
            id: JobId::new(id)?,
            attempt: 1,
            max_attempts: 3,
            due: now,
            enqueued: now,
            last_error: None,
            shutdown: CancellationToken::new(),
            lease_lost: CancellationToken::new(),
            cancel: CancellationToken::new(),
            payload: Arc::new(Vec::new()),
            states: Arc::new(States::default()),
            client,
            progress_to: None,
        })
    }

    /// This context with `value` registered as state, as `Runtime::builder().state(value)`
    /// does (replacing a value of the same type).
    #[must_use]
    pub fn with_state<T: Clone + Send + Sync + 'static>(mut self, value: T) -> JobContext {
        let _ = Arc::make_mut(&mut self.states).insert(value);
        self
    }

    /// This context with `client` as the client handed to listeners.
    #[must_use]
    pub fn with_client(mut self, client: Client) -> JobContext {
        self.client = client;
        self
    }

    /// This context with `payload` as the job's raw payload (JSON, as pushed).
    #[must_use]
    pub fn with_payload(mut self, payload: impl Into<Vec<u8>>) -> JobContext {
        self.payload = Arc::new(payload.into());
        self
    }

    /// The job's topic.
    pub fn topic(&self) -> &Topic {
        &self.topic
    }
    /// The job's id.
    pub fn id(&self) -> &JobId {
        &self.id
    }
    /// This run's number, from 1. Runs the handler postponed with `Outcome::RetryAfter` do
    /// not count; runs that failed or were lost with their worker do.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }
    /// Runs allowed before the job is dead-lettered.
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }
    /// True when a failure now dead-letters the job.
    pub fn is_last_attempt(&self) -> bool {
        self.attempt >= self.max_attempts
    }
    /// When the job was due.
    pub fn due(&self) -> SystemTime {
        self.due
    }
    /// When the job was pushed.
    pub fn enqueued(&self) -> SystemTime {
        self.enqueued
    }
    /// The error of the previous run, on a retry.
    pub fn last_error(&self) -> Option<&str> {
        self.last_error.as_deref()
    }
    /// The job's payload as pushed (JSON), for an extractor that reads more than the handler's
    /// payload type holds.
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }
    /// A clone of the state of type `T` registered at start, if any (a listener asks for it
    /// with a [`State<T>`](crate::State) argument, checked at start).
    pub fn state<T: Clone + 'static>(&self) -> Option<T> {
        self.states.get::<T>().cloned()
    }
    /// Every state registered at start.
    pub fn states(&self) -> &States {
        &self.states
    }
    /// The runtime's client, to push follow-up jobs (a listener may also take a
    /// [`Client`] argument).
    pub fn client(&self) -> &Client {
        &self.client
    }
    /// Resolves when the runtime starts shutting down: a long handler may stop early and
    /// return an error (it is retried) or finish within the grace period.
    pub async fn shutdown_requested(&self) {
        self.shutdown.cancelled().await
    }

    /// Resolves when this run's lease is found lost: it expired before a renewal got through
    /// (Redis stalled or full for longer than the lease, this process paused), or Redis lost
    /// it (restarted from an older dump, failed over). The job may then run elsewhere too, and
    /// this run's outcome will be refused: a long handler should stop here, and leave its side
    /// effects to the other run. The runtime logs it once, stops renewing the lease and no
    /// longer counts the job as running in `dq workers`.
    ///
    /// ```no_run
    /// # async fn long_work() {}
    /// # use dq_runtime::{JobContext, Outcome};
    /// # async fn handler(ctx: JobContext) -> Outcome {
    /// tokio::select! {
    ///     () = long_work() => Outcome::Done,
    ///     () = ctx.lease_lost() => Outcome::Error("lease lost: left to the other run".into()),
    /// }
    /// # }
    /// ```
    pub async fn lease_lost(&self) {
        self.lease_lost.cancelled().await
    }

    /// True once this run's lease was found lost (see [`lease_lost`](JobContext::lease_lost)).
    pub fn is_lease_lost(&self) -> bool {
        self.lease_lost.is_cancelled()
    }

    /// Resolves when a cancel asked this job to stop (`Client::cancel` of the running job, from
    /// any process: it answers `ChangeOutcome::CancelRequested`). A handler that stops here and
    /// returns an error (any failure: a panic, its timeout) ends the job as cancelled: it is
    /// deleted, neither retried nor dead-lettered. A handler that ignores the request runs to
    /// its end, and a run that succeeds is done as any, its value kept as any.
    ///
    /// The request reaches the worker at once through the store's announcement, or at its next
    /// lease renewal (a third of the lease) should the announcement be lost.
    ///
    /// ```no_run
    /// # async fn long_work() {}
    /// # use dq_runtime::{JobContext, Outcome};
    /// # async fn handler(ctx: JobContext) -> Outcome {
    /// tokio::select! {
    ///     () = long_work() => Outcome::Done,
    ///     () = ctx.cancelled() => Outcome::Error("cancelled".into()),
    /// }
    /// # }
    /// ```
    pub async fn cancelled(&self) {
        self.cancel.cancelled().await
    }

    /// True once a cancel asked this job to stop (see [`cancelled`](JobContext::cancelled)).
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// What the steps this job comes after returned, when it is a step of a workflow
    /// (`Client::workflow`): each one's value or error. Two reads of the store; empty
    /// [`Dependencies`](crate::Dependencies) for a job that is not a step.
    ///
    /// ```no_run
    /// # use dq_runtime::JobContext;
    /// # #[derive(serde::Deserialize)] struct Ship { order: u64 }
    /// #[derive(serde::Deserialize)]
    /// struct Receipt { number: String }
    ///
    /// async fn ship(msg: Ship, ctx: JobContext) -> dq_core::Result<()> {
    ///     let deps = ctx.dependencies().await?;
    ///     let receipt: Receipt = deps.value("charge")?;
    ///     println!("shipping order {} paid by {}", msg.order, receipt.number);
    ///     Ok(())
    /// }
    /// ```
    pub async fn dependencies(&self) -> dq_core::Result<crate::Dependencies> {
        let step = self
            .client
            .workflow_step(self.topic.as_str(), self.id.as_str())
            .await?;
        let Some(step) = step else {
            return Ok(crate::Dependencies::default());
        };
        let flow = self.client.workflow_status(&step.workflow).await?;
        Ok(flow
            .map(|f| crate::Dependencies::of(&f, &step.step))
            .unwrap_or_default())
    }

    /// Reports how far this run has come: `value` (anything that serializes: a fraction, a
    /// count, a struct) is stored as the job's progress, as JSON, replacing the one before.
    /// `Client::status` reads it back (`JobInfo::progress`) while the job runs, and so do
    /// `dq show` and the dashboard's job page; it goes when the job leaves running (done,
    /// retried, dead), so the next run starts without one.
    ///
    /// Each call is one write to the store: report at a human pace (each second, each
    /// percent), not for every item. A value that does not serialize, or whose JSON is over
    /// [`MAX_PROGRESS_BYTES`](dq_core::MAX_PROGRESS_BYTES) (64 KiB), is an
    /// [`Error::InvalidProgress`] and nothing is written; an error of the store is returned
    /// as it is. A run whose lease is no longer held (see [`lease_lost`](JobContext::lease_lost))
    /// writes nothing and gets `Ok`: its report is logged at debug level and dropped.
    ///
    /// In a [`JobContext::for_test`] context, which belongs to no run, it checks the value
    /// (it serializes, within the bound) and writes nothing. The reports written are counted
    /// in the metric `dq_progress_reports_total{topic}`.
    ///
    /// ```no_run
    /// # #[derive(serde::Serialize)] struct Step { done: u64, of: u64 }
    /// # async fn handler(ctx: dq_runtime::JobContext) -> dq_core::Result<()> {
    /// for done in 0..100 {
    ///     // ... one percent of the work ...
    ///     ctx.progress(&Step { done, of: 100 }).await?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn progress<T: Serialize + ?Sized>(
        &self,
        value: &T,
    ) -> impl Future<Output = dq_core::Result<()>> + Send + '_ {
        // Serialized here, before the future: it holds the JSON, not `value`, so a handler's
        // future stays `Send` whatever `T` is (an `async fn` would hold `&T`, asking `T: Sync`).
        let json = serde_json::to_vec(value).map_err(|e| Error::InvalidProgress {
            topic: self.topic.to_string(),
            id: self.id.to_string(),
            reason: format!(
                "the value ({}) cannot be serialized as JSON: {e}",
                std::any::type_name::<T>()
            ),
        });
        async move {
            let json = json?;
            let Some(to) = &self.progress_to else {
                let lease = LeaseRef {
                    topic: self.topic.clone(),
                    id: self.id.clone(),
                    token: 0,
                    shard: 0,
                };
                return dq_core::store::check_progress(&lease, &json);
            };
            if to.leases.progress(&to.lease, &json).await? {
                crate::metrics::count(dq_core::metric::PROGRESS_REPORTS, self.topic.as_str());
            } else {
                tracing::debug!(
                    topic = %self.topic, id = %self.id,
                    "progress not recorded: this run's lease is no longer held"
                );
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A value whose serialization fails.
    struct Unserializable;

    impl Serialize for Unserializable {
        fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
            Err(<S::Error as serde::ser::Error>::custom("no way"))
        }
    }

    #[tokio::test]
    async fn a_test_contexts_progress_checks_the_value_and_writes_nothing() {
        let ctx = JobContext::for_test("invoice", "7").unwrap();
        ctx.progress(&0.5).await.unwrap();
        ctx.progress("half way").await.unwrap();
        let err = ctx.progress(&Unserializable).await.unwrap_err();
        assert_eq!(err.kind(), dq_core::ErrorKind::InvalidInput);
        let text = err.to_string();
        assert!(
            text.contains("invoice:7") && text.contains("no way"),
            "{text}"
        );
        // Its JSON is two bytes over the bound (the quotes).
        let big = "x".repeat(dq_core::MAX_PROGRESS_BYTES);
        let err = ctx.progress(&big).await.unwrap_err();
        assert_eq!(err.kind(), dq_core::ErrorKind::InvalidInput);
        assert!(err.to_string().contains("65538 bytes"), "{err}");
    }
}
