//! What a handler returns, and how the runtime reads it.

use std::fmt::Display;
use std::time::Duration;

use serde::Serialize;

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
///
/// It does not implement `Serialize`: a handler returning `Result<Outcome, E>` gives its
/// verdict, while `Result<T, E>` of any other `T` keeps the `Ok` value as the job's result
/// (see [`Output`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// The job is finished; it is acked and deleted (its record kept, without a value, when
    /// its topic has a retention).
    Done,
    /// The job is finished and its handler returned this value, as JSON: it is acked, and kept
    /// as the job's result when its topic has a retention (`#[dq::listener(retain = "1h")]`),
    /// for `Client::result` and `Client::wait` to read. Build it with
    /// [`Outcome::done_with`], which serializes the value (a handler returning
    /// `Result<T, E>` gets it made for it).
    DoneWith(Vec<u8>),
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
    /// The service the handler calls answered "too many requests, retry after this long" (an
    /// HTTP 429 with `Retry-After`): no job of the topic starts for that long, in any process,
    /// and this job goes back to the front of its ready list to run first once the hold ends.
    /// The run does not count as an attempt and the job's last error stays. Works with or
    /// without a [`Listener::rate`](crate::Listener::rate); with one, the starts after the hold
    /// are spread at the rate again. The hold is at least 10 ms (a hold of nothing would run the
    /// job again at once, in a loop) and at most an hour: a "retry after" past that is more
    /// often a date misread as seconds, and a hold stops the whole topic; after the hour the job
    /// runs again and meets the provider again.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # struct Response { status: u16, retry_after: Option<u64> }
    /// fn verdict(r: Response) -> dq_runtime::Outcome {
    ///     match r.status {
    ///         429 => dq_runtime::Outcome::RateLimited(Duration::from_secs(r.retry_after.unwrap_or(1))),
    ///         s if s >= 500 => dq_runtime::Outcome::Error(format!("provider answered {s}")),
    ///         _ => dq_runtime::Outcome::Done,
    ///     }
    /// }
    /// ```
    RateLimited(Duration),
}

impl Outcome {
    /// The job is finished with `value` as its result, serialized to JSON
    /// ([`Outcome::DoneWith`]). A value that serializes to `null` (`()`, `None`) is no value:
    /// [`Outcome::Done`]. A value that fails to serialize fails the run with that error
    /// ([`Outcome::Error`], retried like any failure).
    ///
    /// ```
    /// # #[derive(serde::Serialize)] struct Receipt { number: String }
    /// use dq_runtime::Outcome;
    ///
    /// let done = Outcome::done_with(&Receipt { number: "R-42".into() });
    /// assert_eq!(done, Outcome::DoneWith(br#"{"number":"R-42"}"#.to_vec()));
    /// assert_eq!(Outcome::done_with(&()), Outcome::Done);
    /// ```
    pub fn done_with<T: Serialize + ?Sized>(value: &T) -> Outcome {
        match serde_json::to_vec(value) {
            Ok(json) if json == b"null" => Outcome::Done,
            Ok(json) => Outcome::DoneWith(json),
            Err(e) => Outcome::Error(format!(
                "the handler's value ({}) cannot be serialized as the job's result: {e}",
                std::any::type_name::<T>()
            )),
        }
    }
}

/// Values a handler may return: `()`, [`Outcome`], or `Result<T, E>` where the error
/// displays (`anyhow::Error`, `Box<dyn Error>`, `String`, your own error type) and `T` is an
/// [`Output`]: a value that serializes, kept as the job's result (`Result<Receipt, E>`), `()`
/// for none, or an [`Outcome`].
#[diagnostic::on_unimplemented(
    message = "a dq handler cannot return `{Self}`",
    label = "the handler's return type",
    note = "return `()`, `dq::Outcome`, or `Result<T, E>` where `E: Display` and `T` is `()`, `dq::Outcome` or a value that implements `Serialize` (kept as the job's result)"
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

impl<T: Output, E: Display> IntoOutcome for Result<T, E> {
    fn into_outcome(self) -> Outcome {
        match self {
            Ok(value) => value.into_success(),
            // `{:#}` prints anyhow's whole cause chain; other errors print as usual.
            Err(e) => Outcome::Error(format!("{e:#}")),
        }
    }
}

/// What the `Ok` of a handler's `Result<T, E>` may hold: a value that serializes, kept as the
/// job's result (serialized to JSON with `serde_json`; one that serializes to `null`, as `()`
/// and `None` do, is no value), or an [`Outcome`], the handler's verdict.
///
/// The value is kept only when the listener asks for it (`#[dq::listener(retain = "1h")]`,
/// [`Listener::retain`](crate::Listener::retain)); a program that pushed the job reads it with
/// `Client::result` or waits for it with `Client::wait`. A value that fails to serialize fails
/// the run with that error (retried like any failure).
///
/// A `Result` in the `Ok` is a value like any other (`Ok(Err(..))` is a success whose value is
/// `{"Err": ..}`): flatten it with `?` to fail the run.
///
/// ```
/// # #[derive(serde::Deserialize)] struct Invoice { order_id: u64 }
/// #[derive(serde::Serialize)]
/// struct Receipt { number: String }
///
/// async fn send_invoice(msg: Invoice) -> Result<Receipt, String> {
///     Ok(Receipt { number: format!("R-{}", msg.order_id) })
/// }
/// ```
#[diagnostic::on_unimplemented(
    message = "the `Ok` value of a dq handler must implement `Serialize` (it is kept as the job's result) or be `dq::Outcome`",
    label = "`{Self}` implements neither"
)]
pub trait Output {
    /// The outcome of a run whose handler returned `Ok(self)`.
    fn into_success(self) -> Outcome;
}

impl<T: Serialize> Output for T {
    fn into_success(self) -> Outcome {
        Outcome::done_with(&self)
    }
}

impl Output for Outcome {
    fn into_success(self) -> Outcome {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize)]
    struct Receipt {
        number: String,
    }

    /// A value whose serialization fails.
    struct Unserializable;

    impl Serialize for Unserializable {
        fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
            Err(<S::Error as serde::ser::Error>::custom("no way"))
        }
    }

    #[test]
    fn an_ok_value_is_kept_as_json() {
        let returned: Result<Receipt, String> = Ok(Receipt {
            number: "R-1".into(),
        });
        assert_eq!(
            returned.into_outcome(),
            Outcome::DoneWith(br#"{"number":"R-1"}"#.to_vec())
        );
    }

    #[test]
    fn an_ok_of_nothing_is_done_without_a_value() {
        assert_eq!(Ok::<(), String>(()).into_outcome(), Outcome::Done);
        assert_eq!(Ok::<Option<u8>, String>(None).into_outcome(), Outcome::Done);
        assert_eq!(().into_outcome(), Outcome::Done);
    }

    #[test]
    fn an_ok_outcome_is_the_handlers_verdict() {
        let verdict = Outcome::RetryAfter(Duration::from_secs(1));
        assert_eq!(Ok::<_, String>(verdict.clone()).into_outcome(), verdict);
    }

    #[test]
    fn an_err_is_a_failure_with_its_text() {
        let failed: Result<Receipt, String> = Err("boom".into());
        assert_eq!(failed.into_outcome(), Outcome::Error("boom".into()));
    }

    #[test]
    fn a_value_that_fails_to_serialize_fails_the_run_with_the_error() {
        let Outcome::Error(error) = Ok::<_, String>(Unserializable).into_outcome() else {
            panic!("a value that does not serialize is a failure")
        };
        assert!(error.contains("no way"), "{error}");
        assert!(error.contains("Unserializable"), "{error}");
    }
}
