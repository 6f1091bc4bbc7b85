//! The workers' side of a job's life: promote, fetch, ack, retry and postpone, dead-letter,
//! release, extend, reclaim, and the waits for ready jobs and new due times.

use std::time::Duration;

use async_trait::async_trait;
use redis::{Script, Value};

use super::reply::{
    malformed_reply, read, AckReply, Applied, Count, Promotion, Reclamation, Unsigned,
};
use super::waiters::{RedisReadyWaiter, RedisWakeListener};
use super::RedisStore;
use crate::connection::Server;
use crate::keys::member;
use crate::scripts::SCRIPTS;
use crate::subscription::ShardSubscription;
use dq_core::store::policy::{batch_limit, promote_limit};
use dq_core::store::{Fetcher, Leases, ReadyWaiter, Sharded, WakeListener, MAX_BATCH};
use dq_core::Envelope;
use dq_core::Result;
use dq_core::{Acked, Fetched, LeaseRef, LeasedJob, Promoted, Reclaimed};
use dq_core::{JobId, Topic};

impl RedisStore {
    /// A failed run to retry (`counted`) or a postponed one, after `delay`.
    async fn retry_job(
        &self,
        lease: &LeaseRef,
        delay: Duration,
        error: &str,
        counted: bool,
    ) -> Result<bool> {
        dq_core::store::check_retry_delay(lease, delay)?;
        let k = self.keys_of(&lease.topic, &lease.id);
        let mut inv = SCRIPTS.retry.prepare_invoke();
        inv.key(k.jobs())
            .key(k.inflight())
            .key(k.delayed())
            .key(k.counts())
            .key(k.leases())
            .key(k.ready(&lease.topic))
            .key(k.ready_gen(&lease.topic))
            .arg(k.prefix())
            .arg(member(&lease.topic, &lease.id))
            .arg(lease.token)
            .arg(micros(delay))
            .arg(error)
            .arg(if counted { "1" } else { "0" });
        Ok(self.call::<Applied>("retry", &inv).await?.0)
    }

    fn lease_invocation<'s>(
        script: &'s Script,
        keys: &[String],
        head: &[String],
        chunk: &[&LeaseRef],
    ) -> redis::ScriptInvocation<'s> {
        let mut inv = script.prepare_invoke();
        for k in keys {
            inv.key(k);
        }
        for a in head {
            inv.arg(a);
        }
        for l in chunk {
            inv.arg(member(&l.topic, &l.id)).arg(l.token);
        }
        inv
    }
}

#[async_trait]
impl Leases for RedisStore {
    async fn promote(&self, shard: u16, limit: usize) -> Result<Promoted> {
        let k = self.keys(shard);
        let mut out = Promoted::default();
        let mut needed: Vec<Topic> = Vec::new();
        // A second call when the first found due jobs of topics it had not declared.
        for _ in 0..2 {
            let mut inv = SCRIPTS.promote.prepare_invoke();
            inv.key(k.delayed()).key(k.counts());
            for t in self.declared_topics(&needed) {
                inv.key(k.ready(&t)).key(k.ready_gen(&t));
            }
            inv.arg(k.prefix())
                .arg(promote_limit(limit.saturating_sub(out.moved)));
            let p: Promotion = self.call("promote", &inv).await?;
            out.moved += p.moved;
            out.next_due_us = p.next_due_us;
            out.now_us = p.now_us;
            out.topics.extend(p.made_ready);
            if p.undeclared.is_empty() || out.moved >= limit {
                break;
            }
            self.learn(&p.undeclared);
            needed = p.undeclared;
        }
        Ok(out)
    }

    async fn fetch(&self, shard: u16, topic: &Topic, max: usize, ttl: Duration) -> Result<Fetched> {
        self.fetch_for(shard, topic, max, ttl, &Fetcher::default())
            .await
    }

