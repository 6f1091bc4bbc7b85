//! What a runtime declares for its listeners (their schedules and retries) stays declared
//! when Redis loses it or refuses it at start (issue 29, findings 1 and 6).

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use dq::{Config, Runtime};
use support::RedisServer;

static BEATS: AtomicUsize = AtomicUsize::new(0);

#[dq::listener(topic = "beat", every = "1s", retries = 5)]
async fn beat(_tick: dq::schedule::Tick) {
    BEATS.fetch_add(1, Ordering::SeqCst);
}

fn config(redis: &RedisServer) -> Config {
    Config::builder()
        .redis_url(redis.url())
        .namespace("redeclare")
        .build()
        .unwrap()
}

/// Waits up to `limit` for `done`, polling every 50 ms; fails naming `what`.
async fn within<F: std::future::Future<Output = bool>>(
    limit: Duration,
    what: &str,
    mut done: impl FnMut() -> F,
) {
    let deadline = Instant::now() + limit;
    while !done().await {
        assert!(Instant::now() < deadline, "not within {limit:?}: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until `client` lists the listener's schedule.
async fn declared(client: &dq::Client, what: &str) {
    within(Duration::from_secs(5), what, || async {
        client
            .schedules()
            .await
            .unwrap()
            .iter()
            .any(|s| s.id == "beat")
    })
    .await;
}

fn attempt_limit(redis: &RedisServer) -> String {
    redis
        .command(&["HGET", "dq:{redeclare:0}:attempts", "beat"])
        .trim()
        .to_owned()
}

/// Finding 1: Redis came back empty (restarted without persistence, flushed, failed over to
/// an empty replica): the schedule ticked no more for as long as the processes ran. Now every
/// runtime notices and declares its listeners' schedules and retries again within seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_comes_back_empty_gets_the_listeners_schedules_and_retries_again() {
    let redis = RedisServer::start();
    let (a, b) = (
        Runtime::builder()
            .config(config(&redis))
            .start()
            .await
            .unwrap(),
        Runtime::builder()
            .config(config(&redis))
            .start()
            .await
            .unwrap(),
    );
    within(Duration::from_secs(5), "the schedule ticks", || async {
        BEATS.load(Ordering::SeqCst) > 0
    })
    .await;
    assert_eq!(attempt_limit(&redis), "$1\r\n6", "retries = 5: six runs");

    redis.command(&["FLUSHALL"]);
    let lost_at = Instant::now();
    let client = a.client().clone();
    declared(&client, "the schedule is declared again").await;
    let after = BEATS.load(Ordering::SeqCst);
    within(Duration::from_secs(4), "it ticks again", || async {
        BEATS.load(Ordering::SeqCst) > after
    })
    .await;
    assert_eq!(
        attempt_limit(&redis),
        "$1\r\n6",
        "the retries are recorded again"
    );
    assert!(lost_at.elapsed() < Duration::from_secs(8));
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// Finding 6: a full Redis (or shard 0 down) made `Runtime::start` fail, because storing a
/// listener's schedule was fatal there. Now the runtime starts, and declares the schedule as
/// soon as Redis takes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_starts_on_a_full_redis_and_declares_its_schedule_when_it_can() {
    let redis = RedisServer::start_with(&["--save", "", "--maxmemory-policy", "noeviction"]);
    redis.command(&["CONFIG", "SET", "maxmemory", "1"]);
    let rt = Runtime::builder()
        .config(config(&redis))
        .start()
        .await
        .expect("a full Redis does not keep the runtime from starting");
    let client = rt.client().clone();
    assert!(
        client.schedules().await.unwrap().is_empty(),
        "Redis refused it"
    );
    redis.command(&["CONFIG", "SET", "maxmemory", "0"]);
    declared(&client, "the schedule is declared").await;
    rt.shutdown().await.unwrap();
}
