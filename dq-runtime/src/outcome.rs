//! What a handler returns, and how the runtime reads it.

use std::fmt::Display;
use std::time::Duration;

/// A handler's verdict on its job, for the cases a plain `Result` does not cover.
///
/// ```
/// # use std::time::Duration;
/// # struct Order { paid: bool, exists: bool }
/// fn decide(order: Order) -> dq_runtime::Outcome {
///     if !order.exists {
///         dq_runtime::Outcome::DeadLetter("order not found".into())   // no retries
///     } else if !order.paid {
///         dq_runtime::Outcome::RetryAfter(Duration::from_secs(60))     // look again later
///     } else {
///         dq_runtime::Outcome::Done
///     }
/// }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// The job is finished; it is acked and deleted.
    Done,
    /// The run failed: retried with the listener's backoff while attempts remain, then
    /// dead-lettered with this error.
    Error(String),
    /// Run the job again after this delay, whatever the retry budget says. The run does not
    /// count as an attempt (the next one has the same [`JobContext::attempt`]) and the job's
    /// last error stays: use it for "not yet, look again later", not for failures. To stop
    /// postponing at some point, compare [`JobContext::enqueued`] with the time now and return
    /// [`Outcome::DeadLetter`].
    ///
    /// [`JobContext::attempt`]: crate::JobContext::attempt
    /// [`JobContext::enqueued`]: crate::JobContext::enqueued
    RetryAfter(Duration),
    /// Dead-letter the job now with this reason, without further retries.
    DeadLetter(String),
}

/// Values a handler may return: `()`, [`Outcome`], or `Result<T, E>` of either where the error
/// displays (`anyhow::Error`, `Box<dyn Error>`, `String`, your own error type).
#[diagnostic::on_unimplemented(
    message = "a dq handler cannot return `{Self}`",
    label = "the handler's return type",
    note = "return `()`, `dq::Outcome`, or `Result<(), E>` / `Result<dq::Outcome, E>` where `E: Display`"
)]
pub trait IntoOutcome {
    /// Converts the handler's return value.
    fn into_outcome(self) -> Outcome;
}

impl IntoOutcome for () {
    fn into_outcome(self) -> Outcome {
        Outcome::Done
    }
}

impl IntoOutcome for Outcome {
    fn into_outcome(self) -> Outcome {
        self
    }
}

impl<T: IntoOutcome, E: Display> IntoOutcome for Result<T, E> {
    fn into_outcome(self) -> Outcome {
        match self {
            Ok(value) => value.into_outcome(),
            // `{:#}` prints anyhow's whole cause chain; other errors print as usual.
            Err(e) => Outcome::Error(format!("{e:#}")),
        }
    }
}