    async fn fetch_for(
        &self,
        shard: u16,
        topic: &Topic,
        max: usize,
        ttl: Duration,
        fetcher: &Fetcher,
    ) -> Result<Fetched> {
        self.learn([topic]);
        let k = self.keys(shard);
        let recorded = !fetcher.consumer.is_empty();
        let lost: Vec<String> = fetcher.lost.iter().map(u64::to_string).collect();
        let mut inv = SCRIPTS.fetch.prepare_invoke();
        inv.key(k.jobs())
            .key(k.inflight())
            .key(k.ready(topic))
            .key(k.counts())
            .key(k.paused())
            .key(k.leases())
            .key(k.ready_gen(topic))
            .key(k.delayed())
            .key(k.fetched(&fetcher.consumer))
            .arg(topic.as_str())
            .arg(batch_limit(max))
            .arg(micros(ttl))
            .arg(if recorded {
                fetcher.nonce.to_string()
            } else {
                String::new()
            })
            .arg(lost.join(","));
        let reply: Vec<Value> = self.call("fetch", &inv).await?;
        let head =
            |i: usize| read::<Unsigned>("fetch", reply.get(i).cloned().unwrap_or(Value::Nil));
        if matches!(reply.first(), Some(Value::BulkString(b)) if b == b"paused") {
            let mut paused = Fetched::default();
            paused.paused = true;
            return Ok(paused);
        }
        let (Unsigned(Some(now_us)), Unsigned(Some(token)), Unsigned(Some(taken_back))) =
            (head(0)?, head(1)?, head(2)?)
        else {
            return Err(malformed_reply("fetch", &Value::Array(reply)));
        };
        let mut out = Fetched::default();
        out.now_us = now_us;
        out.taken_back = usize::try_from(taken_back).unwrap_or(usize::MAX);
        for pair in reply.get(3..).unwrap_or_default().chunks(2) {
            let (Some(Value::BulkString(id)), Some(Value::BulkString(raw))) =
                (pair.first(), pair.get(1))
            else {
                return Err(malformed_reply("fetch", &Value::Array(pair.to_vec())));
            };
            // From here on the jobs are leased to us: nothing below may abandon the batch
            // (an error return would leave every job of it leased to nobody until the lease
            // expires). One bad entry is logged and left to the reclaimer.
            let id = String::from_utf8_lossy(id);
            let location = || format!("{} field {topic}:{id}", k.jobs());
            let decoded = Envelope::decode_with(raw, location);
            let id = match JobId::new(id.as_ref()) {
                Ok(id) => id,
                Err(e) => {
                    tracing::error!(topic = %topic, error = %e, "a job with an invalid id was found in Redis' ready list; left leased, the reclaimer dead-letters it after its attempts");
                    continue;
                }
            };
            let lease = LeaseRef {
                topic: topic.clone(),
                id,
                token,
                shard,
            };
            match decoded {
                Ok(mut envelope) => {
                    // Stored: the runs counted so far; handed over: the run being made.
                    envelope.attempt = envelope.attempt.saturating_add(1);
                    out.jobs.push(LeasedJob { lease, envelope });
                }
                Err(e) => {
                    // Never handed to a handler, never retried: dead-lettered at once, the
                    // stored value kept whole as its payload.
                    tracing::error!(
                        topic = %topic, id = %lease.id, error = %e,
                        "malformed job envelope found in Redis; it was moved to the dead letters with its raw value (inspect it with the admin API, fix or purge it)"
                    );
                    let why = format!(
                        "malformed envelope found in Redis ({e}); the raw value is kept as the payload"
                    );
                    if let Err(dead_err) = self.dead_letter(&lease, &why).await {
                        tracing::warn!(topic = %topic, id = %lease.id, error = %dead_err, "could not dead-letter a malformed job; it is tried again when its lease expires");
                    }
                    out.malformed.push((lease.id, e.to_string()));
                }
            }
        }
        Ok(out)
    }

    async fn ack(&self, leases: &[LeaseRef]) -> Result<Acked> {
        let mut out = Acked::default();
        for (shard, group) in self.by_shard(leases) {
            let k = self.keys(shard);
            for chunk in group.chunks(MAX_BATCH) {
                let inv = Self::lease_invocation(
                    &SCRIPTS.ack,
                    &[
                        k.jobs(),
                        k.inflight(),
                        k.counts(),
                        k.leases(),
                        k.unique(),
                        k.unique_for(),
                    ],
                    &[],
                    chunk,
                );
                let reply: AckReply = self.call("ack", &inv).await?;
                out.acked += reply.acked;
                for stale in reply.stale {
                    if let Some(l) = chunk.iter().find(|l| member(&l.topic, &l.id) == stale) {
                        out.stale.push((*l).clone());
                    }
                }
            }
        }
        Ok(out)
    }

    async fn retry(&self, lease: &LeaseRef, delay: Duration, error: &str) -> Result<bool> {
        self.retry_job(lease, delay, error, true).await
    }

    async fn postpone(&self, lease: &LeaseRef, delay: Duration) -> Result<bool> {
        self.retry_job(lease, delay, "", false).await
    }

