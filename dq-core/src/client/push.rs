//! Pushing: the builder [`Client::push`](super::Client::push) returns, and the coalescer that
//! merges concurrent pushes into few store calls.

use std::future::{Future, IntoFuture};
use std::hash::{BuildHasher, Hasher};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::{check_due, Client, Waiter};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::job::{Due, NewJob, OnConflict, PushOutcome, MAX_DELAY, MAX_RETRIES};
use crate::name::{JobId, Topic};
use crate::store::Store;

/// Coalesces single pushes made while another push is in flight into one batched store call:
/// a lone push goes straight to the store, and a thousand concurrent ones cost a handful of
/// round trips instead of a thousand script calls.
#[derive(Default)]
pub(super) struct Coalescer {
    pub(super) in_flight: std::sync::atomic::AtomicUsize,
    queue: std::sync::OnceLock<tokio::sync::mpsc::UnboundedSender<(NewJob, OnConflict, Waiter)>>,
}

impl Coalescer {
    pub(super) fn queue(
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
    pub(super) client: Client,
    pub(super) topic: Result<Topic>,
    pub(super) id: Option<String>,
    pub(super) due: Due,
    pub(super) retries: u32,
    pub(super) priority: i8,
    pub(super) group: Option<String>,
    pub(super) on_conflict: OnConflict,
    pub(super) unique_for: Option<Duration>,
    /// The quiet time of [`PushBuilder::debounce`], checked when the push is sent.
    pub(super) debounce: Option<Duration>,
    /// Set for the job of a schedule's tick (see `FiredTick`).
    pub(super) fence: Option<crate::store::FiredTick>,
    /// The id is the payload's hash (`unique_by_payload`).
    pub(super) id_from_payload: bool,
    pub(super) payload: Result<Vec<u8>>,
}

impl std::fmt::Debug for PushBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PushBuilder")
            .field("topic", &self.topic)
            .field("id", &self.id)
            .field("due", &self.due)
            .field("retries", &self.retries)
            .field("priority", &self.priority)
            .field("on_conflict", &self.on_conflict)
            .field("unique_for", &self.unique_for)
            .field("debounce", &self.debounce)
            .finish_non_exhaustive()
    }
}

impl PushBuilder {
    /// Due this long after the store receives the push (measured by the store's clock). Zero,
    /// the default, is due now; at most [`MAX_DELAY`](crate::MAX_DELAY) (200 years).
    pub fn delay(mut self, delay: Duration) -> Self {
        self.due = Due::After(delay);
        self
    }

    /// Due at this wall-clock instant; a time in the past means now.
    pub fn at(mut self, when: SystemTime) -> Self {
        self.due = Due::At(when);
        self
    }

    /// The job's id; a second push with the same id while the first is pending stores nothing
    /// new (see [`PushBuilder::replace`]). Without it, a unique id is generated.
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// Retries after a failed first run before the job is dead-lettered (default 2, at most
    /// [`MAX_RETRIES`](crate::MAX_RETRIES): more is refused when the push is sent).
    pub fn max_retries(mut self, retries: u32) -> Self {
        self.retries = retries;
        self
    }

    /// Runs the job before the ready jobs of its topic with a lower priority: higher first,
    /// from [`MIN_PRIORITY`](crate::MIN_PRIORITY) (-10) to [`MAX_PRIORITY`](crate::MAX_PRIORITY)
    /// (10); the default is 0. "Password-reset mails before newsletters":
    ///
    /// ```no_run
    /// # async fn f(client: dq_core::Client) -> dq_core::Result<()> {
    /// # let (reset, digest) = (serde_json::json!({}), serde_json::json!({}));
    /// client.push_to("mail", &reset).priority(5).await?;
    /// client.push_to("mail", &digest).priority(-5).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// A priority orders the jobs that are ready (due) at the same time: a fetch takes the
    /// highest priority first and, within one priority, the job that became ready first. It
    /// does not make a job due sooner: a delayed job waits for its time whatever its priority.
    /// The order is strict, with no aging: while jobs of a higher priority keep coming, a lower
    /// one waits (give work that must keep moving a topic of its own, with its own
    /// concurrency). A retried, reclaimed or released job keeps its priority.
    ///
    /// Outside the range the push is refused ([`Error::InvalidPush`]), with nothing stored.
    pub fn priority(mut self, priority: i8) -> Self {
        self.priority = priority;
        self
    }

