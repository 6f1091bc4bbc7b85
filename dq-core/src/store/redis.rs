//! The Redis store: the key layout of [`keys`](super::keys), one Lua script per operation.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use redis::{Script, Value};

use super::connection::{self, Conn, Server};
use super::hub::ReadyHub;
use super::keys::{member, shard_of, ShardKeys};
use super::scripts::SCRIPTS;
use super::subscription::{Delivery, ShardSubscription};
use super::{ReadyWaiter, Store, Wake, WakeListener, MAX_BATCH};

/// The prefix of a `wake` message announcing that a topic was resumed (due times are numbers).
const RESUMED: &str = "resumed ";
use crate::config::Config;
use crate::envelope::Envelope;
use crate::error::{Error, Result};
use crate::job::{
    from_us, to_us, Acked, ChangeOutcome, Fetched, JobInfo, JobState, LeaseRef, LeasedJob, NewJob,
    OnConflict, Page, Promoted, PushOutcome, Reclaimed, Schedule, TopicCounts, TopicStats,
    WorkerInfo,
};
use crate::name::{JobId, Topic};

/// The smallest Redis ACL dq needs, as `ACL SETUSER <name> on ><password> <these rules>`: its own
/// keys (`dq:*`) and pub/sub channels, the commands it sends, and the commands its scripts call.
pub const ACL_RULES: &str = "resetkeys ~dq:* resetchannels &dq:* -@all \
+evalsha +eval +script|load +blmove +subscribe +unsubscribe +ping +hello +info \
+hset +hdel +hgetall +sadd +srem +smembers +config|get \
+time +hget +hmget +hexists +hincrby +zadd +zrem +zscore +zrange +zrangebyscore \
+zrevrange +zremrangebyrank +zcard +rpush +lpush +lrange +ltrim +lrem +llen +lindex +lpos +sismember \
+publish +cluster|slots +exists";

/// A worker not heard from for this long is no longer listed.
pub(crate) const WORKER_EXPIRY_MS: u64 = 60_000;

/// Jobs in Redis, shared by every process that uses the same namespace.
///
/// Cheap to clone: clones share one multiplexed connection (redis-rs's `ConnectionManager`,
/// which reconnects by itself). Blocking commands never run on it; the runtime opens its own
/// connections for them from [`RedisStore::client`].
#[derive(Clone)]
pub struct RedisStore {
    server: Server,
    conn: Conn,
    shards: Vec<ShardKeys>,
    /// Ready notifications for consumers on a cluster (see `hub`).
    hub: Arc<ReadyHub>,
    /// `wait_replicas` and `wait_timeout` of the configuration.
    wait: (Option<u32>, Duration),
    /// The topics this store has met (pushed, fetched, or found due by `promote` and
    /// `reclaim`): those two declare the ready and dead keys of these topics, since a script
    /// must declare every key it touches (see `promote.lua`).
    known: Arc<std::sync::Mutex<std::collections::BTreeSet<Topic>>>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("server", &self.server.describe())
            .field("shards", &self.shards.len())
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// Connects to the Redis at `config.redis_url`, or to the cluster of
    /// `config.redis_cluster`.
    pub async fn connect(config: &Config) -> Result<RedisStore> {
        let (server, conn) = connection::connect(config).await?;
        let shards = (0..config.shards)
            .map(|s| ShardKeys::new(&config.namespace, s))
            .collect();
        Ok(RedisStore {
            server,
            conn,
            shards,
            hub: Arc::default(),
            wait: (config.wait_replicas, config.wait_timeout),
            known: Arc::default(),
        })
    }

    /// What in the server's settings can lose jobs, each as a sentence for the log: an evicting
    /// `maxmemory-policy` deletes jobs silently when memory runs out.
    pub async fn server_warnings(&self) -> Result<Vec<String>> {
        let mut info_cmd = redis::cmd("INFO");
        info_cmd.arg("memory");
        let info: String = connection::on_any_node(&self.conn, info_cmd)
            .await
            .map_err(Error::redis("read server settings"))?;
        let policy = info
            .lines()
            .find_map(|l| l.strip_prefix("maxmemory_policy:"))
            .map(str::trim)
            .unwrap_or("unknown");
        let mut warnings = Vec::new();
        if policy != "noeviction" {
            warnings.push(format!(
                "Redis maxmemory-policy is {policy}: when memory runs out Redis will silently delete jobs; set maxmemory-policy noeviction so that pushes fail loudly instead"
            ));
        }
        Ok(warnings)
    }

