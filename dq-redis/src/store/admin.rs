//! What operators look at and do (counts, listings, pauses, dead letters), and the registry of
//! live workers.

use std::time::SystemTime;

use async_trait::async_trait;

use redis::{FromRedisValue, Script, Value};

use super::reply::{decode_jobs, read, Count, Reply, ShardStats, ShardThroughput, Unsigned};
use super::waiters::RESUMED;
use super::RedisStore;
use crate::keys::ShardKeys;
use dq_core::store::policy::{batch_limit, WORKER_EXPIRY_MS};
use dq_core::store::{Admin, DeadLetters, Registry, Sharded};
use dq_core::{
    from_us, to_us, Cursor, Expanded, JobState, Page, Throughput, TopicCounts, TopicStats,
    WorkerInfo,
};
use dq_core::{Error, Result};
use dq_core::{JobId, Topic};

impl RedisStore {
    /// Adds (SADD) or removes (SREM) a topic in every shard's paused set.
    async fn set_paused(&self, op: &'static str, command: &str, topic: &Topic) -> Result<()> {
        for k in &self.shards {
            self.simple(op, redis::cmd(command).arg(k.paused()).arg(topic.as_str()))
                .await?;
        }
        Ok(())
    }

    /// Runs a script that reads a topic (counts, stats, throughput) on every shard in turn:
    /// with the shard's `keys`, then the topic's name and [`RedisStore::far`] (stats reads
    /// the next due time of the topic's far jobs). The replies, in shard order.
    async fn read_topic<T: FromRedisValue>(
        &self,
        op: &'static str,
        script: &Script,
        topic: &Topic,
        keys: impl Fn(&ShardKeys) -> Vec<String>,
    ) -> Result<Vec<T>> {
        let mut replies = Vec::with_capacity(self.shards.len());
        for k in &self.shards {
            let mut inv = script.prepare_invoke();
            for key in keys(k) {
                inv.key(key);
            }
            inv.arg(topic.as_str()).arg(self.far());
            replies.push(self.call(op, &mut inv).await?);
        }
        Ok(replies)
    }
}

#[async_trait]
impl Admin for RedisStore {
    async fn counts(&self, topic: &Topic) -> Result<TopicCounts> {
        let shards: Vec<Reply<TopicCounts>> = self
            .read_topic("counts", &self.scripts().counts, topic, |k| {
                let mut keys = vec![
                    k.counts(),
                    k.ready(topic),
                    k.dead(topic),
                    k.done(topic),
                    k.ranked(topic),
                ];
                keys.extend(self.named_keys(k, [topic]));
                keys
            })
            .await?;
        let mut total = TopicCounts::default();
        for Reply(shard) in shards {
            total.add(&shard);
        }
        Ok(total)
    }

