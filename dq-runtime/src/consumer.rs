//! Consumer loops: one per topic per shard. Each owns a semaphore of `concurrency` permits
//! (the seed's Semaphore) and takes permits *before* fetching, so it never holds work it has
//! no room for: jobs waiting in a local queue would be lost in a crash. One fetch leases up to
//! as many jobs as there are free permits. When the ready list is empty the loop waits on
//! Redis without taking anything (`BLMOVE ready ready LEFT LEFT` on its own connection) or,
//! with `poll_interval` set, sleeps (for proxies without blocking commands).

use std::sync::Arc;
use std::time::Duration;

use dq_core::{from_us, metric, LeaseRef, LeasedJob, Topic, MAX_BATCH, MAX_DELAY};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tracing::Instrument;

use crate::context::JobContext;
use crate::health::Health;
use crate::listener::Listener;
use crate::outcome::Outcome;
use crate::shared::Shared;

/// How long one blocking wait lasts before it is renewed (it only bounds how long a silently
/// dead connection goes unnoticed; pushes wake it at once).
const WAIT_SLICE: Duration = Duration::from_secs(5);

/// How often a paused topic is checked for being resumed when no resume announcement came.
const PAUSED_RECHECK: Duration = Duration::from_secs(1);

pub(crate) struct ConsumerLoop {
    pub(crate) shared: Arc<Shared>,
    pub(crate) listener: Arc<Listener>,
    pub(crate) topic: Topic,
    pub(crate) shard: u16,
    pub(crate) permits: Arc<Semaphore>,
    /// Names this loop's fetches in the store (this process and topic; the store's key is per
    /// shard), so that a later fetch takes back the jobs of one whose reply was lost.
    pub(crate) consumer: String,
}

/// Most lost fetches asked for at once (a fetch that failed is looked for until its jobs'
/// leases would have run out anyway: two leases, and the time a request may sit in a
/// socket buffer).
const MAX_LOST: usize = 64;

/// A consumer's name in the store: this process's worker id and topic, and 64 random bits, so
/// that no two consumer loops share one (two runtimes in one process, containers that share a
/// hostname and pid).
pub(crate) fn consumer_name(worker: &str, topic: &Topic) -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write(worker.as_bytes());
    h.write(topic.as_str().as_bytes());
    format!("{worker}:{topic}:{:016x}", h.finish())
}

