//! What becomes of a job once its run ended, decided without I/O from how the run ended, its
//! attempt and the listener's backoff ([`fate`]); `settle` writes it to the store.
//!
//! A lost lease is no fate of its own: the run's fate is decided as for any run, and the store
//! refuses to write it (the lease is no longer held), which `settle` logs as taken over.

use std::fmt::Display;
use std::time::Duration;

use dq_core::MAX_DELAY;

use crate::backoff::Backoff;
use crate::outcome::Outcome;

/// How a run ended, as far as the job's fate goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Ended {
    /// The payload could not be decoded for the handler: no run would ever read it.
    Poison(String),
    /// The handler returned this. A panic, a timeout or a task that ended abnormally is an
    /// [`Outcome::Error`] (see [`panicked`], [`timed_out`], [`task_failed`]).
    Returned(Outcome),
    /// Shutdown's grace period ran out and cancelled the handler.
    Cancelled,
    /// A cancel asked the job to stop while its handler ran ([`JobContext::cancelled`]), and
    /// the run ended with this (an error too when shutdown then cancelled the handler).
    ///
    /// [`JobContext::cancelled`]: crate::JobContext::cancelled
    CancelRequested(Outcome),
}

/// What becomes of the job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Fate {
    /// Acked (in a batch, by the acker) and deleted; with the handler's value (JSON), kept as
    /// the job's result when its topic has a retention.
    Ack { result: Option<Vec<u8>> },
    /// Run again after `delay`; the failed attempt is recorded with `error`.
    Retry { delay: Duration, error: String },
    /// Run again after `delay`, no attempt spent and the last error kept (`RetryAfter`).
    Postpone { delay: Duration },
    /// Moved to the dead letters with `reason`.
    DeadLetter { reason: String, why: Why },
    /// Put back to the front of its ready list at once, no attempt spent.
    Release,
    /// The handler met its provider's rate limit (`RateLimited`): every start of the topic is
    /// held back for `hold`, and the job goes back to the front of its ready list, no attempt
    /// spent.
    Throttle { hold: Duration },
    /// Deleted, neither retried nor dead-lettered: a cancel asked it to stop and the run did
    /// not succeed.
    Cancel,
}

/// Why a job is dead-lettered: what the log says to the person on call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Why {
    /// Its payload cannot be read: retrying would not help (poison message).
    Poison,
    /// Its handler said so (`Outcome::DeadLetter`).
    Handler,
    /// It failed on its last attempt, with this error.
    LastAttempt { error: String },
    /// Its next run would be over [`MAX_DELAY`] away, which cannot be stored.
    DelayOutOfRange,
}

/// The fate of a job whose run `ended`, on attempt `attempt` (from 1) of `max_attempts`.
/// `jitter` in [0, 1) is the randomness of the backoff (0.5: its plain delay).
pub(crate) fn fate(
    ended: Ended,
    attempt: u32,
    max_attempts: u32,
    backoff: &Backoff,
    jitter: f64,
) -> Fate {
    match ended {
        Ended::Poison(error) => Fate::DeadLetter {
            reason: error,
            why: Why::Poison,
        },
        Ended::Cancelled => Fate::Release,
        // A handler that ignored the cancel and succeeded is done as any; whatever else the run
        // ended with (a failure, a postponement, a dead letter) ends the job as cancelled.
        Ended::CancelRequested(outcome @ (Outcome::Done | Outcome::DoneWith(_))) => fate(
            Ended::Returned(outcome),
            attempt,
            max_attempts,
            backoff,
            jitter,
        ),
        Ended::CancelRequested(_) => Fate::Cancel,
        Ended::Returned(Outcome::Done) => Fate::Ack { result: None },
        Ended::Returned(Outcome::DoneWith(json)) => Fate::Ack { result: Some(json) },
        Ended::Returned(Outcome::RetryAfter(delay)) => again(delay, None),
        Ended::Returned(Outcome::RateLimited(hold)) => Fate::Throttle {
            hold: hold.clamp(MIN_HOLD, MAX_HOLD),
        },
        Ended::Returned(Outcome::DeadLetter(reason)) => Fate::DeadLetter {
            reason,
            why: Why::Handler,
        },
        // A postponement does not spend an attempt, but a failure does: retried only while
        // attempts remain.
        Ended::Returned(Outcome::Error(error)) if attempt < max_attempts => {
            again(backoff.delay_at(attempt, jitter), Some(error))
        }
        Ended::Returned(Outcome::Error(error)) => Fate::DeadLetter {
            reason: format!("{error} (attempt {attempt} of {max_attempts})"),
            why: Why::LastAttempt { error },
        },
    }
}

