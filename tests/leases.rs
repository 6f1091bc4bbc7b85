//! Leases against a real redis-server: a job whose worker died, whose lease was lost while it
//! ran, whose fetch reply was lost, or whose shard stalled is neither lost nor run twice, nor
//! run more often than its listener allows (issues 15 and 29; RELIABILITY.md lists them).

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dq::store::{Leases, RedisStore, Store};
use dq::{Config, JobContext, JobId, Listener};
use support::faulty::Faulty;
use support::{no_safety_tick, start_on, topic, RedisServer};
use tokio::sync::Notify;

/// Finding 2: lease renewal walked the shards in order and stopped at the first that did not
/// answer, after writing the worker record to shard 0; one stalled master therefore let every
/// lease expire, and jobs on healthy shards were reclaimed and run a second time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_shard_does_not_let_leases_on_other_shards_expire() {
    let redis = RedisServer::start();
    let config = no_safety_tick(&redis)
        .shards(4)
        .lease(Duration::from_millis(1200))
        .build()
        .unwrap();
    let store = Arc::new(Faulty {
        stalled_shard: Some(0),
        ..Faulty::new(&config).await
    });
    let runs: Arc<Mutex<Vec<String>>> = Arc::default();
    let r = runs.clone();
    // Each run outlives three leases: it keeps its job only if its lease is renewed.
    let listener = Listener::new("t", move |_: u32, ctx: JobContext| {
        let r = r.clone();
        async move {
            r.lock().unwrap().push(ctx.id().to_string());
            tokio::time::sleep(Duration::from_millis(4000)).await;
        }
    })
    .no_timeout()
    .concurrency(100);
    let rt = start_on(config, Some(store.clone()), listener).await;
    let c = rt.client().clone();
    let ids: Vec<String> = (0..40).map(|i| format!("job-{i}")).collect();
    c.push_batch(ids.iter().map(|id| c.push_to("t", &1u32).id(id.as_str())))
        .await
        .unwrap();
    let healthy: Vec<&String> = ids
        .iter()
        .filter(|id| {
            dq::store::shard_of(&topic("t"), &dq::JobId::new(id.as_str()).unwrap(), 4) != 0
        })
        .collect();
    assert!(healthy.len() >= 20, "most jobs are on shards 1-3");
    // Every healthy job finishes and is acked.
    let deadline = Instant::now() + Duration::from_secs(20);
    for id in &healthy {
        while c.status_in("t", id.as_str()).await.unwrap().is_some() {
            assert!(Instant::now() < deadline, "{id} was never acked");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let runs = runs.lock().unwrap().clone();
    for id in &healthy {
        let n = runs.iter().filter(|r| r == id).count();
        assert_eq!(n, 1, "{id}, on a healthy shard, ran {n} times");
    }
    let stalled = ids.len() - healthy.len();
    assert!(
        runs.len() > ids.len(),
        "the stalled shard's {stalled} jobs lost their leases and ran again (the fault was real)"
    );
    rt.shutdown_handle().shutdown();
}

/// A config with a short lease (reclaimed every 200 ms), for the dead-worker tests below.
fn short_lease(redis: &RedisServer) -> Config {
    no_safety_tick(redis)
        .lease(Duration::from_millis(400))
        .build()
        .unwrap()
}

/// A worker that leased the job and died before running it: the job is fetched (100 ms lease)
/// and never run nor renewed.
async fn lease_to_a_dead_worker(redis: &RedisServer, topic_name: &str) {
    let store = RedisStore::connect(&short_lease(redis)).await.unwrap();
    let f = store
        .fetch(0, &topic(topic_name), 10, Duration::from_millis(100))
        .await
        .unwrap();
    assert_eq!(f.jobs.len(), 1, "the dead worker took the job");
}

/// A listener that counts its runs and records each run's attempt number.
fn counting(topic_name: &str, runs: &Arc<Mutex<Vec<u32>>>) -> Listener {
    let runs = runs.clone();
    Listener::new(topic_name, move |_: u32, ctx: JobContext| {
        runs.lock().unwrap().push(ctx.attempt());
        async {}
    })
}

/// Finding 10: a job whose worker died was judged by the attempts given at push time, not by
/// its listener's `retries`: with `retries(0)` (charge the card, never run twice) a job whose
/// worker died was run again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_whose_worker_died_is_not_run_again_when_its_listener_allows_no_retries() {
    let redis = RedisServer::start();
    let runs = Arc::new(Mutex::new(Vec::new()));
    let c = support::client(&redis).await;
    c.push_to("charge", &1).id("card").await.unwrap();
    lease_to_a_dead_worker(&redis, "charge").await;
    let listener = counting("charge", &runs).retries(0);
    let rt = start_on(short_lease(&redis), None, listener).await;
    let info = support::wait_until_dead(&c, "charge", "card").await;
    let error = info.last_error.unwrap();
    assert!(error.contains("lease expired on attempt 1 of 1"), "{error}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(runs.lock().unwrap().is_empty(), "ran again: {runs:?}");
    rt.shutdown().await.unwrap();
}

/// Finding 10, the other way: a listener allowing more retries than the push gave keeps
/// running a job whose worker died, rather than dead-lettering it at the push's limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_whose_worker_died_runs_again_when_its_listener_allows_more_retries_than_the_push() {
    let redis = RedisServer::start();
    let runs = Arc::new(Mutex::new(Vec::new()));
    let c = support::client(&redis).await;
    c.push_to("mail", &1).id("m").max_retries(0).await.unwrap();
    lease_to_a_dead_worker(&redis, "mail").await;
    let listener = counting("mail", &runs).retries(3);
    let rt = start_on(short_lease(&redis), None, listener).await;
    support::wait_until_done(&c, "mail", "m").await;
    assert_eq!(
        *runs.lock().unwrap(),
        [2],
        "run once more, as its second attempt"
    );
    rt.shutdown().await.unwrap();
}