    /// Puts the job in a group of its topic, `key` (an account, a tenant): at most the topic's
    /// group concurrency of one group's jobs run at once (1 by default: one at a time, in push
    /// order, "never two jobs for the same account at once"), and the groups with jobs ready
    /// take turns, so one with a million jobs does not delay one with one. The key follows the
    /// rules of a job id.
    ///
    /// On a namespace of several shards (a Redis Cluster's default) every job of a group lives
    /// in its group's shard: leave the id to dq, which draws one that leads there; an id of
    /// yours that leads to another shard is refused ([`Error::InvalidPush`]), with nothing
    /// stored.
    pub fn group(mut self, key: impl Into<String>) -> Self {
        self.group = Some(key.into());
        self
    }

    /// Replaces the payload and due time of a pending job with the same id instead of keeping
    /// it. A running job is never replaced.
    pub fn replace(mut self) -> Self {
        self.on_conflict = OnConflict::Replace;
        self
    }

    /// Keeps the id reserved for `window` after the job succeeds: a push of the same id (in the
    /// same topic) within that window stores nothing and reports [`PushOutcome::Unique`] with
    /// the time left. While the job is pending a push of its id is
    /// [`PushOutcome::AlreadyPending`] as always. "Don't send a second report for this account
    /// within 10 minutes":
    ///
    /// ```no_run
    /// # async fn f(client: dq_core::Client) -> dq_core::Result<()> {
    /// # use std::time::Duration;
    /// client
    ///     .push_to("account-report", &serde_json::json!({ "account": 42 }))
    ///     .unique_key("account-42")
    ///     .unique_for(Duration::from_secs(600))
    ///     .await?;
    /// # Ok(()) }
    /// ```
    ///
    /// The reservation starts when the job succeeds, by the store's clock. A job that is
    /// dead-lettered, cancelled or purged reserves nothing (a dead letter keeps blocking its
    /// id until it is retried or purged; a push of its id revives it, as without uniqueness);
    /// if it later succeeds after a retry, the reservation starts then. A replace (or
    /// [`debounce`](PushBuilder::debounce)) of a pending job takes the new push's window. Use it
    /// with an id of your choosing ([`id`](PushBuilder::id), [`unique_key`](PushBuilder::unique_key)
    /// or [`unique_by_payload`](PushBuilder::unique_by_payload)): a generated id is never pushed twice.
    ///
    /// The window is more than zero and at most [`MAX_DELAY`](crate::MAX_DELAY) (200 years, as
    /// for a delay); the push is refused otherwise ([`Error::InvalidPush`]), with nothing
    /// stored.
    pub fn unique_for(mut self, window: Duration) -> Self {
        self.unique_for = Some(window);
        self
    }

    /// Fenced as the job of a schedule's tick (see `FiredTick`).
    pub(crate) fn fence(mut self, fence: crate::store::FiredTick) -> Self {
        self.fence = Some(fence);
        self
    }

    /// The id is `key`, what makes two pushes "the same job" for uniqueness: an account, a
    /// document, a day. The same as [`id`](PushBuilder::id), named for its purpose.
    pub fn unique_key(self, key: impl Into<String>) -> Self {
        self.id(key)
    }

    /// The id is a hash of the payload (`p-` and 40 hex digits of its SHA-1): two pushes of the
    /// same message to a topic are the same job.
    pub fn unique_by_payload(mut self) -> Self {
        self.id_from_payload = true;
        self
    }

    /// Runs the job `quiet` after the last of a burst of pushes of the same id: while it is
    /// pending, each push replaces its payload and moves its due time to `quiet` from now
    /// ("save the document 2 s after the last keystroke"). The same as
    /// `.delay(quiet).replace()`. A job that is already running is left alone
    /// ([`PushOutcome::Running`]): push again when it has finished if its result may be stale.
    ///
    /// It needs an id ([`id`](PushBuilder::id), [`unique_key`](PushBuilder::unique_key) or
    /// [`unique_by_payload`](PushBuilder::unique_by_payload)), by which the pending job is
    /// found, and a quiet time over zero; the push is refused otherwise
    /// ([`Error::InvalidPush`]), with nothing stored.
    pub fn debounce(mut self, quiet: Duration) -> Self {
        self.debounce = Some(quiet);
        self.delay(quiet).replace()
    }

    /// Sets what happens when the id is already pending.
    pub fn on_conflict(mut self, on_conflict: OnConflict) -> Self {
        self.on_conflict = on_conflict;
        self
    }

