//! Blocking waits on their own connections: for ready jobs of one topic in one shard (one
//! server; a cluster's consumers wait on the hub's bells), and for the `wake` announcements.

use std::time::Duration;

use async_trait::async_trait;

use crate::subscription::{Delivery, ShardSubscription};
use dq_core::store::{ReadyWaiter, Wake, WakeListener};
use dq_core::Topic;
use dq_core::{Error, Result};

/// The prefix of a `wake` message announcing that a topic was resumed (due times are numbers).
pub(super) const RESUMED: &str = "resumed ";

/// The prefix of a `wake` message announcing that a cancel asked a running job's worker to stop
/// it (`cancel <topic:id>`, published by cancel.lua).
const CANCEL: &str = "cancel ";

/// How much longer than its own timeout a blocking wait may go without a reply.
const WAIT_MARGIN: Duration = Duration::from_secs(2);

/// `BLMOVE ready ready LEFT LEFT` on a connection of its own, opened on first use and again
/// after an error (one server only: consumers on a cluster wait on the `hub`'s bells).
pub(super) struct RedisReadyWaiter {
    client: redis::Client,
    key: String,
    conn: Option<redis::aio::MultiplexedConnection>,
}

impl RedisReadyWaiter {
    /// A waiter on the ready list `key`; it connects on first use.
    pub(super) fn new(client: redis::Client, key: String) -> RedisReadyWaiter {
        RedisReadyWaiter {
            client,
            key,
            conn: None,
        }
    }
}

impl std::fmt::Debug for RedisReadyWaiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisReadyWaiter")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl ReadyWaiter for RedisReadyWaiter {
    async fn wait(&mut self, timeout: Duration) -> Result<bool> {
        let conn = match &mut self.conn {
            Some(conn) => conn,
            None => {
                // No response timeout: the command blocks on purpose.
                let config = redis::AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(Duration::from_secs(5)))
                    .set_response_timeout(None);
                let conn = self
                    .client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await
                    .map_err(crate::error::redis("wait for ready jobs"))?;
                self.conn.insert(conn)
            }
        };
        // BLMOVE's timeout is checked on Redis' hz timer; pushes wake the command at once. The
        // reply must come by the end of the wait and a margin: a connection that stays silent
        // past that is dropped (its peer is gone or unreachable) and the next wait opens a new
        // one, instead of waiting for the kernel to give up on it.
        let mut cmd = redis::cmd("BLMOVE");
        cmd.arg(&self.key)
            .arg(&self.key)
            .arg("LEFT")
            .arg("LEFT")
            .arg(timeout.as_secs_f64().max(0.01));
        let blmove = cmd.query_async::<Option<Vec<u8>>>(conn);
        let reply = match tokio::time::timeout(timeout + WAIT_MARGIN, blmove).await {
            Ok(reply) => reply.map_err(crate::error::redis("wait for ready jobs")),
            Err(_) => Err(Error::Timeout {
                op: "wait for ready jobs (no reply from Redis: the connection is replaced)",
                after: timeout + WAIT_MARGIN,
            }),
        };
        if reply.is_err() {
            self.conn = None;
        }
        reply.map(|found| found.is_some())
    }
}

#[derive(Debug)]
pub(super) struct RedisWakeListener {
    subscription: ShardSubscription,
    shards: u16,
    /// Wake-ups still to hand out (every shard's, after the subscription moved).
    pending: Vec<Wake>,
}

impl RedisWakeListener {
    /// Announcements from `subscription`, to the `wake` channels of `shards` shards.
    pub(super) fn new(subscription: ShardSubscription, shards: u16) -> RedisWakeListener {
        RedisWakeListener {
            subscription,
            shards,
            pending: Vec::new(),
        }
    }
}

#[async_trait]
impl WakeListener for RedisWakeListener {
    async fn next(&mut self) -> Result<Wake> {
        loop {
            if let Some(wake) = self.pending.pop() {
                return Ok(wake);
            }
            let (shard, payload) = match self.subscription.next().await? {
                Delivery::Message { shard, payload } => (shard, payload),
                Delivery::Resubscribed => {
                    // An announcement sent while the subscription moved reached nobody: every
                    // mover looks now.
                    self.pending = (0..self.shards)
                        .map(|shard| Wake::Due { shard, due_us: 0 })
                        .collect();
                    continue;
                }
            };
            if let Ok(due_us) = payload.parse::<u64>() {
                return Ok(Wake::Due { shard, due_us });
            }
            if let Some(topic) = payload.strip_prefix(RESUMED) {
                if let Ok(topic) = Topic::new(topic) {
                    return Ok(Wake::Resumed(topic));
                }
            }
            if let Some(member) = payload.strip_prefix(CANCEL) {
                if let Some((topic, id)) = super::reply::parse_member(member) {
                    return Ok(Wake::Cancel { topic, id });
                }
            }
        }
    }
}