/// A job whose worker died runs again as soon as its lease runs out: a reclaimer looks at
/// start and then when the shard's next lease runs out, not only every half lease (here 5 s
/// of the runtime's 10 s lease, against the dead worker's 1 s), so the job and the slot it
/// holds (global concurrency, a group's) come back within a lease of the death.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_whose_worker_died_runs_again_as_soon_as_its_lease_runs_out() {
    let redis = RedisServer::start();
    let c = support::client(&redis).await;
    c.push_to("mail", &1).id("m").await.unwrap();
    let store = RedisStore::connect(&short_lease(&redis)).await.unwrap();
    let died = Instant::now();
    let f = store
        .fetch(0, &topic("mail"), 10, Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(f.jobs.len(), 1, "the dead worker took the job");
    let runs: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let r = runs.clone();
    let listener = Listener::new("mail", move |_: u32, _ctx: JobContext| {
        r.lock().unwrap().push(Instant::now());
        async {}
    });
    let config = no_safety_tick(&redis)
        .lease(Duration::from_secs(10))
        .build()
        .unwrap();
    let rt = start_on(config, None, listener).await;
    support::wait_until(
        Duration::from_secs(8),
        || !runs.lock().unwrap().is_empty(),
        || "the dead worker's job never ran again",
    )
    .await;
    let ran = runs.lock().unwrap()[0] - died;
    assert!(
        ran >= Duration::from_millis(900) && ran < Duration::from_secs(3),
        "ran again {ran:?} after its worker died with a 1 s lease"
    );
    rt.shutdown().await.unwrap();
}

/// A fetch from a stalled master held every free permit of its topic until the client's reply
/// limit ended it, and took them all again at each retry, so the topic's jobs on healthy shards
/// waited for it. After a failed fetch a consumer now asks for one permit until a fetch works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_shard_holds_one_permit_of_its_topic_not_all_of_them() {
    let redis = RedisServer::start();
    let config = no_safety_tick(&redis).shards(2).build().unwrap();
    let mut store = Faulty::new(&config).await;
    store.failing_fetch = Some((0, Duration::from_secs(1)));
    let store = Arc::new(store);
    let started = Arc::new(Mutex::new(Vec::new()));
    let s = started.clone();
    let listener = Listener::new("t", move |_: u32, _: JobContext| {
        s.lock().unwrap().push(Instant::now());
        tokio::time::sleep(Duration::from_millis(20))
    })
    .concurrency(4);
    let rt = start_on(config, Some(store.clone() as Arc<dyn Store>), listener).await;
    support::wait_until(
        Duration::from_secs(5),
        || {
            store
                .fetch_failures
                .load(std::sync::atomic::Ordering::SeqCst)
                != 0
        },
        || "the shard-0 fetch never failed",
    )
    .await;
    // The consumer of shard 0 is into its next failing fetch now.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let c = rt.client().clone();
    let t = topic("t");
    let ids: Vec<String> = (0..)
        .map(|i| format!("j{i}"))
        .filter(|id| dq::store::shard_of(&t, &JobId::new(id.as_str()).unwrap(), 2) == 1)
        .take(8)
        .collect();
    let pushed = Instant::now();
    for id in &ids {
        c.push_to("t", &1).id(id.as_str()).await.unwrap();
    }
    support::wait_until(
        Duration::from_secs(5),
        || started.lock().unwrap().len() >= ids.len(),
        || "jobs of shard 1 never ran",
    )
    .await;
    let first = started.lock().unwrap()[0] - pushed;
    assert!(
        first < Duration::from_millis(300),
        "the first job of the healthy shard started {first:?} after its push"
    );
    rt.shutdown().await.unwrap();
}

