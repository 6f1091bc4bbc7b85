//! The reading of fetch.lua's reply into leased jobs (a job whose envelope cannot be read is
//! dead-lettered on the spot). `lease` makes the call.

use std::time::Duration;

use redis::Value;

use super::reply::{malformed_reply, read, Unsigned};
use super::RedisStore;
use dq_core::store::Leases;
use dq_core::Envelope;
use dq_core::Result;
use dq_core::{Fetched, LeaseRef, LeasedJob};
use dq_core::{JobId, Topic};

impl RedisStore {
    /// Reads fetch.lua's reply: `paused`, or the shard's clock, the lease's token, how many
    /// jobs were taken back, how long the rate limit holds the next start back (0: it does
    /// not), whether the global concurrency held jobs back (1), how many jobs a group's rate
    /// held back, how many ready entries are left (read by `fetch_for`), then `id, envelope`
    /// pairs of the jobs now leased to us.
    pub(super) async fn read_fetched(
        &self,
        shard: u16,
        topic: &Topic,
        reply: Vec<Value>,
    ) -> Result<Fetched> {
        let k = self.keys(shard);
        let head =
            |i: usize| read::<Unsigned>("fetch", reply.get(i).cloned().unwrap_or(Value::Nil));
        if matches!(reply.first(), Some(Value::BulkString(b)) if b == b"paused") {
            let mut paused = Fetched::default();
            paused.paused = true;
            return Ok(paused);
        }
        let (
            Unsigned(Some(now_us)),
            Unsigned(Some(token)),
            Unsigned(Some(taken_back)),
            Unsigned(Some(throttled_us)),
            Unsigned(Some(at_capacity)),
            Unsigned(Some(held_back)),
        ) = (head(0)?, head(1)?, head(2)?, head(3)?, head(4)?, head(5)?)
        else {
            return Err(malformed_reply("fetch", &Value::Array(reply)));
        };
        self.clock.saw(now_us);
        let mut out = Fetched::default();
        out.now_us = now_us;
        out.taken_back = usize::try_from(taken_back).unwrap_or(usize::MAX);
        out.throttled = (throttled_us > 0).then(|| Duration::from_micros(throttled_us));
        out.at_capacity = at_capacity == 1;
        out.held_back = usize::try_from(held_back).unwrap_or(usize::MAX);
        for pair in reply.get(7..).unwrap_or_default().chunks(2) {
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
                    if let Some(group) = &envelope.group {
                        self.leased_in_group(k, topic, &lease.id, group);
                    }
                    out.jobs.push(LeasedJob { lease, envelope });
                }
                Err(e) => self.dead_letter_malformed(&mut out, lease, e).await,
            }
        }
        Ok(out)
    }

    /// A fetched job whose envelope cannot be read. Never handed to a handler, never retried:
    /// dead-lettered at once, the stored value kept whole as its payload.
    async fn dead_letter_malformed(&self, out: &mut Fetched, lease: LeaseRef, e: dq_core::Error) {
        tracing::error!(
            topic = %lease.topic, id = %lease.id, error = %e,
            "malformed job envelope found in Redis; it was moved to the dead letters with its raw value (inspect it with the admin API, fix or purge it)"
        );
        let why = format!(
            "malformed envelope found in Redis ({e}); the raw value is kept as the payload"
        );
        if let Err(dead_err) = self.dead_letter(&lease, &why).await {
            tracing::warn!(topic = %lease.topic, id = %lease.id, error = %dead_err, "could not dead-letter a malformed job; it is tried again when its lease expires");
        }
        out.malformed.push((lease.id, e.to_string()));
    }
}
