//! Pushing: the builder [`Client::push`](super::Client::push) returns, and the coalescer that
//! merges concurrent pushes into few store calls.

use std::future::{Future, IntoFuture};
use std::hash::{BuildHasher, Hasher};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::{check_schedule, Client, Waiter};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::job::{NewJob, OnConflict, PushOutcome, Schedule};
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
    pub(super) schedule: Schedule,
    pub(super) retries: u32,
    pub(super) on_conflict: OnConflict,
    pub(super) payload: Result<Vec<u8>>,
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