/// The shortest hold of a topic whose handler met its provider's rate limit
/// (`Outcome::RateLimited`): a hold of nothing would run the job again at once, in a loop.
pub(crate) const MIN_HOLD: Duration = Duration::from_millis(10);

/// The longest hold: a provider's "retry after" past an hour is more often a date misread as
/// seconds than a wait anyone meant, and a hold stops the whole topic in every process. After
/// an hour the job runs again and meets the provider again.
pub(crate) const MAX_HOLD: Duration = Duration::from_secs(3600);

/// Runs the job again after `delay`: a retry of the failed run's `error`, or a postponement.
/// A delay over [`MAX_DELAY`] (a handler's `RetryAfter(Duration::MAX)`, a huge fixed backoff)
/// cannot be stored: the job is dead-lettered with the reason instead of being written with a
/// due time dq could not read back.
fn again(delay: Duration, error: Option<String>) -> Fate {
    if delay > MAX_DELAY {
        return Fate::DeadLetter {
            reason: delay_reason(delay),
            why: Why::DelayOutOfRange,
        };
    }
    match error {
        Some(error) => Fate::Retry { delay, error },
        None => Fate::Postpone { delay },
    }
}

fn delay_reason(delay: Duration) -> String {
    format!(
        "the job was to run again after {delay:?}, over the 200-year limit of a delay (dq::limits::MAX_DELAY); dead-lettered instead (fix the handler's RetryAfter or the listener's backoff, then requeue it)"
    )
}

/// The runs a job is allowed: its listener's `retries` + 1 when the listener sets them (the
/// listener's word holds over what was given at push), else what was given at push.
pub(crate) fn max_attempts(listener_retries: Option<u32>, pushed: u32) -> u32 {
    listener_retries.map_or(pushed, |r| r.saturating_add(1))
}

/// The failure of a handler that panicked with `message`.
pub(crate) fn panicked(message: &str) -> Outcome {
    Outcome::Error(format!("handler panicked: {message}"))
}

/// The failure of a run whose argument extractor (a user's `FromJob`) panicked with `message`.
pub(crate) fn extractor_panicked(message: &str) -> Outcome {
    Outcome::Error(format!("an argument extractor panicked: {message}"))
}

/// The failure of a handler cancelled by its listener's timeout.
pub(crate) fn timed_out(after: Duration) -> Outcome {
    Outcome::Error(format!("handler timed out after {after:?}"))
}