impl ConsumerLoop {
    pub(crate) async fn run(self) {
        let shared = &self.shared;
        let mut waiter = shared.store.ready_waiter(self.shard, &self.topic);
        let mut health = Health::new(format!("consumer of {} shard {}", self.topic, self.shard));
        let lease = shared.config.lease;
        let mut resumed = shared.resumed.subscribe();
        // After a failed fetch, one permit until a fetch works: the topic's permits are shared
        // by its consumers on every shard, and a fetch from a stalled master holds what it took
        // until the client's reply limit (10 s) ends it.
        let mut failing = false;
        // This loop's fetches by number, and those whose reply did not arrive, each looked for
        // until its jobs' leases would have run out anyway.
        let mut nonce = 0u64;
        let mut lost: Vec<(u64, std::time::Instant)> = Vec::new();
        let look_for = lease * 2 + Duration::from_secs(20);
        loop {
            let first = tokio::select! {
                _ = shared.stop.cancelled() => return,
                p = self.permits.clone().acquire_owned() => match p {
                    Ok(p) => p,
                    Err(_) => return,
                },
            };
            let mut permits = vec![first];
            while !failing && permits.len() < MAX_BATCH {
                match self.permits.clone().try_acquire_owned() {
                    Ok(p) => permits.push(p),
                    Err(_) => break,
                }
            }
            // A resume announced from now on wakes the wait below, even one announced before
            // the wait begins.
            resumed.borrow_and_update();
            nonce += 1;
            let now = std::time::Instant::now();
            lost.retain(|(_, until)| *until > now);
            let fetcher = dq_core::store::Fetcher::new(
                self.consumer.as_str(),
                nonce,
                lost.iter().map(|(n, _)| *n).collect(),
            );
            let fetch =
                shared
                    .store
                    .fetch_for(self.shard, &self.topic, permits.len(), lease, &fetcher);
            tokio::pin!(fetch);
            let fetched = tokio::select! {
                biased;
                f = &mut fetch => f,
                _ = shared.stop.cancelled() => {
                    // Redis may have leased jobs to this call already: dropping the reply would
                    // leave them leased to nobody until the lease expires (and count a run that
                    // never happened). Let it arrive and hand the jobs back.
                    hand_back(shared, tokio::time::timeout(HAND_BACK_LIMIT, fetch).await).await;
                    return;
                }
            };
            if shared.stop.is_cancelled() {
                hand_back(shared, Ok(fetched)).await;
                return;
            }
            let fetched = match fetched {
                Ok(f) => {
                    health.ok();
                    failing = false;
                    if f.taken_back > 0 {
                        let topic = self.topic.as_str();
                        crate::metrics::count_n(metric::JOBS_TAKEN_BACK, topic, f.taken_back);
                        tracing::info!(topic = %self.topic, shard = self.shard, jobs = f.taken_back, "took back jobs leased by a fetch whose reply was lost; they run now, no run counted");
                    }
                    f
                }
                Err(e) => {
                    drop(permits);
                    failing = true;
                    // Redis may have run it (and leased jobs to nobody): later fetches look.
                    lost.push((nonce, now + look_for));
                    if lost.len() > MAX_LOST {
                        lost.remove(0);
                    }
                    let delay = health.failed(&e);
                    tokio::select! {
                        _ = shared.stop.cancelled() => return,
                        _ = tokio::time::sleep(delay) => continue,
                    }
                }
            };
            if fetched.paused {
                // Paused by an operator: look again when a resume is announced (the ready list
                // may be full, so a blocking wait on it would return at once), or after a
                // second should the announcement be lost.
                drop(permits);
                tokio::select! {
                    _ = shared.stop.cancelled() => return,
                    _ = resumed.changed() => continue,
                    _ = tokio::time::sleep(PAUSED_RECHECK) => continue,
                }
            }
            if fetched.jobs.is_empty() {
                drop(permits);
                if !fetched.malformed.is_empty() {
                    continue;
                }
                let waited = tokio::select! {
                    _ = shared.stop.cancelled() => return,
                    w = wait(&mut *waiter, shared.config.poll_interval) => w,
                };
                if let Err(e) = waited {
                    let delay = health.failed(&e);
                    tokio::select! {
                        _ = shared.stop.cancelled() => return,
                        _ = tokio::time::sleep(delay) => {}
                    }
                }
                continue;
            }
            let now = fetched.now_us;
            for (job, permit) in fetched.jobs.into_iter().zip(permits) {
                let run = run_job(shared.clone(), self.listener.clone(), job, permit, now);
                shared.jobs.spawn(run);
            }
        }
    }
}

/// Longest wait for a cancelled handler to stop (see `supervise`).
const ABORTED_LIMIT: Duration = Duration::from_secs(10);

/// Longest wait, once shutdown began, for a fetch reply already on its way (and for handing its
/// jobs back). Past it the jobs stay leased until their lease expires, then run elsewhere.
const HAND_BACK_LIMIT: Duration = Duration::from_secs(2);

/// Returns the jobs of a fetch that completed after shutdown began to the front of their ready
/// list at once, without counting a run.
async fn hand_back(
    shared: &Shared,
    fetched: Result<dq_core::Result<dq_core::Fetched>, tokio::time::error::Elapsed>,
) {
    let leases: Vec<LeaseRef> = match fetched {
        Ok(Ok(f)) => f.jobs.into_iter().map(|j| j.lease).collect(),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "shutdown: a fetch under way as it began failed; any jobs it leased run again when their lease expires");
            return;
        }
        Err(_) => {
            tracing::warn!(limit = ?HAND_BACK_LIMIT, "shutdown: a fetch reply did not arrive in time; any jobs it leased run again when their lease expires");
            return;
        }
    };
    if leases.is_empty() {
        return;
    }
    // Release pushes each job to the front in turn: the last one given goes first, so give
    // them in reverse to keep the fetch's order.
    let leases: Vec<LeaseRef> = leases.into_iter().rev().collect();
    match tokio::time::timeout(HAND_BACK_LIMIT, shared.store.release(&leases)).await {
        Ok(Ok(n)) => tracing::debug!(released = n, "shutdown: handed back jobs fetched as it began"),
        Ok(Err(e)) => tracing::warn!(error = %e, jobs = leases.len(), "shutdown: could not hand back jobs fetched as it began; they run again when their lease expires"),
        Err(_) => tracing::warn!(jobs = leases.len(), "shutdown: handing back jobs fetched as it began timed out; they run again when their lease expires"),
    }
}

async fn wait(
    waiter: &mut dyn dq_core::ReadyWaiter,
    poll: Option<Duration>,
) -> dq_core::Result<()> {
    match poll {
        Some(interval) => tokio::time::sleep(interval).await,
        None => {
            waiter.wait(WAIT_SLICE).await?;
        }
    }
    Ok(())
}

