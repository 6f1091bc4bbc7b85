//! The runtime end to end against a real redis-server: timing, exactly-once under no faults,
//! concurrency limits, retries, timeouts, poison messages, dead letters, crashes, shutdown.

#![allow(clippy::unwrap_used, unreachable_pub)] // test code: a panic is the failure report

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use dq::{Backoff, Config, JobContext, JobState, Listener, Outcome, Runtime};
use serde::{Deserialize, Serialize};
use support::RedisServer;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Job {
    n: u64,
}

/// One handler run as the test saw it.
#[derive(Debug, Clone)]
struct Run {
    id: String,
    attempt: u32,
    started: SystemTime,
    due: SystemTime,
}

#[derive(Default, Clone)]
struct Recorder {
    runs: Arc<Mutex<Vec<Run>>>,
    active: Arc<AtomicUsize>,
    max_active: Arc<AtomicUsize>,
}

impl Recorder {
    fn record(&self, ctx: &JobContext) {
        self.runs.lock().unwrap().push(Run {
            id: ctx.id().to_string(),
            attempt: ctx.attempt(),
            started: SystemTime::now(),
            due: ctx.due(),
        });
    }
    fn runs(&self) -> Vec<Run> {
        self.runs.lock().unwrap().clone()
    }
    fn count(&self) -> usize {
        self.runs.lock().unwrap().len()
    }
    fn enter(&self) {
        let now = self.active.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_active.fetch_max(now, Ordering::SeqCst);
    }
    fn leave(&self) {
        self.active.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The tests of this file run one at a time: several assert timings (a job within 10 ms of its
/// due time) that a 10,000-job burst running beside them on a 2-core CI machine would break.
async fn one_at_a_time() -> tokio::sync::MutexGuard<'static, ()> {
    static LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    LOCK.lock().await
}

fn config(redis: &RedisServer) -> dq::config::ConfigBuilder {
    Config::builder()
        .redis_url(redis.url())
        .namespace("rt")
        .safety_tick(Duration::from_secs(3600))
}

async fn start(config: dq::config::ConfigBuilder, listeners: Vec<Listener>) -> Runtime {
    let mut b = Runtime::builder()
        .config(config.build().unwrap())
        .without_registered_listeners();
    for l in listeners {
        b = b.listener(l);
    }
    b.start().await.unwrap()
}

async fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Polls a job's status until it is dead-lettered (5 s at most) and returns it.
async fn wait_until_dead(c: &dq::Client, topic: &str, id: &str) -> dq::JobInfo {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let info = c.status_in(topic, id).await.unwrap();
        if let Some(info) = info.filter(|i| i.state == JobState::Dead) {
            return info;
        }
        assert!(
            Instant::now() < deadline,
            "{topic}:{id} was never dead-lettered"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn recording(topic: &str, rec: &Recorder) -> Listener {
    let rec = rec.clone();
    Listener::new(topic, move |_: Job, ctx: JobContext| {
        let rec = rec.clone();
        async move { rec.record(&ctx) }
    })
}

fn lateness_ms(r: &Run) -> f64 {
    match r.started.duration_since(r.due) {
        Ok(late) => late.as_secs_f64() * 1000.0,
        Err(early) => -early.duration().as_secs_f64() * 1000.0,
    }
}

// ---------------------------------------------------------------------------------------------
// Child processes: this test binary re-run with DQ_TEST_CHILD set.

/// Entry point for the child processes the tests below spawn; does nothing in a normal run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_process_entry_point() {
    let Ok(role) = std::env::var("DQ_TEST_CHILD") else {
        return;
    };
    let url = std::env::var("DQ_REDIS_URL").unwrap();
    let cfg = Config::builder()
        .redis_url(url)
        .namespace("rt")
        .lease(Duration::from_millis(500));
    match role.as_str() {
        "push" => {
            let client = dq::Client::connect(cfg.build().unwrap()).await.unwrap();
            let delay: u64 = std::env::var("DQ_TEST_DELAY_MS").unwrap().parse().unwrap();
            client
                .push_to("cross", &Job { n: 1 })
                .id("from-child")
                .delay(Duration::from_millis(delay))
                .await
                .unwrap();
        }
        "stuck-worker" => {
            let listener = Listener::new("crash", |_: Job, _ctx: JobContext| async {
                std::future::pending::<()>().await; // never returns: killed with SIGKILL
            })
            .concurrency(100)
            .no_timeout();
            let rt = start(cfg.safety_tick(Duration::from_secs(3600)), vec![listener]).await;
            println!("worker started");
            rt.wait().await.unwrap();
        }
        "signal-worker" => {
            let listener = Listener::new("signal", |_: Job, _ctx: JobContext| async {
                tokio::time::sleep(Duration::from_millis(300)).await;
            });
            let rt = Runtime::builder()
                .config(cfg.build().unwrap())
                .without_registered_listeners()
                .listener(listener)
                .on_shutdown("say goodbye", || async { println!("hook ran") })
                .start()
                .await
                .unwrap();
            println!("worker started");
            let report = rt.run_until_shutdown_signal().await.unwrap();
            println!("finished={} released={}", report.finished, report.released);
        }
        other => panic!("unknown child role {other}"),
    }
}

/// This test binary again, running `child_process_entry_point` in `role` against `redis`.
fn child(role: &str, redis: &RedisServer) -> std::process::Command {
    let mut cmd = dq_testkit::process::this_test("child_process_entry_point").unwrap();
    cmd.env("DQ_TEST_CHILD", role)
        .env("DQ_REDIS_URL", redis.url());
    cmd
}

fn spawn_child(role: &str, redis: &RedisServer, env: &[(&str, String)]) -> std::process::Child {
    let mut cmd = child(role, redis);
    cmd.stdout(std::process::Stdio::null())
        .envs(env.iter().map(|(k, v)| (k, v)));
    cmd.spawn().unwrap()
}

// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_pushed_by_another_process_runs_within_10ms_of_its_due_time() {
    let _serial = one_at_a_time().await;
    let redis = RedisServer::start();
    let rec = Recorder::default();
    // The safety tick is an hour: only the wake-up announced through Redis can start the job.
    let rt = start(config(&redis), vec![recording("cross", &rec)]).await;
    tokio::time::sleep(Duration::from_millis(200)).await; // the runtime is idle and waiting
    let mut child = spawn_child("push", &redis, &[("DQ_TEST_DELAY_MS", "400".into())]);
    assert!(child.wait().unwrap().success());
    wait_until("the job to run", Duration::from_secs(5), || {
        rec.count() == 1
    })
    .await;
    let run = &rec.runs()[0];
    assert_eq!(run.id, "from-child");
    let late = lateness_ms(run);
    assert!(
        (0.0..10.0).contains(&late),
        "started {late:.3} ms after its due time"
    );
    rt.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_never_starts_before_its_due_time() {
    let _serial = one_at_a_time().await;
    let redis = RedisServer::start();
    let rec = Recorder::default();
    let rt = start(config(&redis), vec![recording("t", &rec)]).await;
    let c = rt.client();
    for i in 0..20u64 {
        c.push_to("t", &Job { n: i })
            .delay(Duration::from_millis(20 + i * 7))
            .await
            .unwrap();
    }
    wait_until("all jobs", Duration::from_secs(5), || rec.count() == 20).await;
    for run in rec.runs() {
        let late = lateness_ms(&run);
        assert!(late >= 0.0, "job {} started {:.3} ms early", run.id, -late);
        assert!(late < 50.0, "job {} started {late:.3} ms late", run.id);
    }
    rt.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn burst_of_10_000_jobs_due_at_once_runs_each_exactly_once_within_the_concurrency_limit() {
    let _serial = one_at_a_time().await;
    let redis = RedisServer::start();
    let rec = Recorder::default();
    let r = rec.clone();
    let listener = Listener::new("burst", move |_: Job, ctx: JobContext| {
        let r = r.clone();
        async move {
            r.enter();
            r.record(&ctx);
            tokio::time::sleep(Duration::from_micros(200)).await;
            r.leave();
        }
    })
    .concurrency(8);
    let rt = start(config(&redis), vec![listener]).await;
    let c = rt.client();
    let n = 10_000u64;
    c.push_batch((0..n).map(|i| {
        c.push_to("burst", &Job { n: i })
            .id(i.to_string())
            .delay(Duration::from_millis(300))
    }))
    .await
    .unwrap();
    wait_until("10,000 runs", Duration::from_secs(60), || {
        rec.count() >= n as usize
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await; // would a duplicate show up?
    let mut per_id: HashMap<String, usize> = HashMap::new();
    for run in rec.runs() {
        *per_id.entry(run.id).or_default() += 1;
    }
    assert_eq!(per_id.len(), n as usize, "every job ran");
    assert!(per_id.values().all(|&k| k == 1), "no job ran twice");
    let max = rec.max_active.load(Ordering::SeqCst);
    assert!(max <= 8, "{max} handlers ran at once with concurrency 8");
    assert!(max >= 2, "the limit was actually used ({max})");
    let counts = c.counts("burst").await.unwrap();
    assert_eq!(
        (counts.delayed, counts.ready, counts.running, counts.dead),
        (0, 0, 0, 0)
    );
    rt.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_job_is_retried_with_backoff_until_it_succeeds() {
    let _serial = one_at_a_time().await;
    let redis = RedisServer::start();
    let rec = Recorder::default();
    let r = rec.clone();
    let listener = Listener::new("flaky", move |_: Job, ctx: JobContext| {
        let r = r.clone();
        async move {
            r.record(&ctx);
            if ctx.attempt() < 3 {
                Err(format!("payment service down (attempt {})", ctx.attempt()))
            } else {
                Ok(())
            }
        }
    })
    .backoff(Backoff::Fixed(Duration::from_millis(100)));
    let rt = start(config(&redis), vec![listener]).await;
    rt.client()
        .push_to("flaky", &Job { n: 1 })
        .id("j")
        .await
        .unwrap();
    wait_until("three attempts", Duration::from_secs(5), || {
        rec.count() == 3
    })
    .await;
    let runs = rec.runs();
    assert_eq!(
        runs.iter().map(|r| r.attempt).collect::<Vec<_>>(),
        [1, 2, 3]
    );
    for pair in runs.windows(2) {
        let gap = pair[1].started.duration_since(pair[0].started).unwrap();
        assert!(
            gap >= Duration::from_millis(79),
            "retried after {gap:?}, backoff is 100ms -20%"
        );
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        rt.client().status_in("flaky", "j").await.unwrap().is_none(),
        "done and acked"
    );
    rt.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_failing_every_attempt_is_dead_lettered_with_its_last_error() {
    let _serial = one_at_a_time().await;
    let redis = RedisServer::start();
    let rec = Recorder::default();
    let r = rec.clone();
    let listener = Listener::new("doomed", move |_: Job, ctx: JobContext| {
        let r = r.clone();
        async move {
            r.record(&ctx);
            Err::<(), _>(format!("order service says no (attempt {})", ctx.attempt()))
        }
    })
    .backoff(Backoff::Fixed(Duration::from_millis(10)));
    let rt = start(config(&redis), vec![listener]).await;
    rt.client()
        .push_to("doomed", &Job { n: 1 })
        .id("j")
        .max_retries(2)
        .await
        .unwrap();
    let c = rt.client().clone();
    let info = wait_until_dead(&c, "doomed", "j").await;
    assert_eq!(rec.count(), 3, "the first run and two retries");
    assert_eq!(info.attempt, 3);
    let error = info.last_error.unwrap();
    assert!(
        error.contains("order service says no (attempt 3)") && error.contains("attempt 3 of 3"),
        "{error}"
    );
    rt.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handler_that_overruns_its_timeout_is_cancelled_and_counted_as_failed() {
    let _serial = one_at_a_time().await;
    let redis = RedisServer::start();
    let finished = Arc::new(AtomicUsize::new(0));
    let f = finished.clone();
    let listener = Listener::new("slow", move |_: Job, _ctx: JobContext| {
        let f = f.clone();
        async move {
            tokio::time::sleep(Duration::from_secs(2)).await;
            f.fetch_add(1, Ordering::SeqCst);
        }
    })
    .timeout(Duration::from_millis(50))
    .retries(0);
    let rt = start(config(&redis), vec![listener]).await;
    rt.client()
        .push_to("slow", &Job { n: 1 })
        .id("j")
        .await
        .unwrap();
    let c = rt.client().clone();
    let info = wait_until_dead(&c, "slow", "j").await;
    assert!(info.last_error.unwrap().contains("timed out after 50ms"));
    assert_eq!(
        finished.load(Ordering::SeqCst),
        0,
        "the overrunning handler was cancelled"
    );
    rt.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poison_message_is_dead_lettered_on_its_first_attempt_and_the_worker_goes_on() {
    let _serial = one_at_a_time().await;
    let redis = RedisServer::start();
    let rec = Recorder::default();
    let rt = start(config(&redis), vec![recording("typed", &rec)]).await;
    let c = rt.client();
    c.push_json("typed", r#"{"not":"a job"}"#)
        .id("poison")
        .await
        .unwrap();
    c.push_to("typed", &Job { n: 7 }).id("fine").await.unwrap();
    wait_until("the good job", Duration::from_secs(5), || rec.count() == 1).await;
    let info = wait_until_dead(c, "typed", "poison").await;
    assert_eq!(info.attempt, 1, "never retried");
    let error = info.last_error.unwrap();
    assert!(
        error.contains("poison message") && error.contains("missing field `n`"),
        "{error}"
    );
    assert_eq!(
        rec.runs()[0].id,
        "fine",
        "the handler never saw the poison message"
    );
    rt.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handler_outcomes_dead_letter_now_or_retry_after_a_delay() {
    let _serial = one_at_a_time().await;
    let redis = RedisServer::start();
    let rec = Recorder::default();
    let r = rec.clone();
    let listener = Listener::new("verdicts", move |job: Job, ctx: JobContext| {
        let r = r.clone();
        async move {
            r.record(&ctx);
            // A postponed run does not count as an attempt: the first run is told by the count.
            let first = r.runs().iter().filter(|run| run.id == "later").count() == 1;
            match job.n {
                0 => Outcome::DeadLetter("order not found".into()),
                1 if first => Outcome::RetryAfter(Duration::from_millis(150)),
                _ => Outcome::Done,
            }
        }
    });
    let rt = start(config(&redis), vec![listener]).await;
    let c = rt.client();
    c.push_to("verdicts", &Job { n: 0 })
        .id("gone")
        .await
        .unwrap();
    c.push_to("verdicts", &Job { n: 1 })
        .id("later")
        .await
        .unwrap();
    wait_until("three runs", Duration::from_secs(5), || rec.count() == 3).await;
    let runs = rec.runs();
    let later: Vec<_> = runs.iter().filter(|r| r.id == "later").collect();
    let gap = later[1].started.duration_since(later[0].started).unwrap();
    assert!(gap >= Duration::from_millis(150), "ran again after {gap:?}");
    let gone = c.status_in("verdicts", "gone").await.unwrap().unwrap();
    assert_eq!((gone.state, gone.attempt), (JobState::Dead, 1));
    assert_eq!(gone.last_error.as_deref(), Some("order not found"));
    rt.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handler_panic_is_caught_and_retried() {
    let _serial = one_at_a_time().await;
    let redis = RedisServer::start();
    let rec = Recorder::default();
    let r = rec.clone();
    let listener = Listener::new("panicky", move |_: Job, ctx: JobContext| {
        let r = r.clone();
        async move {
            r.record(&ctx);
            if ctx.attempt() == 1 {
                panic!("bug in handler");
            }
        }
    })
    .backoff(Backoff::Fixed(Duration::from_millis(10)));
    let rt = start(config(&redis), vec![listener]).await;
    rt.client()
        .push_to("panicky", &Job { n: 1 })
        .id("j")
        .await
        .unwrap();
    wait_until("the retry", Duration::from_secs(5), || rec.count() == 2).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        rt.client()
            .status_in("panicky", "j")
            .await
            .unwrap()
            .is_none(),
        "the retry succeeded"
    );
    rt.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_of_a_worker_killed_with_sigkill_run_again_on_another_worker() {
    let _serial = one_at_a_time().await;
    let redis = RedisServer::start();
    let n = 20u64;
    {
        let client = dq::Client::connect(config(&redis).build().unwrap())
            .await
            .unwrap();
        client
            .push_batch((0..n).map(|i| client.push_to("crash", &Job { n: i }).id(i.to_string())))
            .await
            .unwrap();
        let mut worker = spawn_child("stuck-worker", &redis, &[]);
        let deadline = Instant::now() + Duration::from_secs(20);
        while client.counts("crash").await.unwrap().running < n {
            assert!(
                Instant::now() < deadline,
                "the child worker never took the jobs"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        worker.kill().unwrap(); // SIGKILL
        worker.wait().unwrap();
    }
    let rec = Recorder::default();
    let killed_at = Instant::now();
    let rt = start(
        config(&redis).lease(Duration::from_millis(500)),
        vec![recording("crash", &rec)],
    )
    .await;
    wait_until("every job to run again", Duration::from_secs(10), || {
        rec.count() == n as usize
    })
    .await;
    let took = killed_at.elapsed();
    assert!(
        rec.runs().iter().all(|r| r.attempt == 2),
        "each ran a second time"
    );
    assert!(
        took < Duration::from_secs(3),
        "recovered in {took:?} with a 500 ms lease"
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    let counts = rt.client().counts("crash").await.unwrap();
    assert_eq!(
        (counts.running, counts.ready, counts.dead),
        (0, 0, 0),
        "none lost, none stuck"
    );
    rt.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_acks_finished_jobs_releases_unfinished_ones_and_runs_hooks_in_order() {
    let _serial = one_at_a_time().await;
    let redis = RedisServer::start();
    let started = Arc::new(AtomicUsize::new(0));
    let s = started.clone();
    let listener = Listener::new("shutdown", move |job: Job, _ctx: JobContext| {
        let s = s.clone();
        async move {
            s.fetch_add(1, Ordering::SeqCst);
            // Even jobs finish within the grace period; odd ones would take far longer.
            let ms = if job.n.is_multiple_of(2) { 100 } else { 60_000 };
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
    })
    .no_timeout();
    let hooks = Arc::new(Mutex::new(Vec::new()));
    let (h1, h2) = (hooks.clone(), hooks.clone());
    let rt = Runtime::builder()
        .config(
            config(&redis)
                .shutdown_grace(Duration::from_millis(500))
                .build()
                .unwrap(),
        )
        .without_registered_listeners()
        .listener(listener)
        .on_shutdown(
            "first",
            move || async move { h1.lock().unwrap().push("first") },
        )
        .on_shutdown("second", move || async move {
            h2.lock().unwrap().push("second")
        })
        .start()
        .await
        .unwrap();
    let c = rt.client().clone();
    c.push_batch((0..6u64).map(|i| c.push_to("shutdown", &Job { n: i }).id(i.to_string())))
        .await
        .unwrap();
    wait_until("all six to start", Duration::from_secs(5), || {
        started.load(Ordering::SeqCst) == 6
    })
    .await;
    let begun = Instant::now();
    let report = rt.shutdown().await.unwrap();
    assert!(
        begun.elapsed() < Duration::from_millis(1500),
        "took {:?}",
        begun.elapsed()
    );
    assert_eq!((report.finished, report.released), (3, 3));
    assert_eq!(*hooks.lock().unwrap(), ["first", "second"]);
    for i in 0..6u64 {
        let info = c.status_in("shutdown", &i.to_string()).await.unwrap();
        if i % 2 == 0 {
            assert!(info.is_none(), "job {i} finished and was acked");
        } else {
            let info = info.expect("an unfinished job is kept");
            assert_eq!(
                info.state,
                JobState::Ready,
                "job {i} is back in ready at once"
            );
            assert_eq!(info.attempt, 0, "the interrupted run does not count");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_the_running_job_finish_runs_the_hooks_and_exits_cleanly() {
    let _serial = one_at_a_time().await;
    use std::io::BufRead;
    let redis = RedisServer::start();
    let client = dq::Client::connect(config(&redis).build().unwrap())
        .await
        .unwrap();
    let mut child = child("signal-worker", &redis)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    assert!(lines.any(|l| l.unwrap().contains("worker started")));
    client
        .push_to("signal", &Job { n: 1 })
        .id("j")
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while client.counts("signal").await.unwrap().running == 0 {
        assert!(Instant::now() < deadline, "the job never started");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Our own child, by its pid.
    dq_testkit::process::terminate(child.id()).unwrap();
    let status = child.wait().unwrap();
    let rest: Vec<String> = lines.map(|l| l.unwrap()).collect();
    assert!(status.success(), "exit status {status}: {rest:?}");
    assert!(rest.iter().any(|l| l == "hook ran"), "{rest:?}");
    assert!(
        rest.iter().any(|l| l == "finished=1 released=0"),
        "{rest:?}"
    );
    assert!(
        client.status_in("signal", "j").await.unwrap().is_none(),
        "the running job finished and was acked"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_listeners_on_one_topic_are_refused_at_start() {
    let _serial = one_at_a_time().await;
    let redis = RedisServer::start();
    let a = Listener::new("same", |_: Job, _: JobContext| async {});
    let b = Listener::new("same", |_: Job, _: JobContext| async {});
    let err = Runtime::builder()
        .config(config(&redis).build().unwrap())
        .without_registered_listeners()
        .listener(a)
        .listener(b)
        .start()
        .await
        .unwrap_err();
    assert!(matches!(err, dq::Error::DuplicateListener { .. }), "{err}");
    assert!(
        err.to_string().contains("two listeners for topic \"same\""),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_survives_a_redis_restart_and_runs_jobs_pushed_after_it() {
    let _serial = one_at_a_time().await;
    let mut redis = RedisServer::start();
    let rec = Recorder::default();
    let rt = start(config(&redis), vec![recording("t", &rec)]).await;
    rt.client().push_to("t", &Job { n: 1 }).await.unwrap();
    wait_until("the first job", Duration::from_secs(5), || rec.count() == 1).await;
    redis.kill();
    tokio::time::sleep(Duration::from_millis(300)).await; // the loops notice and back off
    redis.restart();
    let c = rt.client().clone();
    let deadline = Instant::now() + Duration::from_secs(10);
    while c
        .push_to("t", &Job { n: 2 })
        .id("after-restart")
        .await
        .is_err()
    {
        assert!(Instant::now() < deadline, "the client never reconnected");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    wait_until(
        "the job pushed after the restart",
        Duration::from_secs(10),
        || rec.count() == 2,
    )
    .await;
    rt.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polling_mode_runs_jobs_without_blocking_commands() {
    let _serial = one_at_a_time().await;
    let redis = RedisServer::start();
    let rec = Recorder::default();
    let rt = start(
        config(&redis).poll_interval(Duration::from_millis(20)),
        vec![recording("t", &rec)],
    )
    .await;
    rt.client()
        .push_to("t", &Job { n: 1 })
        .delay(Duration::from_millis(50))
        .await
        .unwrap();
    wait_until("the job", Duration::from_secs(5), || rec.count() == 1).await;
    let clients = redis.command(&["CLIENT", "LIST"]);
    assert!(
        !clients.contains("cmd=blmove"),
        "no BLMOVE in polling mode: {clients}"
    );
    rt.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_topic_waits_and_runs_after_resume_and_the_worker_is_listed() {
    let _serial = one_at_a_time().await;
    let redis = RedisServer::start();
    let rec = Recorder::default();
    let rt = start(
        config(&redis).lease(Duration::from_millis(600)),
        vec![recording("pausable", &rec)],
    )
    .await;
    let c = rt.client().clone();
    c.pause("pausable").await.unwrap();
    c.push_to("pausable", &Job { n: 1 }).await.unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(rec.count(), 0, "a paused topic is not run");
    let workers = c.workers().await.unwrap();
    assert_eq!(workers.len(), 1);
    assert_eq!(workers[0].topics, ["pausable"]);
    assert_eq!(workers[0].pid, std::process::id());
    c.resume("pausable").await.unwrap();
    wait_until("the job after resume", Duration::from_secs(3), || {
        rec.count() == 1
    })
    .await;
    rt.shutdown().await.unwrap();
    assert!(
        c.workers().await.unwrap().is_empty(),
        "a stopped worker removes itself"
    );
}

/// `dq resume` is announced to every worker: the first job runs at once, not at the paused
/// consumer's next once-a-second look (it came ~500 ms later on average, up to 1 s). Four
/// rounds, so that a 1 s poll passing by luck (1 in 5 per round) cannot pass the test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_topic_runs_its_waiting_job_at_once() {
    let _serial = one_at_a_time().await;
    let redis = RedisServer::start();
    let rec = Recorder::default();
    let rt = start(config(&redis), vec![recording("pausable", &rec)]).await;
    let c = rt.client().clone();
    for round in 1..=4 {
        c.pause("pausable").await.unwrap();
        c.push_to("pausable", &Job { n: round }).await.unwrap();
        // Long enough for the consumer to see the pause and settle into its wait.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(rec.count(), round as usize - 1, "a paused topic is not run");
        let resumed = Instant::now();
        c.resume("pausable").await.unwrap();
        wait_until("the job after resume", Duration::from_secs(3), || {
            rec.count() == round as usize
        })
        .await;
        assert!(
            resumed.elapsed() < Duration::from_millis(200),
            "round {round}: the job ran {:?} after resume",
            resumed.elapsed()
        );
    }
    rt.shutdown().await.unwrap();
}

/// With Redis gone, shutdown ends within its bounds (5 s for the acks, then 2 s for the worker
/// record, the heartbeat renewing leases until the acks are done) and says how many finished
/// jobs it could not ack (they run again after their lease): it took 12.5 s and reported a
/// clean finish.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_with_redis_down_is_bounded_and_reports_the_unacked_job() {
    let _serial = one_at_a_time().await;
    let mut redis = RedisServer::start();
    let release = Arc::new(tokio::sync::Notify::new());
    let started = Arc::new(AtomicUsize::new(0));
    let (r, s) = (release.clone(), started.clone());
    let listener = Listener::new("t", move |_: Job, _ctx: JobContext| {
        let (r, s) = (r.clone(), s.clone());
        async move {
            s.fetch_add(1, Ordering::SeqCst);
            r.notified().await;
        }
    })
    .no_timeout();
    let rt = start(config(&redis), vec![listener]).await;
    rt.client().push_to("t", &Job { n: 1 }).await.unwrap();
    wait_until("the job to start", Duration::from_secs(5), || {
        started.load(Ordering::SeqCst) == 1
    })
    .await;
    redis.kill();
    release.notify_one(); // the handler returns Done; its ack cannot be written
    let begun = Instant::now();
    let report = rt.shutdown().await.unwrap();
    assert!(
        begun.elapsed() < Duration::from_secs(10),
        "shutdown took {:?}",
        begun.elapsed()
    );
    assert_eq!((report.finished, report.unacked), (1, 1), "{report:?}");
}
