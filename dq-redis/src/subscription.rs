//! Pub/sub on the shards' channels (`wake` for the movers, `ready` for the consumers on a
//! cluster), each channel subscribed on the master that owns its shard.
//!
//! A cluster delivers PUBLISH to every node, so any node would do, but a message published on
//! another node travels over the cluster bus, and the bus can hold it back: on Redis 7.0.15,
//! messages published 20 ms apart on one master reached a subscriber of another master up to
//! 24 ms late (3 % of them; none when 50 ms apart, none on the publishing node), the signature
//! of Nagle's algorithm meeting delayed ACKs on the bus links. With 16 shards on 3 masters that
//! was most of a 43 ms wake-up p99. Subscribed on the owner, a message goes straight from the
//! node that published it to the subscriber.
//!
//! Every connection is pinged beside its messages (a silent connection fails the subscription,
//! and its user subscribes again), and on a cluster the slot map is read again every few
//! seconds: when a shard moved (a reshard, a failover), the subscription is made again on the
//! new owners and its user is told so ([`Delivery::Resubscribed`]), since a message sent while
//! it moved may have reached nobody. Until then nothing is lost either: the old owner still
//! receives the new owner's messages over the bus, only later.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::connection::{Conn, Server, RESPONSE_TIMEOUT};
use dq_core::{Error, Result};

/// How often each connection is pinged (and how long a pong may take), and how often a
/// cluster's slot map is read again.
pub(crate) const PING_EVERY: Duration = Duration::from_secs(5);

/// What a subscription hands its user.
#[derive(Debug)]
pub(crate) enum Delivery {
    /// A message on the channel of `shard`.
    Message { shard: u16, payload: String },
    /// The subscription was made again (a shard moved): messages may have been missed.
    Resubscribed,
}

enum Signal {
    Message(u16, String),
    Failed(Error),
    Moved,
}

/// One subscription to a set of shard channels, spread over the nodes that own them.
pub(crate) struct ShardSubscription {
    op: &'static str,
    server: Server,
    conn: Conn,
    /// Channel name -> shard.
    channels: Arc<HashMap<String, u16>>,
    rx: mpsc::Receiver<Signal>,
    /// One task per node connection, and the slot watcher; aborted on drop.
    tasks: JoinSet<()>,
}

impl std::fmt::Debug for ShardSubscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardSubscription")
            .field("op", &self.op)
            .field("channels", &self.channels.len())
            .field("connections", &self.tasks.len())
            .finish_non_exhaustive()
    }
}

impl ShardSubscription {
    /// Subscribes to `channels` (name -> shard); returns once every channel is subscribed, so
    /// that a message published after this returns is delivered.
    pub(crate) async fn open(
        op: &'static str,
        server: &Server,
        conn: &Conn,
        channels: HashMap<String, u16>,
    ) -> Result<Self> {
        let (_, rx) = mpsc::channel(1);
        let mut sub = ShardSubscription {
            op,
            server: server.clone(),
            conn: conn.clone(),
            channels: Arc::new(channels),
            rx,
            tasks: JoinSet::new(),
        };
        sub.subscribe().await?;
        Ok(sub)
    }

    /// The next message, or word that the subscription was made again. An error means the
    /// subscription is broken: open a new one.
    pub(crate) async fn next(&mut self) -> Result<Delivery> {
        match self.rx.recv().await {
            Some(Signal::Message(shard, payload)) => Ok(Delivery::Message { shard, payload }),
            Some(Signal::Failed(e)) => Err(e),
            Some(Signal::Moved) => {
                tracing::debug!(
                    op = self.op,
                    "a shard moved to another master: subscribing on the new owners"
                );
                self.subscribe().await?;
                Ok(Delivery::Resubscribed)
            }
            None => Err(closed(self.op)),
        }
    }

    async fn subscribe(&mut self) -> Result<()> {
        self.tasks.abort_all();
        let op = self.op;
        let bounded = |_| Error::Timeout {
            op,
            after: RESPONSE_TIMEOUT,
        };
        let names: Vec<String> = self.channels.keys().cloned().collect();
        let plan = tokio::time::timeout(
            RESPONSE_TIMEOUT,
            self.server.subscription_plan(&self.conn, &names),
        )
        .await
        .map_err(bounded)??;
        let (tx, rx) = mpsc::channel(1024);
        let mut tasks = JoinSet::new();
        let mut layout = Layout::new();
        for (node, client, list) in plan {
            let pubsub = tokio::time::timeout(RESPONSE_TIMEOUT, client.get_async_pubsub())
                .await
                .map_err(bounded)?
                .map_err(crate::error::redis(op))?;
            let (mut sink, stream) = pubsub.split();
            tokio::time::timeout(RESPONSE_TIMEOUT, sink.subscribe(&list))
                .await
                .map_err(bounded)?
                .map_err(crate::error::redis(op))?;
            tasks.spawn(forward(op, sink, stream, self.channels.clone(), tx.clone()));
            for channel in list {
                layout.insert(channel, node.clone());
            }
        }
        if self.server.is_cluster() {
            tasks.spawn(watch_slots(
                self.server.clone(),
                self.conn.clone(),
                names,
                layout,
                tx,
            ));
        }
        self.tasks = tasks;
        self.rx = rx;
        Ok(())
    }
}

/// Which node each channel is subscribed on.
type Layout = HashMap<String, String>;

/// Hands one connection's messages over, and pings it beside them (not between them: a pong
/// queued behind messages would delay them).
async fn forward(
    op: &'static str,
    mut sink: redis::aio::PubSubSink,
    mut stream: redis::aio::PubSubStream,
    channels: Arc<HashMap<String, u16>>,
    tx: mpsc::Sender<Signal>,
) {
    let pinger = async {
        loop {
            tokio::time::sleep(PING_EVERY).await;
            // In subscribed mode Redis answers PING with ["pong", ""], not +PONG.
            match tokio::time::timeout(PING_EVERY, sink.ping::<redis::Value>()).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => return crate::error::redis(op)(e),
                Err(_) => return closed(op),
            }
        }
    };
    tokio::pin!(pinger);
    loop {
        let signal = tokio::select! {
            msg = stream.next() => match msg {
                Some(msg) => {
                    let (Some(&shard), Ok(payload)) = (
                        channels.get(msg.get_channel_name()),
                        msg.get_payload::<String>(),
                    ) else {
                        continue;
                    };
                    Signal::Message(shard, payload)
                }
                None => Signal::Failed(closed(op)),
            },
            failed = &mut pinger => Signal::Failed(failed),
        };
        let end = matches!(signal, Signal::Failed(_));
        if tx.send(signal).await.is_err() || end {
            return;
        }
    }
}

/// Reads the cluster's slot map every [`PING_EVERY`]; says so once a channel's owner changed.
async fn watch_slots(
    server: Server,
    conn: Conn,
    names: Vec<String>,
    layout: Layout,
    tx: mpsc::Sender<Signal>,
) {
    loop {
        tokio::time::sleep(PING_EVERY).await;
        let Ok(Ok(plan)) =
            tokio::time::timeout(RESPONSE_TIMEOUT, server.subscription_plan(&conn, &names)).await
        else {
            continue; // the connections' pings judge the cluster's health
        };
        let moved = plan
            .iter()
            .any(|(node, _, list)| list.iter().any(|channel| layout.get(channel) != Some(node)));
        if moved {
            let _ = tx.send(Signal::Moved).await;
            return;
        }
    }
}

fn closed(op: &'static str) -> Error {
    crate::error::from_redis(
        op,
        redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::ConnectionAborted,
            "the pub/sub connection closed or stopped answering",
        )),
    )
}