    async fn stats(&self, topic: &Topic) -> Result<TopicStats> {
        let shards: Vec<ShardStats> = self
            .read_topic("stats", &self.scripts().stats, topic, |k| {
                let mut keys = vec![
                    k.counts(),
                    k.ready(topic),
                    k.dead(topic),
                    k.jobs(),
                    k.delayed(),
                    k.paused(),
                    k.ready_gen(topic),
                    k.done(topic),
                    k.ranked(topic),
                ];
                keys.extend(self.named_keys(k, [topic]));
                keys
            })
            .await?;
        let earliest = |a: Option<SystemTime>, us: Option<u64>| match (a, us.map(from_us)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let mut total = TopicStats::default();
        for shard in shards {
            total.counts.add(&shard.counts);
            total.oldest_ready_due = earliest(total.oldest_ready_due, shard.oldest_ready_due_us);
            total.next_due = earliest(total.next_due, shard.next_due_us);
            total.paused |= shard.paused;
            total.group_concurrency = total.group_concurrency.or(shard.group_concurrency);
            total.busiest_groups.extend(shard.busiest_groups);
        }
        total.busiest_groups.sort_by(|a, b| {
            b.waiting
                .cmp(&a.waiting)
                .then_with(|| b.group.cmp(&a.group))
        });
        total.busiest_groups.truncate(dq_core::BUSIEST_GROUPS);
        Ok(total)
    }

    async fn throughput(&self, topic: &Topic) -> Result<Throughput> {
        let shards: Vec<ShardThroughput> = self
            .read_topic("throughput", &self.scripts().throughput, topic, |k| {
                vec![k.counts()]
            })
            .await?;
        let mut now_minute = 0;
        let mut tallies = Vec::new();
        for shard in shards {
            now_minute = now_minute.max(shard.now_minute);
            tallies.extend(shard.tallies);
        }
        Ok(Throughput::from_tallies(now_minute, tallies))
    }

    async fn list(&self, topic: &Topic, state: JobState, at: Cursor, limit: usize) -> Result<Page> {
        if state == JobState::Done {
            return self.done_jobs(topic, at, limit).await;
        }
        let (mut shard, mut pos) = shard_and_position(at);
        let limit = batch_limit(limit);
        let mut page = Page::default();
        while shard < self.shards() && page.jobs.len() < limit {
            let k = self.keys(shard);
            let (kind, key) = match state {
                JobState::Ready => ("list", k.ready(topic)),
                JobState::Delayed => ("delayed", k.delayed()),
                JobState::Running => ("zset", k.inflight()),
                _ => {
                    return Err(Error::Config {
                        key: "state",
                        value: state.as_str().to_owned(),
                        reason:
                            "list delayed, ready or running jobs here; dead ones with dead_jobs"
                                .into(),
                    })
                }
            };
            let mut inv = self.scripts().list.prepare_invoke();
            inv.key(k.jobs()).key(key);
            if state == JobState::Ready {
                inv.key(k.ready_gen(topic)).key(k.ranked(topic));
                inv.key(self.named_keys(k, [topic]));
            } else if state == JobState::Delayed {
                // (on a cluster, `far` among them: the far jobs are listed after the others)
                inv.key(self.named_keys(k, [topic]));
            }
            inv.arg(kind)
                .arg(topic.as_str())
                .arg(pos)
                .arg(limit - page.jobs.len())
                .arg(self.far());
            let reply: Vec<Value> = self.call("list", &mut inv).await?;
            let next = read::<Unsigned>("list", reply.first().cloned().unwrap_or(Value::Nil))?.0;
            page.jobs.extend(decode_jobs(
                reply.get(1..).unwrap_or_default(),
                &k.jobs(),
                state,
                state == JobState::Running,
            ));
            if let Some(next) = next {
                pos = next;
                if page.jobs.len() >= limit {
                    break;
                }
            } else {
                shard += 1;
                pos = 0;
            }
        }
        page.next = (shard < self.shards()).then(|| cursor(shard, pos));
        Ok(page)
    }

    async fn pause(&self, topic: &Topic) -> Result<()> {
        self.set_paused("pause", "SADD", topic).await
    }

    async fn resume(&self, topic: &Topic) -> Result<()> {
        self.set_paused("resume", "SREM", topic).await?;
        // Workers waiting out the pause look again now rather than at their next check. A
        // cluster delivers the message to every node, so one channel reaches every process.
        self.simple(
            "resume",
            redis::cmd("PUBLISH")
                .arg(self.keys(0).wake())
                .arg(format!("{RESUMED}{topic}")),
        )
        .await
    }

    async fn topics(&self) -> Result<Vec<Topic>> {
        let mut all = std::collections::BTreeSet::new();
        for k in &self.shards {
            // The topics pushed to, and those paused (perhaps before their first push).
            for key in [k.topics(), k.paused()] {
                let names: Vec<String> = self
                    .query("topics", redis::cmd("SMEMBERS").arg(key))
                    .await?;
                all.extend(names.into_iter().filter_map(|n| Topic::new(n).ok()));
            }
        }
        Ok(all.into_iter().collect())
    }

    async fn dead_jobs(&self, topic: &Topic, at: Cursor, limit: usize) -> Result<Page> {
        // Shard by shard like `list`; the position is the rank within the shard's dead set
        // (a rank costs O(log n) in a sorted set).
        let (mut shard, mut pos) = shard_and_position(at);
        let limit = batch_limit(limit);
        let mut page = Page::default();
        while shard < self.shards() && page.jobs.len() < limit {
            let k = self.keys(shard);
            let want = limit - page.jobs.len();
            let mut inv = self.scripts().dead_list.prepare_invoke();
            inv.key(k.jobs()).key(k.dead(topic)).arg(pos).arg(want);
            let reply: Vec<Value> = self.call("dead_list", &mut inv).await?;
            let entries = reply.len() / 3;
            page.jobs
                .extend(decode_jobs(&reply, &k.jobs(), JobState::Dead, true));
            if entries >= want {
                pos += u64::try_from(entries).unwrap_or(u64::MAX);
            } else {
                shard += 1;
                pos = 0;
            }
        }
        page.next = (shard < self.shards()).then(|| cursor(shard, pos));
        Ok(page)
    }

    async fn requeue_dead(&self, topic: &Topic, which: DeadLetters<'_>, max: u32) -> Result<usize> {
        // At most `limit` (<= 1,000) jobs per call, so each shard takes one script call.
        let (ids, limit, died_before_us) = which.parts();
        let mut by_shard = self.ids_by_shard(topic, ids.iter().take(limit));
        if let DeadLetters::DiedBy { .. } = which {
            by_shard.extend((0..self.shards()).map(|s| (s, Vec::new())));
        }
        let mut total = 0;
        for (shard, shard_ids) in by_shard {
            let k = self.keys(shard);
            let mut inv = self.scripts().requeue_dead.prepare_invoke();
            inv.key(k.jobs())
                .key(k.dead(topic))
                .key(k.ready(topic))
                .key(k.ready_gen(topic))
                .key(k.counts())
                .key(k.ranked(topic));
            inv.key(self.named_keys(k, [topic]));
            inv.arg(k.prefix())
                .arg(topic.as_str())
                .arg(max)
                .arg(limit - total)
                .arg(died_before_us);
            for id in shard_ids {
                inv.arg(id.as_str());
            }
            total += self.call::<Count>("requeue_dead", &mut inv).await?.0;
            if total >= limit {
                break;
            }
        }
        Ok(total)
    }

    async fn purge_dead(&self, topic: &Topic, before: SystemTime, limit: usize) -> Result<usize> {
        let mut total = 0;
        for k in &self.shards {
            let mut inv = self.scripts().purge_dead.prepare_invoke();
            inv.key(k.jobs())
                .key(k.dead(topic))
                .key(k.unique_for())
                .arg(to_us(before))
                .arg(batch_limit(limit));
            total += self.call::<Count>("purge_dead", &mut inv).await?.0;
        }
        Ok(total)
    }

    async fn delete_dead(&self, topic: &Topic, ids: &[JobId]) -> Result<usize> {
        // At most a batch (<= 1,000) per call, so each shard takes one script call.
        let by_shard = self.ids_by_shard(topic, ids.iter().take(batch_limit(ids.len())));
        let mut total = 0;
        for (shard, shard_ids) in by_shard {
            let k = self.keys(shard);
            let mut inv = self.scripts().delete_dead.prepare_invoke();
            inv.key(k.jobs())
                .key(k.dead(topic))
                .key(k.unique_for())
                .arg(topic.as_str());
            for id in shard_ids {
                inv.arg(id.as_str());
            }
            total += self.call::<Count>("delete_dead", &mut inv).await?.0;
        }
        Ok(total)
    }

    async fn expand(&self, shard: u16) -> Result<Expanded> {
        let k = self.keys(shard);
        let mut inv = self.scripts().expand.prepare_invoke();
        inv.key(k.jobs()).key(k.delayed()).arg(k.prefix());
        // On a cluster, the keys it names itself (lib.lua's `need`): `far`, `farn` and
        // `counts` here, the parts and their jobs' index hashes by the calls that stop.
        if self.server.is_cluster() {
            inv.key(k.far()).key(k.farn()).key(k.counts());
        }
        let (jobs, parts_left) = self.call::<(u64, u64)>("expand", &mut inv).await?;
        Ok(Expanded::new(jobs, parts_left))
    }
}

#[async_trait]
impl Registry for RedisStore {
    async fn register_worker(&self, worker: &WorkerInfo) -> Result<()> {
        // Stamped with Redis' clock, as `workers` judges it: a host whose clock is a minute
        // behind must not look dead to the others.
        let mut worker = worker.clone();
        worker.last_seen_ms = self.time_us().await? / 1000;
        let json = serde_json::to_string(&worker).unwrap_or_default();
        self.simple(
            "register worker",
            redis::cmd("HSET")
                .arg(self.keys(0).workers())
                .arg(&worker.id)
                .arg(json),
        )
        .await
    }