    /// The keys of one shard.
    pub fn keys(&self, shard: u16) -> &ShardKeys {
        &self.shards[usize::from(shard) % self.shards.len()]
    }

    fn keys_of(&self, topic: &Topic, id: &JobId) -> &ShardKeys {
        self.keys(shard_of(topic, id, self.shards()))
    }

    /// Adds (SADD) or removes (SREM) a topic in every shard's paused set.
    async fn set_paused(&self, op: &'static str, command: &str, topic: &Topic) -> Result<()> {
        for k in &self.shards {
            self.simple(op, redis::cmd(command).arg(k.paused()).arg(topic.as_str()))
                .await?;
        }
        Ok(())
    }

    /// The push script and `WAIT` in one pipeline, on one connection to the shard's master:
    /// WAIT covers the writes of its own connection, so it must follow the script on the same
    /// one. (Sent separately, a reconnection or the cluster client's retry on the new master
    /// after a failover would run WAIT where the push never was, and confirm a lost push: the
    /// cluster failover scenario of dq-chaos caught exactly that.) If the pipeline is retried,
    /// both parts are, and the push is idempotent by id. WAIT holds that connection until the
    /// replicas answer, at most `wait_timeout`: that is its cost.
    async fn push_and_wait(&self, shard: u16, keys: &[String], args: &[&[u8]]) -> Result<Value> {
        let (Some(wanted), timeout) = self.wait else {
            unreachable!("push_and_wait is used with wait_replicas set")
        };
        let mut pipe = redis::pipe();
        pipe.cmd("EVALSHA")
            .arg(SCRIPTS.push.get_hash())
            .arg(keys.len())
            .arg(keys);
        for arg in args {
            pipe.arg(*arg);
        }
        pipe.cmd("WAIT").arg(wanted).arg(timeout.as_millis() as u64);
        let mut replies = None;
        for _ in 0..2 {
            let sent: redis::RedisResult<Vec<Value>> = match &self.conn {
                Conn::Single(c) => pipe.query_async(&mut c.clone()).await,
                Conn::Cluster(c) => {
                    use redis::cluster_routing::{Route, SingleNodeRoutingInfo, SlotAddr};
                    let slot = super::keys::slot(&self.keys(shard).jobs());
                    let route =
                        SingleNodeRoutingInfo::SpecificNode(Route::new(slot, SlotAddr::Master));
                    c.clone().route_pipeline(pipe.clone(), 0, 2, route).await
                }
            };
            // A pipeline's command errors come back as error values (cluster) or as the
            // pipeline's error (one server): either way, NOSCRIPT means load and send again.
            let sent = sent.and_then(|replies| match replies.first() {
                Some(Value::ServerError(e)) => Err(redis::RedisError::from(e.clone())),
                _ => Ok(replies),
            });
            match sent {
                Err(e)
                    if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
                {
                    // After a restart or SCRIPT FLUSH: load it (on every master) and again.
                    let mut conn = self.conn.clone();
                    SCRIPTS
                        .push
                        .load_async(&mut conn)
                        .await
                        .map_err(Error::redis("push"))?;
                }
                other => {
                    replies = Some(other.map_err(Error::redis("push"))?);
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
        let acked = int(&acked).ok_or_else(|| malformed_reply("WAIT", &acked))? as u32;
        if acked < wanted {
            return Err(Error::NotReplicated {
                wanted,
                acked,
                timeout,
            });
        }
        Ok(reply)
    }

    /// A failed run to retry (`counted`) or a postponed one, after `delay`.
    async fn retry_job(
        &self,
        lease: &LeaseRef,
        delay: Duration,
        error: &str,
        counted: bool,
    ) -> Result<bool> {
        crate::job::check_retry_delay(lease, delay)?;
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
            .arg(delay.as_micros() as u64)
            .arg(error)
            .arg(if counted { "1" } else { "0" });
        Ok(int(&self.run("retry", &inv).await?) == Some(1))
    }

    async fn simple(&self, op: &'static str, cmd: &redis::Cmd) -> Result<()> {
        let mut conn = self.conn.clone();
        cmd.query_async::<Value>(&mut conn)
            .await
            .map(drop)
            .map_err(Error::redis(op))
    }

    async fn run(&self, op: &'static str, inv: &redis::ScriptInvocation<'_>) -> Result<Value> {
        let mut conn = self.conn.clone();
        inv.invoke_async(&mut conn).await.map_err(Error::redis(op))
    }
}

fn when_arg(when: Schedule) -> String {
    match when {
        Schedule::After(d) => format!("+{}", d.as_micros()),
        Schedule::At(t) => to_us(t).to_string(),
    }
}

fn malformed_reply(op: &str, value: &Value) -> Error {
    Error::Malformed {
        location: format!("the reply to {op}"),
        reason: format!("unexpected reply {value:?}"),
    }
}

fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(n) => Some(*n),
        Value::BulkString(b) => std::str::from_utf8(b)
            .ok()?
            .parse::<f64>()
            .ok()
            .map(|f| f as i64),
        Value::SimpleString(s) => s.parse::<f64>().ok().map(|f| f as i64),
        _ => None,
    }
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

fn array(op: &str, v: Value) -> Result<Vec<Value>> {
    match v {
        Value::Array(items) => Ok(items),
        other => Err(malformed_reply(op, &other)),
    }
}

fn change_outcome(op: &str, v: &Value) -> Result<ChangeOutcome> {
    match int(v) {
        Some(1) => Ok(ChangeOutcome::Done),
        Some(0) => Ok(ChangeOutcome::NotFound),
        Some(2) => Ok(ChangeOutcome::Running),
        _ => Err(malformed_reply(op, v)),
    }
}

/// Jobs from a script's `member, score_us, envelope` triples (list.lua, dead_list.lua). An
/// unreadable entry is logged and skipped: one bad envelope must not hide a whole page.
fn decode_jobs(
    triples: &[Value],
    jobs_key: &str,
    state: JobState,
    keep_score: bool,
) -> Vec<JobInfo> {
    let mut out = Vec::new();
    for triple in triples.chunks(3) {
        let (Some(m), Some(score), Some(Value::BulkString(raw))) = (
            triple.first().and_then(text),
            triple.get(1).and_then(int),
            triple.get(2),
        ) else {
            continue;
        };
        let Some((topic, id)) = parse_member(&m) else {
            continue;
        };
        match Envelope::decode(raw, &format!("{jobs_key} field {m}")) {
            Ok(env) => {
                let score = (keep_score && score >= 0).then_some(score as u64);
                out.push(job_info(topic, id, state, env, score));
            }
            Err(e) => tracing::warn!(error = %e, "skipping an unreadable job in a listing"),
        }
    }
    out
}

/// A stored job as seen from outside: a running job is on the run after the ones its envelope
/// counts.
fn job_info(
    topic: Topic,
    id: JobId,
    state: JobState,
    mut env: Envelope,
    score: Option<u64>,
) -> JobInfo {
    if state == JobState::Running {
        env.attempt = env.attempt.saturating_add(1);
    }
    JobInfo::from_envelope(topic, id, state, env, score)
}

fn parse_member(m: &str) -> Option<(Topic, JobId)> {
    let (t, i) = m.split_once(':')?;
    Some((Topic::new(t).ok()?, JobId::new(i).ok()?))
}

/// Most topics `promote` and `reclaim` declare up front; the due jobs of others are found in the
/// first call and moved by a second one that declares their topics.
const DECLARED_TOPICS: usize = 128;

impl RedisStore {
    /// Remembers topics for `promote` and `reclaim` to declare.
    fn learn<'t>(&self, topics: impl IntoIterator<Item = &'t Topic>) {
        let mut known = self.known.lock().unwrap_or_else(|p| p.into_inner());
        for t in topics {
            if !known.contains(t) {
                known.insert(t.clone());
            }
        }
    }

    /// The topics to declare: the ones just found (`needed`) first, then the known ones.
    fn declared_topics(&self, needed: &[Topic]) -> Vec<Topic> {
        let known = self.known.lock().unwrap_or_else(|p| p.into_inner());
        let mut out: Vec<Topic> = needed.to_vec();
        out.extend(
            known
                .iter()
                .filter(|t| !needed.contains(t))
                .take(DECLARED_TOPICS.saturating_sub(needed.len()))
                .cloned(),
        );
        out
    }

    /// Groups leases by shard and runs `script` on chunks of them.
    fn by_shard<'a>(&self, leases: &'a [LeaseRef]) -> BTreeMap<u16, Vec<&'a LeaseRef>> {
        let mut groups: BTreeMap<u16, Vec<&LeaseRef>> = BTreeMap::new();
        for l in leases {
            groups
                .entry(shard_of(&l.topic, &l.id, self.shards()))
                .or_default()
                .push(l);
        }
        groups
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
impl Store for RedisStore {
    fn shards(&self) -> u16 {
        u16::try_from(self.shards.len()).unwrap_or(u16::MAX)
    }

