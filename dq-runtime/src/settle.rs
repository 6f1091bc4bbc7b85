//! Writes a job's [`Fate`] to the store: the ack (with the handler's value) goes to the
//! acker's batches, a retry, postponement, dead letter or the deletion of a cancelled job is
//! written here (again with backoff while the store fails), a release is left to shutdown.
//! Each is logged for the person on call and counted.

use std::time::Duration;

use dq_core::store::{Leases, RunEnd, RunEnded};
use dq_core::{metric, LeaseRef, Succeeded};

use crate::fate::{Fate, Why};
use crate::health::Health;
use crate::shared::Shared;

/// Writes `fate` for run `run` (from 1) of `lease` (in the job's span), then takes the lease
/// out of the running set; a job to ack leaves it when the acker has acked it, so that a slow
/// ack cannot let its lease expire.
pub(crate) async fn settle(
    shared: &Shared,
    leases: &dyn Leases,
    lease: LeaseRef,
    fate: Fate,
    run: u32,
) {
    match fate {
        Fate::Ack { result } => {
            let _ = shared.acks.send(Succeeded { lease, result, run });
            return;
        }
        Fate::Release => {
            tracing::info!("handler cancelled by shutdown; the job goes back to ready");
            shared.running.interrupted(lease);
            return;
        }
        Fate::Retry { delay, error } => {
            tracing::warn!(error = %error, retry_in = ?delay, "job failed; it will be retried");
            write_retry(shared, leases, &lease, delay, Some(&error)).await;
        }
        Fate::Postpone { delay } => {
            tracing::info!(retry_in = ?delay, "handler asked to run the job again later");
            write_retry(shared, leases, &lease, delay, None).await;
        }
        Fate::DeadLetter { reason, why } => {
            log_dead_letter(&reason, &why);
            write_dead_letter(shared, leases, &lease, &reason).await;
        }
        Fate::Cancel => {
            tracing::info!("job cancelled while running; deleted, not retried");
            write_cancel(shared, leases, &lease).await;
        }
        Fate::Throttle { hold } => {
            tracing::warn!(hold = ?hold, "handler met its provider's rate limit: no job of the topic starts for this long in any process (at least 10 ms, at most an hour); this one goes back to the front of its ready list, no attempt spent");
            write_throttle(shared, leases, &lease, hold).await;
        }
    }
    shared.running.stop(&lease);
}

fn log_dead_letter(reason: &str, why: &Why) {
    match why {
        Why::Poison => {
            tracing::error!(error = %reason, "poison message: dead-lettered on its first attempt, never retried (fix the producer or the payload type, then requeue it)")
        }
        Why::Handler => tracing::warn!(reason = %reason, "handler dead-lettered the job"),
        Why::LastAttempt { error } => {
            tracing::error!(error = %error, "job failed on its last attempt; dead-lettered")
        }
        Why::DelayOutOfRange => tracing::error!(reason = %reason, "retry delay out of range"),
    }
}

/// What the store answered to a write [`keep_writing`] made, and whether an earlier try of it
/// failed (its reply lost, so it may have been applied).
struct Answer<T> {
    said: T,
    after_a_failed_try: bool,
}

/// Writes a finished run's outcome with `write`, again with backoff until it succeeds or
/// shutdown aborts (`None`: then the lease expires and the job runs again, at least once,
/// never lost); what the store answered.
async fn keep_writing<T, F, Fut>(shared: &Shared, what: String, mut write: F) -> Option<Answer<T>>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = dq_core::Result<T>>,
{
    let mut health = Health::new(what);
    let mut after_a_failed_try = false;
    loop {
        match write().await {
            Ok(said) => {
                health.ok();
                return Some(Answer {
                    said,
                    after_a_failed_try,
                });
            }
            Err(e) => {
                after_a_failed_try = true;
                let d = health.failed(&e);
                tokio::select! {
                    _ = shared.abort.cancelled() => {
                        shared.running.gave_up();
                        return None;
                    }
                    _ = tokio::time::sleep(d) => {}
                }
            }
        }
    }
}

