//! The feed of a topic's job events: blocking `XREAD`s on connections of their own, never on
//! the shared one. On one server, one reader reads every shard's stream of the topic in one
//! `XREAD BLOCK`; on a cluster, one reader per shard reads from the master that owns it (found
//! again after a failure: a failover, a shard moved). Each reader hands what it read to the
//! feed through a small channel (a slow consumer holds the readers back, and nothing is read
//! twice); after a failure it drops its connection, says so in the log, waits with backoff and
//! goes on from the last entry it read.

use std::time::Duration;

use async_trait::async_trait;
use redis::Value;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::events::{entry_position, read_reply, OP};
use crate::connection::{Conn, Server, CONNECT_TIMEOUT, RESPONSE_TIMEOUT};
use dq_core::events::{EventCursor, EventEntry, EventPosition};
use dq_core::store::EventFeed;
use dq_core::{Error, ErrorKind, Result, Topic};

/// Most entries read from one stream at once.
const READ_COUNT: usize = 1000;

/// How long one `XREAD` blocks when there is nothing to read (events wake it at once).
const BLOCK: Duration = Duration::from_secs(5);

/// How much longer than [`BLOCK`] a read may go without a reply before its connection is
/// taken for dead and replaced.
const WAIT_MARGIN: Duration = Duration::from_secs(2);

/// Longest wait between two attempts of a failing reader.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

type Batch = Result<Vec<EventEntry>>;

/// A read of one topic's events, fed by its readers (aborted when it is dropped).
pub(super) struct RedisEventFeed {
    start: EventCursor,
    rx: mpsc::Receiver<Batch>,
    readers: JoinSet<()>,
    /// Every reader ended (they do not, short of a bug): said once, then the feed waits.
    ended: bool,
}

impl std::fmt::Debug for RedisEventFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisEventFeed")
            .field("start", &self.start)
            .field("readers", &self.readers.len())
            .finish_non_exhaustive()
    }
}

impl RedisEventFeed {
    /// Starts the readers of `topic`'s streams `keys` (one per shard, shard 0 first) after
    /// `start`, which holds a position per shard.
    pub(super) fn open(
        server: Server,
        conn: Conn,
        topic: Topic,
        keys: Vec<String>,
        start: EventCursor,
    ) -> RedisEventFeed {
        let (tx, rx) = mpsc::channel(4);
        let shards: Vec<(u16, String, EventPosition)> = (0u16..)
            .zip(keys)
            .map(|(shard, key)| (shard, key, start.position(shard)))
            .collect();
        // One server holds every shard: one read over all of them. A cluster's shards live on
        // several masters: a read each.
        let groups = if server.is_cluster() {
            shards.into_iter().map(|s| vec![s]).collect()
        } else {
            vec![shards]
        };
        let mut readers = JoinSet::new();
        for shards in groups {
            let reader = Reader {
                server: server.clone(),
                conn: conn.clone(),
                topic: topic.clone(),
                shards,
                tx: tx.clone(),
                resuming: true,
                recheck: true,
            };
            readers.spawn(reader.run());
        }
        RedisEventFeed {
            start,
            rx,
            readers,
            ended: false,
        }
    }
}

#[async_trait]
impl EventFeed for RedisEventFeed {
    fn start(&self) -> &EventCursor {
        &self.start
    }

    async fn next(&mut self) -> Result<Vec<EventEntry>> {
        if !self.ended {
            if let Some(batch) = self.rx.recv().await {
                return batch;
            }
            self.ended = true;
            return Err(Error::Internal {
                what: "the read of job events",
                reason: "its readers stopped".into(),
            });
        }
        std::future::pending().await
    }
}

/// One reader: some shards' streams of a topic, read together from one server.
struct Reader {
    server: Server,
    conn: Conn,
    topic: Topic,
    /// Each shard read, its stream, and the last event read there.
    shards: Vec<(u16, String, EventPosition)>,
    tx: mpsc::Sender<Batch>,
    /// Until its first read: the cursor it starts from may stand inside an entry of several
    /// events (a consumer stopped halfway through it), so that entry is read again and the
    /// events up to the cursor's are left out. Later reads go on after whole entries.
    resuming: bool,
    /// Whether the next read first checks that each position still stands on the entry it
    /// read ([`Reader::check_positions`]): on each new connection, and after a read that
    /// found nothing.
    recheck: bool,
}

