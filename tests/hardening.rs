//! Paths a review of the guarantees found where a job could be lost, run twice or stall, each
//! shown against a real redis-server (issue 15; RELIABILITY.md lists them).

#![allow(clippy::unwrap_used, unreachable_pub)] // test code: a panic is the failure report

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use async_trait::async_trait;
use dq::admin::{ChangeOutcome, Cursor, Page, Throughput, TopicCounts, TopicStats, WorkerInfo};
use dq::push::{OnConflict, PushOutcome};
use dq::store::{
    Acked, Fetched, Fetcher, FiredTick, LeaseRef, NewJob, Promoted, Reclaimed, RedisStore, Store,
};
use dq::store::{
    Admin, DeadLetters, Leases, Producer, ReadyWaiter, Registry, ScheduleEntry, Schedules, Sharded,
    WakeListener,
};
use dq::{
    Config, JobContext, JobId, JobInfo, JobState, Listener, Outcome, Runtime, Schedule, Topic,
};
use support::RedisServer;
use tokio::sync::{Notify, Semaphore};

fn config(redis: &RedisServer) -> Config {
    Config::builder()
        .redis_url(redis.url())
        .namespace("hard")
        .safety_tick(Duration::from_secs(3600))
        .build()
        .unwrap()
}

/// A runtime on `redis` with only `listener`.
async fn start(redis: &RedisServer, listener: Listener) -> Runtime {
    start_on(config(redis), None, listener).await
}

/// A runtime with `config`, on `store` when given, with only `listener`.
async fn start_on(config: Config, store: Option<Arc<dyn Store>>, listener: Listener) -> Runtime {
    let mut builder = Runtime::builder().config(config);
    if let Some(store) = store {
        builder = builder.store(store);
    }
    builder
        .without_registered_listeners()
        .listener(listener)
        .start()
        .await
        .unwrap()
}

/// A Redis store with faults the test switches on:
/// - `hold_fetch`: a fetch that has leased jobs holds its reply until the test opens `gate`: a
///   reply in flight, as when shutdown begins between Redis' answer and its arrival;
/// - `stalled_shard`: every call that touches this shard's keys (lease renewals, acks, the
///   worker record of shard 0) never answers, as with a master busy in a long command;
/// - `failing_fetch`: a fetch from this shard fails after this long, as a fetch from a stalled
///   master fails when the client's reply limit runs out (counted in `fetch_failures`).
#[derive(Debug)]
struct Faulty {
    inner: RedisStore,
    hold_fetch: bool,
    leased: Notify,
    gate: Semaphore,
    stalled_shard: Option<u16>,
    failing_fetch: Option<(u16, Duration)>,
    fetch_failures: std::sync::atomic::AtomicUsize,
    /// A push of a job whose id starts with this holds (after `pushing` is notified) until
    /// the test adds a permit to `push_gate`: a process stalled between its look at a
    /// schedule and its push of the tick's job.
    hold_push: Option<String>,
    pushing: Notify,
    push_gate: Semaphore,
    /// A schedule's store (`put_schedule`) is written, then the call holds (after `put_done`
    /// is notified) until the test adds a permit to `put_gate`: a process paused between
    /// storing a changed schedule and what it does next.
    hold_put: bool,
    put_done: Notify,
    put_gate: Semaphore,
    /// The next fetch that leases jobs runs in Redis, then fails as if its reply was lost (a
    /// timeout while Redis was stalled with the request in its buffer).
    lose_fetch_reply: std::sync::atomic::AtomicBool,
}

impl Faulty {
    async fn new(config: &Config) -> Faulty {
        Faulty {
            inner: RedisStore::connect(config).await.unwrap(),
            hold_fetch: false,
            leased: Notify::new(),
            gate: Semaphore::new(0),
            stalled_shard: None,
            failing_fetch: None,
            fetch_failures: Default::default(),
            hold_push: None,
            pushing: Notify::new(),
            push_gate: Semaphore::new(0),
            hold_put: false,
            put_done: Notify::new(),
            put_gate: Semaphore::new(0),
            lose_fetch_reply: Default::default(),
        }
    }