/// Counts a run's end without success as the store wrote it: `metric` when written as asked,
/// `dq_jobs_cancelled_total` when a cancel requested against the lease (which the worker had
/// not heard of yet) had the job deleted instead (the store logs it), nothing (and
/// `taken_over` logged) when the lease was no longer held. A lease no longer held after a
/// failed try is counted as written: that try may have been applied, its reply lost (as
/// before the store said which runs were cancelled).
fn count_end(ended: Option<Answer<RunEnded>>, topic: &str, metric: &'static str, taken_over: &str) {
    let Some(Answer {
        said,
        after_a_failed_try,
    }) = ended
    else {
        return;
    };
    match said {
        RunEnded::Written => crate::metrics::count(metric, topic),
        RunEnded::Cancelled => crate::metrics::count(metric::JOBS_CANCELLED, topic),
        RunEnded::NotHeld if after_a_failed_try => {
            crate::metrics::count(metric, topic);
            tracing::warn!("the lease was no longer held when the write was tried again: an earlier try whose reply was lost wrote it, or {taken_over}");
        }
        RunEnded::NotHeld => tracing::warn!("{taken_over}"),
        _ => {}
    }
}

/// Schedules the job again after `delay`. `error` is the failed run's, or `None` for a run the
/// handler postponed (`RetryAfter`), which does not spend an attempt.
async fn write_retry(
    shared: &Shared,
    leases: &dyn Leases,
    lease: &LeaseRef,
    delay: Duration,
    error: Option<&str>,
) {
    let (metric, end) = match error {
        Some(error) => (metric::JOBS_RETRIED, RunEnd::Retry { delay, error }),
        None => (metric::JOBS_POSTPONED, RunEnd::Postpone { delay }),
    };
    let what = format!("retry of {}:{}", lease.topic, lease.id);
    let taken_over = "the lease was taken over while the job ran (the lease expired: the worker stalled or Redis was unreachable); the other run decides the job's fate";
    let ended = keep_writing(shared, what, || leases.end_run(lease, end)).await;
    count_end(ended, lease.topic.as_str(), metric, taken_over);
}

async fn write_dead_letter(shared: &Shared, leases: &dyn Leases, lease: &LeaseRef, error: &str) {
    let what = format!("dead-letter of {}:{}", lease.topic, lease.id);
    let taken_over = "the lease was taken over while the job ran; not dead-lettered here";
    let end = RunEnd::DeadLetter { error };
    let ended = keep_writing(shared, what, || leases.end_run(lease, end)).await;
    count_end(
        ended,
        lease.topic.as_str(),
        metric::JOBS_DEAD_LETTERED,
        taken_over,
    );
}

/// Holds the topic's starts back for `hold` in every shard, then puts the job back to the front
/// of its ready list, no attempt spent. Hold first: a job released first would start again at
/// once, into the same 429. Counted as the store wrote it: rate limited once released (or
/// after a try whose reply was lost), cancelled when a cancel requested against the lease had
/// the job deleted instead; not at all when shutdown gave up (the job runs again when its
/// lease expires) or the lease was taken over.
async fn write_throttle(shared: &Shared, leases: &dyn Leases, lease: &LeaseRef, hold: Duration) {
    let topic = lease.topic.as_str();
    let what = format!("hold of topic {} for {hold:?}", lease.topic);
    if keep_writing(shared, what, || leases.hold(&lease.topic, hold))
        .await
        .is_none()
    {
        return; // shutdown gave up on the hold: the job runs again when its lease expires
    }
    let what = format!("release of rate-limited job {}:{}", lease.topic, lease.id);
    let taken_over = "the lease was taken over while the job ran; not released here";
    let ended = keep_writing(shared, what, || leases.end_run(lease, RunEnd::Release)).await;
    count_end(ended, topic, metric::JOBS_RATE_LIMITED, taken_over);
}

/// Deletes a job a cancel asked to stop, whose run did not succeed.
async fn write_cancel(shared: &Shared, leases: &dyn Leases, lease: &LeaseRef) {
    crate::metrics::count(metric::JOBS_CANCELLED, lease.topic.as_str());
    let what = format!("deletion of cancelled job {}:{}", lease.topic, lease.id);
    let deleted = keep_writing(shared, what, || leases.cancel_running(lease)).await;
    if deleted.is_some_and(|d| !d.said && !d.after_a_failed_try) {
        tracing::warn!("the lease was taken over while the job ran; not deleted here");
    }
}