/// What this thread logs, for tests that count log lines (a current-thread runtime runs every
/// task of the test on it).
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    fn capture() -> (Logs, tracing::subscriber::DefaultGuard) {
        let logs = Logs::default();
        let writer = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        (logs, tracing::subscriber::set_default(subscriber))
    }

    fn count(&self, needle: &str) -> usize {
        String::from_utf8_lossy(&self.0.lock().unwrap())
            .matches(needle)
            .count()
    }
}

/// Issue 29, finding 10: a lease lost while the handler runs (Redis restarted from a dump
/// with the job back in ready) was logged every heartbeat for as long as the handler ran, the
/// handler was not told, and `dq workers` went on counting it. Now: said once, the handler
/// sees it through its `JobContext`, and the worker counts it no more.
#[tokio::test]
async fn a_lease_lost_while_the_handler_runs_is_said_once_and_the_handler_is_told() {
    let (logs, _guard) = Logs::capture();
    let redis = RedisServer::start();
    let config = Config::builder()
        .redis_url(redis.url())
        .lease(Duration::from_millis(600))
        .build()
        .unwrap();
    let told = Arc::new(Notify::new());
    let t = told.clone();
    let listener = Listener::new("long", move |_: u32, ctx: JobContext| {
        let t = t.clone();
        async move {
            // Runs until told (the test fails on its own time limit should it never be).
            ctx.lease_lost().await;
            t.notify_one();
            // Cleaning up takes a while more: the loss is not said again meanwhile.
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    })
    .retries(0);
    let rt = start_on(config, None, listener).await;
    let client = rt.client().clone();
    client.push_to("long", &1).id("j").await.unwrap();
    let running = || async {
        let workers = client.workers().await.unwrap();
        workers.iter().map(|w| w.running).sum::<usize>()
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while running().await == 0 {
        assert!(Instant::now() < deadline, "the job never showed as running");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Redis loses the lease, as after a restart from a dump taken before the fetch.
    let leases = redis.command(&["KEYS", "*leases"]);
    let key = leases.lines().find(|l| l.contains("leases")).unwrap();
    redis.command(&["HDEL", key, "long:j"]);
    tokio::time::timeout(Duration::from_secs(3), told.notified())
        .await
        .expect("the handler was told its lease was lost");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(running().await, 0, "still shown as running");
    assert_eq!(logs.count("lease lost while the job runs"), 1);
    rt.shutdown().await.unwrap();
    assert_eq!(logs.count("lease lost while the job runs"), 1);
    assert_eq!(
        logs.count("ack refused"),
        0,
        "the refused ack was already said"
    );
}

/// Issue 29, finding 7: a fetch whose reply was lost (Redis stalled with the request in its
/// buffer, the client gave up and Redis ran it later) leased jobs to nobody. They ran a lease
/// later as attempt 2 and counted as failed, or, with no retries, were dead-lettered "the
/// worker died" without ever running. The consumer's next fetch takes them back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_whose_fetch_reply_was_lost_runs_at_once_with_no_attempt_spent() {
    let redis = RedisServer::start();
    let config = no_safety_tick(&redis).build().unwrap();
    let faulty = Faulty::new(&config).await;
    faulty
        .lose_fetch_reply
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let store = Arc::new(faulty);
    let runs = Arc::new(Mutex::new(Vec::new()));
    let r = runs.clone();
    let listener = Listener::new("t", move |_: u32, ctx: JobContext| {
        r.lock().unwrap().push((ctx.attempt(), Instant::now()));
        async {}
    })
    .retries(0);
    let rt = start_on(config, Some(store.clone()), listener).await;
    let pushed = Instant::now();
    rt.client().push_to("t", &1).id("j").await.unwrap();
    support::wait_until(
        Duration::from_secs(5),
        || runs.lock().unwrap().len() == 1,
        || "the job whose fetch reply was lost never ran",
    )
    .await;
    let (attempt, at) = runs.lock().unwrap()[0];
    assert_eq!(attempt, 1, "no attempt spent on the lost fetch");
    assert!(
        at - pushed < Duration::from_secs(3),
        "ran {:?} after its push: it waited for its lease",
        at - pushed
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(rt.client().throughput("t").await.unwrap().failed(), 0);
    rt.shutdown().await.unwrap();
}