    /// Never returns when a lease of the call is on the stalled shard.
    async fn stall_if_touched(&self, leases: &[LeaseRef]) {
        let stalled = self.stalled_shard.is_some_and(|s| {
            leases
                .iter()
                .any(|l| dq::store::shard_of(&l.topic, &l.id, self.shards()) == s)
        });
        if stalled {
            std::future::pending::<()>().await;
        }
    }
}

#[async_trait]
impl Sharded for Faulty {
    fn shards(&self) -> u16 {
        self.inner.shards()
    }
    async fn time_us(&self) -> dq::Result<u64> {
        self.inner.time_us().await
    }
}

#[async_trait]
impl Producer for Faulty {
    async fn push(
        &self,
        jobs: Vec<NewJob>,
        on_conflict: OnConflict,
    ) -> dq::Result<Vec<PushOutcome>> {
        let held = self.hold_push.as_ref().is_some_and(|prefix| {
            jobs.iter()
                .any(|j| j.id.as_str().starts_with(prefix.as_str()))
        });
        if held {
            self.pushing.notify_one();
            self.push_gate.acquire().await.unwrap().forget();
        }
        self.inner.push(jobs, on_conflict).await
    }
    async fn cancel(&self, topic: &Topic, id: &JobId) -> dq::Result<ChangeOutcome> {
        self.inner.cancel(topic, id).await
    }
    async fn reschedule(
        &self,
        topic: &Topic,
        id: &JobId,
        when: Schedule,
    ) -> dq::Result<ChangeOutcome> {
        self.inner.reschedule(topic, id, when).await
    }
    async fn status(&self, topic: &Topic, id: &JobId) -> dq::Result<Option<JobInfo>> {
        self.inner.status(topic, id).await
    }
}

#[async_trait]
impl Leases for Faulty {
    async fn promote(&self, shard: u16, limit: usize) -> dq::Result<Promoted> {
        self.inner.promote(shard, limit).await
    }
    async fn fetch(
        &self,
        shard: u16,
        topic: &Topic,
        max: usize,
        lease: Duration,
    ) -> dq::Result<Fetched> {
        self.fetch_for(shard, topic, max, lease, &Fetcher::default())
            .await
    }
    async fn fetch_for(
        &self,
        shard: u16,
        topic: &Topic,
        max: usize,
        lease: Duration,
        fetcher: &Fetcher,
    ) -> dq::Result<Fetched> {
        if let Some((failing, after)) = self.failing_fetch.filter(|(s, _)| *s == shard) {
            tokio::time::sleep(after).await;
            self.fetch_failures
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            return Err(Topic::new(format!("shard {failing} timed out")).unwrap_err());
        }
        let fetched = self
            .inner
            .fetch_for(shard, topic, max, lease, fetcher)
            .await?;
        if !fetched.jobs.is_empty()
            && self
                .lose_fetch_reply
                .swap(false, std::sync::atomic::Ordering::SeqCst)
        {
            return Err(Topic::new("the fetch reply was lost").unwrap_err());
        }
        if self.hold_fetch && !fetched.jobs.is_empty() {
            self.leased.notify_one();
            let _ = self.gate.acquire().await.unwrap();
        }
        Ok(fetched)
    }
    async fn ack(&self, leases: &[LeaseRef]) -> dq::Result<Acked> {
        self.stall_if_touched(leases).await;
        self.inner.ack(leases).await
    }
    async fn retry(&self, lease: &LeaseRef, delay: Duration, error: &str) -> dq::Result<bool> {
        self.inner.retry(lease, delay, error).await
    }
    async fn postpone(&self, lease: &LeaseRef, delay: Duration) -> dq::Result<bool> {
        self.inner.postpone(lease, delay).await
    }
    async fn dead_letter(&self, lease: &LeaseRef, error: &str) -> dq::Result<bool> {
        self.inner.dead_letter(lease, error).await
    }
    async fn release(&self, leases: &[LeaseRef]) -> dq::Result<usize> {
        self.inner.release(leases).await
    }
    async fn extend(&self, leases: &[LeaseRef], lease: Duration) -> dq::Result<Vec<LeaseRef>> {
        self.stall_if_touched(leases).await;
        self.inner.extend(leases, lease).await
    }
    async fn reclaim(&self, shard: u16, limit: usize) -> dq::Result<Reclaimed> {
        self.inner.reclaim(shard, limit).await
    }
    async fn set_attempt_limit(&self, topic: &Topic, max: Option<u32>) -> dq::Result<()> {
        self.inner.set_attempt_limit(topic, max).await
    }
    fn ready_waiter(&self, shard: u16, topic: &Topic) -> Box<dyn ReadyWaiter> {
        self.inner.ready_waiter(shard, topic)
    }
    async fn wake_listener(&self) -> dq::Result<Box<dyn WakeListener>> {
        self.inner.wake_listener().await
    }
}