    /// Sends the push and reports the outcome along with the id. Fails with
    /// [`Error::TopicFull`] when the topic holds as many jobs as its `max_pending` allows
    /// ([`Client::set_max_pending`]): nothing is stored.
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
        if let PushOutcome::Full { max_pending } = outcome {
            metrics::counter!(crate::metric::PUSHES_REFUSED_FULL, "topic" => topic_name.clone())
                .increment(1);
            return Err(Error::TopicFull {
                topic: topic_name,
                max_pending,
            });
        }
        if matches!(outcome, PushOutcome::Created | PushOutcome::Replaced) {
            metrics::counter!(crate::metric::JOBS_PUSHED, "topic" => topic_name).increment(1);
        }
        Ok(Pushed { id, outcome })
    }

    pub(super) fn into_job(self, config: &Config) -> Result<NewJob> {
        let topic = self.topic?;
        let payload = self.payload?;
        if payload.len() > config.max_payload_bytes {
            return Err(Error::PayloadTooLarge {
                topic: topic.to_string(),
                size: payload.len(),
                limit: config.max_payload_bytes,
            });
        }
        // An id of the caller's (or the payload's), by which a debounce finds its pending job.
        let chosen_id = self.id.is_some() || self.id_from_payload;
        let id = match (self.id, self.id_from_payload) {
            (_, true) => payload_id(&payload),
            (Some(id), false) => JobId::new(id)?,
            (None, false) => match &self.group {
                // On a namespace of several shards a grouped job lives in its group's shard:
                // an id is drawn until it leads there (shards draws on average).
                Some(group) if config.shards > 1 => {
                    let home = crate::store::shard_of_group(&topic, group, config.shards);
                    loop {
                        let id = generated_id();
                        if crate::store::shard_of(&topic, &id, config.shards) == home {
                            break id;
                        }
                    }
                }
                _ => generated_id(),
            },
        };
        check_due(topic.as_str(), id.as_str(), self.due)?;
        let invalid = |reason: String| Error::InvalidPush {
            topic: topic.to_string(),
            reason,
        };
        if let Some(quiet) = self.debounce {
            if !chosen_id {
                return Err(invalid(
                    "debounce needs an id (.id(..) or .unique_key(..)): the pending job it replaces is found by its id, and a generated id matches none".into(),
                ));
            }
            if quiet.is_zero() {
                return Err(invalid(format!(
                    "job {id}: debounce of 0s waits for no quiet time; give the time to wait after the last push (or use .replace() to replace a pending job and run it now)"
                )));
            }
        }
        if let Some(window) = self.unique_for {
            if window.is_zero() {
                return Err(invalid(format!(
                    "job {id}: unique_for of 0s reserves the id for no time; leave it out, or give the window"
                )));
            }
            if window > MAX_DELAY {
                return Err(invalid(format!(
                    "job {id}: unique_for of {window:?} is over the limit of 200 years (dq::limits::MAX_DELAY), as for a delay"
                )));
            }
        }
        let retries = match self.retries {
            // The job of a schedule's tick: a schedule stored with more retries keeps firing.
            n if n > MAX_RETRIES && self.fence.is_some() => MAX_RETRIES,
            n if n > MAX_RETRIES => {
                return Err(invalid(format!(
                    "job {id}: {n} retries is over the limit of {MAX_RETRIES} (dq::limits::MAX_RETRIES); a job that failed that often needs a person (or a longer backoff between runs)"
                )))
            }
            n => n,
        };
        // The trace context of the span the push is made in, for the run to continue.
        #[cfg(feature = "otel")]
        let trace = crate::trace::of_push(self.fence.is_some());
        #[cfg(not(feature = "otel"))]
        let trace = None;
        if let Some(problem) = self
            .group
            .as_deref()
            .and_then(crate::name::group_key_problem)
        {
            return Err(invalid(format!("job {id}: {problem}")));
        }
        let job = NewJob {
            topic,
            id,
            due: self.due,
            max_attempts: retries.saturating_add(1),
            unique_for: self.unique_for,
            fence: self.fence,
            trace,
            priority: self.priority,
            group: self.group,
            id_drawn: !chosen_id,
            payload,
        };
        crate::job::check_priority(&job)?;
        Ok(job)
    }
}

impl IntoFuture for PushBuilder {
    type Output = Result<JobId>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<JobId>> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move { self.send().await.map(|p| p.id) })
    }
}

/// `p-` and the SHA-1 of the payload in hex: the same on every host and in every release.
fn payload_id(payload: &[u8]) -> JobId {
    let digest = sha1_smol::Sha1::from(payload).digest().to_string();
    JobId::new(format!("p-{digest}")).unwrap_or_else(|_| unreachable!("hex digits are an id"))
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
