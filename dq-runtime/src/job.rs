//! One leased job's run: its [`JobContext`], the handler under its timeout and the shutdown,
//! the run's metrics; then its fate is decided ([`crate::fate`]) and written
//! ([`crate::settle`]).

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dq_core::store::{Envelope, Leases};
use dq_core::{from_us, metric, LeaseRef, LeasedJob};
use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::backoff::unit_random;
use crate::context::{JobContext, ProgressTo};
use crate::extract::HandlerFuture;
use crate::fate::{self, Ended};
use crate::listener::Listener;
use crate::outcome::Outcome;
use crate::settle::settle;
use crate::shared::Shared;

/// Longest wait for a cancelled handler to stop (see `supervise`).
const ABORTED_LIMIT: Duration = Duration::from_secs(10);

/// What a job's task needs: the runtime's shared state, the store's lease role (to write the
/// job's fate) and the job's listener.
pub(crate) struct Runner {
    pub(crate) shared: Arc<Shared>,
    pub(crate) leases: Arc<dyn Leases>,
    pub(crate) listener: Arc<Listener>,
}

/// How a handler's run ended.
struct Ran {
    outcome: Outcome,
    /// Cancelled by the listener's timeout (its outcome is the timeout's error).
    timed_out: bool,
}

impl Runner {
    /// Runs one leased job to its end: decode, call under the timeout, then ack, retry or
    /// dead-letter. Holds its permit until the handler returns, or, for a run that met its
    /// provider's rate limit, until the topic's hold is written: a consumer with a free permit
    /// would otherwise fetch the next job before the hold exists, into the same 429.
    pub(crate) async fn run(
        self,
        job: LeasedJob,
        permit: OwnedSemaphorePermit,
        fetched_at_us: u64,
    ) {
        let max_attempts = fate::max_attempts(self.listener.retries, job.envelope.max_attempts);
        let lateness_ms = (fetched_at_us as f64 - job.envelope.due_us as f64) / 1000.0;
        let span = tracing::info_span!(
            "job", topic = %job.lease.topic, id = %job.lease.id, attempt = job.envelope.attempt,
            max_attempts, lateness_ms
        );
        // With `otel`, the run continues the trace its push recorded (before the span is
        // entered: its parent cannot change after).
        #[cfg(feature = "otel")]
        dq_core::trace::continue_run(&span, &job);
        let LeasedJob { lease, envelope } = job;
        async move {
            let attempt = envelope.attempt;
            let (ended, kept) = self
                .call(&lease, envelope, max_attempts, permit, fetched_at_us)
                .await;
            let backoff = &self.listener.backoff;
            let fate = fate::fate(ended, attempt, max_attempts, backoff, unit_random());
            let run = attempt.saturating_add(1);
            settle(&self.shared, self.leases.as_ref(), lease, fate, run).await;
            drop(kept);
        }
        .instrument(span)
        .await
    }

    /// Decodes the payload and runs the handler until it returns, times out, or shutdown
    /// cancels it. Holds `permit` until then, and gives it back for a run that returned
    /// `Outcome::RateLimited` (to be held until the hold is written); the job is in the running
    /// set from the start of the handler (so that its lease is renewed).
    async fn call(
        &self,
        lease: &LeaseRef,
        envelope: Envelope,
        max_attempts: u32,
        permit: OwnedSemaphorePermit,
        fetched_at_us: u64,
    ) -> (Ended, Option<OwnedSemaphorePermit>) {
        let due_us = envelope.due_us;
        let lease_lost = CancellationToken::new();
        let cancel = CancellationToken::new();
        let tokens = (lease_lost.clone(), cancel.clone());
        let (ctx, payload) = self.context(lease, envelope, max_attempts, tokens);
        let started = Instant::now();
        let future = match self.decode(&payload, ctx) {
            Ok(future) => future,
            Err(poison) => return (Ended::Poison(poison), None),
        };
        let lateness = Duration::from_micros(fetched_at_us.saturating_sub(due_us));
        crate::metrics::started(lease.topic.as_str(), lateness);
        // The lease stays in the running set until the job's fate is written (the acker removes
        // it after the ack), so a slow ack cannot let the lease expire.
        self.shared.running.start(lease, lease_lost, cancel.clone());
        let ran = supervise(&self.shared, &self.listener, future).await;
        let kept = if matches!(
            &ran,
            Some(Ran {
                outcome: Outcome::RateLimited(_),
                ..
            })
        ) {
            Some(permit)
        } else {
            // The run's slot of a global concurrency is free for the fetch this permit wakes.
            self.leases.run_returned(lease);
            drop(permit);
            None
        };
        let Some(ran) = ran else {
            // Shutdown cancelled the handler of a job a cancel had asked to stop: it ends as
            // cancelled rather than going back to ready.
            if cancel.is_cancelled() {
                let stopped = Outcome::Error("cancelled by shutdown".to_owned());
                return (Ended::CancelRequested(stopped), None);
            }
            return (Ended::Cancelled, None);
        };
        self.shared.running.settling(lease);
        let stopped = cancel.is_cancelled();
        record(lease.topic.as_str(), started.elapsed(), &ran, stopped);
        if stopped {
            return (Ended::CancelRequested(ran.outcome), kept);
        }
        (Ended::Returned(ran.outcome), kept)
    }