#[async_trait]
impl Admin for Faulty {
    async fn counts(&self, topic: &Topic) -> dq::Result<TopicCounts> {
        self.inner.counts(topic).await
    }
    async fn stats(&self, topic: &Topic) -> dq::Result<TopicStats> {
        self.inner.stats(topic).await
    }
    async fn throughput(&self, topic: &Topic) -> dq::Result<Throughput> {
        self.inner.throughput(topic).await
    }
    async fn list(&self, topic: &Topic, state: JobState, at: Cursor, n: usize) -> dq::Result<Page> {
        self.inner.list(topic, state, at, n).await
    }
    async fn pause(&self, topic: &Topic) -> dq::Result<()> {
        self.inner.pause(topic).await
    }
    async fn resume(&self, topic: &Topic) -> dq::Result<()> {
        self.inner.resume(topic).await
    }
    async fn topics(&self) -> dq::Result<Vec<Topic>> {
        self.inner.topics().await
    }
    async fn dead_jobs(&self, topic: &Topic, at: Cursor, limit: usize) -> dq::Result<Page> {
        self.inner.dead_jobs(topic, at, limit).await
    }
    async fn requeue_dead(&self, t: &Topic, which: DeadLetters<'_>, max: u32) -> dq::Result<usize> {
        self.inner.requeue_dead(t, which, max).await
    }
    async fn purge_dead(&self, t: &Topic, before: SystemTime, n: usize) -> dq::Result<usize> {
        self.inner.purge_dead(t, before, n).await
    }
    async fn delete_dead(&self, t: &Topic, ids: &[JobId]) -> dq::Result<usize> {
        self.inner.delete_dead(t, ids).await
    }
}

#[async_trait]
impl Registry for Faulty {
    async fn register_worker(&self, worker: &WorkerInfo) -> dq::Result<()> {
        if self.stalled_shard == Some(0) {
            std::future::pending::<()>().await; // the worker record lives in shard 0
        }
        self.inner.register_worker(worker).await
    }
    async fn unregister_worker(&self, id: &str) -> dq::Result<()> {
        self.inner.unregister_worker(id).await
    }
    async fn workers(&self) -> dq::Result<Vec<WorkerInfo>> {
        self.inner.workers().await
    }
    async fn namespace_epoch(&self) -> dq::Result<String> {
        self.inner.namespace_epoch().await
    }
}

#[async_trait]
impl Schedules for Faulty {
    async fn put_schedule(&self, id: &str, spec: &str, next: Option<u64>) -> dq::Result<()> {
        self.inner.put_schedule(id, spec, next).await?;
        if self.hold_put {
            self.put_done.notify_one();
            self.put_gate.acquire().await.unwrap().forget();
        }
        Ok(())
    }
    async fn remove_schedule(&self, id: &str) -> dq::Result<bool> {
        self.inner.remove_schedule(id).await
    }
    async fn schedule(&self, id: &str) -> dq::Result<Option<ScheduleEntry>> {
        self.inner.schedule(id).await
    }
    async fn schedules(&self) -> dq::Result<Vec<ScheduleEntry>> {
        self.inner.schedules().await
    }
    async fn due_schedules(&self, until_us: u64, limit: usize) -> dq::Result<Vec<(String, u64)>> {
        self.inner.due_schedules(until_us, limit).await
    }
    async fn advance_schedule(&self, fired: &FiredTick, to: Option<u64>) -> dq::Result<bool> {
        self.inner.advance_schedule(fired, to).await
    }
    async fn set_schedule_next(&self, id: &str, next: Option<u64>) -> dq::Result<bool> {
        self.inner.set_schedule_next(id, next).await
    }
    async fn raise_schedule_generation(&self, id: &str, above: u64) -> dq::Result<Option<u64>> {
        self.inner.raise_schedule_generation(id, above).await
    }
}

