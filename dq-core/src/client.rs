//! The producer API: [`Client`] pushes, cancels, reschedules and inspects jobs.

use std::future::{Future, IntoFuture};
use std::hash::{BuildHasher, Hasher};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::Serialize;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::job::{
    ChangeOutcome, JobInfo, JobState, NewJob, OnConflict, Page, PushOutcome, Schedule, TopicCounts,
    TopicStats, WorkerInfo, DEFAULT_RETRIES,
};
use crate::message::Message;
use crate::name::{JobId, Topic};
use crate::store::{RedisStore, Store};

/// Pushes and manages jobs. Cheap to clone; clones share the store and its connection.
///
/// ```no_run
/// # use std::time::Duration;
/// # #[derive(serde::Serialize, serde::Deserialize)]
/// # struct OrderCancel { order_id: u64 }
/// # impl dq_core::Message for OrderCancel { const TOPIC: &'static str = "order-cancel"; }
/// # async fn demo(client: dq_core::Client) -> dq_core::Result<()> {
/// let id = client
///     .push(OrderCancel { order_id: 42 })
///     .delay(Duration::from_secs(600))
///     .id("42")
///     .await?;
/// assert_eq!(id.as_str(), "42");
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    store: Arc<dyn Store>,
    config: Arc<Config>,
    coalescer: Arc<Coalescer>,
}

type Waiter = tokio::sync::oneshot::Sender<Result<PushOutcome>>;

/// Coalesces single pushes made while another push is in flight into one batched store call:
/// a lone push goes straight to the store, and a thousand concurrent ones cost a handful of
/// round trips instead of a thousand script calls.
#[derive(Default)]
struct Coalescer {
    in_flight: std::sync::atomic::AtomicUsize,
    queue: std::sync::OnceLock<tokio::sync::mpsc::UnboundedSender<(NewJob, OnConflict, Waiter)>>,
}

impl Coalescer {
    fn queue(
        &self,
        store: &Arc<dyn Store>,
    ) -> &tokio::sync::mpsc::UnboundedSender<(NewJob, OnConflict, Waiter)> {
        self.queue.get_or_init(|| {
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            tokio::spawn(coalesce(store.clone(), rx));
            tx
        })
    }
}

/// Sends whatever pushes queued up while the previous call was in flight as one call per mode.
async fn coalesce(
    store: Arc<dyn Store>,
    mut rx: tokio::sync::mpsc::UnboundedReceiver<(NewJob, OnConflict, Waiter)>,
) {
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        while batch.len() < crate::store::MAX_BATCH {
            match rx.try_recv() {
                Ok(item) => batch.push(item),
                Err(_) => break,
            }
        }
        let (replace, keep): (Vec<_>, Vec<_>) = batch
            .into_iter()
            .partition(|(_, mode, _)| *mode == OnConflict::Replace);
        for (mode, group) in [(OnConflict::Keep, keep), (OnConflict::Replace, replace)] {
            if group.is_empty() {
                continue;
            }
            let (jobs, waiters): (Vec<NewJob>, Vec<Waiter>) =
                group.into_iter().map(|(job, _, w)| (job, w)).unzip();
            match store.push(jobs, mode).await {
                Ok(outcomes) => {
                    for (w, outcome) in waiters.into_iter().zip(outcomes) {
                        let _ = w.send(Ok(outcome));
                    }
                }
                Err(e) => {
                    let e = Arc::new(e);
                    for w in waiters {
                        let _ = w.send(Err(Error::Batch(e.clone())));
                    }
                }
            }
        }
    }
}

/// Counts a push as in flight until dropped (also when the push future is cancelled).
struct InFlight<'a>(&'a std::sync::atomic::AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("store", &self.store)
            .field("namespace", &self.config.namespace)
            .finish()
    }
}

impl Client {
    /// A client on an existing store.
    pub fn new(store: Arc<dyn Store>, config: Config) -> Client {
        Client {
            store,
            config: Arc::new(config),
            coalescer: Arc::default(),
        }
    }

    /// Connects to the Redis named by `config.redis_url`.
    pub async fn connect(config: Config) -> Result<Client> {
        let store = RedisStore::connect(&config).await?;
        Ok(Client::new(Arc::new(store), config))
    }

    /// The store under this client.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The configuration this client was made with.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Starts a push of `message` to its topic; set options, then `.await` it for the job id.
    ///
    /// Without options the job is due now, gets a generated id and the default two retries.
    pub fn push<M: Message>(&self, message: M) -> PushBuilder {
        self.push_to(M::TOPIC, &message)
    }

