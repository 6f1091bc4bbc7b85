//! Waiting for a job's end: one subscription per store to every shard's `ended` channel
//! (announced by ack, dead letter, the reclaimer's dead letters and cancels, in every topic;
//! an ack and the reclaimer announce the jobs of a call in one message, one `topic:id` a
//! line), shared by every wait of the process. A wait registers before it looks, so no
//! announcement falls between the look and the wait; when the subscription is made again
//! (Redis restarted, a shard moved), every wait looks again, since an announcement may have
//! reached nobody meanwhile. An ack announces its jobs only while a wait listens in its shard
//! (the `waiting` mark each look renews: a shard nobody waits on pays no announcement for its
//! acks, and on a cluster none is copied to every node). A look
//! that fails for want of a connection (Redis restarting, the shared connection being made
//! again) does not end the wait: it looks again soon, and answers that error only if its
//! timeout comes before a look gets through.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::{broadcast, watch};
use tokio::time::Instant;

use super::RedisStore;
use crate::connection::{Conn, Server};
use crate::keys::member;
use crate::subscription::{Delivery, ShardSubscription, PING_EVERY};
use dq_core::store::{Producer, Waited};
use dq_core::{Error, JobId, JobState, Result, Topic};

/// What tells every wait to look again (the subscription was made again).
const LOOK_AGAIN: &str = "*";

/// How soon a wait looks again after a look failed for want of a connection.
const LOOK_AFTER_FAILURE: Duration = Duration::from_millis(250);

/// How long a wait without a bound (`Duration::MAX`) lasts: longer than any process.
const UNBOUNDED: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// How long a wait's mark (`waiting`, which makes acks announce their jobs) lasts: renewed
/// at each look, which comes at least every [`PING_EVERY`], so it outlives a wait by this much
/// at most.
const MARK_LASTS: Duration = Duration::from_secs(30);

/// The shared subscription to the `ended` channels and the waits listening to it.
#[derive(Debug)]
pub(crate) struct EndedHub {
    /// Each announced `topic:id`, and [`LOOK_AGAIN`].
    ended: broadcast::Sender<String>,
    /// Whether the subscription is in place now.
    live: watch::Sender<bool>,
    started: Mutex<bool>,
}

impl Default for EndedHub {
    fn default() -> Self {
        EndedHub {
            ended: broadcast::channel(4096).0,
            live: watch::channel(false).0,
            started: Mutex::new(false),
        }
    }
}

impl EndedHub {
    /// A listener of the announcements, and of whether they are heard; starts the
    /// subscription on first use.
    fn listen(
        self: &Arc<Self>,
        store: &RedisStore,
    ) -> (broadcast::Receiver<String>, watch::Receiver<bool>) {
        let listener = (self.ended.subscribe(), self.live.subscribe());
        let mut started = self.started.lock().unwrap_or_else(|p| p.into_inner());
        if !*started {
            *started = true;
            let channels: HashMap<String, u16> = store
                .shards
                .iter()
                .zip(0u16..)
                .map(|(k, s)| (k.ended_channel(), s))
                .collect();
            tokio::spawn(subscribe(
                Arc::downgrade(self),
                store.server.clone(),
                store.conn.clone(),
                channels,
            ));
        }
        listener
    }
}

/// Keeps the subscription while the hub lives, opening it again after a failure.
async fn subscribe(
    hub: Weak<EndedHub>,
    server: Server,
    conn: Conn,
    channels: HashMap<String, u16>,
) {
    let mut failures = 0u32;
    while hub.strong_count() > 0 {
        let started = std::time::Instant::now();
        let Err(e) = listen(&hub, &server, &conn, &channels).await else {
            return; // the store is gone
        };
        if let Some(h) = hub.upgrade() {
            h.live.send_replace(false);
        }
        if started.elapsed() > PING_EVERY * 2 {
            failures = 0;
        }
        failures += 1;
        let delay = Duration::from_millis(100 * 2u64.pow(failures.min(5)));
        tracing::warn!(error = %e, retry_in = ?delay, "the subscription that wakes waits for job ends failed; they wait until it is back (or their timeout)");
        tokio::time::sleep(delay).await;
    }
}

/// One subscription's life: subscribe, tell every wait to look again, then pass on what is
/// announced until it fails.
async fn listen(
    hub: &Weak<EndedHub>,
    server: &Server,
    conn: &Conn,
    channels: &HashMap<String, u16>,
) -> Result<()> {
    let mut sub =
        ShardSubscription::open("job-end subscription", server, conn, channels.clone()).await?;
    let Some(h) = hub.upgrade() else {
        return Ok(());
    };
    h.live.send_replace(true);
    let _ = h.ended.send(LOOK_AGAIN.to_owned());
    drop(h);
    loop {
        let delivery = tokio::select! {
            d = sub.next() => d?,
            _ = tokio::time::sleep(PING_EVERY) => {
                if hub.strong_count() == 0 {
                    return Ok(());
                }
                continue;
            }
        };
        let Some(h) = hub.upgrade() else {
            return Ok(());
        };
        let said = match delivery {
            Delivery::Message { payload, .. } => payload,
            Delivery::Resubscribed => LOOK_AGAIN.to_owned(),
        };
        let _ = h.ended.send(said);
    }
}