/// Runs one leased job to its end: decode, call under the timeout, then ack, retry or
/// dead-letter. Holds its permit until the handler returns.
async fn run_job(
    shared: Arc<Shared>,
    listener: Arc<Listener>,
    job: LeasedJob,
    permit: OwnedSemaphorePermit,
    fetched_at_us: u64,
) {
    let LeasedJob { lease, envelope } = job;
    let payload = Arc::new(envelope.payload);
    let max_attempts = listener
        .retries
        .map_or(envelope.max_attempts, |r| r.saturating_add(1));
    let lateness_ms = (fetched_at_us as f64 - envelope.due_us as f64) / 1000.0;
    let span = tracing::info_span!(
        "job", topic = %lease.topic, id = %lease.id, attempt = envelope.attempt,
        max_attempts, lateness_ms
    );
    async move {
        let lease_lost = tokio_util::sync::CancellationToken::new();
        let ctx = JobContext {
            topic: lease.topic.clone(),
            id: lease.id.clone(),
            attempt: envelope.attempt,
            max_attempts,
            due: from_us(envelope.due_us),
            enqueued: from_us(envelope.created_us),
            last_error: envelope.last_error.clone(),
            shutdown: shared.stop.child_token(),
            lease_lost: lease_lost.clone(),
            payload: payload.clone(),
            states: shared.states.clone(),
            client: shared.client.clone(),
        };
        let started = std::time::Instant::now();
        // Decoding and the extractors run here, before the handler's own task: a panic in one
        // of them (a user's `FromJob`) is a failed run, retried and dead-lettered as any.
        let called = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            (listener.handler)(&payload, ctx)
        }));
        let called = called.unwrap_or_else(|panic| {
            let error = format!("an argument extractor panicked: {}", panic_message(panic));
            Ok(Box::pin(std::future::ready(Outcome::Error(error))))
        });
        let outcome = match called {
            Err(poison) => {
                drop(permit);
                tracing::error!(error = %poison, "poison message: dead-lettered on its first attempt, never retried (fix the producer or the payload type, then requeue it)");
                settle_dead(&shared, &lease, &poison).await;
                return;
            }
            Ok(future) => {
                crate::metrics::started(
                    lease.topic.as_str(),
                    Duration::from_micros(fetched_at_us.saturating_sub(envelope.due_us)),
                );
                // The lease stays in the renewed set until the job's fate is written (the
                // acker removes it after the ack), so a slow ack cannot let the lease expire.
                shared.start_running(&lease, lease_lost);
                let outcome = supervise(&shared, &listener, future).await;
                drop(permit);
                outcome
            }
        };
        let Some(Ran { outcome, timed_out }) = outcome else {
            tracing::info!("handler cancelled by shutdown; the job goes back to ready");
            shared.stop_running(&lease);
            shared.interrupted(lease);
            return;
        };
        shared.settling(&lease);
        let took = started.elapsed();
        let topic = lease.topic.as_str().to_owned();
        crate::metrics::finished(&topic, took);
        if matches!(outcome, Outcome::Error(_)) {
            crate::metrics::count(metric::JOBS_FAILED, &topic);
            if timed_out {
                crate::metrics::count(metric::JOBS_TIMED_OUT, &topic);
            }
        }
        let done = outcome == Outcome::Done;
        let lease_for_cleanup = lease.clone();
        match outcome {
            Outcome::Done => {
                tracing::debug!(took_ms = took.as_secs_f64() * 1000.0, "job done");
                crate::metrics::count(metric::JOBS_SUCCEEDED, &topic);
                let _ = shared.acks.send(lease);
            }
            Outcome::RetryAfter(delay) if delay > MAX_DELAY => {
                dead_for_delay(&shared, &lease, delay).await;
            }
            Outcome::RetryAfter(delay) => {
                tracing::info!(retry_in = ?delay, "handler asked to run the job again later");
                settle_retry(&shared, &lease, delay, None).await;
            }
            Outcome::DeadLetter(reason) => {
                tracing::warn!(reason = %reason, "handler dead-lettered the job");
                settle_dead(&shared, &lease, &reason).await;
            }
            Outcome::Error(error) if envelope.attempt < max_attempts => {
                let delay = listener.backoff.delay(envelope.attempt);
                if delay > MAX_DELAY {
                    dead_for_delay(&shared, &lease, delay).await;
                } else {
                    tracing::warn!(error = %error, retry_in = ?delay, "job failed; it will be retried");
                    settle_retry(&shared, &lease, delay, Some(&error)).await;
                }
            }
            Outcome::Error(error) => {
                let reason = format!("{error} (attempt {} of {max_attempts})", envelope.attempt);
                tracing::error!(error = %error, "job failed on its last attempt; dead-lettered");
                settle_dead(&shared, &lease, &reason).await;
            }
        }
        // Done jobs leave the renewed set when the acker has acked them.
        if !done {
            shared.stop_running(&lease_for_cleanup);
        }
    }
    .instrument(span)
    .await
}

