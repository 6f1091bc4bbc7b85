//! A Redis store with faults a test switches on: a fetch reply held or lost, a stalled shard,
//! a failing fetch, a push or a schedule's store held until the test lets it go.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use dq::admin::{ChangeOutcome, Cursor, Page, Throughput, TopicCounts, TopicStats, WorkerInfo};
use dq::events::EventCursor;
use dq::push::{OnConflict, PushOutcome};
use dq::store::{
    Acked, Admin, DeadLetters, EventFeed, Fetched, Fetcher, FiredTick, LeaseRef, Leases, NewJob,
    Producer, Promoted, ReadyWaiter, Reclaimed, RedisStore, Registry, Retention, RunEnd, RunEnded,
    ScheduleEntry, Schedules, Sharded, Succeeded, Waited, Wake, WakeListener,
};
use dq::{Config, Due, JobId, JobInfo, JobState, Topic};
use tokio::sync::{Notify, Semaphore};

/// A Redis store with faults the test switches on:
/// - `hold_fetch`: a fetch that has leased jobs holds its reply until the test opens `gate`: a
///   reply in flight, as when shutdown begins between Redis' answer and its arrival;
/// - `stalled_shard`: every call that touches this shard's keys (lease renewals, acks, the
///   worker record of shard 0) never answers, as with a master busy in a long command;
/// - `failing_fetch`: a fetch from this shard fails after this long, as a fetch from a stalled
///   master fails when the client's reply limit runs out (counted in `fetch_failures`).
#[derive(Debug)]
pub struct Faulty {
    pub inner: RedisStore,
    pub hold_fetch: bool,
    pub leased: Notify,
    pub gate: Semaphore,
    pub stalled_shard: Option<u16>,
    pub failing_fetch: Option<(u16, Duration)>,
    pub fetch_failures: AtomicUsize,
    /// A push of a job whose id starts with this holds (after `pushing` is notified) until
    /// the test adds a permit to `push_gate`: a process stalled between its look at a
    /// schedule and its push of the tick's job.
    pub hold_push: Option<String>,
    pub pushing: Notify,
    pub push_gate: Semaphore,
    /// A schedule's store (`put_schedule`) is written, then the call holds (after `put_done`
    /// is notified) until the test adds a permit to `put_gate`: a process paused between
    /// storing a changed schedule and what it does next.
    pub hold_put: bool,
    pub put_done: Notify,
    pub put_gate: Semaphore,
    /// The next fetch that leases jobs runs in Redis, then fails as if its reply was lost (a
    /// timeout while Redis was stalled with the request in its buffer).
    pub lose_fetch_reply: AtomicBool,
    /// The runtime never hears of a cancel of a running job: the announcements are dropped and
    /// the heartbeat's read of the requests finds none (a worker whose run ends before the
    /// news of the cancel reaches it).
    pub deaf_to_cancels: bool,
}

/// The announcements of a store, without those of cancels.
#[derive(Debug)]
struct DeafToCancels(Box<dyn WakeListener>);

#[async_trait]
impl WakeListener for DeafToCancels {
    async fn next(&mut self) -> dq::Result<Wake> {
        loop {
            match self.0.next().await? {
                Wake::Cancel { .. } => continue,
                other => return Ok(other),
            }
        }
    }
}

