//! Cancelling a running job, end to end against a real redis-server: a program with a client
//! of its own cancels a job a worker runs; a handler that listens (`JobContext::cancelled`)
//! stops at once and the job is deleted, not retried, also when the worker is another OS
//! process (this test binary run again: `worker_process_entry_point`); a handler that ignores
//! the request runs to its end and its job is done as any.

#![allow(clippy::unwrap_used, unreachable_pub)] // test code: a panic is the failure report

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dq::admin::ChangeOutcome;
use dq::{Backoff, Client, Config, JobContext, JobResult, Listener, Runtime};
use serde::{Deserialize, Serialize};
use support::worker::{self, Target, WorkerProcess};
use support::RedisServer;

#[derive(Debug, Serialize, Deserialize)]
struct Report {
    n: u64,
}

const TOPIC: &str = "report";

/// How soon after the cancel returns a handler that listens must have heard it.
const HEARD_WITHIN: Duration = Duration::from_millis(100);

/// How long a job that must not run again is watched.
const WATCH: Duration = Duration::from_secs(2);

/// Far longer than any test: a handler that sleeps this long runs until it is stopped.
const FOREVER: Duration = Duration::from_secs(3600);

/// The namespace of these tests, and of the worker process's runtime.
const NAMESPACE: &str = "cancel";

fn config(redis: &RedisServer) -> Config {
    Config::builder()
        .redis_url(redis.url())
        .namespace(NAMESPACE)
        .build()
        .unwrap()
}

/// What the handlers of a test saw: how many runs started, and when a run heard the cancel.
#[derive(Clone, Default)]
struct Seen {
    runs: Arc<AtomicUsize>,
    heard: Arc<Mutex<Option<Instant>>>,
}

impl Seen {
    fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }

    fn heard(&self) -> Option<Instant> {
        *self.heard.lock().unwrap()
    }
}

/// A listener whose runs count themselves in `seen`, then run `handler`; retried quickly, so
/// that a retry would show within [`WATCH`], and keeping its ends for the waits.
fn listener<F, H>(seen: &Seen, handler: H) -> Listener
where
    F: std::future::Future<Output = Result<(), String>> + Send + 'static,
    H: Fn(JobContext, Seen) -> F + Clone + Send + Sync + 'static,
{
    let seen = seen.clone();
    Listener::new(TOPIC, move |_: Report, ctx: JobContext| {
        let (seen, handler) = (seen.clone(), handler.clone());
        async move {
            seen.runs.fetch_add(1, Ordering::SeqCst);
            handler(ctx, seen).await
        }
    })
    .no_timeout()
    .retries(3)
    .backoff(Backoff::Fixed(Duration::from_millis(100)))
    .retain(Duration::from_secs(3600))
}

/// A worker on `redis` running only `listener`.
async fn worker(redis: &RedisServer, listener: Listener) -> Runtime {
    support::start_on(config(redis), None, listener).await
}

