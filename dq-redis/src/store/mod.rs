//! The Redis store: the key layout of [`keys`](crate::keys), one Lua script per operation.
//!
//! One module per role of the store ([`Producer`](dq_core::store::Producer) in `produce`,
//! [`Leases`](dq_core::store::Leases) in `lease` (its fetch in `fetch`, the writes about a
//! running job in `running`),
//! [`Admin`](dq_core::store::Admin) and [`Registry`](dq_core::store::Registry) in `admin`,
//! [`Schedules`](dq_core::store::Schedules) in `schedules`), the blocking waiters in
//! `waiters`, job events in `events` (read by `event_feed`), and the reading of script replies
//! in `reply`.

mod ack;
mod admin;
mod clock;
mod ended;
mod event_feed;
mod events;
mod fetch;
mod lease;
mod produce;
mod reply;
mod running;
mod schedules;
mod slots;
mod waiters;
mod workflows;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use redis::Value;

use crate::cluster::{on_any_node, on_owner_of};
use crate::connection::{self, Conn, Server};
use crate::hub::ReadyHub;
use crate::keys::ShardKeys;
use crate::scripts::{Scripts, CLUSTER_SCRIPTS, SCRIPTS};
use dq_core::store::shard_of;
use dq_core::store::Sharded;
use dq_core::Config;
use dq_core::LeaseRef;
use dq_core::{Error, Result};
use dq_core::{JobId, Topic};