    /// Like [`Client::push`] for any serializable value, to a topic named at run time.
    pub fn push_to<T: Serialize + ?Sized>(&self, topic: &str, message: &T) -> PushBuilder {
        let payload = serde_json::to_vec(message).map_err(|source| Error::Serialize {
            topic: topic.to_owned(),
            source,
        });
        self.push_raw(topic, payload)
    }

    /// Like [`Client::push`] with a payload that is already JSON bytes (for tools and bridges).
    pub fn push_json(&self, topic: &str, json: impl Into<Vec<u8>>) -> PushBuilder {
        self.push_raw(topic, Ok(json.into()))
    }

    fn push_raw(&self, topic: &str, payload: Result<Vec<u8>>) -> PushBuilder {
        PushBuilder {
            client: self.clone(),
            topic: Topic::new(topic),
            id: None,
            schedule: Schedule::default(),
            retries: DEFAULT_RETRIES,
            on_conflict: OnConflict::Keep,
            payload,
        }
    }

    /// Pushes many jobs in as few round trips as the store allows (up to 1,000 jobs per call).
    ///
    /// Every job is checked before anything is sent: one invalid job fails the whole batch and
    /// nothing is stored. Each job's own [`OnConflict`] is honoured, batched by mode.
    pub async fn push_batch(
        &self,
        jobs: impl IntoIterator<Item = PushBuilder>,
    ) -> Result<Vec<Pushed>> {
        let mut keep = Vec::new();
        let mut replace = Vec::new();
        let mut order = Vec::new();
        for builder in jobs {
            let mode = builder.on_conflict;
            let job = builder.into_job(&self.config)?;
            let list = if mode == OnConflict::Replace {
                &mut replace
            } else {
                &mut keep
            };
            order.push((mode == OnConflict::Replace, list.len()));
            list.push(job);
        }
        let ids = |jobs: &[NewJob]| jobs.iter().map(|j| j.id.clone()).collect::<Vec<_>>();
        let (keep_ids, replace_ids) = (ids(&keep), ids(&replace));
        let topics = |jobs: &[NewJob]| jobs.iter().map(|j| j.topic.clone()).collect::<Vec<_>>();
        let (keep_topics, replace_topics) = (topics(&keep), topics(&replace));
        let keep_out = if keep.is_empty() {
            Vec::new()
        } else {
            self.store.push(keep, OnConflict::Keep).await?
        };
        let replace_out = if replace.is_empty() {
            Vec::new()
        } else {
            self.store.push(replace, OnConflict::Replace).await?
        };
        let mut pushed: std::collections::HashMap<&Topic, u64> = std::collections::HashMap::new();
        for (topics, outs) in [(&keep_topics, &keep_out), (&replace_topics, &replace_out)] {
            for (topic, outcome) in topics.iter().zip(outs.iter()) {
                if matches!(outcome, PushOutcome::Created | PushOutcome::Replaced) {
                    *pushed.entry(topic).or_default() += 1;
                }
            }
        }
        for (topic, n) in pushed {
            metrics::counter!(crate::metric::JOBS_PUSHED, "topic" => topic.to_string())
                .increment(n);
        }
        Ok(order
            .into_iter()
            .map(|(is_replace, i)| {
                let (ids, outs) = if is_replace {
                    (&replace_ids, &replace_out)
                } else {
                    (&keep_ids, &keep_out)
                };
                Pushed {
                    id: ids[i].clone(),
                    outcome: outs[i],
                }
            })
            .collect())
    }

    /// Deletes a job that has not started yet. A running job is left alone
    /// ([`ChangeOutcome::Running`]); a dead letter is deleted.
    pub async fn cancel(&self, topic: &str, id: &str) -> Result<ChangeOutcome> {
        self.store
            .cancel(&Topic::new(topic)?, &JobId::new(id)?)
            .await
    }

    /// Moves a job that has not started yet to a new due time.
    pub async fn reschedule(&self, topic: &str, id: &str, when: Schedule) -> Result<ChangeOutcome> {
        check_schedule(topic, id, when)?;
        self.store
            .reschedule(&Topic::new(topic)?, &JobId::new(id)?, when)
            .await
    }

    /// A job's state, attempts, last error and payload; `None` when it is neither pending nor
    /// dead (never pushed, finished, or cancelled).
    pub async fn status(&self, topic: &str, id: &str) -> Result<Option<JobInfo>> {
        self.store
            .status(&Topic::new(topic)?, &JobId::new(id)?)
            .await
    }

    /// How many jobs of a topic are delayed, ready, running and dead.
    pub async fn counts(&self, topic: &str) -> Result<TopicCounts> {
        self.store.counts(&Topic::new(topic)?).await
    }

    // ---- Administration: what the `dq` command-line tool is built on. ----

