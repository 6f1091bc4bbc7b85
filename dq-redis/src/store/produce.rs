//! Creating and changing jobs that have not started: push (with the optional `WAIT` for
//! replicas), cancel, reschedule and status.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use async_trait::async_trait;
use redis::Value;

use super::reply::{job_info, malformed_reply, read, Count, Reply, StatusReply};
use super::RedisStore;
use crate::cluster::pipeline_on_owner_of;
use crate::keys::{member, ShardKeys};

use dq_core::events::EventCursor;
use dq_core::store::shard_of;
use dq_core::store::{EventFeed, Producer, Sharded, Waited, MAX_BATCH};
use dq_core::Envelope;
use dq_core::{to_us, ChangeOutcome, Due, JobInfo, JobState, NewJob, OnConflict, PushOutcome};
use dq_core::{Error, Result};
use dq_core::{JobId, Topic};

impl RedisStore {
    /// A cancel or reschedule of one job that has not started: the keys both scripts declare
    /// (every list the job may be in), then the shard's prefix, the topic and the id.
    fn change_invocation<'s>(
        &self,
        script: &'s redis::Script,
        topic: &Topic,
        id: &JobId,
    ) -> redis::ScriptInvocation<'s> {
        let k = self.keys_of(topic, id);
        let mut inv = script.prepare_invoke();
        inv.key(k.jobs())
            .key(k.delayed())
            .key(k.inflight())
            .key(k.counts())
            .key(k.ready(topic))
            .key(k.dead(topic))
            .key(k.ready_gen(topic))
            .key(k.unique_for())
            .key(k.done(topic))
            .key(k.retain())
            .arg(k.prefix())
            .arg(topic.as_str())
            .arg(id.as_str());
        inv
    }

    /// Runs push.lua (and `WAIT`, when replicas are awaited) on `chunk`, jobs of one shard
    /// given by their index in `jobs`; the reply is push.lua's.
    async fn push_chunk(
        &self,
        shard: u16,
        jobs: &[NewJob],
        chunk: &[usize],
        mode: &str,
    ) -> Result<Vec<Value>> {
        let k = self.keys(shard);
        let topics: BTreeSet<&Topic> = chunk.iter().map(|&i| &jobs[i].topic).collect();
        let mut keys = push_keys(k, &topics);
        if self.server.is_cluster() {
            // The keys the script names itself (lib.lua's `need`), and the lists of the groups
            // of the jobs pushed: a push that moves a job out of another group names that
            // one's list.
            keys.extend(self.named_keys(k, topics.iter().copied()));
            let groups: BTreeSet<(&Topic, &str)> = chunk
                .iter()
                .filter_map(|&i| Some((&jobs[i].topic, jobs[i].group.as_deref()?)))
                .collect();
            keys.extend(groups.into_iter().map(|(t, g)| k.group_queue(t, g)));
            // The index hashes of far jobs the call looks in (every id, but for ids dq drew)
            // or writes (the jobs that may be stored far).
            let lookup = !mode.ends_with(" new");
            let members: Vec<String> = chunk
                .iter()
                .filter(|&&i| lookup || may_go_far(&jobs[i]))
                .map(|&i| member(&jobs[i].topic, &jobs[i].id))
                .collect();
            keys.extend(self.far_indexes(k, members.iter().map(String::as_str)));
            // And the parts lately named where far jobs of this shard go.
            if chunk.iter().any(|&i| may_go_far(&jobs[i])) {
                keys.extend(self.far_parts_of(shard));
            }
        }
        self.learn(topics);
        // The arguments borrow the payloads: only the numbers are printed here.
        let count = chunk.len().to_string();
        let numbers: Vec<[String; 4]> = chunk.iter().map(|&i| push_numbers(&jobs[i])).collect();
        let mut args: Vec<&[u8]> = Vec::with_capacity(3 + 8 * chunk.len());
        args.extend([k.prefix().as_bytes(), mode.as_bytes(), count.as_bytes()]);
        for (&i, [when, max, hold, fence]) in chunk.iter().zip(&numbers) {
            let j = &jobs[i];
            args.extend([
                j.topic.as_str().as_bytes(),
                j.id.as_str().as_bytes(),
                when.as_bytes(),
                max.as_bytes(),
                hold.as_bytes(),
                fence.as_bytes(),
                &j.payload[..],
            ]);
        }
        // The trace contexts after the jobs' values, one per job, only when a job has one, a
        // priority or a group; then the priorities, only when a job has one or a group; then
        // the groups, only when a job has one: push.lua reads a missing one as none.
        let grouped = chunk.iter().any(|&i| jobs[i].group.is_some());
        let ranked = grouped || chunk.iter().any(|&i| jobs[i].priority != 0);
        if ranked || chunk.iter().any(|&i| jobs[i].trace.is_some()) {
            args.extend(
                chunk
                    .iter()
                    .map(|&i| jobs[i].trace.as_deref().unwrap_or("").as_bytes()),
            );
        }
        let priorities: Vec<String> = if ranked {
            chunk
                .iter()
                .map(|&i| jobs[i].priority.to_string())
                .collect()
        } else {
            Vec::new()
        };
        args.extend(priorities.iter().map(String::as_bytes));
        if grouped {
            args.extend(
                chunk
                    .iter()
                    .map(|&i| jobs[i].group.as_deref().unwrap_or("").as_bytes()),
            );
        }
        let mut named = super::Needed::default();
        let reply = if self.wait.0.is_some() {
            self.push_and_wait(shard, keys, &args, &mut named).await
        } else {
            let mut inv = self.scripts().push.prepare_invoke();
            for key in &keys {
                inv.key(key);
            }
            for arg in &args {
                inv.arg(*arg);
            }
            self.run_naming("push", &mut inv, &mut named).await
        };
        self.far_parts_named(shard, named.named());
        read("push", reply?)
    }

    /// The push script and `WAIT` in one pipeline, on one connection to the shard's master:
    /// WAIT covers the writes of its own connection, so it must follow the script on the same
    /// one. (Sent separately, a reconnection or the cluster client's retry on the new master
    /// after a failover would run WAIT where the push never was, and confirm a lost push: the
    /// cluster failover scenario of dq-chaos caught exactly that.) If the pipeline is retried,
    /// both parts are, and the push is idempotent by id. WAIT holds that connection until the
    /// replicas answer, at most `wait_timeout`: that is its cost.
    /// On a cluster, a call that names keys it was not given (lib.lua's `need`) is sent again
    /// with them, as `RedisStore::run` does.
    async fn push_and_wait(
        &self,
        shard: u16,
        mut keys: Vec<String>,
        args: &[&[u8]],
        named: &mut super::Needed,
    ) -> Result<Value> {
        let (Some(wanted), timeout) = self.wait else {
            unreachable!("push_and_wait is used with wait_replicas set")
        };
        let timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        let owner = self.keys(shard).jobs();
        let mut replies = None;
        let mut loads = 0;
        while loads < 2 {
            let mut pipe = redis::pipe();
            pipe.cmd("EVALSHA")
                .arg(self.scripts().push.get_hash())
                .arg(keys.len())
                .arg(&keys);
            for arg in args {
                pipe.arg(*arg);
            }
            pipe.cmd("WAIT").arg(wanted).arg(timeout_ms);
            let sent = pipeline_on_owner_of(&self.conn, &owner, &pipe, 2).await;
            // A pipeline's command errors come back as error values (cluster) or as the
            // pipeline's error (one server): either way, NOSCRIPT means load and send again.
            let sent = sent.and_then(|replies| match replies.first() {
                Some(Value::ServerError(e)) => Err(redis::RedisError::from(e.clone())),
                _ => Ok(replies),
            });
            match sent {
                Err(e) if e.to_string().contains("DQKEYS ") => match named.more(&e) {
                    Some(more) => keys.extend(more),
                    None => return Err(crate::error::redis("push")(e)),
                },
                Err(e)
                    if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
                {
                    loads += 1;
                    // After a restart or SCRIPT FLUSH: load it (on every master) and again.
                    let mut conn = self.conn.clone();
                    self.scripts()
                        .push
                        .load_async(&mut conn)
                        .await
                        .map_err(crate::error::redis("push"))?;
                }
                other => {
                    replies = Some(other.map_err(crate::error::redis("push"))?);
                    break;
                }
            }
        }
        let replies = replies.ok_or_else(|| Error::Malformed {
            location: "the reply to push".into(),
            reason: "the push script was not found twice in a row".into(),
        })?;
        let [reply, acked]: [Value; 2] = replies
            .try_into()
            .map_err(|r: Vec<Value>| malformed_reply("push and WAIT", &Value::Array(r)))?;
        let acked = u32::try_from(read::<Count>("WAIT", acked)?.0).unwrap_or(u32::MAX);
        if acked < wanted {
            return Err(Error::NotReplicated {
                wanted,
                acked,
                timeout,
            });
        }
        Ok(reply)
    }
}