/// A method that runs a request (a command, a pipeline) on the shared connection and reads
/// the reply as `T`, a failure reported as `op`'s. A macro because the two request types
/// share no trait that sends them.
macro_rules! sender {
    ($(#[$doc:meta])* $name:ident($request:ty)) => {
        $(#[$doc])*
        pub(super) async fn $name<T: redis::FromRedisValue>(
            &self,
            op: &'static str,
            request: &$request,
        ) -> Result<T> {
            let mut conn = self.conn.clone();
            request
                .query_async(&mut conn)
                .await
                .map_err(crate::error::redis(op))
        }
    };
}

/// How long connecting waits for a Redis that is loading or not answering to tell the
/// namespace's shard count.
const SHARD_COUNT_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// The smallest Redis ACL dq needs, as `ACL SETUSER <name> on ><password> <these rules>`: its own
/// keys (`dq:*`) and pub/sub channels, the commands it sends, and the commands its scripts call.
pub const ACL_RULES: &str = "resetkeys ~dq:* resetchannels &dq:* -@all \
+evalsha +eval +script|load +subscribe +unsubscribe +ping +hello +info \
+hset +hdel +hgetall +sadd +srem +smembers +config|get \
+time +hget +hmget +hexists +hincrby +zadd +zrem +zscore +zrange +zrangebyscore \
+zrevrange +zcount +zmscore +zincrby +zremrangebyrank +zremrangebyscore +zcard +hlen +lpop +rpush +lpush +lrange +ltrim +lrem +llen +lindex +lset +lpos +sismember \
+publish +cluster|slots +exists +get +set +multi +exec +wait +asking +xadd +xread +xrevrange +del +pexpire";

/// Jobs in Redis, shared by every process that uses the same namespace.
///
/// Cheap to clone: clones share one multiplexed connection (redis-rs's `ConnectionManager`,
/// which reconnects by itself). Blocking commands never run on it; the runtime opens its own
/// connections for them (see `waiters`).
#[derive(Clone)]
pub struct RedisStore {
    server: Server,
    conn: Conn,
    shards: Vec<ShardKeys>,
    /// Ready notifications for consumers on a cluster (see `hub`).
    hub: Arc<ReadyHub>,
    /// The announcements of job ends that wake waits (see `ended`).
    ended: Arc<ended::EndedHub>,
    /// `wait_replicas` and `wait_timeout` of the configuration.
    wait: (Option<u32>, Duration),
    /// The topics this store has met (pushed, fetched, or found due by `promote` and
    /// `reclaim`): those two declare the ready and dead keys of these topics, since a script
    /// must declare every key it touches (see `promote.lua`).
    known: Arc<std::sync::Mutex<std::collections::BTreeSet<Topic>>>,
    /// On a cluster, the list of parked jobs of the group of each grouped job this store
    /// leased (`topic:id` -> key), read from its envelope at the fetch: the ack declares it,
    /// so that it need not stop to name it (see `leased_group_queues`).
    leased_groups: Arc<std::sync::Mutex<std::collections::HashMap<String, String>>>,
    /// Redis' clock as this process last read it (see `clock`).
    clock: Arc<clock::RedisClock>,
    /// `compact` of the configuration (see `far_push`).
    compact: bool,
    /// On a cluster, the parts of far jobs (lib.lua) that pushes to each shard named lately,
    /// newest last: a push that may store far jobs declares them, so that it need not stop to
    /// name the part being filled (see `far_parts_of`).
    far_parts: Arc<std::sync::Mutex<std::collections::HashMap<u16, Vec<String>>>>,
    /// The limits of topics that, over several shards, are counted in the first shard for all
    /// (a rate: `rate_grant.lua`; a global concurrency: `slots.lua`), as this store last
    /// found: a fetch of such a topic asks that shard for its starts or slots first, and the
    /// end of a run with a slot there frees it (see `fetch_for`).
    at_home: Arc<std::sync::Mutex<std::collections::BTreeSet<(lease::Home, Topic)>>>,
    /// The shards and topics, of a rate counted in the first shard, whose last fetch here left
    /// no ready entry there: the next asks the shard how many it has before it asks the
    /// first shard for starts (see `fetch_for`).
    ran_dry: Arc<std::sync::Mutex<std::collections::BTreeSet<(u16, Topic)>>>,
    /// Names this store's grants of slots (`slots.lua`'s placeholders) apart from every other
    /// process's: a random prefix, and a count.
    grants: Arc<slots::GrantNames>,
    /// The grants of slots this store holds in the first shard, the jobs that hold each, and
    /// the slots of ended runs kept a moment for its next fetch (see `slots`).
    slots: Arc<std::sync::Mutex<slots::SlotBook>>,
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
    /// What every script that writes or looks for far jobs (lib.lua's far jobs: jobs due far
    /// ahead, stored compact) is told: `"far"`, always since they are stored on a cluster too,
    /// where every call declares the keys of far jobs it touches (the index hashes from the ids,
    /// `far_indexes`; the parts named from what it reads, by a call that stops before its first
    /// write: lib.lua's `need`). A script told `""` (a cluster, before) leaves them alone.
    pub(crate) fn far(&self) -> &'static str {
        "far"
    }

    /// What push.lua is told after its mode: ` far` where jobs due far ahead are stored
    /// compact, ` seen` where only the ones stored already are looked for (`Config::compact`
    /// off, before a rollback).
    pub(crate) fn far_push(&self) -> &'static str {
        if self.compact {
            " far"
        } else {
            " seen"
        }
    }

    /// Connects to the Redis at `config.redis_url`, or to the cluster of
    /// `config.redis_cluster`.
    pub async fn connect(config: &Config) -> Result<RedisStore> {
        // Its fields are public: a config changed after it was built is checked again here.
        let config = &config.clone().validate()?;
        let (server, conn) = connection::connect(config).await?;
        let mut store = RedisStore {
            server,
            conn,
            shards: Vec::new(),
            hub: Arc::default(),
            ended: Arc::default(),
            wait: (config.wait_replicas, config.wait_timeout),
            known: Arc::default(),
            leased_groups: Arc::default(),
            clock: Arc::default(),
            compact: config.compact,
            far_parts: Arc::default(),
            at_home: Arc::default(),
            ran_dry: Arc::default(),
            grants: Arc::default(),
            slots: Arc::default(),
        };
        let count = store.shard_count(config).await?;
        store.shards = (0..count)
            .map(|s| ShardKeys::new(&config.namespace, s))
            .collect();
        Ok(store)
    }

    /// The namespace's shard count as recorded in Redis (by the first process that used it;
    /// this one's when there is none). A process left at the default count uses the recorded
    /// one (a CLI or dashboard without `DQ_SHARDS`); one configured with another count is
    /// refused: it would push jobs to shards no worker looks at, or miss some.
    async fn shard_count(&self, config: &Config) -> Result<u16> {
        let meta = ShardKeys::new(&config.namespace, 0).meta();
        let op = "read the namespace's shard count";
        // Read first: a replica or a full Redis answers reads. A Redis still loading after a
        // restart, or not answering yet, gets a few seconds: guessing would strand jobs.
        let deadline = std::time::Instant::now() + SHARD_COUNT_WAIT;
        let read = loop {
            let mut cmd = redis::cmd("HGET");
            cmd.arg(&meta).arg("shards");
            let read: Result<Option<String>> = on_owner_of(&self.conn, &meta, cmd)
                .await
                .map_err(crate::error::redis(op));
            match read {
                Err(e) if e.is_connection() && std::time::Instant::now() < deadline => {
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                }
                other => break other,
            }
        };
        let recorded = match read {
            Ok(Some(text)) => text.parse::<u64>().unwrap_or(0),
            // A cluster node named as one Redis: every call says so (ErrorKind::Moved).
            Err(e) if e.kind() == dq_core::ErrorKind::Moved => return Ok(config.shards),
            Err(e) => return Err(e),
            Ok(None) => {
                // Nothing recorded yet: this process's count becomes the namespace's (should
                // another record first, the script keeps theirs and answers it).
                let mut inv = self.scripts().shard_count.prepare_invoke();
                inv.key(&meta).arg(config.shards);
                match self.call::<u64>(op, &mut inv).await {
                    Ok(n) => n,
                    Err(e) => {
                        tracing::warn!(error = %e, shards = config.shards, "could not record the namespace's shard count in Redis (full or read-only?); using this process's own, unrecorded");
                        return Ok(config.shards);
                    }
                }
            }
        };
        let recorded = u16::try_from(recorded)
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| Error::Malformed {
                location: format!("{meta} field shards"),
                reason: format!("{recorded} is not a shard count from 1 to 65535"),
            })?;
        let default = if config.redis_cluster.is_empty() {
            1
        } else {
            dq_core::CLUSTER_SHARDS
        };
        if recorded == config.shards {
            Ok(recorded)
        } else if config.shards == default {
            tracing::info!(
                namespace = %config.namespace, shards = recorded,
                "using the namespace's shard count recorded in Redis (DQ_SHARDS is not set here)"
            );
            Ok(recorded)
        } else {
            Err(Error::Config {
                key: "DQ_SHARDS",
                value: config.shards.to_string(),
                reason: format!(
                    "namespace {:?} spreads its jobs over {recorded} shards (recorded in Redis at {meta} by the first process that used it), and every process must hash with the same count or jobs are stranded: set DQ_SHARDS={recorded} (or leave it unset), or move to another count as OPERATIONS.md says (if the namespace holds no job yet and the count was recorded by mistake, by a `dq` command run before the workers say, `HDEL {meta} shards` lets the next process record its own)",
                    config.namespace
                ),
            })
        }
    }

    /// What in the server's settings can lose jobs, each as a sentence for the log: an evicting
    /// `maxmemory-policy` deletes jobs silently when memory runs out.
    pub async fn server_warnings(&self) -> Result<Vec<String>> {
        let mut info_cmd = redis::cmd("INFO");
        info_cmd.arg("memory");
        let info: String = on_any_node(&self.conn, info_cmd)
            .await
            .map_err(crate::error::redis("read server settings"))?;
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
    pub(crate) fn keys(&self, shard: u16) -> &ShardKeys {
        &self.shards[usize::from(shard) % self.shards.len()]
    }

    pub(super) fn keys_of(&self, topic: &Topic, id: &JobId) -> &ShardKeys {
        self.keys(shard_of(topic, id, self.shards()))
    }

    /// Runs a command whose reply is of no use.
    pub(super) async fn simple(&self, op: &'static str, cmd: &redis::Cmd) -> Result<()> {
        self.query::<Value>(op, cmd).await.map(drop)
    }

    sender! {
        /// Runs a command and reads its reply as `T`.
        query(redis::Cmd)
    }

    sender! {
        /// Runs a pipeline and reads its replies as `T`.
        query_pipe(redis::Pipeline)
    }

    /// The scripts as this store runs them: on a cluster, those that stop a call before it
    /// touches a key it did not declare (lib.lua's `need`).
    pub(super) fn scripts(&self) -> &'static Scripts {
        if self.server.is_cluster() {
            &CLUSTER_SCRIPTS
        } else {
            &SCRIPTS
        }
    }

    /// On a cluster, the keys that the scripts a call of `topics` may reach name themselves
    /// (lib.lua's `need`): the shard's (workflows, limits, the delayed set, events, unique ids,
    /// retention) and each topic's (its groups, its ready lanes, dead letters, kept records and
    /// event stream), which the call declares; those named from what the call reads (a group's
    /// list, a workflow, the topics of its other steps) it names when it meets them. None on
    /// one Redis, where no call checks them.
    pub(super) fn named_keys<'t>(
        &self,
        k: &ShardKeys,
        topics: impl IntoIterator<Item = &'t Topic>,
    ) -> Vec<String> {
        if !self.server.is_cluster() {
            return Vec::new();
        }
        let mut keys = vec![
            k.workflow_steps(),
            k.limits(),
            k.delayed(),
            k.events(),
            k.unique_for(),
            k.retain(),
            k.far(),
            k.farn(),
        ];
        for topic in topics {
            keys.extend(k.topic_groups(topic));
            let done = k.done(topic);
            keys.extend([
                k.ready(topic),
                k.ranked(topic),
                k.ready_gen(topic),
                k.dead(topic),
                format!("{done}:order"),
                format!("{done}:taken"),
                done,
                k.cancelled(topic),
                k.events_stream(topic),
            ]);
        }
        keys
    }

    /// On a cluster, the index hashes of far jobs (lib.lua's `far_index`) that hold `members`
    /// if they are far jobs: a call that looks them up or stores them declares these (they are
    /// known from the ids; the parts, named from what the call reads, it names itself). Empty
    /// on one Redis, where no call checks them.
    pub(super) fn far_indexes<'m>(
        &self,
        k: &ShardKeys,
        members: impl IntoIterator<Item = &'m str>,
    ) -> Vec<String> {
        if !self.server.is_cluster() {
            return Vec::new();
        }
        let mut keys: Vec<String> = members.into_iter().map(|m| k.far_index(m)).collect();
        keys.sort_unstable();
        keys.dedup();
        keys
    }

    /// On a cluster, the parts of far jobs that calls of pushes to `shard` named lately (lib.lua's
    /// `need`), to declare in the next push that may store far jobs there: the part being filled
    /// of a topic and bucket stays the same for up to 1,000 jobs, so a push of far jobs mostly
    /// takes one call instead of two. Empty on one Redis.
    pub(super) fn far_parts_of(&self, shard: u16) -> Vec<String> {
        let parts = self.far_parts.lock().unwrap_or_else(|p| p.into_inner());
        parts.get(&shard).cloned().unwrap_or_default()
    }

    /// Remembers the parts of far jobs among `named`, keys a push to `shard` named (at most
    /// [`FAR_PARTS_KEPT`] a shard, the oldest forgotten first).
    pub(super) fn far_parts_named<'k>(
        &self,
        shard: u16,
        named: impl IntoIterator<Item = &'k String>,
    ) {
        let fresh: Vec<&String> = named.into_iter().filter(|k| k.contains("}:far:")).collect();
        if fresh.is_empty() {
            return;
        }
        let mut parts = self.far_parts.lock().unwrap_or_else(|p| p.into_inner());
        let kept = parts.entry(shard).or_default();
        for part in fresh {
            kept.retain(|k| k != part);
            kept.push(part.clone());
        }
        let over = kept.len().saturating_sub(FAR_PARTS_KEPT);
        kept.drain(..over);
    }

    /// Runs a script. On a cluster, a call that meets keys it did not declare (a group's list,
    /// named from the jobs it reads) stops before its first write, naming them (lib.lua's
    /// `need`), and is made again with them declared: `inv` keeps them.
    pub(super) async fn run(
        &self,
        op: &'static str,
        inv: &mut redis::ScriptInvocation<'_>,
    ) -> Result<Value> {
        self.run_naming(op, inv, &mut Needed::default()).await
    }

    /// [`RedisStore::run`], leaving in `named` the keys its calls named.
    pub(super) async fn run_naming(
        &self,
        op: &'static str,
        inv: &mut redis::ScriptInvocation<'_>,
        named: &mut Needed,
    ) -> Result<Value> {
        let mut conn = self.conn.clone();
        loop {
            match inv.invoke_async(&mut conn).await {
                Err(e) => match named.more(&e) {
                    Some(keys) => {
                        inv.key(keys);
                    }
                    None => return Err(crate::error::redis(op)(e)),
                },
                ok => return ok.map_err(crate::error::redis(op)),
            }
        }
    }

    /// Runs a script and reads its reply as `T` (see `reply`).
    pub(super) async fn call<T: redis::FromRedisValue>(
        &self,
        op: &'static str,
        inv: &mut redis::ScriptInvocation<'_>,
    ) -> Result<T> {
        reply::read(op, self.run(op, inv).await?)
    }
}

