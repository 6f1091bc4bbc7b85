//! The wait for the `wake` announcements (consumers wait for ready jobs on the hub's bells).

use async_trait::async_trait;

use crate::subscription::{Delivery, ShardSubscription};
use dq_core::store::{Wake, WakeListener};
use dq_core::Result;
use dq_core::Topic;

/// The prefix of a `wake` message announcing that a topic was resumed (due times are numbers).
pub(super) const RESUMED: &str = "resumed ";

/// The prefix of a `wake` message announcing that a cancel asked a running job's worker to stop
/// it (`cancel <topic:id>`, published by cancel.lua).
const CANCEL: &str = "cancel ";

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