    /// The handler's view of the job, and its payload.
    fn context(
        &self,
        lease: &LeaseRef,
        envelope: Envelope,
        max_attempts: u32,
        (lease_lost, cancel): (CancellationToken, CancellationToken),
    ) -> (JobContext, Arc<Vec<u8>>) {
        let payload = Arc::new(envelope.payload);
        let ctx = JobContext {
            topic: lease.topic.clone(),
            id: lease.id.clone(),
            attempt: envelope.attempt,
            max_attempts,
            due: from_us(envelope.due_us),
            enqueued: from_us(envelope.created_us),
            last_error: envelope.last_error,
            shutdown: self.shared.stop.child_token(),
            lease_lost,
            cancel,
            payload: payload.clone(),
            states: self.shared.states.clone(),
            client: self.shared.client.clone(),
            progress_to: Some(ProgressTo {
                lease: lease.clone(),
                leases: self.leases.clone(),
            }),
        };
        (ctx, payload)
    }

    /// Decodes the payload and runs the argument extractors, here, before the handler's own
    /// task: a panic in one of them (a user's `FromJob`) is a failed run, retried and
    /// dead-lettered as any. `Err`: the payload cannot be decoded (a poison message).
    fn decode(&self, payload: &[u8], ctx: JobContext) -> Result<HandlerFuture, String> {
        let called =
            std::panic::catch_unwind(AssertUnwindSafe(|| (self.listener.handler)(payload, ctx)));
        called.unwrap_or_else(|panic| {
            let outcome = fate::extractor_panicked(&panic_message(panic));
            Ok(Box::pin(std::future::ready(outcome)))
        })
    }
}

/// Counts a run that returned, and says a success in the debug log. A run a cancel `stopped`
/// that did not succeed is counted as cancelled when its job is deleted, not as failed (the
/// store counts no run for it either).
fn record(topic: &str, took: Duration, ran: &Ran, stopped: bool) {
    crate::metrics::finished(topic, took);
    match &ran.outcome {
        Outcome::Error(_) if stopped => {}
        Outcome::Error(_) => {
            crate::metrics::count(metric::JOBS_FAILED, topic);
            if ran.timed_out {
                crate::metrics::count(metric::JOBS_TIMED_OUT, topic);
            }
        }
        Outcome::Done | Outcome::DoneWith(_) => {
            tracing::debug!(took_ms = took.as_secs_f64() * 1000.0, "job done");
            crate::metrics::count(metric::JOBS_SUCCEEDED, topic);
        }
        Outcome::RetryAfter(_) | Outcome::DeadLetter(_) | Outcome::RateLimited(_) => {}
    }
}

/// Runs the handler in a task of its own (so a panic is caught and a timeout can cancel it),
/// until it ends, times out, or the shutdown grace period runs out (`None`).
async fn supervise(shared: &Shared, listener: &Listener, future: HandlerFuture) -> Option<Ran> {
    // In the job's span, as the handler's own spans and events (and with `otel`, its trace).
    let mut task = tokio::spawn(future.in_current_span());
    let timeout = async {
        match listener.timeout {
            Some(t) => tokio::time::sleep(t).await,
            None => std::future::pending().await,
        }
    };
    // Biased: a handler that finished as its timeout fired (or as the grace period ended) has
    // finished, and is acked rather than retried and run again.
    let ran = tokio::select! {
        biased;
        joined = &mut task => Some(Ran {
            outcome: match joined {
                Ok(outcome) => outcome,
                Err(e) if e.is_panic() => fate::panicked(&panic_message(e.into_panic())),
                Err(e) => fate::task_failed(e),
            },
            timed_out: false,
        }),
        _ = timeout => {
            task.abort();
            Some(Ran {
                outcome: fate::timed_out(listener.timeout.unwrap_or_default()),
                timed_out: true,
            })
        }
        _ = shared.abort.cancelled() => {
            task.abort();
            None
        }
    };
    if !task.is_finished() {
        // An aborted handler stops at its next `.await`; code that blocks between two awaits
        // keeps running until then. Wait for it (its lease is renewed meanwhile), so that the
        // retry (or the release at shutdown) does not start a second run beside it; but not
        // forever: a handler stuck for good must not hold its job and its permit for good.
        if tokio::time::timeout(ABORTED_LIMIT, task).await.is_err() {
            tracing::error!(limit = ?ABORTED_LIMIT, "the handler did not stop after it was cancelled (it blocks between awaits, e.g. on a std Mutex or blocking I/O); the job goes on to its retry or release while that code may still run");
        }
    }
    ran
}

fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a non-text panic payload".to_owned()
    }
}