/// Finding 3: shutdown used to drop a fetch reply in flight. Redis had leased the job, nobody
/// ran it, and only the lease's expiry brought it back, counted as a run that never happened
/// (a job on its last attempt was dead-lettered without running).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetch_reply_in_flight_at_shutdown_is_handed_back_not_dropped() {
    let redis = RedisServer::start();
    let store = Arc::new(Faulty {
        hold_fetch: true,
        ..Faulty::new(&config(&redis)).await
    });
    let ran = Arc::new(Mutex::new(0));
    let r = ran.clone();
    let listener = Listener::new("t", move |_: u32, _: JobContext| {
        let r = r.clone();
        async move { *r.lock().unwrap() += 1 }
    });
    let rt = start_on(config(&redis), Some(store.clone()), listener).await;
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
    let client = dq::Client::connect(config(&redis)).await.unwrap();
    let info = client.status_in("t", "j").await.unwrap().unwrap();
    assert_eq!(
        (info.state, info.attempt),
        (JobState::Ready, 0),
        "handed back at once, no run counted"
    );
}

/// One run: its attempt, when it started, and when its blocking part ended.
type Run = (u32, Instant, Option<Instant>);

/// Finding 10: a handler aborted by its timeout keeps running until its next `.await` when it
/// blocks the thread; the retry must not start a second run beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn a_timed_out_handler_that_blocks_ends_before_its_retry_starts() {
    let redis = RedisServer::start();
    let runs: Arc<Mutex<Vec<Run>>> = Arc::default();
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
    let rt = start(&redis, listener).await;
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
    let redis = RedisServer::start();
    let listener = Listener::new("t", |_: u32, _: JobContext| async {
        Outcome::RetryAfter(Duration::MAX)
    });
    let rt = start(&redis, listener).await;
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

/// Finding 2: lease renewal walked the shards in order and stopped at the first that did not
/// answer, after writing the worker record to shard 0; one stalled master therefore let every
/// lease expire, and jobs on healthy shards were reclaimed and run a second time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_shard_does_not_let_leases_on_other_shards_expire() {
    let redis = RedisServer::start();
    let config = Config::builder()
        .redis_url(redis.url())
        .namespace("stall")
        .shards(4)
        .lease(Duration::from_millis(1200))
        .safety_tick(Duration::from_secs(3600))
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

fn topic(name: &str) -> Topic {
    Topic::new(name).unwrap()
}