/// Waits (5 s at most) until `done` holds, failing the test with `what` else.
async fn until(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !done() {
        assert!(Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Pushes the job `j`, due now, with a client of its own; returns that client once the job's
/// handler started (the one run `seen` counts).
async fn push_and_await_start(redis: &RedisServer, seen: &Seen) -> Client {
    let client = Client::connect(config(redis)).await.unwrap();
    client
        .push_to(TOPIC, &Report { n: 1 })
        .id("j")
        .await
        .unwrap();
    until("the handler never started", || seen.runs() == 1).await;
    client
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_job_cancelled_from_another_client_stops_at_once_and_is_not_retried() {
    let redis = RedisServer::start();
    let seen = Seen::default();
    let rt = worker(
        &redis,
        listener(&seen, |ctx: JobContext, seen: Seen| async move {
            tokio::select! {
                () = ctx.cancelled() => {
                    *seen.heard.lock().unwrap() = Some(Instant::now());
                    assert!(ctx.is_cancelled());
                    Err("cancelled".to_owned())
                }
                () = tokio::time::sleep(FOREVER) => Ok(()),
            }
        }),
    )
    .await;
    let client = push_and_await_start(&redis, &seen).await;

    let cancelled = client.cancel_in(TOPIC, "j").await.unwrap();
    let returned = Instant::now();
    assert_eq!(cancelled, ChangeOutcome::CancelRequested);
    until("the handler never heard the cancel", || {
        seen.heard().is_some()
    })
    .await;
    let heard = seen.heard().unwrap();
    let after = heard.saturating_duration_since(returned);
    assert!(
        after <= HEARD_WITHIN,
        "heard {after:?} after the cancel returned"
    );

    // Deleted by its worker, which ends the wait for it; never run again.
    let waited = client
        .wait_in::<serde_json::Value>(TOPIC, "j", Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(waited, JobResult::Cancelled);
    assert!(client.status_in(TOPIC, "j").await.unwrap().is_none());
    tokio::time::sleep(WATCH).await;
    assert_eq!(seen.runs(), 1, "the job ran again");
    assert!(client.status_in(TOPIC, "j").await.unwrap().is_none());
    let counts = client.counts(TOPIC).await.unwrap();
    assert_eq!(
        (counts.delayed, counts.ready, counts.running, counts.dead),
        (0, 0, 0, 0)
    );
    rt.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_that_ignores_the_cancel_runs_to_its_end_and_its_job_is_done() {
    let redis = RedisServer::start();
    let seen = Seen::default();
    let rt = worker(
        &redis,
        listener(&seen, |ctx: JobContext, seen: Seen| async move {
            // Works on whatever is asked, then looks: the request was seen, and ignored.
            tokio::time::sleep(Duration::from_millis(500)).await;
            if ctx.is_cancelled() {
                *seen.heard.lock().unwrap() = Some(Instant::now());
            }
            Ok(())
        }),
    )
    .await;
    let client = push_and_await_start(&redis, &seen).await;

    let cancelled = client.cancel_in(TOPIC, "j").await.unwrap();
    assert_eq!(cancelled, ChangeOutcome::CancelRequested);
    let waited = client
        .wait_in::<serde_json::Value>(TOPIC, "j", Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(waited, JobResult::SucceededEmpty, "acked as any success");
    assert!(seen.heard().is_some(), "the handler was told");
    let info = client.status_in(TOPIC, "j").await.unwrap().unwrap();
    assert_eq!(info.state, dq::JobState::Done);
    tokio::time::sleep(WATCH).await;
    assert_eq!(seen.runs(), 1, "the job ran again");
    rt.shutdown().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// Across processes: the worker is this test binary run again, and records in Redis what its
// handler did, since the test cannot see into it.

/// The test the worker process runs, and its role.
const ENTRY: &str = "worker_process_entry_point";
const LISTENING: &str = "listening";

/// Where the worker process counts the runs of its handler (`INCR`).
const RUNS: &str = "cancel-test:runs";
/// Where it records the Redis time (us) at which its handler heard the cancel and stopped.
const STOPPED_US: &str = "cancel-test:stopped-us";

/// The worker process: a runtime whose handler counts its runs in Redis, then runs until it
/// hears a cancel, records the Redis time then and stops. Returns at once in a normal run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_process_entry_point() {
    let Some((role, target)) = worker::role() else {
        return;
    };
    assert_eq!(role, LISTENING, "a role this file does not know");
    let Target::Server(url) = &target else {
        panic!("the cancel tests run on one redis-server");
    };
    let conn = redis::Client::open(url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let listening = Listener::new(TOPIC, move |_: Report, ctx: JobContext| {
        let mut conn = conn.clone();
        async move {
            let fail = |e: redis::RedisError| e.to_string();
            let _: u64 = redis::cmd("INCR")
                .arg(RUNS)
                .query_async(&mut conn)
                .await
                .map_err(fail)?;
            tokio::select! {
                () = ctx.cancelled() => {
                    let (secs, micros): (u64, u64) =
                        redis::cmd("TIME").query_async(&mut conn).await.map_err(fail)?;
                    redis::cmd("SET")
                        .arg(STOPPED_US)
                        .arg(secs * 1_000_000 + micros)
                        .query_async::<()>(&mut conn)
                        .await
                        .map_err(fail)?;
                    Err("cancelled".to_owned())
                }
                () = tokio::time::sleep(FOREVER) => Ok(()),
            }
        }
    })
    .no_timeout()
    .retries(3)
    .backoff(Backoff::Fixed(Duration::from_millis(100)))
    .retain(Duration::from_secs(3600));
    let config = target.config(NAMESPACE).build().unwrap();
    let rt = support::start_on(config, None, listening).await;
    worker::serve(rt).await;
}

/// The number at `key` in Redis, if any.
async fn read(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> Option<u64> {
    redis::cmd("GET").arg(key).query_async(conn).await.unwrap()
}

/// Microseconds since the epoch.
fn micros_of(t: std::time::SystemTime) -> u64 {
    let since = t.duration_since(std::time::UNIX_EPOCH).unwrap();
    u64::try_from(since.as_micros()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_job_cancelled_from_another_process_stops_within_100_ms_and_is_not_retried() {
    let redis = RedisServer::start();
    let _worker = WorkerProcess::start(ENTRY, LISTENING, &Target::server(&redis));
    let client = Client::connect(config(&redis)).await.unwrap();
    let mut conn = redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    client
        .push_to(TOPIC, &Report { n: 1 })
        .id("j")
        .await
        .unwrap();
    // Generous for the start: another process, on a machine that may be loaded.
    let deadline = Instant::now() + Duration::from_secs(10);
    while read(&mut conn, RUNS).await.is_none() {
        assert!(Instant::now() < deadline, "the worker never ran the job");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    // Strict on the stop: both times are Redis' clock.
    let cancel_at = micros_of(client.store_time().await.unwrap());
    let cancelled = client.cancel_in(TOPIC, "j").await.unwrap();
    assert_eq!(cancelled, ChangeOutcome::CancelRequested);
    let deadline = Instant::now() + Duration::from_secs(5);
    let stopped_at = loop {
        if let Some(at) = read(&mut conn, STOPPED_US).await {
            break at;
        }
        assert!(
            Instant::now() < deadline,
            "the handler never heard the cancel"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    let after = Duration::from_micros(stopped_at.saturating_sub(cancel_at));
    assert!(
        after <= HEARD_WITHIN,
        "the handler stopped {after:?} after the cancel"
    );

    // Deleted by the worker, and never run again.
    let deadline = Instant::now() + Duration::from_secs(5);
    while client.status_in(TOPIC, "j").await.unwrap().is_some() {
        assert!(
            Instant::now() < deadline,
            "the cancelled job is still there"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(WATCH).await;
    assert_eq!(read(&mut conn, RUNS).await, Some(1), "the job ran again");
    assert!(client.status_in(TOPIC, "j").await.unwrap().is_none());
    let counts = client.counts(TOPIC).await.unwrap();
    assert_eq!(
        (counts.delayed, counts.ready, counts.running, counts.dead),
        (0, 0, 0, 0)
    );
}