/// Most grouped jobs whose groups a store remembers between their fetch and their end (see
/// `RedisStore::leased_group_queues`). Past it, it forgets them all: a job whose end another
/// process recorded (a lease taken back) is never forgotten otherwise, and an ack of a job it
/// forgot costs one more call, nothing else.
const LEASED_GROUPS: usize = 1 << 17;

impl RedisStore {
    /// Remembers the group of a job this store leased (on a cluster only).
    pub(super) fn leased_in_group(&self, k: &ShardKeys, topic: &Topic, id: &JobId, group: &str) {
        if !self.server.is_cluster() {
            return;
        }
        let mut groups = self.leased_groups.lock().unwrap_or_else(|p| p.into_inner());
        if groups.len() >= LEASED_GROUPS {
            groups.clear();
        }
        groups.insert(crate::keys::member(topic, id), k.group_queue(topic, group));
    }

    /// The lists of parked jobs of the groups of `leases`, as far as this store leased them,
    /// once each, forgotten here: an ack or a dead letter of a grouped job reads its group's
    /// list to let the next job in, and on a cluster a script must declare it (lib.lua's
    /// `need`). Empty on one Redis.
    pub(super) fn leased_group_queues<'l>(
        &self,
        leases: impl IntoIterator<Item = &'l LeaseRef>,
    ) -> Vec<String> {
        if !self.server.is_cluster() {
            return Vec::new();
        }
        let mut groups = self.leased_groups.lock().unwrap_or_else(|p| p.into_inner());
        let mut queues: Vec<String> = leases
            .into_iter()
            .filter_map(|l| groups.remove(&crate::keys::member(&l.topic, &l.id)))
            .collect();
        queues.sort_unstable();
        queues.dedup();
        queues
    }
}