impl Faulty {
    pub async fn new(config: &Config) -> Faulty {
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
            deaf_to_cancels: false,
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
    async fn reschedule(&self, topic: &Topic, id: &JobId, when: Due) -> dq::Result<ChangeOutcome> {
        self.inner.reschedule(topic, id, when).await
    }
    async fn status(&self, topic: &Topic, id: &JobId) -> dq::Result<Option<JobInfo>> {
        self.inner.status(topic, id).await
    }
    async fn wait_finished(
        &self,
        topic: &Topic,
        id: &JobId,
        timeout: Duration,
    ) -> dq::Result<Waited> {
        self.inner.wait_finished(topic, id, timeout).await
    }
    async fn event_feed(
        &self,
        topic: &Topic,
        after: &EventCursor,
    ) -> dq::Result<Box<dyn EventFeed>> {
        self.inner.event_feed(topic, after).await
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
        let fetcher = Fetcher::default();
        self.fetch_for(shard, topic, max, lease, &fetcher).await
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
            self.fetch_failures.fetch_add(1, Ordering::SeqCst);
            return Err(Topic::new(format!("shard {failing} timed out")).unwrap_err());
        }
        let fetched = self
            .inner
            .fetch_for(shard, topic, max, lease, fetcher)
            .await?;
        if !fetched.jobs.is_empty() && self.lose_fetch_reply.swap(false, Ordering::SeqCst) {
            return Err(Topic::new("the fetch reply was lost").unwrap_err());
        }
        if self.hold_fetch && !fetched.jobs.is_empty() {
            self.leased.notify_one();
            let _ = self.gate.acquire().await.unwrap();
        }
        Ok(fetched)
    }
    async fn ack_succeeded(&self, done: &[Succeeded]) -> dq::Result<Acked> {
        let leases: Vec<LeaseRef> = done.iter().map(|d| d.lease.clone()).collect();
        self.stall_if_touched(&leases).await;
        self.inner.ack_succeeded(done).await
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
    async fn end_run(&self, lease: &LeaseRef, end: RunEnd<'_>) -> dq::Result<RunEnded> {
        self.inner.end_run(lease, end).await
    }
    async fn release(&self, leases: &[LeaseRef]) -> dq::Result<usize> {
        self.inner.release(leases).await
    }
    async fn progress(&self, lease: &LeaseRef, value: &[u8]) -> dq::Result<bool> {
        self.inner.progress(lease, value).await
    }
    async fn extend(&self, leases: &[LeaseRef], lease: Duration) -> dq::Result<Vec<LeaseRef>> {
        self.stall_if_touched(leases).await;
        self.inner.extend(leases, lease).await
    }
    async fn cancel_requests(&self, leases: &[LeaseRef]) -> dq::Result<Vec<LeaseRef>> {
        if self.deaf_to_cancels {
            return Ok(Vec::new());
        }
        self.inner.cancel_requests(leases).await
    }
    async fn cancel_running(&self, lease: &LeaseRef) -> dq::Result<bool> {
        self.inner.cancel_running(lease).await
    }
    async fn reclaim(&self, shard: u16, limit: usize) -> dq::Result<Reclaimed> {
        self.inner.reclaim(shard, limit).await
    }
    async fn set_attempt_limit(&self, topic: &Topic, max: Option<u32>) -> dq::Result<()> {
        self.inner.set_attempt_limit(topic, max).await
    }
    async fn set_retention(&self, topic: &Topic, retention: Option<Retention>) -> dq::Result<()> {
        self.inner.set_retention(topic, retention).await
    }
    async fn set_events(&self, topic: &Topic, cap: Option<u64>) -> dq::Result<()> {
        self.inner.set_events(topic, cap).await
    }
    async fn set_max_pending(&self, topic: &Topic, max: Option<u64>) -> dq::Result<()> {
        self.inner.set_max_pending(topic, max).await
    }
    async fn max_pending(&self, topic: &Topic) -> dq::Result<Option<u64>> {
        self.inner.max_pending(topic).await
    }
    async fn set_rate(&self, topic: &Topic, rate: Option<dq::Rate>) -> dq::Result<()> {
        self.inner.set_rate(topic, rate).await
    }
    async fn rate(&self, topic: &Topic) -> dq::Result<Option<dq::Rate>> {
        self.inner.rate(topic).await
    }
    async fn set_global_concurrency(&self, topic: &Topic, max: Option<u32>) -> dq::Result<()> {
        self.inner.set_global_concurrency(topic, max).await
    }
    async fn set_group_concurrency(&self, topic: &Topic, max: Option<u32>) -> dq::Result<()> {
        self.inner.set_group_concurrency(topic, max).await
    }
    async fn group_concurrency(&self, topic: &Topic) -> dq::Result<Option<u32>> {
        self.inner.group_concurrency(topic).await
    }
    async fn set_group_rate(&self, topic: &Topic, rate: Option<dq::Rate>) -> dq::Result<()> {
        self.inner.set_group_rate(topic, rate).await
    }
    async fn group_rate(&self, topic: &Topic) -> dq::Result<Option<dq::Rate>> {
        self.inner.group_rate(topic).await
    }
    async fn global_concurrency(&self, topic: &Topic) -> dq::Result<Option<u32>> {
        self.inner.global_concurrency(topic).await
    }
    async fn hold_ends_us(&self, topic: &Topic) -> dq::Result<Option<u64>> {
        self.inner.hold_ends_us(topic).await
    }
    async fn hold(&self, topic: &Topic, duration: Duration) -> dq::Result<()> {
        self.inner.hold(topic, duration).await
    }
    async fn lift_hold(&self, topic: &Topic) -> dq::Result<bool> {
        self.inner.lift_hold(topic).await
    }
    fn ready_waiter(&self, shard: u16, topic: &Topic) -> Box<dyn ReadyWaiter> {
        self.inner.ready_waiter(shard, topic)
    }
    async fn wake_listener(&self) -> dq::Result<Box<dyn WakeListener>> {
        let listener = self.inner.wake_listener().await?;
        if self.deaf_to_cancels {
            return Ok(Box::new(DeafToCancels(listener)));
        }
        Ok(listener)
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

#[async_trait]
impl dq::store::Workflows for Faulty {
    async fn push_workflow(
        &self,
        flow: &dq::workflow::NewWorkflow,
    ) -> dq::Result<dq::workflow::WorkflowOutcome> {
        self.inner.push_workflow(flow).await
    }
    async fn workflow(&self, id: &str) -> dq::Result<Option<dq::workflow::WorkflowInfo>> {
        self.inner.workflow(id).await
    }
    async fn cancel_workflow(&self, id: &str) -> dq::Result<Option<usize>> {
        self.inner.cancel_workflow(id).await
    }
    async fn step_of(&self, t: &Topic, id: &JobId) -> dq::Result<Option<dq::workflow::StepRef>> {
        self.inner.step_of(t, id).await
    }
}