    async fn unregister_worker(&self, id: &str) -> Result<()> {
        self.simple(
            "unregister worker",
            redis::cmd("HDEL").arg(self.keys(0).workers()).arg(id),
        )
        .await
    }

    async fn workers(&self) -> Result<Vec<WorkerInfo>> {
        let all: Vec<(String, String)> = self
            .query("workers", redis::cmd("HGETALL").arg(self.keys(0).workers()))
            .await?;
        let now_ms = self.time_us().await? / 1000;
        let mut live = Vec::new();
        for (id, json) in all {
            match serde_json::from_str::<WorkerInfo>(&json) {
                Ok(w) if now_ms.saturating_sub(w.last_seen_ms) <= WORKER_EXPIRY_MS => live.push(w),
                _ => {
                    // Gone for a minute (or unreadable): forget it.
                    self.unregister_worker(&id).await?;
                }
            }
        }
        live.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(live)
    }

    async fn namespace_epoch(&self) -> Result<String> {
        let mut inv = self.scripts().epoch.prepare_invoke();
        inv.key(self.keys(0).meta());
        self.call::<String>("read the namespace's epoch", &mut inv)
            .await
    }
}

impl RedisStore {
    /// A page of a topic's kept succeeded jobs, shard by shard, newest first in each (as
    /// `dead_jobs` pages dead letters).
    async fn done_jobs(&self, topic: &Topic, at: Cursor, limit: usize) -> Result<Page> {
        let (mut shard, mut pos) = shard_and_position(at);
        let limit = batch_limit(limit);
        let mut page = Page::default();
        while shard < self.shards() && page.jobs.len() < limit {
            let k = self.keys(shard);
            let want = limit - page.jobs.len();
            let mut inv = self.scripts().done_list.prepare_invoke();
            inv.key(k.jobs()).key(k.done(topic)).arg(pos).arg(want);
            inv.key(self.named_keys(k, [topic]));
            let reply: Vec<Value> = self.call("done_list", &mut inv).await?;
            let entries = reply.len() / 4;
            for quad in reply.chunks(4) {
                let mut found =
                    decode_jobs(&quad[..3.min(quad.len())], &k.jobs(), JobState::Done, true);
                if let (Some(job), Some(Value::BulkString(value))) =
                    (found.first_mut(), quad.get(3))
                {
                    job.result = Some(value.clone()).filter(|v| !v.is_empty());
                }
                page.jobs.extend(found);
            }
            if entries >= want {
                pos += u64::try_from(entries).unwrap_or(u64::MAX);
            } else {
                shard += 1;
                pos = 0;
            }
        }
        page.next = (shard < self.shards()).then(|| cursor(shard, pos));
        Ok(page)
    }
}

// A Redis store's cursor holds the shard in its top 16 bits and the position within the
// shard's list or set below.
fn shard_and_position(at: Cursor) -> (u16, u64) {
    let shard = u16::try_from(at.raw() >> 48).unwrap_or(u16::MAX); // 16 bits: always fits
    (shard, at.raw() & ((1 << 48) - 1))
}

fn cursor(shard: u16, position: u64) -> Cursor {
    Cursor::from_raw((u64::from(shard) << 48) | position)
}