/// Most times a call is made again with the keys it named. A call stops at most at a few
/// points, each naming every key it lacks there (the lists of the groups of every grouped topic
/// it meets, then its workflows, then their steps' topics), so it needs two or three; more mean
/// that what it reads changed between two calls. Past this, the error is the caller's.
const NEED_ROUNDS: usize = 32;

/// Most parts of far jobs a store remembers per shard for its pushes to declare (see
/// `RedisStore::far_parts_of`): the parts being filled of that many topics and buckets.
const FAR_PARTS_KEPT: usize = 64;

/// The keys the calls of one operation named (lib.lua's `need`), so far.
#[derive(Default)]
pub(super) struct Needed {
    keys: std::collections::HashSet<String>,
    rounds: usize,
}

impl Needed {
    /// Every key named so far.
    pub(super) fn named(&self) -> impl Iterator<Item = &String> {
        self.keys.iter()
    }

    /// The keys `e` names that no earlier call of the operation named: to declare in the next
    /// call. None when `e` is another error, names nothing new (a script that keeps asking for
    /// keys it has: its caller's error), or the calls made are [`NEED_ROUNDS`].
    pub(super) fn more(&mut self, e: &redis::RedisError) -> Option<Vec<String>> {
        let text = e.to_string();
        let (_, named) = text.split_once("DQKEYS ")?;
        // Every key of dq's has a hashtag; the words Redis adds after them have none.
        let fresh: Vec<String> = named
            .split_whitespace()
            .take_while(|w| w.contains('{'))
            .filter(|k| self.keys.insert((*k).to_owned()))
            .map(str::to_owned)
            .collect();
        self.rounds += 1;
        (!fresh.is_empty() && self.rounds <= NEED_ROUNDS).then_some(fresh)
    }
}