impl Reader {
    /// Reads until the feed is dropped, going on after failures.
    async fn run(mut self) {
        let mut conn = None;
        let mut failures = 0u32;
        while !self.tx.is_closed() {
            let read = self.read(&mut conn).await;
            match read {
                Ok(mut entries) => {
                    if std::mem::take(&mut self.resuming) {
                        entries.retain(|e| !self.already_read(e));
                    }
                    if failures > 0 {
                        tracing::info!(topic = %self.topic, "the read of job events is back; it goes on from the last event read");
                    }
                    failures = 0;
                    if entries.is_empty() {
                        self.recheck = true;
                        continue;
                    }
                    for e in &entries {
                        if let Some(s) = self.shards.iter_mut().find(|s| s.0 == e.shard) {
                            s.2 = e.position;
                        }
                    }
                    if self.tx.send(Ok(entries)).await.is_err() {
                        return;
                    }
                }
                Err(e) => {
                    conn = None;
                    failures = failures.saturating_add(1);
                    let delay = backoff(failures);
                    // A shard moving between masters, or a connection lost: found again.
                    let passing = e.is_connection()
                        || (self.server.is_cluster() && e.kind() == ErrorKind::Moved);
                    tracing::warn!(topic = %self.topic, error = %e, retry_in = ?delay, "the read of job events failed; it reconnects and goes on from the last event read");
                    if !passing && self.tx.send(Err(e)).await.is_err() {
                        return;
                    }
                    tokio::time::sleep(delay).await;
                }
            }
        }
    }

    /// One `XREAD BLOCK` of every stream of this reader after its positions, on its own
    /// connection (opened first when there is none).
    async fn read(
        &mut self,
        conn: &mut Option<redis::aio::MultiplexedConnection>,
    ) -> Result<Vec<EventEntry>> {
        let c = match conn {
            Some(c) => c,
            None => {
                let fresh = self.connect().await?;
                self.recheck = true;
                conn.insert(fresh)
            }
        };
        if self.recheck {
            self.check_positions(c).await?;
            self.recheck = false;
        }
        let mut cmd = redis::cmd("XREAD");
        cmd.arg("COUNT")
            .arg(READ_COUNT)
            .arg("BLOCK")
            .arg(u64::try_from(BLOCK.as_millis()).unwrap_or(5000))
            .arg("STREAMS");
        for (_, key, _) in &self.shards {
            cmd.arg(key);
        }
        for (_, _, at) in &self.shards {
            if self.resuming {
                cmd.arg(before(at));
            } else {
                cmd.arg(at.stream_id());
            }
        }
        // The reply must come by the end of the block and a margin: a connection silent past
        // that is dropped (its peer is gone) and the next read opens a new one.
        let reply = tokio::time::timeout(BLOCK + WAIT_MARGIN, cmd.query_async::<Value>(c))
            .await
            .map_err(|_| Error::Timeout {
                op: "read job events (no reply from Redis: the connection is replaced)",
                after: BLOCK + WAIT_MARGIN,
            })?
            .map_err(crate::error::redis(OP))?;
        let keys: Vec<(u16, String)> = self
            .shards
            .iter()
            .map(|(shard, key, _)| (*shard, key.clone()))
            .collect();
        read_reply(&self.topic, &keys, &reply)
    }

