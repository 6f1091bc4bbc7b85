//! The producer API: [`Client`] pushes, cancels, reschedules and inspects jobs.

mod push;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::Serialize;

use crate::admin::{ChangeOutcome, Cursor, Page, Throughput, TopicCounts, TopicStats, WorkerInfo};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::job::{JobInfo, JobState, NewJob, OnConflict, PushOutcome, Schedule, DEFAULT_RETRIES};
use crate::message::Message;
use crate::name::{JobId, Topic};
use crate::store::{DeadLetters, Store};

use self::push::Coalescer;
pub use self::push::{PushBuilder, Pushed};

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
    pub(crate) store: Arc<dyn Store>,
    config: Arc<Config>,
    coalescer: Arc<Coalescer>,
    /// Schedules this process cannot read, already reported (see `schedule/firing.rs`).
    pub(crate) unreadable: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
}

type Waiter = tokio::sync::oneshot::Sender<Result<PushOutcome>>;

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("store", &self.store)
            .field("namespace", &self.config.namespace)
            .finish()
    }
}

impl Client {
    /// A client on an existing store. The client does not hand its store back out: a tool that
    /// works below the client (on leases, say) keeps its own `Arc` of the store.
    ///
    /// `config` is taken as it is: the store was built from a checked one (the Redis store
    /// checks its config when it connects), and of the rest the client reads only `max_payload_bytes`. A
    /// config from [`Config::builder`] or serde is checked already.
    pub fn new(store: Arc<dyn Store>, config: Config) -> Client {
        Client {
            store,
            config: Arc::new(config),
            coalescer: Arc::default(),
            unreadable: Arc::default(),
        }
    }

    /// Connects to the Redis named by `config.redis_url` (or the cluster of
    /// `config.redis_cluster`), through the store the `dq` crate links ([`store::open`](crate::store::open)).
    pub async fn connect(config: Config) -> Result<Client> {
        let store = crate::store::open(&config).await?;
        Ok(Client::new(store, config))
    }