/// How a handler's run ended.
struct Ran {
    outcome: Outcome,
    /// Cancelled by the listener's timeout (its outcome is the timeout's error).
    timed_out: bool,
}

/// Runs the handler in a task of its own (so a panic is caught and a timeout can cancel it),
/// until it ends, times out, or the shutdown grace period runs out (`None`).
async fn supervise(
    shared: &Shared,
    listener: &Listener,
    future: crate::listener::HandlerFuture,
) -> Option<Ran> {
    let mut task = tokio::spawn(future);
    let timeout = async {
        match listener.timeout {
            Some(t) => tokio::time::sleep(t).await,
            None => std::future::pending().await,
        }
    };
    // Biased: a handler that finished as its timeout fired (or as the grace period ended) has
    // finished, and is acked rather than retried and run again.
    let outcome = tokio::select! {
        biased;
        joined = &mut task => Some(Ran {
            outcome: match joined {
                Ok(outcome) => outcome,
                Err(e) if e.is_panic() => Outcome::Error(format!("handler panicked: {}", panic_message(e.into_panic()))),
                Err(e) => Outcome::Error(format!("handler task ended abnormally: {e}")),
            },
            timed_out: false,
        }),
        _ = timeout => {
            task.abort();
            Some(Ran {
                outcome: Outcome::Error(format!(
                    "handler timed out after {:?}",
                    listener.timeout.unwrap_or_default()
                )),
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
    outcome
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

/// A retry asked for after more than [`MAX_DELAY`] (a handler's `RetryAfter(Duration::MAX)`, a
/// huge fixed backoff) cannot be stored: the job is dead-lettered with the reason instead of
/// being written with a due time dq could not read back.
async fn dead_for_delay(shared: &Shared, lease: &LeaseRef, delay: Duration) {
    let reason = format!(
        "the job was to run again after {delay:?}, over the 200-year limit of a delay (dq::limits::MAX_DELAY); dead-lettered instead (fix the handler's RetryAfter or the listener's backoff, then requeue it)"
    );
    tracing::error!(reason = %reason, "retry delay out of range");
    settle_dead(shared, lease, &reason).await;
}

/// Writes a finished run's outcome with `write`, again with backoff until it succeeds or
/// shutdown aborts; if it never does, the lease expires and the job runs again (at least once,
/// never lost). `write` returning false means the lease was taken over: `taken_over` is logged.
async fn settle<F, Fut>(shared: &Shared, what: String, taken_over: &str, mut write: F)
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
                    _ = shared.abort.cancelled() => return shared.gave_up(),
                    _ = tokio::time::sleep(d) => {}
                }
            }
        }
    }
}

/// Schedules the job again after `delay`. `error` is the failed run's, or `None` for a run the
/// handler postponed (`RetryAfter`), which does not spend an attempt.
async fn settle_retry(shared: &Shared, lease: &LeaseRef, delay: Duration, error: Option<&str>) {
    let metric = match error {
        Some(_) => metric::JOBS_RETRIED,
        None => metric::JOBS_POSTPONED,
    };
    crate::metrics::count(metric, lease.topic.as_str());
    let what = format!("retry of {}:{}", lease.topic, lease.id);
    let taken_over = "the lease was taken over while the job ran (the lease expired: the worker stalled or Redis was unreachable); the other run decides the job's fate";
    settle(shared, what, taken_over, || async move {
        match error {
            Some(error) => shared.store.retry(lease, delay, error).await,
            None => shared.store.postpone(lease, delay).await,
        }
    })
    .await;
}

async fn settle_dead(shared: &Shared, lease: &LeaseRef, error: &str) {
    crate::metrics::count(metric::JOBS_DEAD_LETTERED, lease.topic.as_str());
    let what = format!("dead-letter of {}:{}", lease.topic, lease.id);
    let taken_over = "the lease was taken over while the job ran; not dead-lettered here";
    settle(shared, what, taken_over, || {
        shared.store.dead_letter(lease, error)
    })
    .await;
}