    /// Checks that each shard's position still stands on the entry it read (same id, same
    /// time). When not, and the stream was not merely trimmed past it, Redis went back to an
    /// older state (a restart from an older snapshot, a failover to a replica that was behind):
    /// the position moves back to the last entry written no later than the one it read, so
    /// that the events written since, whose numbers the reader has seen, are read; the stream
    /// tells the reader ([`EventItem::RolledBack`](dq_core::events::EventItem::RolledBack)).
    /// A position without a time (saved so) is not checked.
    async fn check_positions(&mut self, c: &mut redis::aio::MultiplexedConnection) -> Result<()> {
        for i in 0..self.shards.len() {
            let (shard, key, at) = self.shards[i].clone();
            if at.n == 0 || at.t_us == 0 {
                continue;
            }
            // XREVRANGE and XREAD only: the commands README's least-rights ACL allows.
            let id = at.stream_id();
            let here = self.range(c, &key, &id, &id, 1).await?;
            if here.first().is_some_and(|e| e.t_us == at.t_us) {
                continue;
            }
            let first = self.first_entry(c, shard, &key).await?;
            if first.is_some_and(|e| (e.ms, e.seq) > (at.ms, at.seq)) {
                continue; // trimmed past it: the numbers tell the reader how many it missed
            }
            let mut end = "+".to_owned();
            let back = 'found: loop {
                let page = self.range(c, &key, &end, "-", 100).await?;
                let Some(oldest) = page.last() else {
                    break EventPosition::default();
                };
                if let Some(kept) = page.iter().find(|e| e.t_us <= at.t_us) {
                    break 'found *kept;
                }
                end = format!("({}", oldest.stream_id());
            };
            if first.is_none() {
                // No stream: the topic's events were turned off (the numbers go on from where
                // they were when turned on again), or Redis went back to before the stream;
                // read from its start, and the numbers tell the reader which.
                tracing::debug!(topic = %self.topic, shard, "the stream of job events is gone; the reader reads a new one from its start");
            } else {
                tracing::warn!(
                    topic = %self.topic, shard, read_up_to = at.n, kept_up_to = back.n,
                    "Redis lost job events this reader had read (it restarted from an older snapshot, or a replica that was behind took over): the reader is told, and reads on from the last event kept, so that it misses none of those written since"
                );
            }
            self.shards[i].2 = back;
        }
        Ok(())
    }

    /// The entries `XREVRANGE` of `key` from `from` down to `to` returns, at most `count`,
    /// newest first: the position of each entry's last event, with its time.
    async fn range(
        &self,
        c: &mut redis::aio::MultiplexedConnection,
        key: &str,
        from: &str,
        to: &str,
        count: usize,
    ) -> Result<Vec<EventPosition>> {
        let mut cmd = redis::cmd("XREVRANGE");
        cmd.arg(key).arg(from).arg(to).arg("COUNT").arg(count);
        let reply = Self::checked(c, &cmd).await?;
        let Value::Array(entries) = &reply else {
            return Err(super::reply::malformed_reply("XREVRANGE", &reply));
        };
        entries.iter().map(entry_position).collect()
    }

    /// The position of the first entry of stream `key` (shard `shard`'s), `None` when it has
    /// none (an `XREAD` without `BLOCK` after `0-0`).
    async fn first_entry(
        &self,
        c: &mut redis::aio::MultiplexedConnection,
        shard: u16,
        key: &str,
    ) -> Result<Option<EventPosition>> {
        let mut cmd = redis::cmd("XREAD");
        cmd.arg("COUNT").arg(1).arg("STREAMS").arg(key).arg("0-0");
        let reply = Self::checked(c, &cmd).await?;
        let entries = read_reply(&self.topic, &[(shard, key.to_owned())], &reply)?;
        Ok(entries.first().map(|e| e.position))
    }

    /// The reply to one command of the check, bounded in time.
    async fn checked(c: &mut redis::aio::MultiplexedConnection, cmd: &redis::Cmd) -> Result<Value> {
        tokio::time::timeout(RESPONSE_TIMEOUT, cmd.query_async::<Value>(c))
            .await
            .map_err(|_| Error::Timeout {
                op: "check where a reader of job events stands",
                after: RESPONSE_TIMEOUT,
            })?
            .map_err(crate::error::redis(OP))
    }

    /// Whether `e` is one of the events of the cursor's entry up to the cursor's event.
    fn already_read(&self, e: &EventEntry) -> bool {
        self.shards.iter().any(|(shard, _, at)| {
            *shard == e.shard
                && (e.position.ms, e.position.seq) == (at.ms, at.seq)
                && e.position.n <= at.n
        })
    }

    /// A connection of its own to the server (on a cluster, the master) holding the streams.
    async fn connect(&self) -> Result<redis::aio::MultiplexedConnection> {
        let keys: Vec<String> = self.shards.iter().map(|(_, key, _)| key.clone()).collect();
        let plan = tokio::time::timeout(
            RESPONSE_TIMEOUT,
            self.server.subscription_plan(&self.conn, &keys),
        )
        .await
        .map_err(|_| Error::Timeout {
            op: "find the master of a topic's job events",
            after: RESPONSE_TIMEOUT,
        })??;
        let Some((_, client, _)) = plan.into_iter().next() else {
            return Err(Error::Malformed {
                location: "CLUSTER SLOTS".into(),
                reason: "no master serves the topic's job events".into(),
            });
        };
        // No response timeout on the connection: the read blocks on purpose (bounded above).
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(None);
        client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(crate::error::redis(OP))
    }
}

/// The stream id just before `at`'s entry, so that an `XREAD` after it reads that entry again
/// (`0-0`, the start, stays the start).
fn before(at: &EventPosition) -> String {
    match (at.ms, at.seq) {
        (0, 0) => "0-0".to_owned(),
        (ms, 0) => format!("{}-{}", ms - 1, u64::MAX),
        (ms, seq) => format!("{ms}-{}", seq - 1),
    }
}

/// 100 ms after the first failure, doubling up to [`MAX_BACKOFF`].
fn backoff(failures: u32) -> Duration {
    let doubled = 2u32.saturating_pow(failures.saturating_sub(1));
    Duration::from_millis(100)
        .saturating_mul(doubled)
        .min(MAX_BACKOFF)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_reader_waits_longer_each_time_up_to_the_bound() {
        assert_eq!(backoff(1), Duration::from_millis(100));
        assert_eq!(backoff(2), Duration::from_millis(200));
        assert_eq!(backoff(6), Duration::from_millis(3200));
        assert_eq!(backoff(7), MAX_BACKOFF);
        assert_eq!(backoff(u32::MAX), MAX_BACKOFF);
    }
}