    /// The store's clock: Redis' `TIME` (on a cluster, that of the master holding shard 0),
    /// by which due times, deaths and heartbeats are stamped. Compare ages with it rather than
    /// with this host's clock, which may be off.
    pub async fn store_time(&self) -> Result<SystemTime> {
        Ok(crate::job::from_us(self.store.time_us().await?))
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
            unique_for: None,
            debounce: None,
            fence: None,
            id_from_payload: false,
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

    /// Deletes a job of message type `M` that has not started yet (or a dead letter), by id:
    /// `client.cancel::<OrderCancel>("42")`. For a topic named at run time, [`Client::cancel_in`].
    pub async fn cancel<M: Message>(&self, id: &str) -> Result<ChangeOutcome> {
        self.cancel_in(M::TOPIC, id).await
    }

    /// Moves a job of message type `M` that has not started yet to a new due time.
    pub async fn reschedule<M: Message>(&self, id: &str, when: Schedule) -> Result<ChangeOutcome> {
        self.reschedule_in(M::TOPIC, id, when).await
    }

    /// A job of message type `M`: its state, attempts, due time, last error and payload;
    /// `None` when no such job is pending or dead.
    pub async fn status<M: Message>(&self, id: &str) -> Result<Option<JobInfo>> {
        self.status_in(M::TOPIC, id).await
    }

    /// Deletes a job that has not started yet. A running job is left alone
    /// ([`ChangeOutcome::Running`]); a dead letter is deleted.
    pub async fn cancel_in(&self, topic: &str, id: &str) -> Result<ChangeOutcome> {
        self.store
            .cancel(&Topic::new(topic)?, &JobId::new(id)?)
            .await
    }

    /// Moves a job that has not started yet to a new due time.
    pub async fn reschedule_in(
        &self,
        topic: &str,
        id: &str,
        when: Schedule,
    ) -> Result<ChangeOutcome> {
        check_schedule(topic, id, when)?;
        self.store
            .reschedule(&Topic::new(topic)?, &JobId::new(id)?, when)
            .await
    }

    /// A job's state, attempts, last error and payload; `None` when it is neither pending nor
    /// dead (never pushed, finished, or cancelled).
    pub async fn status_in(&self, topic: &str, id: &str) -> Result<Option<JobInfo>> {
        self.store
            .status(&Topic::new(topic)?, &JobId::new(id)?)
            .await
    }

    /// How many jobs of a topic are delayed, ready, running and dead.
    pub async fn counts(&self, topic: &str) -> Result<TopicCounts> {
        self.store.counts(&Topic::new(topic)?).await
    }

    // ---- Administration: what the `dq` command-line tool is built on. ----

    /// Every topic ever pushed to, and every paused one (even before its first push).
    pub async fn topics(&self) -> Result<Vec<Topic>> {
        self.store.topics().await
    }

    /// A topic's counts, the due time of its oldest ready job (how far behind the workers
    /// are), its next due time and whether it is paused.
    pub async fn stats(&self, topic: &str) -> Result<TopicStats> {
        self.store.stats(&Topic::new(topic)?).await
    }

    /// How many runs of a topic ended done or failed in each of the last 60 minutes (what the
    /// dashboard charts). Kept by the store in a bounded ring, so this is cheap at any size.
    pub async fn throughput(&self, topic: &str) -> Result<Throughput> {
        self.store.throughput(&Topic::new(topic)?).await
    }

    /// A page of at most `limit` (at most 1,000) of a topic's jobs in one state; `at` is
    /// [`Cursor::START`], then the page's `next` until it is `None`. Pages go shard by shard;
    /// dead letters come newest first within a shard. Every page costs bounded work, however
    /// long the queue.
    ///
    /// ```no_run
    /// # async fn f(client: dq_core::Client) -> dq_core::Result<()> {
    /// use dq_core::{Cursor, JobState};   // in the facade: dq::admin::Cursor, dq::JobState
    ///
    /// let mut at = Some(Cursor::START);
    /// while let Some(cursor) = at {
    ///     let page = client.jobs("order-cancel", JobState::Dead, cursor, 100).await?;
    ///     for job in &page.jobs {
    ///         println!("{} died: {:?}", job.id, job.last_error);
    ///     }
    ///     at = page.next;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn jobs(
        &self,
        topic: &str,
        state: JobState,
        at: Cursor,
        limit: usize,
    ) -> Result<Page> {
        let topic = Topic::new(topic)?;
        if state == JobState::Dead {
            return self.store.dead_jobs(&topic, at, limit).await;
        }
        self.store.list(&topic, state, at, limit).await
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
                    .requeue_dead(&topic, DeadLetters::Ids(chunk), max)
                    .await?;
            }
            return Ok(n);
        }
        // Only what died before this call began: a job that dies again while we work through
        // the list is not taken again (with a failing handler that would never end).
        let before_us = self.store.time_us().await?;
        let mut n = 0;
        loop {
            let oldest = DeadLetters::DiedBy {
                before_us,
                limit: crate::store::MAX_BATCH,
            };
            let moved = self.store.requeue_dead(&topic, oldest, max).await?;
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

    /// Deletes the given dead letters of a topic; returns how many. Only dead letters are
    /// deleted: an id that was pushed again since it died (a new job, pending now), retried, or
    /// is gone is skipped and nothing of it is touched, where [`Client::cancel_in`] would
    /// delete the new job. With `ids` empty nothing is deleted ([`Client::purge_dead`] takes
    /// them all).
    pub async fn delete_dead(&self, topic: &str, ids: &[&str]) -> Result<usize> {
        let topic = Topic::new(topic)?;
        let ids = ids
            .iter()
            .map(|i| JobId::new(*i))
            .collect::<Result<Vec<_>>>()?;
        let mut n = 0;
        for chunk in ids.chunks(crate::store::MAX_BATCH) {
            n += self.store.delete_dead(&topic, chunk).await?;
        }
        Ok(n)
    }

    /// Stops every worker from fetching the topic (running jobs finish); survives restarts.
    ///
    /// A topic may be paused before its first push (so that its jobs wait from the start): it
    /// is then listed by [`Client::topics`] (and `dq stats`, the dashboard) as paused until it
    /// is resumed. `dq pause` asks for `--force` for a topic nobody pushed to, which is more
    /// often a typo.
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
