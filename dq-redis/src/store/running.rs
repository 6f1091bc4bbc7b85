//! The writes about a running job besides its end: progress, cancel requests, the deletion of
//! a cancelled run.

use super::reply::Applied;
use super::RedisStore;
use crate::keys::member;
use dq_core::{LeaseRef, Result};

impl RedisStore {
    /// Records `value` as the progress of the job `lease` runs (progress.lua); false when the
    /// lease is no longer held.
    pub(super) async fn record_progress(&self, lease: &LeaseRef, value: &[u8]) -> Result<bool> {
        dq_core::store::check_progress(lease, value)?;
        let k = self.keys_of(&lease.topic, &lease.id);
        let mut inv = self.scripts().progress.prepare_invoke();
        inv.key(k.leases())
            .key(k.progress())
            .key(k.jobs())
            .key(k.events())
            .key(k.events_stream(&lease.topic))
            .arg(member(&lease.topic, &lease.id))
            .arg(lease.token)
            .arg(value);
        Ok(self.call::<Applied>("progress", &mut inv).await?.0)
    }

    /// Those of `leases` with a cancel request made against that very lease, read shard by
    /// shard from the shard's cancels hash.
    pub(super) async fn read_cancel_requests(&self, leases: &[LeaseRef]) -> Result<Vec<LeaseRef>> {
        let mut asked = Vec::new();
        for (shard, chunk) in self.lease_chunks(leases) {
            let members: Vec<String> = chunk.iter().map(|l| member(&l.topic, &l.id)).collect();
            let cmd = redis::cmd("HMGET")
                .arg(self.keys(shard).cancels())
                .arg(&members)
                .to_owned();
            let tokens: Vec<Option<String>> = self.query("read the cancel requests", &cmd).await?;
            // A request applies to the lease it was made against, not to a later run.
            asked.extend(
                chunk
                    .iter()
                    .zip(tokens)
                    .filter(|(l, token)| token.as_deref() == Some(l.token.to_string().as_str()))
                    .map(|(l, _)| (*l).clone()),
            );
        }
        Ok(asked)
    }

    /// Deletes the running job `lease` names, its cancel requested (cancel_running.lua); false
    /// when the lease is no longer held.
    pub(super) async fn delete_cancelled_run(&self, lease: &LeaseRef) -> Result<bool> {
        let k = self.keys_of(&lease.topic, &lease.id);
        let mut inv = self.scripts().cancel_running.prepare_invoke();
        inv.key(k.jobs())
            .key(k.inflight())
            .key(k.counts())
            .key(k.leases())
            .key(k.cancels())
            .key(k.unique_for())
            .key(k.retain())
            .key(k.progress())
            .key(k.events())
            .key(k.events_stream(&lease.topic))
            .key(k.cancelled(&lease.topic));
        inv.key(self.named_keys(k, [&lease.topic]));
        inv.arg(member(&lease.topic, &lease.id)).arg(lease.token);
        Ok(self.call::<Applied>("cancel_running", &mut inv).await?.0)
    }

    /// Deletes as cancelled the jobs of `leases`: runs that ended without success (`how`)
    /// after a cancel was requested against their lease, which the script that would have
    /// retried, dead-lettered, released or taken them back left alone. How many it deleted.
    pub(super) async fn delete_asked(&self, leases: &[LeaseRef], how: &str) -> Result<usize> {
        let mut deleted = 0;
        for lease in leases {
            if self.delete_cancelled_run(lease).await? {
                tracing::info!(
                    topic = %lease.topic, id = %lease.id,
                    "the run {how} after its cancel was requested: the job is deleted as cancelled, not run again"
                );
                deleted += 1;
            }
        }
        Ok(deleted)
    }
}
