//! Ready notifications for consumers, on one server and on a Redis Cluster. A blocking `BLMOVE`
//! per topic per shard would hold shards x topics connections in every worker (320 for 16
//! shards and 20 topics), and could not wait on a topic's two ready lanes (its list and its
//! ranked set, lib.lua) at once; instead the scripts that make jobs ready `PUBLISH` the topic on the shard's
//! `ready` channel, and one subscription per process (one connection per master, each channel
//! on the master of its shard: see `subscription`) wakes the consumer loops it concerns.
//!
//! No wake is lost: a consumer that finds nothing waits on a [`Notify`] whose permit is kept
//! when the message comes before the wait; after every (re)subscription all consumers are
//! woken, since messages sent while the subscription was down are gone; and a ping every
//! few seconds notices a silently dead connection. The consumer's own wait slice is the last
//! resort.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::Notify;

use crate::connection::{Conn, Server};
use crate::keys::ShardKeys;
use crate::subscription::{Delivery, ShardSubscription, PING_EVERY};
use dq_core::store::ReadyWaiter;
use dq_core::Result;
use dq_core::Topic;

/// Longest an idle consumer waits for its bell before it looks anyway. The bell is reliable
/// (above), so this only bounds the cost of a bug: 320 idle loops fetch about 11 times a
/// second instead of 64 with the consumers' 5 s slice.
const IDLE_LOOK: Duration = Duration::from_secs(30);

/// The bells of one store's consumers, rung by one subscription task.
#[derive(Debug, Default)]
pub(crate) struct ReadyHub {
    bells: Mutex<HashMap<(u16, String), Arc<Notify>>>,
    running: Mutex<bool>,
}

impl ReadyHub {
    /// A waiter for one topic of one shard; starts the subscription on first use.
    pub(crate) fn waiter(
        self: &Arc<Self>,
        server: &Server,
        conn: &Conn,
        shards: &[ShardKeys],
        shard: u16,
        topic: &Topic,
    ) -> Box<dyn ReadyWaiter> {
        let bell = self
            .lock_bells()
            .entry((shard, topic.as_str().to_owned()))
            .or_default()
            .clone();
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        if !*running {
            *running = true;
            let channels: HashMap<String, u16> = shards
                .iter()
                .zip(0u16..)
                .map(|(k, s)| (k.ready_channel(), s))
                .collect();
            tokio::spawn(subscribe(
                Arc::downgrade(self),
                server.clone(),
                conn.clone(),
                channels,
            ));
        }
        Box::new(BellWaiter { bell })
    }

    fn lock_bells(&self) -> std::sync::MutexGuard<'_, HashMap<(u16, String), Arc<Notify>>> {
        self.bells.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn ring(&self, shard: u16, topic: &str) {
        if let Some(bell) = self.lock_bells().get(&(shard, topic.to_owned())) {
            bell.notify_one();
        }
    }

    fn ring_all(&self) {
        for bell in self.lock_bells().values() {
            bell.notify_one();
        }
    }
}

/// Keeps one subscription to every shard's `ready` channel while the hub lives.
async fn subscribe(
    hub: Weak<ReadyHub>,
    server: Server,
    conn: Conn,
    channels: HashMap<String, u16>,
) {
    let mut failures = 0u32;
    loop {
        if hub.strong_count() == 0 {
            return;
        }
        let started = std::time::Instant::now();
        match listen(&hub, &server, &conn, &channels).await {
            Ok(()) => return, // the store is gone
            Err(e) => {
                // A subscription that lived a while was healthy: start the backoff over.
                if started.elapsed() > PING_EVERY * 2 {
                    failures = 0;
                }
                failures += 1;
                let delay = Duration::from_millis(100 * 2u64.pow(failures.min(5)));
                tracing::warn!(error = %e, retry_in = ?delay, "the ready-job subscription failed; consumers poll until it is back (jobs are safe in Redis)");
                tokio::time::sleep(delay).await;
            }
        }
    }
}

/// One subscription's life: subscribe, wake everyone, then ring bells until it fails.
async fn listen(
    hub: &Weak<ReadyHub>,
    server: &Server,
    conn: &Conn,
    channels: &HashMap<String, u16>,
) -> Result<()> {
    let mut sub =
        ShardSubscription::open("ready-job subscription", server, conn, channels.clone()).await?;
    // Messages sent before the subscription was in place reached nobody.
    match hub.upgrade() {
        Some(h) => h.ring_all(),
        None => return Ok(()),
    }
    loop {
        // Looks up now and then whether the store is gone: a quiet namespace may send nothing,
        // and the subscription must not outlive its store.
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
        match delivery {
            Delivery::Message { shard, payload } => h.ring(shard, &payload),
            // Messages sent while the subscription moved reached nobody.
            Delivery::Resubscribed => h.ring_all(),
        }
    }
}

/// Waits for its topic's bell.
#[derive(Debug)]
struct BellWaiter {
    bell: Arc<Notify>,
}

#[async_trait]
impl ReadyWaiter for BellWaiter {
    async fn wait(&mut self, timeout: Duration) -> Result<bool> {
        Ok(
            tokio::time::timeout(timeout.max(IDLE_LOOK), self.bell.notified())
                .await
                .is_ok(),
        )
    }
}