    async fn push(&self, jobs: Vec<NewJob>, on_conflict: OnConflict) -> Result<Vec<PushOutcome>> {
        let mode = match on_conflict {
            OnConflict::Replace => "replace",
            _ => "keep",
        };
        let mut outcomes = vec![PushOutcome::Created; jobs.len()];
        let mut groups: BTreeMap<u16, Vec<usize>> = BTreeMap::new();
        for (i, job) in jobs.iter().enumerate() {
            groups
                .entry(shard_of(&job.topic, &job.id, self.shards()))
                .or_default()
                .push(i);
        }
        for (shard, indices) in groups {
            let k = self.keys(shard);
            for chunk in indices.chunks(MAX_BATCH) {
                let mut keys = vec![k.jobs(), k.delayed(), k.topics(), k.counts(), k.inflight()];
                let topics: std::collections::BTreeSet<&Topic> =
                    chunk.iter().map(|&i| &jobs[i].topic).collect();
                for t in &topics {
                    keys.push(k.ready(t));
                    keys.push(k.dead(t));
                    keys.push(k.ready_gen(t));
                }
                self.learn(topics);
                // The arguments borrow the payloads: only the numbers are printed here.
                let count = chunk.len().to_string();
                let numbers: Vec<(String, String)> = chunk
                    .iter()
                    .map(|&i| (when_arg(jobs[i].schedule), jobs[i].max_attempts.to_string()))
                    .collect();
                let mut args: Vec<&[u8]> = Vec::with_capacity(3 + 5 * chunk.len());
                args.extend([k.prefix().as_bytes(), mode.as_bytes(), count.as_bytes()]);
                for (&i, (when, max)) in chunk.iter().zip(&numbers) {
                    let j = &jobs[i];
                    args.extend([
                        j.topic.as_str().as_bytes(),
                        j.id.as_str().as_bytes(),
                        when.as_bytes(),
                        max.as_bytes(),
                        &j.payload[..],
                    ]);
                }
                let reply = if self.wait.0.is_some() {
                    array("push", self.push_and_wait(shard, &keys, &args).await?)?
                } else {
                    let mut inv = SCRIPTS.push.prepare_invoke();
                    for key in &keys {
                        inv.key(key);
                    }
                    for arg in &args {
                        inv.arg(*arg);
                    }
                    array("push", self.run("push", &inv).await?)?
                };
                if reply.len() != chunk.len() + 1 {
                    return Err(Error::Malformed {
                        location: "the reply to push".into(),
                        reason: format!("{} codes for {} jobs", reply.len() - 1, chunk.len()),
                    });
                }
                for (&i, code) in chunk.iter().zip(&reply[1..]) {
                    outcomes[i] = match int(code) {
                        Some(0) => PushOutcome::AlreadyPending,
                        Some(1) => PushOutcome::Created,
                        Some(2) => PushOutcome::Replaced,
                        Some(3) => PushOutcome::Running,
                        _ => return Err(malformed_reply("push", code)),
                    };
                }
            }
        }
        Ok(outcomes)
    }

