//! The runtime end to end against a real redis-server: timing, exactly-once under no faults,
//! concurrency limits, retries, timeouts, poison messages, dead letters, crashes, shutdown.

#![allow(clippy::unwrap_used, unreachable_pub)] // test code: a panic is the failure report

mod support;

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use dq::runtime::{IntoOutcome, ShutdownReport};
use dq::{Backoff, Config, JobContext, JobState, Listener, Outcome, Runtime};
use serde::{Deserialize, Serialize};
use support::faulty::Faulty;
use support::{wait_until_dead, RedisServer};

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
    /// Waits until `n` runs were recorded (5 s at most, or the test fails saying `what`).
    async fn wait_for(&self, n: usize, what: &str) {
        wait_until(what, Duration::from_secs(5), || self.count() == n).await;
    }
}

/// The tests of this file run one at a time: several assert timings (a job within 10 ms of its
/// due time) that a 10,000-job burst running beside them on a 2-core CI machine would break.
async fn one_at_a_time() -> tokio::sync::MutexGuard<'static, ()> {
    static LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    LOCK.lock().await
}

/// A test's turn ([`one_at_a_time`]), its redis-server and a recorder for its runs.
async fn begin() -> (tokio::sync::MutexGuard<'static, ()>, RedisServer, Recorder) {
    let serial = one_at_a_time().await;
    (serial, RedisServer::start(), Recorder::default())
}

/// [`begin`], then a runtime on its Redis ([`config`] as `tweak` changes it) whose only
/// listener records the runs of `topic`.
async fn begin_recording(
    topic: &str,
    tweak: impl FnOnce(dq::config::ConfigBuilder) -> dq::config::ConfigBuilder,
) -> (
    tokio::sync::MutexGuard<'static, ()>,
    RedisServer,
    Recorder,
    Runtime,
) {
    let (serial, redis, rec) = begin().await;
    let rt = start(tweak(config(&redis)), vec![recording(topic, &rec)]).await;
    (serial, redis, rec, rt)
}

/// Shuts `rt` down, which must take less than `limit`.
async fn shutdown_within(rt: Runtime, limit: Duration) -> ShutdownReport {
    let begun = Instant::now();
    let report = rt.shutdown().await.unwrap();
    assert!(
        begun.elapsed() < limit,
        "shutdown took {:?}",
        begun.elapsed()
    );
    report
}

/// After a moment for its ack, job `j` of `topic` is gone: it succeeded (else the test fails
/// saying `what`).
async fn assert_done(c: &dq::Client, topic: &str, what: &str) {
    tokio::time::sleep(Duration::from_millis(50)).await;
    let status = c.status_in(topic, "j").await.unwrap();
    assert!(status.is_none(), "{what}");
}