/// Whether push.lua may store `j` far (lib.lua's `far_bucket`: new jobs due more than 5
/// minutes ahead, by Redis' clock, with nothing of their own to keep): on a cluster the call
/// declares its index hash. Judged by this host's clock with a minute to spare; a script given
/// too few keys names the others (lib.lua's `need`), at the cost of a second call.
fn may_go_far(j: &NewJob) -> bool {
    const SOONEST: Duration = Duration::from_secs(240);
    let plain = j.trace.is_none() && j.priority == 0 && j.group.is_none() && j.unique_for.is_none();
    plain
        && match j.due {
            Due::After(d) => d >= SOONEST,
            Due::At(t) => t
                .duration_since(std::time::SystemTime::now())
                .is_ok_and(|d| d >= SOONEST),
        }
}

fn when_arg(when: Due) -> String {
    match when {
        Due::After(d) => format!("+{}", d.as_micros()),
        Due::At(t) => to_us(t).to_string(),
    }
}

/// The keys push.lua declares: the shard's, then each topic's ready list, dead set, ready
/// generation, kept records and event stream.
fn push_keys(k: &ShardKeys, topics: &BTreeSet<&Topic>) -> Vec<String> {
    let mut keys = vec![
        k.jobs(),
        k.delayed(),
        k.topics(),
        k.counts(),
        k.inflight(),
        k.unique(),
        k.unique_for(),
        k.tick_fence(),
        k.events(),
    ];
    for t in topics {
        keys.push(k.ready(t));
        keys.push(k.dead(t));
        keys.push(k.ready_gen(t));
        keys.push(k.done(t));
        keys.push(k.events_stream(t));
        keys.push(k.ranked(t));
    }
    keys
}