/// A duration as the scripts take it: whole microseconds (saturating; delays are checked
/// against `MAX_DELAY` before they get here).
pub(super) fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// Most topics `promote` and `reclaim` declare up front; the due jobs of others are found in the
/// first call and moved by a second one that declares their topics.
const DECLARED_TOPICS: usize = 128;

impl RedisStore {
    /// Remembers topics for `promote` and `reclaim` to declare.
    pub(super) fn learn<'t>(&self, topics: impl IntoIterator<Item = &'t Topic>) {
        let mut known = self.known.lock().unwrap_or_else(|p| p.into_inner());
        for t in topics {
            if !known.contains(t) {
                known.insert(t.clone());
            }
        }
    }

    /// The topics to declare: the ones just found (`needed`) first, then the known ones.
    pub(super) fn declared_topics(&self, needed: &[Topic]) -> Vec<Topic> {
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

    /// Groups leases by the shard each lives in.
    pub(super) fn by_shard<'a>(&self, leases: &'a [LeaseRef]) -> BTreeMap<u16, Vec<&'a LeaseRef>> {
        let mut groups: BTreeMap<u16, Vec<&LeaseRef>> = BTreeMap::new();
        for l in leases {
            groups
                .entry(shard_of(&l.topic, &l.id, self.shards()))
                .or_default()
                .push(l);
        }
        groups
    }

    /// Groups `ids` of `topic` by the shard each lives in.
    pub(super) fn ids_by_shard<'a>(
        &self,
        topic: &Topic,
        ids: impl Iterator<Item = &'a JobId>,
    ) -> BTreeMap<u16, Vec<&'a JobId>> {
        let mut groups: BTreeMap<u16, Vec<&JobId>> = BTreeMap::new();
        for id in ids {
            groups
                .entry(shard_of(topic, id, self.shards()))
                .or_default()
                .push(id);
        }
        groups
    }
}

#[async_trait]
impl Sharded for RedisStore {
    fn shards(&self) -> u16 {
        u16::try_from(self.shards.len()).unwrap_or(u16::MAX)
    }

    async fn time_us(&self) -> Result<u64> {
        // Shard 0's master, which holds the worker registry: heartbeats are stamped and judged
        // by one clock even when a cluster's masters disagree.
        let registry = self.keys(0).workers();
        let (secs, micros): (u64, u64) =
            on_owner_of(&self.conn, &registry, redis::cmd("TIME").to_owned())
                .await
                .map_err(crate::error::redis("read the time"))?;
        Ok(secs * 1_000_000 + micros)
    }
}
