//! Acks, with the values of jobs whose topic keeps its succeeded jobs, and the retention that
//! says which topics do.

use std::collections::BTreeMap;

use super::reply::AckReply;
use super::RedisStore;
use crate::keys::member;
use dq_core::store::{Retention, Sharded, Succeeded, MAX_BATCH};
use dq_core::{Acked, Result, Topic};

impl RedisStore {
    /// Acks `done`, shard by shard in calls of at most [`MAX_BATCH`] jobs (ack.lua keeps the
    /// values of retained topics in the same step).
    pub(super) async fn ack_jobs(&self, done: &[Succeeded]) -> Result<Acked> {
        let mut by_shard: BTreeMap<u16, Vec<&Succeeded>> = BTreeMap::new();
        for job in done {
            let shard = dq_core::store::shard_of(&job.lease.topic, &job.lease.id, self.shards());
            by_shard.entry(shard).or_default().push(job);
        }
        // The runs' slots of a global concurrency counted in the first shard are free before
        // the ack is sent: their handlers have returned, and a consumer waiting for room,
        // woken when the ack is sent, takes them for its next fetch.
        self.free_slots(done.iter().map(|j| &j.lease));
        let mut out = Acked::default();
        for (shard, jobs) in by_shard {
            for chunk in jobs.chunks(MAX_BATCH) {
                let reply = self.ack_chunk(shard, chunk).await?;
                out.acked += reply.acked;
                out.stale.extend(chunk.iter().filter_map(|j| {
                    let m = member(&j.lease.topic, &j.lease.id);
                    reply.stale.contains(&m).then(|| j.lease.clone())
                }));
            }
        }
        Ok(out)
    }

    /// One ack.lua call: the shard's keys, each topic's `done` key, then the jobs.
    async fn ack_chunk(&self, shard: u16, chunk: &[&Succeeded]) -> Result<AckReply> {
        let k = self.keys(shard);
        let topics: std::collections::BTreeSet<&Topic> =
            chunk.iter().map(|j| &j.lease.topic).collect();
        let mut inv = self.scripts().ack.prepare_invoke();
        inv.key(k.jobs())
            .key(k.inflight())
            .key(k.counts())
            .key(k.leases())
            .key(k.unique())
            .key(k.unique_for())
            .key(k.retain())
            .key(k.cancels());
        for topic in &topics {
            inv.key(k.done(topic));
        }
        inv.key(k.progress());
        // Then the events of each topic, in the same order (ack.lua announces the jobs acked).
        inv.key(k.events());
        for topic in &topics {
            inv.key(k.events_stream(topic));
        }
        inv.key(k.waiting());
        inv.key(self.named_keys(k, topics.iter().copied()));
        inv.key(self.leased_group_queues(chunk.iter().map(|j| &j.lease)));
        inv.arg(topics.len());
        for topic in &topics {
            inv.arg(topic.as_str());
        }
        // Each value goes as the record a topic that keeps it stores, `<stamp>:<value>`, with
        // the call's stamp beside: ack.lua builds no text per job (see `clock`).
        let stamp = self.clock.now_us().to_string();
        inv.arg(&stamp);
        for job in chunk {
            let value = job.result.as_deref().unwrap_or_default();
            let mut record = Vec::with_capacity(stamp.len() + 1 + value.len());
            record.extend_from_slice(stamp.as_bytes());
            record.push(b':');
            record.extend_from_slice(value);
            inv.arg(member(&job.lease.topic, &job.lease.id))
                .arg(job.lease.token)
                .arg(record)
                .arg(job.run);
        }
        self.call("ack", &mut inv).await
    }

    /// Writes (or removes) `topic`'s retention in every shard, as `<age us>:<count>`.
    pub(super) async fn record_retention(
        &self,
        topic: &Topic,
        retention: Option<Retention>,
    ) -> Result<()> {
        for k in &self.shards {
            let cmd = match retention {
                Some(r) => redis::cmd("HSET")
                    .arg(k.retain())
                    .arg(topic.as_str())
                    .arg(format!(
                        "{}:{}",
                        r.age.min(dq_core::MAX_DELAY).as_micros(),
                        r.count
                    ))
                    .to_owned(),
                None => redis::cmd("HDEL")
                    .arg(k.retain())
                    .arg(topic.as_str())
                    .to_owned(),
            };
            self.simple("record the listeners' retention", &cmd).await?;
            if retention.is_none() {
                self.forget_done(k, topic).await?;
            }
        }
        Ok(())
    }

    /// Deletes the kept records of a topic that keeps none any more, a thousand at a time,
    /// then its marks of cancelled jobs (forget_done.lua: each page read and deleted in one
    /// step, since a push of a record's id writes the new job's envelope where the record's
    /// was).
    async fn forget_done(&self, k: &crate::keys::ShardKeys, topic: &Topic) -> Result<()> {
        loop {
            let mut inv = self.scripts().forget_done.prepare_invoke();
            inv.key(k.jobs()).key(k.done(topic)).key(k.cancelled(topic));
            inv.key(self.named_keys(k, [topic]));
            let deleted: i64 = self.call("forget_done", &mut inv).await?;
            if deleted < 0 {
                return Ok(());
            }
        }
    }
}
