//! [`JobContext`]: what a handler may know about the job it runs.

use std::time::SystemTime;

use dq_core::{JobId, Topic};
use tokio_util::sync::CancellationToken;

/// The job a handler is running: its identity, attempt and times. Take it as the handler's
/// second argument when you need it.
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
}

impl JobContext {
    /// A context for calling a handler directly, in a unit test: attempt 1 of 3, due now.
    pub fn for_test(topic: &str, id: &str) -> dq_core::Result<JobContext> {
        let now = SystemTime::now();
        Ok(JobContext {
            topic: Topic::new(topic)?,
            id: JobId::new(id)?,
            attempt: 1,
            max_attempts: 3,
            due: now,
            enqueued: now,
            last_error: None,
            shutdown: CancellationToken::new(),
        })
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
    /// Resolves when the runtime starts shutting down: a long handler may stop early and
    /// return an error (it is retried) or finish within the grace period.
    pub async fn shutdown_requested(&self) {
        self.shutdown.cancelled().await
    }
}