/// The arguments of a job to push.lua that are printed here: when it is due, its attempts, how
/// long its id stays reserved (microseconds, 0: not at all) and its schedule's tick fence.
fn push_numbers(j: &NewJob) -> [String; 4] {
    let hold = j.unique_for.map_or(0, |d| d.as_micros().max(1));
    let fence = j.fence.as_ref().map_or(String::new(), |f| {
        format!("{}:{}:{}", f.generation, f.tick_us, f.schedule)
    });
    [
        when_arg(j.due),
        j.max_attempts.to_string(),
        hold.to_string(),
        fence,
    ]
}

/// Reads push.lua's reply (the earliest due time if it moved, then a code for each job of
/// `chunk`) into the outcomes of those jobs.
fn read_pushed(reply: &[Value], chunk: &[usize], outcomes: &mut [PushOutcome]) -> Result<()> {
    if reply.len() != chunk.len() + 1 {
        return Err(Error::Malformed {
            location: "the reply to push".into(),
            reason: format!("{} codes for {} jobs", reply.len() - 1, chunk.len()),
        });
    }
    for (&i, code) in chunk.iter().zip(&reply[1..]) {
        outcomes[i] = read::<Reply<PushOutcome>>("push", code.clone())?.0;
    }
    Ok(())
}

#[async_trait]
impl Producer for RedisStore {
    async fn push(&self, jobs: Vec<NewJob>, on_conflict: OnConflict) -> Result<Vec<PushOutcome>> {
        jobs.iter().try_for_each(dq_core::store::check_priority)?;
        if let Some((job, group)) = jobs.iter().find_map(|j| {
            let group = j.group.as_deref()?;
            let home = dq_core::store::shard_of_group(&j.topic, group, self.shards());
            (shard_of(&j.topic, &j.id, self.shards()) != home).then_some((j, group))
        }) {
            return Err(Error::InvalidPush {
                topic: job.topic.to_string(),
                reason: format!(
                    "job {}: on a namespace of {} shards every job of a group lives in its group's shard, where its slots are counted (group {group:?}: shard {}), and the id {} leads to shard {}. Leave the id out (dq then draws one that leads to the group's shard), or give grouped topics a namespace of one shard (Config::shards(1)) to choose their ids freely",
                    job.id,
                    self.shards(),
                    dq_core::store::shard_of_group(&job.topic, group, self.shards()),
                    job.id,
                    shard_of(&job.topic, &job.id, self.shards()),
                ),
            });
        }
        let mode = match on_conflict {
            OnConflict::Replace => "replace",
            _ => "keep",
        };
        let mode = format!("{mode}{}", self.far_push());
        let mut outcomes = vec![PushOutcome::Created; jobs.len()];
        let mut groups: BTreeMap<u16, Vec<usize>> = BTreeMap::new();
        for (i, job) in jobs.iter().enumerate() {
            groups
                .entry(shard_of(&job.topic, &job.id, self.shards()))
                .or_default()
                .push(i);
        }
        for (shard, indices) in groups {
            for chunk in indices.chunks(MAX_BATCH) {
                // Ids dq drew are looked for nowhere costly (NewJob::id_drawn): push.lua is
                // told so when every job of the call has one.
                let drawn = chunk.iter().all(|&i| jobs[i].id_drawn);
                let mode = if drawn {
                    format!("{mode} new")
                } else {
                    mode.clone()
                };
                let reply = self.push_chunk(shard, &jobs, chunk, &mode).await?;
                read_pushed(&reply, chunk, &mut outcomes)?;
            }
        }
        Ok(outcomes)
    }

