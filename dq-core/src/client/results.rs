//! Reading what became of a job, and waiting for it: the value its handler returned, or its
//! last error.

use std::time::Duration;

use serde::de::DeserializeOwned;

use super::Client;
use crate::error::{Error, Result};
use crate::job::{JobInfo, JobState};
use crate::message::Message;
use crate::metric;
use crate::name::{JobId, Topic};
use crate::result::{JobResult, Waited};

impl Client {
    /// What became of job `id` of `M`'s topic, now: its value when it succeeded (and its topic
    /// keeps records: `#[dq::listener(retain = "1h")]`), its last error when it is dead,
    /// [`JobResult::Pending`] while it is delayed, ready or running.
    ///
    /// ```no_run
    /// # #[derive(serde::Serialize, serde::Deserialize)]
    /// # struct Invoice { order_id: u64 }
    /// # impl dq_core::Message for Invoice { const TOPIC: &'static str = "invoice"; }
    /// # #[derive(Debug, serde::Deserialize)]
    /// # struct Receipt { number: String }
    /// # async fn f(client: dq_core::Client) -> dq_core::Result<()> {
    /// use dq_core::JobResult;
    /// match client.result::<Invoice, Receipt>("42").await? {
    ///     JobResult::Succeeded(receipt) => println!("receipt {}", receipt.number),
    ///     JobResult::Dead { error, .. } => println!("failed: {error}"),
    ///     other => println!("not there yet: {other:?}"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn result<M: Message, T: DeserializeOwned>(&self, id: &str) -> Result<JobResult<T>> {
        self.result_in(M::TOPIC, id).await
    }

    /// Like [`Client::result`], for a topic named at run time.
    pub async fn result_in<T: DeserializeOwned>(
        &self,
        topic: &str,
        id: &str,
    ) -> Result<JobResult<T>> {
        let (topic, id) = (Topic::new(topic)?, JobId::new(id)?);
        match self.store.status(&topic, &id).await? {
            Some(info) => decode(info),
            // Not pending and no record: the store's wait answers which (no retention, or
            // gone). A read, not a wait: not counted in `dq_waits_total`.
            None => answered(
                self.store
                    .wait_finished(&topic, &id, Duration::ZERO)
                    .await?,
            ),
        }
    }

    /// Waits until job `id` of `M`'s topic has ended, at most `timeout`, and says what became
    /// of it: woken by the store when the job succeeds, dies or is cancelled (from whatever
    /// process ran it), never by polling. It never hangs: a job that is no longer pending is
    /// answered at once (not found, or ended in a topic that keeps no records:
    /// [`JobResult::NotFound`], [`JobResult::NotKept`]; cancelled: [`JobResult::Cancelled`]),
    /// and one still pending at `timeout` as [`JobResult::Pending`]. A pending job is waited
    /// for whatever its topic's retention: a runtime that keeps its value may start before it
    /// ends. A `timeout` of `Duration::MAX` waits for as long as the job takes. Each wait is counted in the metric `dq_waits_total{topic, answer}`
    /// ([`metric::WAITS`]).
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # #[derive(serde::Serialize, serde::Deserialize)]
    /// # struct Invoice { order_id: u64 }
    /// # impl dq_core::Message for Invoice { const TOPIC: &'static str = "invoice"; }
    /// # #[derive(Debug, serde::Deserialize)]
    /// # struct Receipt { number: String }
    /// # async fn f(client: dq_core::Client) -> dq_core::Result<()> {
    /// let id = client.push(Invoice { order_id: 42 }).await?;
    /// let end = client.wait::<Invoice, Receipt>(id.as_str(), Duration::from_secs(30)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn wait<M: Message, T: DeserializeOwned>(
        &self,
        id: &str,
        timeout: Duration,
    ) -> Result<JobResult<T>> {
        self.wait_in(M::TOPIC, id, timeout).await
    }

    /// Like [`Client::wait`], for a topic named at run time.
    pub async fn wait_in<T: DeserializeOwned>(
        &self,
        topic: &str,
        id: &str,
        timeout: Duration,
    ) -> Result<JobResult<T>> {
        let (topic, id) = (Topic::new(topic)?, JobId::new(id)?);
        let waited = self.store.wait_finished(&topic, &id, timeout).await?;
        metrics::counter!(
            metric::WAITS,
            "topic" => topic.to_string(),
            "answer" => answer(&waited)
        )
        .increment(1);
        answered(waited)
    }
}

/// What a store's wait found, as the caller reads it.
fn answered<T: DeserializeOwned>(waited: Waited) -> Result<JobResult<T>> {
    match waited {
        Waited::Finished(info) => decode(*info),
        Waited::NotKept => Ok(JobResult::NotKept),
        Waited::NotFound => Ok(JobResult::NotFound),
        Waited::Cancelled => Ok(JobResult::Cancelled),
        Waited::TimedOut => Ok(JobResult::Pending),
    }
}

/// The `answer` label of [`metric::WAITS`]: what a wait found.
fn answer(waited: &Waited) -> &'static str {
    match waited {
        Waited::Finished(info) if info.state == JobState::Dead => "dead",
        Waited::Finished(_) => "finished",
        Waited::NotKept => "not_kept",
        Waited::Cancelled => "cancelled",
        Waited::NotFound => "not_found",
        Waited::TimedOut => "timed_out",
    }
}

/// What a job's record says, its value decoded as `T`.
fn decode<T: DeserializeOwned>(info: JobInfo) -> Result<JobResult<T>> {
    match info.state {
        JobState::Done => match info.result {
            None => Ok(JobResult::SucceededEmpty),
            Some(json) => serde_json::from_slice(&json)
                .map(JobResult::Succeeded)
                .map_err(|e| Error::Malformed {
                    location: format!("the result of job {}:{}", info.topic, info.id),
                    reason: format!(
                        "it does not decode as {}: {e} (the handler returned another type?)",
                        std::any::type_name::<T>()
                    ),
                }),
        },
        JobState::Dead => Ok(JobResult::Dead {
            error: info.last_error.unwrap_or_default(),
            attempts: info.attempt,
        }),
        _ => Ok(JobResult::Pending),
    }
}