    async fn cancel(&self, topic: &Topic, id: &JobId) -> Result<ChangeOutcome> {
        let k = self.keys_of(topic, id);
        let mut inv = SCRIPTS.cancel.prepare_invoke();
        inv.key(k.jobs())
            .key(k.delayed())
            .key(k.inflight())
            .key(k.counts())
            .key(k.ready(topic))
            .key(k.dead(topic))
            .key(k.ready_gen(topic))
            .arg(k.prefix())
            .arg(topic.as_str())
            .arg(id.as_str());
        change_outcome("cancel", &self.run("cancel", &inv).await?)
    }

    async fn reschedule(&self, topic: &Topic, id: &JobId, when: Schedule) -> Result<ChangeOutcome> {
        let k = self.keys_of(topic, id);
        let mut inv = SCRIPTS.reschedule.prepare_invoke();
        inv.key(k.jobs())
            .key(k.delayed())
            .key(k.inflight())
            .key(k.counts())
            .key(k.ready(topic))
            .key(k.dead(topic))
            .key(k.ready_gen(topic))
            .arg(k.prefix())
            .arg(topic.as_str())
            .arg(id.as_str())
            .arg(when_arg(when));
        change_outcome("reschedule", &self.run("reschedule", &inv).await?)
    }

    async fn status(&self, topic: &Topic, id: &JobId) -> Result<Option<JobInfo>> {
        let k = self.keys_of(topic, id);
        let m = member(topic, id);
        let mut inv = SCRIPTS.status.prepare_invoke();
        inv.key(k.jobs())
            .key(k.delayed())
            .key(k.inflight())
            .key(k.dead(topic))
            .arg(&m);
        let reply = array("status", self.run("status", &inv).await?)?;
        let [state, raw, score] = match <[Value; 3]>::try_from(reply) {
            Ok(parts) => parts,
            Err(parts) if parts.is_empty() => return Ok(None),
            Err(parts) => return Err(malformed_reply("status", &Value::Array(parts))),
        };
        let state = match text(&state).as_deref() {
            Some("delayed") => JobState::Delayed,
            Some("ready") => JobState::Ready,
            Some("running") => JobState::Running,
            Some("dead") => JobState::Dead,
            _ => return Err(malformed_reply("status", &state)),
        };
        let Value::BulkString(raw) = raw else {
            return Err(malformed_reply("status", &raw));
        };
        let env = Envelope::decode(&raw, &format!("{} field {m}", k.jobs()))?;
        let score = int(&score)
            .filter(|s| *s >= 0 && state != JobState::Delayed)
            .map(|s| s as u64);
        Ok(Some(job_info(topic.clone(), id.clone(), state, env, score)))
    }

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
                .arg(limit.saturating_sub(out.moved).clamp(1, 10_000));
            let reply = array("promote", self.run("promote", &inv).await?)?;
            let num = |v: &Value| int(v).ok_or_else(|| malformed_reply("promote", v));
            let (Some(moved), Some(next), Some(now_us), Some(n)) =
                (reply.first(), reply.get(1), reply.get(2), reply.get(3))
            else {
                return Err(malformed_reply("promote", &Value::Array(reply)));
            };
            let (moved, next, now_us, n) = (
                num(moved)? as usize,
                num(next)?,
                num(now_us)? as u64,
                num(n)? as usize,
            );
            let unknown: Vec<Topic> = reply
                .iter()
                .skip(4)
                .take(n)
                .filter_map(|v| Topic::new(text(v)?).ok())
                .collect();
            out.moved += moved;
            out.next_due_us = (next >= 0).then_some(next as u64);
            out.now_us = now_us;
            out.topics
                .extend(
                    reply
                        .get(4 + n..)
                        .unwrap_or_default()
                        .chunks(2)
                        .filter_map(|pair| {
                            let topic = Topic::new(text(&pair[0])?).ok()?;
                            Some((topic, int(pair.get(1)?)? as usize))
                        }),
                );
            if unknown.is_empty() || out.moved >= limit {
                break;
            }
            self.learn(&unknown);
            needed = unknown;
        }
        Ok(out)
    }

    async fn fetch(
        &self,
        shard: u16,
        topic: &Topic,
        max: usize,
        lease: Duration,
    ) -> Result<Fetched> {
        self.learn([topic]);
        let k = self.keys(shard);
        let mut inv = SCRIPTS.fetch.prepare_invoke();
        inv.key(k.jobs())
            .key(k.inflight())
            .key(k.ready(topic))
            .key(k.counts())
            .key(k.paused())
            .key(k.leases())
            .key(k.ready_gen(topic))
            .key(k.delayed())
            .arg(topic.as_str())
            .arg(max.clamp(1, MAX_BATCH))
            .arg(lease.as_micros() as u64);
        let reply = array("fetch", self.run("fetch", &inv).await?)?;
        if reply.first().and_then(text).as_deref() == Some("paused") {
            return Ok(Fetched {
                paused: true,
                ..Fetched::default()
            });
        }
        let mut out = Fetched {
            now_us: reply.first().and_then(int).unwrap_or(0) as u64,
            ..Fetched::default()
        };
        let token = match reply.get(1).and_then(int) {
            Some(t) if t >= 0 => t as u64,
            _ => return Err(malformed_reply("fetch", &Value::Array(reply))),
        };
        for pair in reply.get(2..).unwrap_or_default().chunks(2) {
            let (Some(id), Some(Value::BulkString(raw))) =
                (pair.first().and_then(text), pair.get(1))
            else {
                return Err(malformed_reply("fetch", &Value::Array(pair.to_vec())));
            };
            // From here on the jobs are leased to us: nothing below may abandon the batch
            // (an error return would leave every job of it leased to nobody until the lease
            // expires). One bad entry is logged and left to the reclaimer.
            let location = || format!("{} field {topic}:{id}", k.jobs());
            let decoded = Envelope::decode_with(raw, location);
            let id = match JobId::new(id) {
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
                    &[k.jobs(), k.inflight(), k.counts(), k.leases()],
                    &[],
                    chunk,
                );
                let reply = array("ack", self.run("ack", &inv).await?)?;
                out.acked += reply.first().and_then(int).unwrap_or(0) as usize;
                for stale in reply.iter().skip(1).filter_map(text) {
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
        Ok(int(&self.run("dead_letter", &inv).await?) == Some(1))
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
                released += int(&self.run("release", &inv).await?).unwrap_or(0) as usize;
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
                    &[(lease.as_micros() as u64).to_string()],
                    chunk,
                );
                let reply = array("extend", self.run("extend", &inv).await?)?;
                for m in reply.iter().filter_map(text) {
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
            inv.arg(k.prefix()).arg(limit.clamp(1, MAX_BATCH));
            let reply = array("reclaim", self.run("reclaim", &inv).await?)?;
            out.requeued += reply.first().and_then(int).unwrap_or(0) as usize;
            out.dead += reply.get(1).and_then(int).unwrap_or(0) as usize;
            let unknown: Vec<Topic> = reply
                .iter()
                .skip(2)
                .filter_map(|v| Topic::new(text(v)?).ok())
                .collect();
            if unknown.is_empty() {
                break;
            }
            self.learn(&unknown);
            needed = unknown;
        }
        Ok(out)
    }

    async fn counts(&self, topic: &Topic) -> Result<TopicCounts> {
        let mut total = TopicCounts::default();
        for k in &self.shards {
            let mut inv = SCRIPTS.counts.prepare_invoke();
            inv.key(k.counts())
                .key(k.ready(topic))
                .key(k.dead(topic))
                .arg(topic.as_str());
            let reply = array("counts", self.run("counts", &inv).await?)?;
            let n = |i: usize| reply.get(i).and_then(int).unwrap_or(0).max(0) as u64;
            total.delayed += n(0);
            total.ready += n(1);
            total.running += n(2);
            total.dead += n(3);
        }
        Ok(total)
    }

    async fn stats(&self, topic: &Topic) -> Result<TopicStats> {
        let mut total = TopicStats::default();
        for k in &self.shards {
            let mut inv = SCRIPTS.stats.prepare_invoke();
            inv.key(k.counts())
                .key(k.ready(topic))
                .key(k.dead(topic))
                .key(k.jobs())
                .key(k.delayed())
                .key(k.paused())
                .key(k.ready_gen(topic))
                .arg(topic.as_str());
            let reply = array("stats", self.run("stats", &inv).await?)?;
            let n = |i: usize| reply.get(i).and_then(int).unwrap_or(0);
            let c = &mut total.counts;
            c.delayed += n(0).max(0) as u64;
            c.ready += n(1).max(0) as u64;
            c.running += n(2).max(0) as u64;
            c.dead += n(3).max(0) as u64;
            let earliest = |a: Option<SystemTime>, us: i64| match (a, us >= 0) {
                (Some(a), true) => Some(a.min(from_us(us as u64))),
                (None, true) => Some(from_us(us as u64)),
                (a, false) => a,
            };
            total.oldest_ready_due = earliest(total.oldest_ready_due, n(4));
            total.next_due = earliest(total.next_due, n(5));
            total.paused |= n(6) == 1;
        }
        Ok(total)
    }

    async fn list(
        &self,
        topic: &Topic,
        state: JobState,
        cursor: u64,
        limit: usize,
    ) -> Result<Page> {
        // The cursor holds the shard in its top 16 bits and the position within it below.
        let mut shard = (cursor >> 48) as u16;
        let mut pos = cursor & ((1 << 48) - 1);
        let limit = limit.clamp(1, MAX_BATCH);
        let mut page = Page::default();
        while shard < self.shards() && page.jobs.len() < limit {
            let k = self.keys(shard);
            let (kind, key) = match state {
                JobState::Ready => ("list", k.ready(topic)),
                JobState::Delayed => ("zset", k.delayed()),
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
            let mut inv = SCRIPTS.list.prepare_invoke();
            inv.key(k.jobs()).key(key);
            if state == JobState::Ready {
                inv.key(k.ready_gen(topic));
            }
            inv.arg(kind)
                .arg(topic.as_str())
                .arg(pos)
                .arg(limit - page.jobs.len());
            let reply = array("list", self.run("list", &inv).await?)?;
            let next = reply.first().and_then(int).unwrap_or(-1);
            page.jobs.extend(decode_jobs(
                reply.get(1..).unwrap_or_default(),
                &k.jobs(),
                state,
                state == JobState::Running,
            ));
            if next >= 0 {
                pos = next as u64;
                if page.jobs.len() >= limit {
                    break;
                }
            } else {
                shard += 1;
                pos = 0;
            }
        }
        page.next = (shard < self.shards()).then(|| (u64::from(shard) << 48) | pos);
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
        let mut conn = self.conn.clone();
        let all: Vec<(String, String)> = redis::cmd("HGETALL")
            .arg(self.keys(0).workers())
            .query_async(&mut conn)
            .await
            .map_err(Error::redis("workers"))?;
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

    async fn topics(&self) -> Result<Vec<Topic>> {
        let mut all = std::collections::BTreeSet::new();
        for k in &self.shards {
            let mut conn = self.conn.clone();
            let names: Vec<String> = redis::cmd("SMEMBERS")
                .arg(k.topics())
                .query_async(&mut conn)
                .await
                .map_err(Error::redis("topics"))?;
            all.extend(names.into_iter().filter_map(|n| Topic::new(n).ok()));
        }
        Ok(all.into_iter().collect())
    }

    async fn dead_jobs(&self, topic: &Topic, cursor: u64, limit: usize) -> Result<Page> {
        // Shard by shard like `list`: the cursor holds the shard in its top 16 bits and the
        // rank within the shard's dead set below (a rank costs O(log n) in a sorted set).
        let (mut shard, mut pos) = ((cursor >> 48) as u16, cursor & ((1 << 48) - 1));
        let limit = limit.clamp(1, MAX_BATCH);
        let mut page = Page::default();
        while shard < self.shards() && page.jobs.len() < limit {
            let k = self.keys(shard);
            let want = limit - page.jobs.len();
            let mut inv = SCRIPTS.dead_list.prepare_invoke();
            inv.key(k.jobs()).key(k.dead(topic)).arg(pos).arg(want);
            let reply = array("dead_list", self.run("dead_list", &inv).await?)?;
            let entries = reply.len() / 3;
            page.jobs
                .extend(decode_jobs(&reply, &k.jobs(), JobState::Dead, true));
            if entries >= want {
                pos += entries as u64;
            } else {
                shard += 1;
                pos = 0;
            }
        }
        page.next = (shard < self.shards()).then(|| (u64::from(shard) << 48) | pos);
        Ok(page)
    }

    async fn requeue_dead(
        &self,
        topic: &Topic,
        ids: &[JobId],
        max_attempts: u32,
        limit: usize,
        died_before_us: u64,
    ) -> Result<usize> {
        // At most `limit` (<= 1,000) jobs per call, so each shard takes one script call.
        let limit = limit.clamp(1, MAX_BATCH);
        let mut by_shard: BTreeMap<u16, Vec<&JobId>> = BTreeMap::new();
        if ids.is_empty() {
            by_shard.extend((0..self.shards()).map(|s| (s, Vec::new())));
        }
        for id in ids.iter().take(limit) {
            by_shard
                .entry(shard_of(topic, id, self.shards()))
                .or_default()
                .push(id);
        }
        let mut total = 0;
        for (shard, shard_ids) in by_shard {
            let k = self.keys(shard);
            let mut inv = SCRIPTS.requeue_dead.prepare_invoke();
            inv.key(k.jobs())
                .key(k.dead(topic))
                .key(k.ready(topic))
                .key(k.ready_gen(topic))
                .arg(k.prefix())
                .arg(topic.as_str())
                .arg(max_attempts)
                .arg(limit - total)
                .arg(died_before_us);
            for id in shard_ids {
                inv.arg(id.as_str());
            }
            total += int(&self.run("requeue_dead", &inv).await?).unwrap_or(0) as usize;
            if total >= limit {
                break;
            }
        }
        Ok(total)
    }

    async fn time_us(&self) -> Result<u64> {
        // Shard 0's master, which holds the worker registry: heartbeats are stamped and judged
        // by one clock even when a cluster's masters disagree.
        let registry = self.keys(0).workers();
        let (secs, micros): (u64, u64) =
            connection::on_owner_of(&self.conn, &registry, redis::cmd("TIME").to_owned())
                .await
                .map_err(Error::redis("read the time"))?;
        Ok(secs * 1_000_000 + micros)
    }

    fn ready_waiter(&self, shard: u16, topic: &Topic) -> Box<dyn ReadyWaiter> {
        match &self.server {
            Server::Single(client) => Box::new(RedisReadyWaiter {
                client: client.clone(),
                key: self.keys(shard).ready(topic),
                conn: None,
            }),
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
            .enumerate()
            .map(|(shard, k)| (k.wake(), shard as u16))
            .collect();
        let subscription =
            ShardSubscription::open("wake subscription", &self.server, &self.conn, channels)
                .await?;
        Ok(Box::new(RedisWakeListener {
            subscription,
            shards: self.shards.len() as u16,
            pending: Vec::new(),
        }))
    }

    async fn purge_dead(&self, topic: &Topic, before: SystemTime, limit: usize) -> Result<usize> {
        let mut total = 0;
        for k in &self.shards {
            let mut inv = SCRIPTS.purge_dead.prepare_invoke();
            inv.key(k.jobs())
                .key(k.dead(topic))
                .arg(to_us(before))
                .arg(limit.clamp(1, MAX_BATCH));
            total += int(&self.run("purge_dead", &inv).await?).unwrap_or(0) as usize;
        }
        Ok(total)
    }
}

/// How much longer than its own timeout a blocking wait may go without a reply.
const WAIT_MARGIN: Duration = Duration::from_secs(2);

/// `BLMOVE ready ready LEFT LEFT` on a connection of its own, opened on first use and again
/// after an error (one server only: consumers on a cluster wait on the `hub`'s bells).
struct RedisReadyWaiter {
    client: redis::Client,
    key: String,
    conn: Option<redis::aio::MultiplexedConnection>,
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
                    .map_err(Error::redis("wait for ready jobs"))?;
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
            Ok(reply) => reply.map_err(|source| Error::Redis {
                op: "wait for ready jobs",
                source,
            }),
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
struct RedisWakeListener {
    subscription: ShardSubscription,
    shards: u16,
    /// Wake-ups still to hand out (every shard's, after the subscription moved).
    pending: Vec<Wake>,
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
        }
    }
}