impl RedisStore {
    /// `Producer::wait_finished`: looks, then waits for an announcement of this job (or word
    /// to look again) and looks again, until it has an answer or `timeout` runs out.
    pub(super) async fn wait_for_end(
        &self,
        topic: &Topic,
        id: &JobId,
        timeout: Duration,
    ) -> Result<Waited> {
        // A wait of zero (`Client::result`) asks for exactly one look, bounded by the store's
        // reply limit rather than the timeout.
        if timeout.is_zero() {
            return Ok(self.end_now(topic, id).await?.unwrap_or(Waited::TimedOut));
        }
        // A timeout too long for the clock (`Duration::MAX`: as long as it takes) is a wait
        // of a century.
        let deadline = Instant::now()
            .checked_add(timeout)
            .unwrap_or_else(|| Instant::now() + UNBOUNDED);
        // Listening before the first look: no announcement falls between the two. Every look,
        // the first too, is bounded by the deadline and goes on through a lost connection.
        let (mut ended, mut live) = self.ended.listen(self);
        let me = member(topic, id);
        loop {
            // Besides the announcements, a look every few seconds: an end may go unannounced
            // (by a process of a release before, which announced only the ends it kept), or
            // the subscription be down.
            let look_again = (Instant::now() + PING_EVERY).min(deadline);
            // Until the subscription is in place, an announcement could reach nobody.
            if !*live.borrow_and_update() {
                let _ = tokio::time::timeout_at(look_again, live.changed()).await;
            }
            // Why this look failed, while the connection is away.
            let failed: Option<Error> = match self.end_before(deadline, topic, id).await {
                Ok(Some(answer)) => return Ok(answer),
                Ok(None) => None,
                // Redis restarting, or the connection being made again: the wait goes on.
                Err(e) if e.is_connection() => {
                    tracing::debug!(error = %e, %topic, %id, "a wait's look failed; it looks again");
                    Some(e)
                }
                Err(e) => return Err(e),
            };
            if Instant::now() >= deadline {
                return failed.map_or(Ok(Waited::TimedOut), Err);
            }
            let until = match failed {
                Some(_) => (Instant::now() + LOOK_AFTER_FAILURE).min(deadline),
                None => look_again,
            };
            word_of(&mut ended, &me, until).await;
        }
    }

    /// [`RedisStore::end_now`], or `TimedOut` once `deadline` has passed: a stalled Redis does
    /// not hold a wait past its timeout. The shard's `waiting` mark is set first: an ack makes
    /// its announcement only while a wait listens, so the mark comes before the look and is
    /// renewed at each.
    async fn end_before(
        &self,
        deadline: Instant,
        topic: &Topic,
        id: &JobId,
    ) -> Result<Option<Waited>> {
        let look = async {
            let mark = redis::cmd("SET")
                .arg(self.keys_of(topic, id).waiting())
                .arg(1)
                .arg("PX")
                .arg(MARK_LASTS.as_millis() as u64)
                .to_owned();
            self.simple("mark that a wait listens for job ends", &mark)
                .await?;
            self.end_now(topic, id).await
        };
        match tokio::time::timeout_at(deadline, look).await {
            Ok(answer) => answer,
            Err(_) => Ok(Some(Waited::TimedOut)),
        }
    }

    /// What a wait answers now: the job's record when it ended, whether its topic keeps
    /// none or it is gone, `None` while it is pending. A pending job's wait goes on whether
    /// or not its topic keeps its ends yet: its end is announced either way (ack.lua, while a
    /// wait listens), and a runtime that records the retention may start before it ends.
    async fn end_now(&self, topic: &Topic, id: &JobId) -> Result<Option<Waited>> {
        let info = self.status(topic, id).await?;
        if let Some(info) = &info {
            if matches!(info.state, JobState::Done | JobState::Dead) {
                return Ok(Some(Waited::Finished(Box::new(info.clone()))));
            }
        }
        let k = self.keys_of(topic, id);
        let mut look = redis::pipe();
        look.hexists(k.retain(), topic.as_str())
            .zscore(k.cancelled(topic), member(topic, id));
        let (kept, cancelled): (bool, Option<f64>) = self
            .query_pipe("read the topic's retention and cancelled jobs", &look)
            .await?;
        Ok(match (info, kept) {
            (Some(_), _) => None,
            (None, false) => Some(Waited::NotKept),
            (None, true) if cancelled.is_some() => Some(Waited::Cancelled),
            (None, true) => Some(Waited::NotFound),
        })
    }
}

/// Waits until `me` (a `topic:id`) is announced, or word comes to look again, or `until`.
async fn word_of(ended: &mut broadcast::Receiver<String>, me: &str, until: Instant) {
    loop {
        match tokio::time::timeout_at(until, ended.recv()).await {
            Err(_) => return,
            Ok(Ok(said)) if said == LOOK_AGAIN || said.split('\n').any(|m| m == me) => return,
            Ok(Ok(_)) => continue,
            // Behind (a flood of ends): look again rather than miss its own.
            Ok(Err(broadcast::error::RecvError::Lagged(_))) => return,
            Ok(Err(broadcast::error::RecvError::Closed)) => {
                tokio::time::sleep_until(until).await;
                return;
            }
        }
    }
}