/// Pushes `Job { n: 1 }` as job `j` of `topic`.
async fn push_j(c: &dq::Client, topic: &str) {
    c.push_to(topic, &Job { n: 1 }).id("j").await.unwrap();
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

fn recording(topic: &str, rec: &Recorder) -> Listener {
    let rec = rec.clone();
    Listener::new(topic, move |_: Job, ctx: JobContext| {
        let rec = rec.clone();
        async move { rec.record(&ctx) }
    })
}

/// A listener on `topic` whose runs record themselves in `rec`, then run `handler` (given the
/// job, its context and the recorder).
fn judging<R, F, H>(topic: &str, rec: &Recorder, handler: H) -> Listener
where
    R: IntoOutcome,
    F: Future<Output = R> + Send + 'static,
    H: Fn(Job, JobContext, Recorder) -> F + Send + Sync + 'static,
{
    let (rec, handler) = (rec.clone(), Arc::new(handler));
    Listener::new(topic, move |job: Job, ctx: JobContext| {
        let (rec, handler) = (rec.clone(), handler.clone());
        async move {
            rec.record(&ctx);
            handler(job, ctx, rec).await
        }
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
    // The safety tick is an hour: only the wake-up announced through Redis can start the job.
    let (_serial, redis, rec, rt) = begin_recording("cross", |c| c).await;
    tokio::time::sleep(Duration::from_millis(200)).await; // the runtime is idle and waiting
    let mut child = spawn_child("push", &redis, &[("DQ_TEST_DELAY_MS", "400".into())]);
    assert!(child.wait().unwrap().success());
    rec.wait_for(1, "the job to run").await;
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
    let (_serial, _redis, rec, rt) = begin_recording("t", |c| c).await;
    for i in 0..20u64 {
        rt.client()
            .push_to("t", &Job { n: i })
            .delay(Duration::from_millis(20 + i * 7))
            .await
            .unwrap();
    }
    rec.wait_for(20, "all jobs").await;
    for run in rec.runs() {
        let late = lateness_ms(&run);
        assert!(late >= 0.0, "job {} started {:.3} ms early", run.id, -late);
        assert!(late < 50.0, "job {} started {late:.3} ms late", run.id);
    }
    rt.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn burst_of_10_000_jobs_due_at_once_runs_each_exactly_once_within_the_concurrency_limit() {
    let (_serial, redis, rec) = begin().await;
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
    let (_serial, redis, rec) = begin().await;
    let listener = judging("flaky", &rec, |_, ctx, _| async move {
        if ctx.attempt() < 3 {
            Err(format!("payment service down (attempt {})", ctx.attempt()))
        } else {
            Ok(())
        }
    })
    .backoff(Backoff::Fixed(Duration::from_millis(100)));
    let rt = start(config(&redis), vec![listener]).await;
    push_j(rt.client(), "flaky").await;
    rec.wait_for(3, "three attempts").await;
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
    assert_done(rt.client(), "flaky", "done and acked").await;
    rt.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_failing_every_attempt_is_dead_lettered_with_its_last_error() {
    let (_serial, redis, rec) = begin().await;
    let listener = judging("doomed", &rec, |_, ctx, _| async move {
        Err::<(), _>(format!("order service says no (attempt {})", ctx.attempt()))
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
    // Each run's error, its topic's events off.
    let runs: Vec<(u32, bool)> = info
        .errors
        .iter()
        .map(|e| {
            (
                e.run,
                e.error.contains(&format!("says no (attempt {})", e.run)),
            )
        })
        .collect();
    assert_eq!(runs, [(1, true), (2, true), (3, true)], "{:?}", info.errors);
    rt.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poison_message_is_dead_lettered_on_its_first_attempt_and_the_worker_goes_on() {
    let (_serial, _redis, rec, rt) = begin_recording("typed", |c| c).await;
    let c = rt.client();
    c.push_json("typed", r#"{"not":"a job"}"#)
        .id("poison")
        .await
        .unwrap();
    c.push_to("typed", &Job { n: 7 }).id("fine").await.unwrap();
    rec.wait_for(1, "the good job").await;
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
    let (_serial, redis, rec) = begin().await;
    let listener = judging("verdicts", &rec, |job, _, r| async move {
        // A postponed run does not count as an attempt: the first run is told by the count.
        let first = r.runs().iter().filter(|run| run.id == "later").count() == 1;
        match job.n {
            0 => Outcome::DeadLetter("order not found".into()),
            1 if first => Outcome::RetryAfter(Duration::from_millis(150)),
            _ => Outcome::Done,
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
    rec.wait_for(3, "three runs").await;
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
    let (_serial, redis, rec) = begin().await;
    let listener = judging("panicky", &rec, |_, ctx, _| async move {
        if ctx.attempt() == 1 {
            panic!("bug in handler");
        }
    })
    .backoff(Backoff::Fixed(Duration::from_millis(10)));
    let rt = start(config(&redis), vec![listener]).await;
    push_j(rt.client(), "panicky").await;
    rec.wait_for(2, "the retry").await;
    assert_done(rt.client(), "panicky", "the retry succeeded").await;
    rt.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_of_a_worker_killed_with_sigkill_run_again_on_another_worker() {
    let (_serial, redis, _) = begin().await;
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
async fn sigterm_lets_the_running_job_finish_runs_the_hooks_and_exits_cleanly() {
    use std::io::BufRead;
    let (_serial, redis, _) = begin().await;
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
    let (_serial, redis, _) = begin().await;
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
    let (_serial, mut redis, rec, rt) = begin_recording("t", |c| c).await;
    rt.client().push_to("t", &Job { n: 1 }).await.unwrap();
    rec.wait_for(1, "the first job").await;
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
    let polling = |c: dq::config::ConfigBuilder| c.poll_interval(Duration::from_millis(20));
    let (_serial, redis, rec, rt) = begin_recording("t", polling).await;
    rt.client()
        .push_to("t", &Job { n: 1 })
        .delay(Duration::from_millis(50))
        .await
        .unwrap();
    rec.wait_for(1, "the job").await;
    let clients = redis.command(&["CLIENT", "LIST"]);
    assert!(
        !clients.contains("cmd=blmove") && !clients.contains("cmd=blpop"),
        "no blocking command in polling mode: {clients}"
    );
    let channels = redis.command(&["PUBSUB", "CHANNELS", "*ready*"]);
    assert!(
        !channels.contains("ready"),
        "no ready-job subscription in polling mode: {channels}"
    );
    rt.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_topic_waits_and_runs_after_resume_and_the_worker_is_listed() {
    let short_lease = |c: dq::config::ConfigBuilder| c.lease(Duration::from_millis(600));
    let (_serial, _redis, rec, rt) = begin_recording("pausable", short_lease).await;
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
    let (_serial, _redis, rec, rt) = begin_recording("pausable", |c| c).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_acks_finished_jobs_releases_unfinished_ones_and_runs_hooks_in_order() {
    let (_serial, redis, rec) = begin().await;
    let listener = judging("shutdown", &rec, |job, _, _| async move {
        // Even jobs finish within the grace period; odd ones would take far longer.
        let ms = if job.n.is_multiple_of(2) { 100 } else { 60_000 };
        tokio::time::sleep(Duration::from_millis(ms)).await;
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
    rec.wait_for(6, "all six to start").await;
    let report = shutdown_within(rt, Duration::from_millis(1500)).await;
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

/// With Redis gone, shutdown ends within its bounds (5 s for the acks, then 2 s for the worker
/// record, the heartbeat renewing leases until the acks are done) and says how many finished
/// jobs it could not ack (they run again after their lease): it took 12.5 s and reported a
/// clean finish.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_with_redis_down_is_bounded_and_reports_the_unacked_job() {
    let (_serial, mut redis, _) = begin().await;
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
    let report = shutdown_within(rt, Duration::from_secs(10)).await;
    assert_eq!((report.finished, report.unacked), (1, 1), "{report:?}");
}

// Retries, timeouts and shutdown where a job could be run twice, or lost (issue 15's review;
// RELIABILITY.md lists the findings).

/// Finding 3: shutdown used to drop a fetch reply in flight. Redis had leased the job, nobody
/// ran it, and only the lease's expiry brought it back, counted as a run that never happened
/// (a job on its last attempt was dead-lettered without running).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetch_reply_in_flight_at_shutdown_is_handed_back_not_dropped() {
    let (_serial, redis, _) = begin().await;
    let config = config(&redis).build().unwrap();
    let store = Arc::new(Faulty {
        hold_fetch: true,
        ..Faulty::new(&config).await
    });
    let ran = Arc::new(Mutex::new(0));
    let r = ran.clone();
    let listener = Listener::new("t", move |_: u32, _: JobContext| {
        let r = r.clone();
        async move { *r.lock().unwrap() += 1 }
    });
    let rt = support::start_on(config.clone(), Some(store.clone()), listener).await;
    rt.client()
        .push_to("t", &1)
        .id("j")
        .max_retries(0)
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(5), store.leased.notified())
        .await
        .expect("the job was leased");
    let handle = rt.shutdown_handle();
    handle.shutdown();
    tokio::time::sleep(Duration::from_millis(100)).await;
    store.gate.add_permits(1); // the reply arrives after shutdown began
    rt.wait().await.unwrap();

    assert_eq!(
        *ran.lock().unwrap(),
        0,
        "shutdown began first: not run here"
    );
    let client = dq::Client::connect(config).await.unwrap();
    let info = client.status_in("t", "j").await.unwrap().unwrap();
    assert_eq!(
        (info.state, info.attempt),
        (JobState::Ready, 0),
        "handed back at once, no run counted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handler_that_overruns_its_timeout_is_cancelled_and_counted_as_failed() {
    let (_serial, redis, _) = begin().await;
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
    push_j(rt.client(), "slow").await;
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

/// One run: its attempt, when it started, and when its blocking part ended.
type BlockingRun = (u32, Instant, Option<Instant>);

/// Finding 10: a handler aborted by its timeout keeps running until its next `.await` when it
/// blocks the thread; the retry must not start a second run beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn a_timed_out_handler_that_blocks_ends_before_its_retry_starts() {
    let (_serial, redis, _) = begin().await;
    let runs: Arc<Mutex<Vec<BlockingRun>>> = Arc::default();
    let r = runs.clone();
    let listener = Listener::new("t", move |_: u32, ctx: JobContext| {
        let r = r.clone();
        async move {
            let i = {
                let mut runs = r.lock().unwrap();
                runs.push((ctx.attempt(), Instant::now(), None));
                runs.len() - 1
            };
            if ctx.attempt() == 1 {
                tokio::task::yield_now().await;
                std::thread::sleep(Duration::from_millis(600)); // blocking code: no await
            }
            r.lock().unwrap()[i].2 = Some(Instant::now());
            tokio::task::yield_now().await;
        }
    })
    .timeout(Duration::from_millis(50))
    .retries(1)
    .backoff(dq::Backoff::Fixed(Duration::from_millis(1)));
    let rt = start(config(&redis), vec![listener]).await;
    rt.client().push_to("t", &1).id("j").await.unwrap();
    support::wait_until(
        Duration::from_secs(10),
        || runs.lock().unwrap().len() >= 2,
        || format!("no retry: {:?}", runs.lock().unwrap()),
    )
    .await;
    let runs = runs.lock().unwrap().clone();
    let first_ended = runs[0].2.expect("the blocking part ran to its end");
    assert!(
        runs[1].1 >= first_ended,
        "the retry started {:?} before the first run's blocking code ended",
        first_ended - runs[1].1
    );
    rt.shutdown().await.unwrap();
}

/// Finding 8: `RetryAfter(Duration::MAX)` used to write an envelope dq could not read (and a
/// delay of 2^64 us or more wrapped around to a short one). Now the job is dead-lettered with
/// the reason, readable and requeueable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_longer_than_the_limit_is_dead_lettered_with_the_reason() {
    let (_serial, redis, _) = begin().await;
    let listener = Listener::new("t", |_: u32, _: JobContext| async {
        Outcome::RetryAfter(Duration::MAX)
    });
    let rt = start(config(&redis), vec![listener]).await;
    let c = rt.client().clone();
    c.push_to("t", &1).id("j").await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let info = loop {
        let info = c.status_in("t", "j").await.unwrap().unwrap();
        if info.state == JobState::Dead {
            break info;
        }
        assert!(Instant::now() < deadline, "not dead-lettered: {info:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let error = info.last_error.unwrap();
    assert!(error.contains("200-year limit"), "{error}");
    rt.shutdown().await.unwrap();
}

/// Finding 10: `Outcome::RetryAfter` ("not yet, look again in a minute") spent an attempt, so a
/// job that was postponed a few times was dead-lettered on its first real failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_does_not_spend_an_attempt() {
    let (_serial, redis, _) = begin().await;
    let runs = Arc::new(Mutex::new(Vec::new()));
    let r = runs.clone();
    let listener = Listener::new("poll", move |_: u32, ctx: JobContext| {
        let mut runs = r.lock().unwrap();
        runs.push(ctx.attempt());
        let outcome = match runs.len() {
            1..=3 => Outcome::RetryAfter(Duration::from_millis(20)),
            4 => Outcome::Error("the payment service answered 503".into()),
            _ => Outcome::Done,
        };
        async move { outcome }
    })
    .retries(1)
    .backoff(dq::Backoff::Fixed(Duration::from_millis(20)));
    let rt = start(config(&redis), vec![listener]).await;
    let c = rt.client().clone();
    c.push_to("poll", &1).id("p").await.unwrap();
    support::wait_until_done(&c, "poll", "p").await;
    assert_eq!(*runs.lock().unwrap(), [1, 1, 1, 1, 2]);
    rt.shutdown().await.unwrap();
}

/// Issue 33, item 1: a rate limit holds across processes. Two runtimes on one Redis, each with
/// room for 16 at once, share the topic's 20 a second: 12 jobs start one at a time, 50 ms
/// apart (the burst is one job), whatever the number of workers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_holds_across_two_runtimes() {
    let (_serial, redis, rec) = begin().await;
    let rate: dq::Rate = "20/1s".parse().unwrap();
    let a = start(config(&redis), vec![recording("calls", &rec).rate(rate)]).await;
    let b = start(config(&redis), vec![recording("calls", &rec).rate(rate)]).await;
    for n in 0..12 {
        a.client().push_to("calls", &Job { n }).await.unwrap();
    }
    wait_until("12 runs", Duration::from_secs(10), || rec.count() == 12).await;
    let mut starts: Vec<SystemTime> = rec.runs().iter().map(|r| r.started).collect();
    starts.sort();
    // 11 intervals of 50 ms between the first start and the last, less the clocks' jitter
    // (the limit runs on Redis' clock, the starts are read on ours).
    let span = starts[11].duration_since(starts[0]).unwrap();
    assert!(span >= Duration::from_millis(500), "12 starts in {span:?}");
    let tightest = starts
        .windows(3)
        .map(|w| w[2].duration_since(w[0]).unwrap())
        .min()
        .unwrap();
    assert!(
        tightest >= Duration::from_millis(80),
        "three starts within {tightest:?}: over the rate"
    );
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// Issue 33, item 1: a handler that meets its provider's 429 returns `RateLimited`: no job of
/// the topic starts during the hold, the job runs again after it on the same attempt (none
/// spent), and its last error stays as it was. The next job is ready before the 429 comes back:
/// the run keeps its permit until the hold is written, so the next fetch cannot slip in first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limited_run_holds_the_topic_and_runs_again_without_spending_an_attempt() {
    let (_serial, redis, rec) = begin().await;
    let listener = judging("provider", &rec, |job, _, r| async move {
        let first = r.runs().iter().filter(|run| run.id == "limited").count() == 1;
        match job.n {
            0 if first => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                Outcome::RateLimited(Duration::from_millis(400))
            }
            _ => Outcome::Done,
        }
    })
    .concurrency(1);
    let rt = start(config(&redis), vec![listener]).await;
    let c = rt.client();
    c.push_to("provider", &Job { n: 0 })
        .id("limited")
        .await
        .unwrap();
    rec.wait_for(1, "the first run").await;
    c.push_to("provider", &Job { n: 1 })
        .id("other")
        .await
        .unwrap();
    wait_until("three runs", Duration::from_secs(5), || rec.count() == 3).await;
    let runs = rec.runs();
    let first = runs[0].started;
    for run in &runs[1..] {
        let after = run.started.duration_since(first).unwrap();
        assert!(
            after >= Duration::from_millis(490),
            "{} started {after:?} after the run that met the 429 (100 ms run, 400 ms hold)",
            run.id
        );
    }
    let again: Vec<&Run> = runs.iter().filter(|r| r.id == "limited").collect();
    assert_eq!(
        again.iter().map(|r| r.attempt).collect::<Vec<_>>(),
        [1, 1],
        "no attempt spent"
    );
    // The held job went back to the front: it runs before the one pushed during the hold.
    assert_eq!(runs[1].id, "limited");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(c.status_in("provider", "limited").await.unwrap().is_none());
    rt.shutdown().await.unwrap();
}

/// Issue 33, item 2: a global concurrency holds across processes. Two runtimes, each with room
/// for 8, never run more than 3 of the topic's jobs at once between them, and run them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_global_concurrency_holds_across_two_runtimes() {
    let (_serial, redis, rec) = begin().await;
    let limited = |rec: &Recorder| {
        judging("calls", rec, |_, _, r| async move {
            r.enter();
            tokio::time::sleep(Duration::from_millis(30)).await;
            r.leave();
        })
        .concurrency(8)
        .global_concurrency(3)
    };
    let a = start(config(&redis), vec![limited(&rec)]).await;
    let b = start(config(&redis), vec![limited(&rec)]).await;
    for n in 0..20 {
        a.client().push_to("calls", &Job { n }).await.unwrap();
    }
    wait_until("20 runs", Duration::from_secs(10), || rec.count() == 20).await;
    let most = rec.max_active.load(Ordering::SeqCst);
    assert!((1..=3).contains(&most), "{most} ran at once");
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// The same over a namespace of 4 shards, with a limit of 2, under the shard count: the first
/// shard counts the slots of all four (slots.lua), the runs' ends give them back, and every job
/// runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_global_concurrency_under_the_shard_count_holds_across_two_runtimes() {
    let (_serial, redis, rec) = begin().await;
    let limited = |rec: &Recorder| {
        judging("calls", rec, |_, _, r| async move {
            r.enter();
            tokio::time::sleep(Duration::from_millis(30)).await;
            r.leave();
        })
        .concurrency(8)
        .global_concurrency(2)
    };
    let sharded = || config(&redis).shards(4);
    let a = start(sharded(), vec![limited(&rec)]).await;
    let b = start(sharded(), vec![limited(&rec)]).await;
    for n in 0..40 {
        a.client().push_to("calls", &Job { n }).await.unwrap();
    }
    wait_until("40 runs", Duration::from_secs(20), || rec.count() == 40).await;
    let most = rec.max_active.load(Ordering::SeqCst);
    assert_eq!(most, 2, "the limit was reached and never passed");
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
    assert_eq!(
        redis
            .command(&["HGET", "dq:{rt:0}:gslots:calls", ":held"])
            .lines()
            .nth(1),
        Some("0"),
        "every slot was given back"
    );
}