/// A config with a short lease (reclaimed every 200 ms), for the dead-worker tests below.
fn short_lease(redis: &RedisServer) -> Config {
    Config::builder()
        .redis_url(redis.url())
        .namespace("hard")
        .safety_tick(Duration::from_secs(3600))
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

/// Polls a job until it is dead-lettered (5 s at most).
async fn wait_until_dead(c: &dq::Client, topic_name: &str, id: &str) -> JobInfo {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let info = c.status_in(topic_name, id).await.unwrap();
        match info {
            Some(info) if info.state == JobState::Dead => return info,
            _ => assert!(
                Instant::now() < deadline,
                "{topic_name}:{id} never dead: {info:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Polls a job until it finished (its record is gone; 5 s at most).
async fn wait_until_done(c: &dq::Client, topic_name: &str, id: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while let Some(info) = c.status_in(topic_name, id).await.unwrap() {
        assert!(
            Instant::now() < deadline,
            "{topic_name}:{id} never done: {info:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Finding 10: a job whose worker died was judged by the attempts given at push time, not by
/// its listener's `retries`: with `retries(0)` (charge the card, never run twice) a job whose
/// worker died was run again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_whose_worker_died_is_not_run_again_when_its_listener_allows_no_retries() {
    let redis = RedisServer::start();
    let runs = Arc::new(Mutex::new(Vec::new()));
    let c = support::client_with(&redis, |b| b.namespace("hard")).await;
    c.push_to("charge", &1).id("card").await.unwrap();
    lease_to_a_dead_worker(&redis, "charge").await;
    let listener = counting("charge", &runs).retries(0);
    let rt = start_on(short_lease(&redis), None, listener).await;
    let info = wait_until_dead(&c, "charge", "card").await;
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
    let c = support::client_with(&redis, |b| b.namespace("hard")).await;
    c.push_to("mail", &1).id("m").max_retries(0).await.unwrap();
    lease_to_a_dead_worker(&redis, "mail").await;
    let listener = counting("mail", &runs).retries(3);
    let rt = start_on(short_lease(&redis), None, listener).await;
    wait_until_done(&c, "mail", "m").await;
    assert_eq!(
        *runs.lock().unwrap(),
        [2],
        "run once more, as its second attempt"
    );
    rt.shutdown().await.unwrap();
}

/// Finding 10: `Outcome::RetryAfter` ("not yet, look again in a minute") spent an attempt, so a
/// job that was postponed a few times was dead-lettered on its first real failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_does_not_spend_an_attempt() {
    let redis = RedisServer::start();
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
    let rt = start(&redis, listener).await;
    let c = rt.client().clone();
    c.push_to("poll", &1).id("p").await.unwrap();
    wait_until_done(&c, "poll", "p").await;
    assert_eq!(*runs.lock().unwrap(), [1, 1, 1, 1, 2]);
    rt.shutdown().await.unwrap();
}

/// A fetch from a stalled master held every free permit of its topic until the client's reply
/// limit ended it, and took them all again at each retry, so the topic's jobs on healthy shards
/// waited for it. After a failed fetch a consumer now asks for one permit until a fetch works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_shard_holds_one_permit_of_its_topic_not_all_of_them() {
    let redis = RedisServer::start();
    let config = Config::builder()
        .redis_url(redis.url())
        .namespace("hard")
        .safety_tick(Duration::from_secs(3600))
        .shards(2)
        .build()
        .unwrap();
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

// Issue 19's review: a schedule's tick is made into one job, whatever the interleaving of the
// processes that fire it.

/// A client whose pushes of jobs with ids starting `prefix` hold until the test lets them go
/// (`push_gate`), and the store that holds them.
async fn holding_pushes(config: &Config, prefix: &str) -> (Arc<Faulty>, dq::Client) {
    let mut faulty = Faulty::new(config).await;
    faulty.hold_push = Some(prefix.into());
    let faulty = Arc::new(faulty);
    let client = dq::Client::new(faulty.clone(), config.clone());
    (faulty, client)
}

/// A schedule firing every second, on `topic`, in `redis`; the tick due next (store clock).
async fn every_second(client: &dq::Client, id: &str, topic: &str) -> SystemTime {
    let info = client
        .schedule(id)
        .every(Duration::from_secs(1))
        .topic(topic)
        .upsert()
        .await
        .unwrap();
    info.next.unwrap()
}

/// Sleeps until `tick` is due by Redis' clock.
async fn until_due(client: &dq::Client, tick: SystemTime) {
    loop {
        let now = client.store_time().await.unwrap();
        match tick.duration_since(now) {
            Ok(left) if !left.is_zero() => tokio::time::sleep(left).await,
            _ => return,
        }
    }
}

/// A process that read a tick as due, then stalled (a paused VM, a stopped container) until
/// the tick's job had run elsewhere and its reservation had run out, must not create that job
/// again when it wakes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_stalled_past_a_ticks_reservation_does_not_make_its_job_again() {
    let redis = RedisServer::start();
    let config = config(&redis);
    let (faulty, stalled) = holding_pushes(&config, "beat@").await;
    let runs = Arc::new(Mutex::new(Vec::new()));
    let r = runs.clone();
    let listener = Listener::new("beats", move |tick: dq::schedule::Tick, _: JobContext| {
        r.lock().unwrap().push(tick.at);
        async {}
    });
    let rt = start(&redis, listener).await;
    let client = rt.client().clone();
    let tick = every_second(&client, "beat", "beats").await;
    until_due(&client, tick).await;
    // The stalled process looks at the schedule and holds before its push.
    let look = tokio::spawn(async move { stalled.fire_schedules(Duration::ZERO).await });
    faulty.pushing.notified().await;
    // Another process fires the tick; its job runs.
    let id = dq::schedule::tick_job_id("beat", tick);
    client.fire_schedules(Duration::ZERO).await.unwrap();
    wait_until_done(&client, "beats", &id).await;
    assert_eq!(runs.lock().unwrap().len(), 1);
    // Ten minutes later its reservation has run out (the test removes it), and the stalled
    // process wakes up and pushes.
    for key in redis.command(&["KEYS", "*unique"]).lines() {
        redis.command(&["DEL", key]);
    }
    faulty.push_gate.add_permits(1);
    let created = look.await.unwrap().unwrap();
    assert_eq!(created, 0, "the stalled process made the tick's job again");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let status = client.status_in("beats", &id).await.unwrap();
    let ran = runs.lock().unwrap().len();
    assert_eq!(ran, 1, "tick {id} ran twice ({status:?})");
    rt.shutdown().await.unwrap();
}

/// A look under way while the schedule is changed (here its message) cannot go on making the
/// jobs of the coming ticks with the old spec: at most the one it was pushing is left (its tick
/// is a tick of the new spec too), and the ticks after it carry the new message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_look_under_way_when_a_schedule_changes_makes_no_more_jobs_of_the_old_spec() {
    let redis = RedisServer::start();
    let config = config(&redis);
    let (faulty, stalled) = holding_pushes(&config, "greet@").await;
    let client = dq::Client::connect(config.clone()).await.unwrap();
    let declare = |word: &'static str| {
        client
            .schedule("greet")
            .every(Duration::from_secs(1))
            .message_to("greetings", &word)
            .upsert()
    };
    let tick = declare("old").await.unwrap().next.unwrap();
    // The look fires the coming ticks ahead of time and holds before its first push.
    let look = tokio::spawn(async move { stalled.fire_schedules(Duration::from_secs(5)).await });
    faulty.pushing.notified().await;
    // The schedule changes meanwhile; its next tick stays the same.
    let changed = declare("new").await.unwrap();
    assert_eq!(changed.next, Some(tick));
    faulty.push_gate.add_permits(100);
    look.await.unwrap().unwrap();
    // The next look (any process) makes the jobs of the ticks after it with the new message.
    client.fire_schedules(Duration::from_secs(5)).await.unwrap();
    let message = |tick: SystemTime| {
        let id = dq::schedule::tick_job_id("greet", tick);
        let client = client.clone();
        async move {
            let job = client.status_in("greetings", &id).await.unwrap();
            job.map(|j| String::from_utf8_lossy(&j.payload).into_owned())
        }
    };
    assert!(message(tick).await.is_some(), "the tick has a job");
    for later in 1..=3 {
        let t = tick + Duration::from_secs(later);
        assert_eq!(message(t).await.as_deref(), Some("\"new\""), "tick {t:?}");
    }
    client.unschedule("greet").await.unwrap();
}

/// The same, when the change moves the ticks elsewhere: the job the look was pushing, for a
/// tick the schedule no longer has, goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_look_under_way_when_a_schedule_changes_leaves_no_job_at_a_tick_it_no_longer_has() {
    let redis = RedisServer::start();
    let config = config(&redis);
    let (faulty, stalled) = holding_pushes(&config, "greet@").await;
    let client = dq::Client::connect(config.clone()).await.unwrap();
    let declare = |every: u64| {
        client
            .schedule("greet")
            .every(Duration::from_secs(every))
            .topic("greetings")
            .upsert()
    };
    let mut tick = declare(1).await.unwrap().next.unwrap();
    while to_secs(tick).is_multiple_of(3600) {
        // A tick of the hourly schedule too: wait for the next one.
        tokio::time::sleep(Duration::from_secs(1)).await;
        tick = client.schedules().await.unwrap()[0].next.unwrap();
    }
    let look = tokio::spawn(async move { stalled.fire_schedules(Duration::from_secs(5)).await });
    faulty.pushing.notified().await;
    declare(3600).await.unwrap();
    faulty.push_gate.add_permits(100);
    look.await.unwrap().unwrap();
    let id = dq::schedule::tick_job_id("greet", tick);
    let job = client.status_in("greetings", &id).await.unwrap();
    assert!(job.is_none(), "a job of the old spec was left: {job:?}");
    client.unschedule("greet").await.unwrap();
}

fn to_secs(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs()
}

/// A look under way when the schedule is paused (or removed) leaves no job of it behind: the
/// pause cancels what was made ahead, and the look, whose move then fails, removes the job it
/// was pushing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_look_under_way_when_a_schedule_is_paused_or_removed_leaves_no_job_of_it() {
    let redis = RedisServer::start();
    let config = config(&redis);
    let client = dq::Client::connect(config.clone()).await.unwrap();
    for remove in [false, true] {
        let (faulty, stalled) = holding_pushes(&config, "nap@").await;
        let tick = every_second(&client, "nap", "naps").await;
        let look =
            tokio::spawn(async move { stalled.fire_schedules(Duration::from_secs(5)).await });
        faulty.pushing.notified().await;
        if remove {
            assert!(client.unschedule("nap").await.unwrap());
        } else {
            assert!(client.pause_schedule("nap").await.unwrap());
        }
        faulty.push_gate.add_permits(100);
        look.await.unwrap().unwrap();
        let id = dq::schedule::tick_job_id("nap", tick);
        let job = client.status_in("naps", &id).await.unwrap();
        assert!(job.is_none(), "removed {remove}: a job was left: {job:?}");
        client.unschedule("nap").await.unwrap();
    }
}