    /// Every topic ever pushed to.
    pub async fn topics(&self) -> Result<Vec<Topic>> {
        self.store.topics().await
    }

    /// A topic's counts, the due time of its oldest ready job (how far behind the workers
    /// are), its next due time and whether it is paused.
    pub async fn stats(&self, topic: &str) -> Result<TopicStats> {
        self.store.stats(&Topic::new(topic)?).await
    }

    /// A page of at most `limit` (at most 1,000) of a topic's jobs in one state; `cursor` is 0,
    /// then the page's `next` until it is `None`. Pages go shard by shard; dead letters come
    /// newest first within a shard. Every page costs bounded work, however long the queue.
    pub async fn jobs(
        &self,
        topic: &str,
        state: JobState,
        cursor: u64,
        limit: usize,
    ) -> Result<Page> {
        let topic = Topic::new(topic)?;
        if state == JobState::Dead {
            return self.store.dead_jobs(&topic, cursor, limit).await;
        }
        self.store.list(&topic, state, cursor, limit).await
    }

    /// Runs dead letters again with a fresh set of attempts (the default retries): the given
    /// ids, or with `ids` empty all of the topic's dead letters. Returns how many.
    pub async fn retry_dead(&self, topic: &str, ids: &[&str]) -> Result<usize> {
        let topic = Topic::new(topic)?;
        let max = DEFAULT_RETRIES + 1;
        if !ids.is_empty() {
            let ids = ids
                .iter()
                .map(|i| JobId::new(*i))
                .collect::<Result<Vec<_>>>()?;
            let mut n = 0;
            for chunk in ids.chunks(crate::store::MAX_BATCH) {
                n += self
                    .store
                    .requeue_dead(&topic, chunk, max, chunk.len(), u64::MAX)
                    .await?;
            }
            return Ok(n);
        }
        // Only what died before this call began: a job that dies again while we work through
        // the list is not taken again (with a failing handler that would never end).
        let died_before = self.store.time_us().await?;
        let mut n = 0;
        loop {
            let moved = self
                .store
                .requeue_dead(&topic, &[], max, crate::store::MAX_BATCH, died_before)
                .await?;
            n += moved;
            if moved == 0 {
                return Ok(n);
            }
        }
    }

    /// Runs every dead letter of every topic again. Returns how many.
    pub async fn retry_all_dead(&self) -> Result<usize> {
        let mut n = 0;
        for topic in self.store.topics().await? {
            n += self.retry_dead(topic.as_str(), &[]).await?;
        }
        Ok(n)
    }

    /// Deletes a topic's dead letters that died more than `older_than` ago. Returns how many.
    pub async fn purge_dead(&self, topic: &str, older_than: Duration) -> Result<usize> {
        let topic = Topic::new(topic)?;
        // By the store's clock, as the deaths were stamped.
        let now = crate::job::from_us(self.store.time_us().await?);
        let before = now
            .checked_sub(older_than)
            .unwrap_or(SystemTime::UNIX_EPOCH);
        let mut n = 0;
        loop {
            let limit = crate::store::MAX_BATCH;
            let deleted = self.store.purge_dead(&topic, before, limit).await?;
            n += deleted;
            if deleted < limit {
                return Ok(n);
            }
        }
    }

    /// Stops every worker from fetching the topic (running jobs finish); survives restarts.
    pub async fn pause(&self, topic: &str) -> Result<()> {
        self.store.pause(&Topic::new(topic)?).await
    }

    /// Lets workers fetch the topic again.
    pub async fn resume(&self, topic: &str) -> Result<()> {
        self.store.resume(&Topic::new(topic)?).await
    }

    /// The worker processes heard from in the last minute.
    pub async fn workers(&self) -> Result<Vec<WorkerInfo>> {
        self.store.workers().await
    }
}

fn check_schedule(topic: &str, id: &str, when: Schedule) -> Result<()> {
    let bad = |reason| Error::InvalidSchedule {
        topic: topic.to_owned(),
        id: id.to_owned(),
        reason,
    };
    const LIMIT: Duration = crate::job::MAX_DELAY;
    match when {
        Schedule::After(d) if d > LIMIT => Err(bad("a delay is at most 200 years")),
        Schedule::At(t) if t < SystemTime::UNIX_EPOCH => Err(bad("a due time before 1970")),
        Schedule::At(t) if t > SystemTime::now() + LIMIT => {
            Err(bad("a due time is at most 200 years ahead"))
        }
        _ => Ok(()),
    }
}

/// The result of a push: the job's id and what the store did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Pushed {
    /// The job id, given or generated.
    pub id: JobId,
    /// Created, kept (already pending), replaced, or refused because it is running.
    pub outcome: PushOutcome,
}

