//! Writes a job's [`Fate`] to the store: the ack (with the handler's value) goes to the
//! acker's batches, a retry, postponement, dead letter or the deletion of a cancelled job is
//! written here (again with backoff while the store fails), a release is left to shutdown.
//! Each is logged for the person on call and counted.

use std::time::Duration;

use dq_core::store::Leases;
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

/// Writes a finished run's outcome with `write`, again with backoff until it succeeds or
/// shutdown aborts; if it never does, the lease expires and the job runs again (at least once,
/// never lost). `write` returning false means the lease was taken over: `taken_over` is logged.
async fn keep_writing<F, Fut>(shared: &Shared, what: String, taken_over: &str, mut write: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = dq_core::Result<bool>>,
{
    let mut health = Health::new(what);
    loop {
        match write().await {
            Ok(true) => return health.ok(),
            Ok(false) => return tracing::warn!("{taken_over}"),
            Err(e) => {
                let d = health.failed(&e);
                tokio::select! {
                    _ = shared.abort.cancelled() => return shared.running.gave_up(),
                    _ = tokio::time::sleep(d) => {}
                }
            }
        }
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
    let metric = match error {
        Some(_) => metric::JOBS_RETRIED,
        None => metric::JOBS_POSTPONED,
    };
    crate::metrics::count(metric, lease.topic.as_str());
    let what = format!("retry of {}:{}", lease.topic, lease.id);
    let taken_over = "the lease was taken over while the job ran (the lease expired: the worker stalled or Redis was unreachable); the other run decides the job's fate";
    keep_writing(shared, what, taken_over, || async move {
        match error {
            Some(error) => leases.retry(lease, delay, error).await,
            None => leases.postpone(lease, delay).await,
        }
    })
    .await;
}

async fn write_dead_letter(shared: &Shared, leases: &dyn Leases, lease: &LeaseRef, error: &str) {
    crate::metrics::count(metric::JOBS_DEAD_LETTERED, lease.topic.as_str());
    let what = format!("dead-letter of {}:{}", lease.topic, lease.id);
    let taken_over = "the lease was taken over while the job ran; not dead-lettered here";
    keep_writing(shared, what, taken_over, || {
        leases.dead_letter(lease, error)
    })
    .await;
}

/// Holds the topic's starts back for `hold` in every shard, then puts the job back to the front
/// of its ready list, no attempt spent. Hold first: a job released first would start again at
/// once, into the same 429.
async fn write_throttle(shared: &Shared, leases: &dyn Leases, lease: &LeaseRef, hold: Duration) {
    crate::metrics::count(metric::JOBS_RATE_LIMITED, lease.topic.as_str());
    let what = format!("hold of topic {} for {hold:?}", lease.topic);
    keep_writing(shared, what, "", || async move {
        leases.hold(&lease.topic, hold).await.map(|()| true)
    })
    .await;
    if shared.abort.is_cancelled() {
        return; // shutdown gave up on the hold (counted): the job runs again when its lease expires
    }
    let what = format!("release of rate-limited job {}:{}", lease.topic, lease.id);
    let taken_over = "the lease was taken over while the job ran; not released here";
    keep_writing(shared, what, taken_over, || async move {
        leases
            .release(std::slice::from_ref(lease))
            .await
            .map(|n| n > 0)
    })
    .await;
}

/// Deletes a job a cancel asked to stop, whose run did not succeed.
async fn write_cancel(shared: &Shared, leases: &dyn Leases, lease: &LeaseRef) {
    crate::metrics::count(metric::JOBS_CANCELLED, lease.topic.as_str());
    let what = format!("deletion of cancelled job {}:{}", lease.topic, lease.id);
    let taken_over = "the lease was taken over while the job ran; not deleted here";
    keep_writing(shared, what, taken_over, || leases.cancel_running(lease)).await;
}