    async fn dead_letter(&self, lease: &LeaseRef, error: &str) -> Result<bool> {
        let k = self.keys_of(&lease.topic, &lease.id);
        let mut inv = SCRIPTS.dead.prepare_invoke();
        inv.key(k.jobs())
            .key(k.inflight())
            .key(k.counts())
            .key(k.dead(&lease.topic))
            .key(k.leases())
            .arg(member(&lease.topic, &lease.id))
            .arg(lease.token)
            .arg(error);
        Ok(self.call::<Applied>("dead_letter", &inv).await?.0)
    }

    async fn release(&self, leases: &[LeaseRef]) -> Result<usize> {
        let mut released = 0;
        for (shard, group) in self.by_shard(leases) {
            let k = self.keys(shard);
            for chunk in group.chunks(MAX_BATCH) {
                let mut keys = vec![k.inflight(), k.counts(), k.leases()];
                let topics: std::collections::BTreeSet<&Topic> =
                    chunk.iter().map(|l| &l.topic).collect();
                for t in topics {
                    keys.push(k.ready(t));
                    keys.push(k.ready_gen(t));
                }
                let inv = Self::lease_invocation(
                    &SCRIPTS.release,
                    &keys,
                    &[k.prefix().to_owned()],
                    chunk,
                );
                released += self.call::<Count>("release", &inv).await?.0;
            }
        }
        Ok(released)
    }

    async fn extend(&self, leases: &[LeaseRef], lease: Duration) -> Result<Vec<LeaseRef>> {
        let mut lost = Vec::new();
        for (shard, group) in self.by_shard(leases) {
            let k = self.keys(shard);
            for chunk in group.chunks(MAX_BATCH) {
                let inv = Self::lease_invocation(
                    &SCRIPTS.extend,
                    &[k.inflight(), k.leases()],
                    &[micros(lease).to_string()],
                    chunk,
                );
                let lost_members: Vec<String> = self.call("extend", &inv).await?;
                for m in lost_members {
                    if let Some(l) = chunk.iter().find(|l| member(&l.topic, &l.id) == m) {
                        lost.push((*l).clone());
                    }
                }
            }
        }
        Ok(lost)
    }

    async fn reclaim(&self, shard: u16, limit: usize) -> Result<Reclaimed> {
        let k = self.keys(shard);
        let mut out = Reclaimed::default();
        let mut needed: Vec<Topic> = Vec::new();
        // A second call when the first found expired jobs of topics it had not declared.
        for _ in 0..2 {
            let mut inv = SCRIPTS.reclaim.prepare_invoke();
            inv.key(k.jobs())
                .key(k.inflight())
                .key(k.counts())
                .key(k.leases())
                .key(k.attempts());
            for t in self.declared_topics(&needed) {
                inv.key(k.ready(&t)).key(k.dead(&t)).key(k.ready_gen(&t));
            }
            inv.arg(k.prefix()).arg(batch_limit(limit));
            let r: Reclamation = self.call("reclaim", &inv).await?;
            out.requeued += r.requeued;
            out.dead += r.dead;
            if r.undeclared.is_empty() {
                break;
            }
            self.learn(&r.undeclared);
            needed = r.undeclared;
        }
        Ok(out)
    }

    async fn set_attempt_limit(&self, topic: &Topic, max_attempts: Option<u32>) -> Result<()> {
        for k in &self.shards {
            let cmd = match max_attempts {
                Some(max) => redis::cmd("HSET")
                    .arg(k.attempts())
                    .arg(topic.as_str())
                    .arg(max.max(1))
                    .to_owned(),
                None => redis::cmd("HDEL")
                    .arg(k.attempts())
                    .arg(topic.as_str())
                    .to_owned(),
            };
            self.simple("record the listeners' attempt limit", &cmd)
                .await?;
        }
        Ok(())
    }

    fn ready_waiter(&self, shard: u16, topic: &Topic) -> Box<dyn ReadyWaiter> {
        match &self.server {
            Server::Single(client) => Box::new(RedisReadyWaiter::new(
                client.clone(),
                self.keys(shard).ready(topic),
            )),
            Server::Cluster { .. } => {
                self.hub
                    .waiter(&self.server, &self.conn, &self.shards, shard, topic)
            }
        }
    }

    async fn wake_listener(&self) -> Result<Box<dyn WakeListener>> {
        let channels = self
            .shards
            .iter()
            .zip(0u16..)
            .map(|(k, shard)| (k.wake(), shard))
            .collect();
        let subscription =
            ShardSubscription::open("wake subscription", &self.server, &self.conn, channels)
                .await?;
        Ok(Box::new(RedisWakeListener::new(
            subscription,
            self.shards(),
        )))
    }
}

/// A duration as the scripts take it: whole microseconds (saturating; delays are checked
/// against `MAX_DELAY` before they get here).
fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}
