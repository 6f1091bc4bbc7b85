//! One job's history: [`Client::job_history`], the events of one job still kept in its topic's
//! stream, which the dashboard's job page shows with each run's error.

use std::time::Duration;

use super::Client;
use crate::error::{Error, Result};
use crate::events::{EventCursor, EventPosition, JobEvent};
use crate::name::{JobId, Topic};

/// The longest a read of a job's history takes: past it, the read is cut short with an error
/// (a stream deleted by hand while it is read, say).
const HISTORY_READ: Duration = Duration::from_secs(10);

impl Client {
    /// The events of job `id` of `topic` still kept in the topic's stream, oldest first: when
    /// it was pushed, each run's start and end, the error of each run that failed and when it
    /// was retried, its progress, how it ended. The job itself keeps only its latest error
    /// ([`JobInfo::last_error`](crate::JobInfo::last_error)); its history keeps each one while
    /// its topic's events are on (`#[dq::listener(events = true)]`) and within its cap.
    ///
    /// Empty when the topic's events are off, or the job's events went past the cap (10,000
    /// events per shard by default, all jobs of the topic together). It reads the topic's
    /// stream from its oldest event kept to where it ended when called, in every shard: a call
    /// for a page or a tool, not for each job on a hot path (where a reader of
    /// [`Client::events`] that keeps what it needs is the way).
    ///
    /// ```no_run
    /// use dq_core::events::EventKind;
    ///
    /// # async fn f(client: dq_core::Client) -> dq_core::Result<()> {
    /// for event in client.job_history("invoice", "inv-42").await? {
    ///     if let EventKind::Failed { error } = &event.kind {
    ///         println!("run {} failed: {error}", event.attempt);
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn job_history(&self, topic: &str, id: &str) -> Result<Vec<JobEvent>> {
        let topic = Topic::new(topic)?;
        let id = JobId::new(id)?;
        let shards = usize::from(self.store.shards());
        // Where each shard's stream ends now: the read stops there.
        let end = self
            .store
            .event_feed(&topic, &EventCursor::now())
            .await?
            .start()
            .clone();
        let until: Vec<EventPosition> = (0..self.store.shards()).map(|s| end.position(s)).collect();
        let mut feed = self.store.event_feed(&topic, &EventCursor::start()).await?;
        let mut at = vec![EventPosition::default(); shards];
        let mut found = Vec::new();
        let read = async {
            while at.iter().zip(&until).any(|(at, until)| at < until) {
                for entry in feed.next().await? {
                    if let Some(p) = at.get_mut(usize::from(entry.shard)) {
                        *p = entry.position;
                    }
                    match entry.event {
                        Some(event) if event.id == id => found.push(event),
                        _ => {}
                    }
                }
            }
            Ok::<_, Error>(())
        };
        match tokio::time::timeout(HISTORY_READ, read).await {
            Ok(read) => read.map(|()| found),
            // The stream did not reach where it ended when the read began (deleted by hand
            // meanwhile, say).
            Err(_) => Err(Error::Timeout {
                op: "reading a job's history",
                after: HISTORY_READ,
            }),
        }
    }
}
