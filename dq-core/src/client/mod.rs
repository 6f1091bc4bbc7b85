//! The producer API: [`Client`] pushes, cancels, reschedules and inspects jobs.

mod admin;
mod events;
mod history;
mod push;
mod results;
mod workflow;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::Serialize;

use crate::admin::{ChangeOutcome, TopicCounts};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::job::{Due, JobInfo, NewJob, OnConflict, PushOutcome, DEFAULT_RETRIES};
use crate::message::Message;
use crate::name::{JobId, Topic};
use crate::store::Store;

pub use self::events::EventStream;
use self::push::Coalescer;
pub use self::push::{PushBuilder, Pushed};
pub use self::workflow::{Step, WorkflowBuilder};

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
        let mut push = self.push_to(M::TOPIC, &message);
        push.group = message.group();
        push
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
            due: Due::default(),
            retries: DEFAULT_RETRIES,
            priority: 0,
            group: None,
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
    /// nothing is stored. Each job's own [`OnConflict`] is honoured, batched by mode. A job
    /// whose topic is full (its `max_pending`, [`Client::set_max_pending`]) is not stored and
    /// says so ([`PushOutcome::Full`]); the others of the batch are.
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
        let mut refused: std::collections::HashMap<&Topic, u64> = std::collections::HashMap::new();
        for (topics, outs) in [(&keep_topics, &keep_out), (&replace_topics, &replace_out)] {
            for (topic, outcome) in topics.iter().zip(outs.iter()) {
                match outcome {
                    PushOutcome::Created | PushOutcome::Replaced => {
                        *pushed.entry(topic).or_default() += 1
                    }
                    PushOutcome::Full { .. } => *refused.entry(topic).or_default() += 1,
                    _ => {}
                }
            }
        }
        for (topic, n) in pushed {
            metrics::counter!(crate::metric::JOBS_PUSHED, "topic" => topic.to_string())
                .increment(n);
        }
        for (topic, n) in refused {
            metrics::counter!(crate::metric::PUSHES_REFUSED_FULL, "topic" => topic.to_string())
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
    /// `client.cancel::<OrderCancel>("42")`; asks the worker of a running one to stop it
    /// ([`ChangeOutcome::CancelRequested`]). For a topic named at run time, [`Client::cancel_in`].
    pub async fn cancel<M: Message>(&self, id: &str) -> Result<ChangeOutcome> {
        self.cancel_in(M::TOPIC, id).await
    }

    /// Moves a job of message type `M` that has not started yet to a new due time.
    pub async fn reschedule<M: Message>(&self, id: &str, when: Due) -> Result<ChangeOutcome> {
        self.reschedule_in(M::TOPIC, id, when).await
    }

    /// A job of message type `M`: its state, attempts, due time, last error and payload (and a
    /// running job's latest [`progress`](JobInfo::progress)); `None` when no such job is
    /// pending or dead.
    pub async fn status<M: Message>(&self, id: &str) -> Result<Option<JobInfo>> {
        self.status_in(M::TOPIC, id).await
    }

    /// Deletes a job that has not started yet; a dead letter, or the kept record of a
    /// succeeded job, is deleted too.
    ///
    /// A running job is not deleted at once: its worker, in whatever process, is asked to stop
    /// it ([`ChangeOutcome::CancelRequested`]). Its handler sees the request in
    /// `JobContext::cancelled` (a future to `select!` on, as the shutdown signal); when the run
    /// then ends without success (an error, a panic, a timeout) the job is deleted, neither
    /// retried nor dead-lettered. A handler that ignores the request runs to its end: if it
    /// succeeds the job is done as any. A wait for the job's end ([`Client::wait`]) answers
    /// [`JobResult::Cancelled`](crate::JobResult::Cancelled) once it is deleted (within its
    /// topic's retention).
    pub async fn cancel_in(&self, topic: &str, id: &str) -> Result<ChangeOutcome> {
        self.store
            .cancel(&Topic::new(topic)?, &JobId::new(id)?)
            .await
    }

    /// Moves a job that has not started yet to a new due time.
    pub async fn reschedule_in(&self, topic: &str, id: &str, when: Due) -> Result<ChangeOutcome> {
        check_due(topic, id, when)?;
        self.store
            .reschedule(&Topic::new(topic)?, &JobId::new(id)?, when)
            .await
    }

    /// A job's state, attempts, last error and payload (and a running job's latest
    /// [`progress`](JobInfo::progress)); `None` when it is neither pending nor dead (never
    /// pushed, finished, or cancelled).
    pub async fn status_in(&self, topic: &str, id: &str) -> Result<Option<JobInfo>> {
        self.store
            .status(&Topic::new(topic)?, &JobId::new(id)?)
            .await
    }

    /// How many jobs of a topic are delayed, ready, running and dead, and how many records of
    /// succeeded jobs it keeps (done).
    pub async fn counts(&self, topic: &str) -> Result<TopicCounts> {
        self.store.counts(&Topic::new(topic)?).await
    }
}

fn check_due(topic: &str, id: &str, when: Due) -> Result<()> {
    let bad = |reason| Error::InvalidSchedule {
        topic: topic.to_owned(),
        id: id.to_owned(),
        reason,
    };
    const LIMIT: Duration = crate::job::MAX_DELAY;
    match when {
        Due::After(d) if d > LIMIT => Err(bad("a delay is at most 200 years")),
        Due::At(t) if t < SystemTime::UNIX_EPOCH => Err(bad("a due time before 1970")),
        Due::At(t) if t > SystemTime::now() + LIMIT => {
            Err(bad("a due time is at most 200 years ahead"))
        }
        _ => Ok(()),
    }
}