/// Issue 29, finding 2: a changed schedule was stored, then the jobs made ahead under the old
/// spec were cancelled; a look by another process in between made (or took over) the coming
/// ticks' jobs under the new spec, and the cancel then removed them: up to a lookahead of
/// ticks lost. Every tick after the change keeps its job, with the new message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_look_right_after_a_schedule_changes_keeps_the_ticks_it_made() {
    let redis = RedisServer::start();
    let config = config(&redis);
    let mut faulty = Faulty::new(&config).await;
    faulty.hold_put = true;
    let faulty = Arc::new(faulty);
    let changer = dq::Client::new(faulty.clone(), config.clone());
    let client = dq::Client::connect(config.clone()).await.unwrap();
    client
        .schedule("greet")
        .every(Duration::from_secs(1))
        .message_to("greetings", &"old")
        .upsert()
        .await
        .unwrap();
    client.fire_schedules(Duration::from_secs(5)).await.unwrap();
    let change = tokio::spawn(async move {
        changer
            .schedule("greet")
            .every(Duration::from_secs(1))
            .message_to("greetings", &"new")
            .upsert()
            .await
    });
    tokio::time::timeout(Duration::from_secs(5), faulty.put_done.notified())
        .await
        .expect("the change was stored");
    let stored = client.store_time().await.unwrap();
    // Another process looks right after the new spec is stored.
    client.fire_schedules(Duration::from_secs(5)).await.unwrap();
    faulty.put_gate.add_permits(1);
    change.await.unwrap().unwrap();
    let first = dq::store::from_us((dq::store::to_us(stored) / 1_000_000 + 2) * 1_000_000);
    for later in 0..3 {
        let tick = first + Duration::from_secs(later);
        let id = dq::schedule::tick_job_id("greet", tick);
        let job = client.status_in("greetings", &id).await.unwrap();
        let message = job.map(|j| String::from_utf8_lossy(&j.payload).into_owned());
        assert_eq!(message.as_deref(), Some("\"new\""), "tick {id}");
    }
    client.unschedule("greet").await.unwrap();
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
        .namespace("hard")
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
    let faulty = Faulty::new(&config(&redis)).await;
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
    let rt = start_on(config(&redis), Some(store.clone()), listener).await;
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