/// A push being prepared; `.await` sends it and yields the job id.
#[must_use = "a push does nothing until it is awaited"]
pub struct PushBuilder {
    client: Client,
    topic: Result<Topic>,
    id: Option<String>,
    schedule: Schedule,
    retries: u32,
    on_conflict: OnConflict,
    payload: Result<Vec<u8>>,
}

impl std::fmt::Debug for PushBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PushBuilder")
            .field("topic", &self.topic)
            .field("id", &self.id)
            .field("schedule", &self.schedule)
            .field("retries", &self.retries)
            .field("on_conflict", &self.on_conflict)
            .finish_non_exhaustive()
    }
}

impl PushBuilder {
    /// Due this long after the store receives the push (measured by the store's clock).
    pub fn delay(mut self, delay: Duration) -> Self {
        self.schedule = Schedule::After(delay);
        self
    }

    /// Due at this wall-clock instant; a time in the past means now.
    pub fn at(mut self, when: SystemTime) -> Self {
        self.schedule = Schedule::At(when);
        self
    }

    /// The job's id; a second push with the same id while the first is pending stores nothing
    /// new (see [`PushBuilder::replace`]). Without it, a unique id is generated.
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// Retries after a failed first run before the job is dead-lettered (default 2).
    pub fn max_retries(mut self, retries: u32) -> Self {
        self.retries = retries;
        self
    }

    /// Replaces the payload and due time of a pending job with the same id instead of keeping
    /// it. A running job is never replaced.
    pub fn replace(mut self) -> Self {
        self.on_conflict = OnConflict::Replace;
        self
    }

    /// Sets what happens when the id is already pending.
    pub fn on_conflict(mut self, on_conflict: OnConflict) -> Self {
        self.on_conflict = on_conflict;
        self
    }

    /// Sends the push and reports the outcome along with the id.
    pub async fn send(self) -> Result<Pushed> {
        let client = self.client.clone();
        let mode = self.on_conflict;
        let job = self.into_job(&client.config)?;
        let id = job.id.clone();
        let topic_name = job.topic.to_string();
        let counter = &client.coalescer.in_flight;
        let alone = counter.fetch_add(1, Ordering::SeqCst) == 0;
        let _in_flight = InFlight(counter);
        let outcome = if alone {
            let outcome = client.store.push(vec![job], mode).await?;
            outcome.first().copied().unwrap_or(PushOutcome::Created)
        } else {
            let (tx, rx) = tokio::sync::oneshot::channel();
            let queued = client.coalescer.queue(&client.store).send((job, mode, tx));
            match (queued, rx.await) {
                (Ok(()), Ok(result)) => result?,
                // The coalescing task is gone (the runtime is shutting down): push directly.
                (Err(e), _) => {
                    let (job, mode, _) = e.0;
                    let outcome = client.store.push(vec![job], mode).await?;
                    outcome.first().copied().unwrap_or(PushOutcome::Created)
                }
                (Ok(()), Err(_)) => {
                    return Err(Error::Timeout {
                        op: "push (the coalescing task stopped)",
                        after: Duration::ZERO,
                    })
                }
            }
        };
        if matches!(outcome, PushOutcome::Created | PushOutcome::Replaced) {
            metrics::counter!(crate::metric::JOBS_PUSHED, "topic" => topic_name).increment(1);
        }
        Ok(Pushed { id, outcome })
    }

    fn into_job(self, config: &Config) -> Result<NewJob> {
        let topic = self.topic?;
        let payload = self.payload?;
        if payload.len() > config.max_payload_bytes {
            return Err(Error::PayloadTooLarge {
                topic: topic.to_string(),
                size: payload.len(),
                limit: config.max_payload_bytes,
            });
        }
        let id = match self.id {
            Some(id) => JobId::new(id)?,
            None => generated_id(),
        };
        check_schedule(topic.as_str(), id.as_str(), self.schedule)?;
        Ok(NewJob {
            topic,
            id,
            schedule: self.schedule,
            max_attempts: self.retries.saturating_add(1),
            payload,
        })
    }
}

impl IntoFuture for PushBuilder {
    type Output = Result<JobId>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<JobId>> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move { self.send().await.map(|p| p.id) })
    }
}

/// A unique id: time, a per-process random value and a counter, in hex.
fn generated_id() -> JobId {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    static SALT: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let salt = *SALT.get_or_init(|| {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        h.finish()
    });
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    let micros = crate::job::to_us(SystemTime::now());
    // Always valid: hex digits and '-'.
    JobId::new(format!("{micros:x}-{:08x}-{seq:x}", salt as u32))
        .unwrap_or_else(|_| unreachable!("generated ids are hex"))
}