    async fn cancel(&self, topic: &Topic, id: &JobId) -> Result<ChangeOutcome> {
        let mut inv = self.change_invocation(&self.scripts().cancel, topic, id);
        // A running job's cancel is recorded against its lease (cancel.lua's KEYS[11], [12]);
        // a job deleted is announced on its topic's events (KEYS[13], [14]) and marked
        // cancelled for the waits (KEYS[15]).
        let k = self.keys_of(topic, id);
        inv.key(k.leases())
            .key(k.cancels())
            .key(k.events())
            .key(k.events_stream(topic))
            .key(k.cancelled(topic))
            .arg(self.far());
        // On a cluster, last: the keys of the topic's groups and the index hash of the job if
        // it is far (lib.lua's `need`).
        inv.key(self.named_keys(k, [topic]));
        inv.key(self.far_indexes(k, [member(topic, id).as_str()]));
        Ok(self
            .call::<Reply<ChangeOutcome>>("cancel", &mut inv)
            .await?
            .0)
    }

    async fn reschedule(&self, topic: &Topic, id: &JobId, when: Due) -> Result<ChangeOutcome> {
        let mut inv = self.change_invocation(&self.scripts().reschedule, topic, id);
        // KEYS[11]: where a job with a priority goes when it is to run now; on a cluster, the
        // keys of the topic's groups after it (lib.lua's `need`).
        let k = self.keys_of(topic, id);
        inv.key(k.ranked(topic)).arg(when_arg(when)).arg(self.far());
        inv.key(self.named_keys(k, [topic]));
        inv.key(self.far_indexes(k, [member(topic, id).as_str()]));
        Ok(self
            .call::<Reply<ChangeOutcome>>("reschedule", &mut inv)
            .await?
            .0)
    }

    async fn wait_finished(&self, topic: &Topic, id: &JobId, timeout: Duration) -> Result<Waited> {
        self.wait_for_end(topic, id, timeout).await
    }

    async fn event_feed(&self, topic: &Topic, after: &EventCursor) -> Result<Box<dyn EventFeed>> {
        self.open_event_feed(topic, after).await
    }

    async fn status(&self, topic: &Topic, id: &JobId) -> Result<Option<JobInfo>> {
        let k = self.keys_of(topic, id);
        let m = member(topic, id);
        let mut inv = self.scripts().status.prepare_invoke();
        inv.key(k.jobs())
            .key(k.delayed())
            .key(k.inflight())
            .key(k.dead(topic))
            .key(k.done(topic))
            .key(k.progress())
            .key(k.cancels())
            .key(k.leases())
            .arg(&m)
            .arg(self.far());
        inv.key(self.named_keys(k, [topic]));
        inv.key(self.far_indexes(k, [m.as_str()]));
        let StatusReply(found) = self.call("status", &mut inv).await?;
        let Some(super::reply::Status {
            state,
            raw,
            score,
            value,
            progress,
            cancel_requested,
        }) = found
        else {
            return Ok(None);
        };
        let env = Envelope::decode(&raw, &format!("{} field {m}", k.jobs()))?;
        let score = score.filter(|_| state != JobState::Delayed);
        let mut info = job_info(topic.clone(), id.clone(), state, env, score);
        info.result = value.filter(|v| !v.is_empty());
        info.progress = progress.filter(|p| !p.is_empty());
        info.cancel_requested = cancel_requested;
        Ok(Some(info))
    }
}