/// The failure of a handler task that ended neither by returning nor by a panic.
pub(crate) fn task_failed(error: impl Display) -> Outcome {
    Outcome::Error(format!("handler task ended abnormally: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::IntoOutcome;

    const MAX: u32 = 3;
    const FIRST: u32 = 1;
    const MIDDLE: u32 = 2;
    const LAST: u32 = 3;
    const ATTEMPTS: [u32; 3] = [FIRST, MIDDLE, LAST];
    /// The jitter that leaves a backoff's plain delay.
    const PLAIN: f64 = 0.5;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    fn fixed() -> Backoff {
        Backoff::Fixed(secs(10))
    }

    fn exponential() -> Backoff {
        Backoff::Exponential {
            base: secs(1),
            max: secs(600),
        }
    }

    /// 2 s, then capped at 3 s from the second failure on.
    fn capped() -> Backoff {
        Backoff::Exponential {
            base: secs(2),
            max: secs(3),
        }
    }

    fn fixed_over_limit() -> Backoff {
        Backoff::Fixed(MAX_DELAY + secs(1))
    }

    /// Exactly `MAX_DELAY` after the first failure, twice that after the second.
    fn exponential_to_limit() -> Backoff {
        Backoff::Exponential {
            base: MAX_DELAY,
            max: Duration::MAX,
        }
    }

    fn every_backoff() -> [Backoff; 5] {
        [
            fixed(),
            exponential(),
            capped(),
            fixed_over_limit(),
            exponential_to_limit(),
        ]
    }

    fn returned(outcome: Outcome, attempt: u32, backoff: &Backoff) -> Fate {
        fate(Ended::Returned(outcome), attempt, MAX, backoff, PLAIN)
    }

    fn failed(error: &str, attempt: u32, backoff: &Backoff) -> Fate {
        returned(Outcome::Error(error.to_owned()), attempt, backoff)
    }

    fn retry(delay: Duration, error: &str) -> Fate {
        Fate::Retry {
            delay,
            error: error.to_owned(),
        }
    }

    fn dead_for_delay(delay: Duration) -> Fate {
        Fate::DeadLetter {
            reason: delay_reason(delay),
            why: Why::DelayOutOfRange,
        }
    }

    fn dead_on_last_attempt(error: &str, attempt: u32) -> Fate {
        Fate::DeadLetter {
            reason: format!("{error} (attempt {attempt} of {MAX})"),
            why: Why::LastAttempt {
                error: error.to_owned(),
            },
        }
    }

    /// The fate of a failure on every attempt with every backoff, whatever the failure's text.
    fn assert_judged_as_a_failure(error: &str) {
        let before_last = [
            (fixed(), [secs(10), secs(10)]),
            (exponential(), [secs(1), secs(2)]),
            (capped(), [secs(2), secs(3)]),
            (fixed_over_limit(), [MAX_DELAY + secs(1); 2]),
            (exponential_to_limit(), [MAX_DELAY, MAX_DELAY * 2]),
        ];
        for (backoff, delays) in before_last {
            for (attempt, delay) in [FIRST, MIDDLE].into_iter().zip(delays) {
                let expected = if delay > MAX_DELAY {
                    dead_for_delay(delay)
                } else {
                    retry(delay, error)
                };
                let got = failed(error, attempt, &backoff);
                assert_eq!(got, expected, "attempt {attempt} with {backoff:?}");
            }
            let got = failed(error, LAST, &backoff);
            assert_eq!(got, dead_on_last_attempt(error, LAST), "{backoff:?}");
        }
    }

    /// A failure ("boom") on `attempt` with `backoff` is retried after `delay`.
    fn assert_retried_after(attempt: u32, backoff: Backoff, delay: Duration) {
        assert_eq!(failed("boom", attempt, &backoff), retry(delay, "boom"));
    }

    /// `judged(attempt, backoff)` is `expected` on every attempt with every backoff.
    fn assert_on_every_attempt_and_backoff(judged: impl Fn(u32, &Backoff) -> Fate, expected: Fate) {
        for backoff in every_backoff() {
            for attempt in ATTEMPTS {
                let got = judged(attempt, &backoff);
                assert_eq!(got, expected, "{attempt} {backoff:?}");
            }
        }
    }

    /// `outcome` is a failure (`what` says which), with `error` as its text when given, and is
    /// judged as any failure.
    fn assert_a_failure_like_any(outcome: Outcome, what: &str, error: Option<&str>) {
        let Outcome::Error(got) = outcome else {
            panic!("{what} is a failure")
        };
        if let Some(error) = error {
            assert_eq!(got, error);
        }
        assert_judged_as_a_failure(&got);
    }

    #[test]
    fn a_done_run_is_acked_on_any_attempt_with_any_backoff() {
        assert_on_every_attempt_and_backoff(
            |attempt, backoff| returned(Outcome::Done, attempt, backoff),
            Fate::Ack { result: None },
        );
    }

    #[test]
    fn a_run_done_with_a_value_is_acked_with_it_on_any_attempt_with_any_backoff() {
        let json = br#"{"number":"R-42"}"#.to_vec();
        assert_on_every_attempt_and_backoff(
            |attempt, backoff| returned(Outcome::DoneWith(json.clone()), attempt, backoff),
            Fate::Ack {
                result: Some(json.clone()),
            },
        );
    }

    #[test]
    fn a_run_whose_value_is_nothing_is_acked_without_a_value() {
        for returned_nothing in [
            Ok::<(), String>(()).into_outcome(),
            Ok::<Option<u64>, String>(None).into_outcome(),
            Outcome::done_with(&()),
        ] {
            let got = returned(returned_nothing, FIRST, &fixed());
            assert_eq!(got, Fate::Ack { result: None });
        }
    }

    #[test]
    fn a_returned_value_reaches_the_ack_as_its_json() {
        #[derive(serde::Serialize)]
        struct Receipt {
            number: String,
        }
        let value: Result<Receipt, String> = Ok(Receipt {
            number: "R-42".into(),
        });
        let got = returned(value.into_outcome(), LAST, &fixed());
        assert_eq!(
            got,
            Fate::Ack {
                result: Some(br#"{"number":"R-42"}"#.to_vec())
            }
        );
    }

    /// One test per row, named as the row: a failure ("boom") on the attempt with the backoff is
    /// retried after the delay.
    macro_rules! retried_after {
        ($($name:ident: $attempt:expr, $backoff:expr => $delay:expr;)*) => {$(
            #[test]
            fn $name() {
                assert_retried_after($attempt, $backoff, $delay);
            }
        )*};
    }

    retried_after! {
        a_failed_first_attempt_is_retried_after_the_fixed_delay: FIRST, fixed() => secs(10);
        a_failed_middle_attempt_is_retried_after_the_same_fixed_delay:
            MIDDLE, fixed() => secs(10);
        a_failed_first_attempt_is_retried_after_the_exponential_base:
            FIRST, exponential() => secs(1);
        a_failed_middle_attempt_is_retried_after_twice_the_exponential_base:
            MIDDLE, exponential() => secs(2);
        a_failed_first_attempt_under_the_cap_is_retried_after_the_base: FIRST, capped() => secs(2);
        a_failed_middle_attempt_is_retried_after_the_cap_not_the_doubled_delay:
            MIDDLE, capped() => secs(3);
        a_retry_delay_of_exactly_max_delay_is_kept: FIRST, exponential_to_limit() => MAX_DELAY;
    }

    #[test]
    fn a_failed_first_or_middle_attempt_whose_fixed_delay_is_over_max_delay_is_dead_lettered_for_it(
    ) {
        let delay = MAX_DELAY + secs(1);
        assert_eq!(
            failed("boom", FIRST, &fixed_over_limit()),
            dead_for_delay(delay)
        );
        assert_eq!(
            failed("boom", MIDDLE, &fixed_over_limit()),
            dead_for_delay(delay)
        );
    }

    #[test]
    fn a_failed_middle_attempt_whose_exponential_delay_grew_over_max_delay_is_dead_lettered_for_it()
    {
        let got = failed("boom", MIDDLE, &exponential_to_limit());
        assert_eq!(got, dead_for_delay(MAX_DELAY * 2));
    }

    #[test]
    fn a_failed_last_attempt_is_dead_lettered_with_its_error_and_count_whatever_the_backoff() {
        for backoff in every_backoff() {
            let got = failed("boom", LAST, &backoff);
            assert_eq!(
                got,
                Fate::DeadLetter {
                    reason: "boom (attempt 3 of 3)".to_owned(),
                    why: Why::LastAttempt {
                        error: "boom".to_owned()
                    },
                },
                "{backoff:?}"
            );
        }
    }

    #[test]
    fn an_attempt_past_a_limit_lowered_since_the_push_is_dead_lettered_as_the_last() {
        assert_eq!(failed("boom", 5, &fixed()), dead_on_last_attempt("boom", 5));
    }

    #[test]
    fn a_single_allowed_attempt_is_dead_lettered_at_its_first_failure() {
        let got = fate(
            Ended::Returned(Outcome::Error("boom".into())),
            FIRST,
            1,
            &exponential(),
            PLAIN,
        );
        assert_eq!(
            got,
            Fate::DeadLetter {
                reason: "boom (attempt 1 of 1)".to_owned(),
                why: Why::LastAttempt {
                    error: "boom".to_owned()
                },
            }
        );
    }

    #[test]
    fn the_retry_delay_carries_the_jitter_drawn() {
        let got = fate(
            Ended::Returned(Outcome::Error("boom".into())),
            FIRST,
            MAX,
            &fixed(),
            0.0,
        );
        assert_eq!(got, retry(secs(8), "boom"));
    }

    #[test]
    fn a_failure_is_retried_then_dead_lettered_on_every_attempt_and_backoff() {
        assert_judged_as_a_failure("boom");
    }

    #[test]
    fn a_timed_out_run_is_retried_then_dead_lettered_with_the_timeout_as_its_error() {
        assert_a_failure_like_any(
            timed_out(secs(30)),
            "a timeout",
            Some("handler timed out after 30s"),
        );
    }

    #[test]
    fn a_panicked_handler_is_retried_then_dead_lettered_with_the_panic_message() {
        assert_a_failure_like_any(
            panicked("index out of bounds"),
            "a panic",
            Some("handler panicked: index out of bounds"),
        );
    }

    #[test]
    fn a_panicked_argument_extractor_is_retried_then_dead_lettered_like_any_failure() {
        assert_a_failure_like_any(
            extractor_panicked("no tenant"),
            "an extractor's panic",
            Some("an argument extractor panicked: no tenant"),
        );
    }

    #[test]
    fn a_handler_task_that_ended_abnormally_is_retried_then_dead_lettered_like_any_failure() {
        assert_a_failure_like_any(task_failed("task 7 was cancelled"), "an abnormal end", None);
    }

    /// The handler saw `JobContext::lease_lost` and gave up: its fate is decided as for any
    /// failure (the store then refuses to write it, the lease being another run's).
    #[test]
    fn a_run_that_stopped_on_its_lost_lease_is_judged_like_any_failure() {
        assert_judged_as_a_failure("lease lost: left to the other run");
    }

    #[test]
    fn a_postponed_run_runs_again_after_its_delay_on_any_attempt_with_any_backoff() {
        assert_on_every_attempt_and_backoff(
            |attempt, backoff| returned(Outcome::RetryAfter(secs(60)), attempt, backoff),
            Fate::Postpone { delay: secs(60) },
        );
    }

    #[test]
    fn a_rate_limited_run_holds_its_topic_at_least_ten_milliseconds_and_at_most_an_hour() {
        for (asked, held) in [
            (Duration::ZERO, MIN_HOLD),
            (secs(30), secs(30)),
            (secs(86_400 * 365 * 54), MAX_HOLD),
            (Duration::MAX, MAX_HOLD),
        ] {
            assert_on_every_attempt_and_backoff(
                |attempt, backoff| returned(Outcome::RateLimited(asked), attempt, backoff),
                Fate::Throttle { hold: held },
            );
        }
    }

    #[test]
    fn a_postponement_of_exactly_max_delay_is_kept() {
        let got = returned(Outcome::RetryAfter(MAX_DELAY), LAST, &fixed());
        assert_eq!(got, Fate::Postpone { delay: MAX_DELAY });
    }

    #[test]
    fn a_postponement_over_max_delay_is_dead_lettered_for_it_on_any_attempt() {
        assert_on_every_attempt_and_backoff(
            |attempt, backoff| returned(Outcome::RetryAfter(Duration::MAX), attempt, backoff),
            dead_for_delay(Duration::MAX),
        );
    }

    #[test]
    fn a_job_its_handler_dead_lettered_goes_to_the_dead_letters_with_its_reason_on_any_attempt() {
        assert_on_every_attempt_and_backoff(
            |attempt, backoff| returned(Outcome::DeadLetter("gone".into()), attempt, backoff),
            Fate::DeadLetter {
                reason: "gone".to_owned(),
                why: Why::Handler,
            },
        );
    }

    #[test]
    fn an_undecodable_payload_is_dead_lettered_at_once_even_with_attempts_left() {
        assert_on_every_attempt_and_backoff(
            |attempt, backoff| {
                fate(
                    Ended::Poison("bad json".into()),
                    attempt,
                    MAX,
                    backoff,
                    PLAIN,
                )
            },
            Fate::DeadLetter {
                reason: "bad json".to_owned(),
                why: Why::Poison,
            },
        );
    }

    #[test]
    fn a_run_cancelled_by_shutdown_is_released_on_any_attempt_even_the_last() {
        assert_on_every_attempt_and_backoff(
            |attempt, backoff| fate(Ended::Cancelled, attempt, MAX, backoff, PLAIN),
            Fate::Release,
        );
    }

    fn cancel_requested(outcome: Outcome, attempt: u32, backoff: &Backoff) -> Fate {
        fate(
            Ended::CancelRequested(outcome),
            attempt,
            MAX,
            backoff,
            PLAIN,
        )
    }

    #[test]
    fn a_cancelled_run_that_failed_is_deleted_on_any_attempt_not_retried_nor_dead_lettered() {
        assert_on_every_attempt_and_backoff(
            |attempt, backoff| {
                cancel_requested(Outcome::Error("cancelled".into()), attempt, backoff)
            },
            Fate::Cancel,
        );
    }

    #[test]
    fn a_cancelled_run_whose_handler_panicked_is_deleted() {
        assert_on_every_attempt_and_backoff(
            |attempt, backoff| cancel_requested(panicked("boom"), attempt, backoff),
            Fate::Cancel,
        );
    }

    #[test]
    fn a_cancelled_run_that_timed_out_is_deleted() {
        assert_on_every_attempt_and_backoff(
            |attempt, backoff| cancel_requested(timed_out(secs(30)), attempt, backoff),
            Fate::Cancel,
        );
    }

    #[test]
    fn a_cancelled_run_that_postponed_or_dead_lettered_is_deleted() {
        for outcome in [
            Outcome::RetryAfter(secs(60)),
            Outcome::DeadLetter("gone".into()),
        ] {
            assert_on_every_attempt_and_backoff(
                |attempt, backoff| cancel_requested(outcome.clone(), attempt, backoff),
                Fate::Cancel,
            );
        }
    }

    #[test]
    fn a_cancelled_run_that_succeeded_anyway_is_acked_with_its_value() {
        assert_on_every_attempt_and_backoff(
            |attempt, backoff| cancel_requested(Outcome::Done, attempt, backoff),
            Fate::Ack { result: None },
        );
        let json = br#"{"number":"R-42"}"#.to_vec();
        assert_on_every_attempt_and_backoff(
            |attempt, backoff| cancel_requested(Outcome::DoneWith(json.clone()), attempt, backoff),
            Fate::Ack {
                result: Some(json.clone()),
            },
        );
    }

    #[test]
    fn the_listener_retries_override_the_attempts_given_at_push() {
        assert_eq!(max_attempts(Some(2), 5), 3);
        assert_eq!(max_attempts(Some(0), 5), 1);
        assert_eq!(max_attempts(None, 5), 5);
        assert_eq!(max_attempts(Some(u32::MAX), 1), u32::MAX);
    }
}
