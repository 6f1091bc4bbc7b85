//! The pieces every scenario is made of: a redis-server of its own, worker processes it can
//! kill, a paced producer that retries with the same id, the drain, and the oracle that reads
//! the ledgers and prints what was pushed, handled, lost and duplicated.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use dq::store::ShardKeys;
use dq::{JobState, Topic};
use dq_testkit::{RedisCluster, RedisServer};
use serde_json::{json, Value};

use crate::ledger::Ledger;
use crate::rng::Rng;
use crate::worker::WorkerArgs;
use crate::{Job, NAMESPACE, TOPIC};

pub(crate) use dq_testkit::stats::now_us;

/// A fault as it happened: what, when it began and when it was over (microseconds).
#[derive(Debug, Clone)]
pub(crate) struct Fault {
    pub(crate) kind: String,
    pub(crate) start_us: u64,
    pub(crate) end_us: u64,
}

/// One scenario's world.
#[derive(Debug)]
pub(crate) struct Harness {
    pub(crate) dir: PathBuf,
    /// The one redis-server of most scenarios.
    pub(crate) redis: Option<Arc<Mutex<RedisServer>>>,
    /// The cluster of the cluster scenarios.
    pub(crate) cluster: Option<Arc<Mutex<RedisCluster>>>,
    pub(crate) url: String,
    pub(crate) client: dq::Client,
    pub(crate) worker: WorkerArgs,
    workers: Vec<Option<Child>>,
    pub(crate) faults: Vec<Fault>,
    pub(crate) rng: Rng,
    pub(crate) ledger: Ledger,
    pub(crate) exit_ms: Vec<u64>,
    /// When each worker process the harness killed or stopped had ended (us, by pid; each time,
    /// should the system give a pid again): the end of the runs it cut
    /// (`Ledger::with_cut_runs`).
    pub(crate) ended_us: HashMap<u32, Vec<u64>>,
    /// When the store took back each job's expired leases (us, by id: its `stalled` and `dead`
    /// events), read from the job events after the drain where the workers turned them on
    /// (`WorkerArgs::events`); empty otherwise.
    pub(crate) taken_back_us: HashMap<String, Vec<u64>>,
    /// The proxy between the workers and Redis, when the scenario has one; kept until the end.
    pub(crate) proxy: Option<crate::proxy::Blackhole>,
    /// Clock offsets injected into the workers, by slot (libfaketime); none past the end.
    pub(crate) clock_offsets_ms: Vec<i64>,
    /// The topics the scenario pushes to ([`TOPIC`] unless it says otherwise): the drain waits
    /// for their jobs, and the dead letters and what is left in Redis are read from them.
    pub(crate) topics: Vec<String>,
    started: Instant,
}

impl Harness {
    /// Starts redis-server with `redis_args` and a client; no workers yet.
    pub(crate) async fn start(
        scenario: &str,
        redis_args: &[&str],
        worker: WorkerArgs,
        seed: u64,
    ) -> anyhow::Result<Harness> {
        let redis = RedisServer::start_with(redis_args);
        let url = redis.url();
        Harness::with(scenario, url, Some(redis), None, worker, seed, None).await
    }

    /// Starts a local Redis Cluster and a client; no workers yet.
    pub(crate) async fn start_cluster(
        scenario: &str,
        masters: usize,
        replicas: usize,
        worker: WorkerArgs,
        seed: u64,
    ) -> anyhow::Result<Harness> {
        let cluster = RedisCluster::start(masters, replicas);
        let url = format!("cluster:{}", cluster.urls().join(","));
        Harness::with(scenario, url, None, Some(cluster), worker, seed, None).await
    }

    /// Starts a local Redis Cluster and a client whose namespace has one shard (recorded by
    /// the client, which connects first: the workers take the recorded count); no workers yet.
    pub(crate) async fn start_cluster_one_shard(
        scenario: &str,
        masters: usize,
        worker: WorkerArgs,
        seed: u64,
    ) -> anyhow::Result<Harness> {
        let cluster = RedisCluster::start(masters, 0);
        let url = format!("cluster:{}", cluster.urls().join(","));
        Harness::with(scenario, url, None, Some(cluster), worker, seed, Some(1)).await
    }

    async fn with(
        scenario: &str,
        url: String,
        redis: Option<RedisServer>,
        cluster: Option<RedisCluster>,
        worker: WorkerArgs,
        seed: u64,
        shards: Option<u16>,
    ) -> anyhow::Result<Harness> {
        let dir = std::env::temp_dir().join(format!(
            "dq-chaos-{}-{scenario}-{}",
            std::process::id(),
            now_us()
        ));
        std::fs::create_dir_all(&dir)?;
        let mut config = crate::config(&url)?;
        if let Some(shards) = shards {
            config = config.shards(shards);
        }
        let client = dq::Client::connect(config.build()?).await?;
        let worker = WorkerArgs {
            url: url.clone(),
            ..worker
        };
        Ok(Harness {
            dir,
            redis: redis.map(|r| Arc::new(Mutex::new(r))),
            cluster: cluster.map(|c| Arc::new(Mutex::new(c))),
            url,
            client,
            worker,
            workers: Vec::new(),
            faults: Vec::new(),
            rng: Rng::new(seed),
            ledger: Ledger::default(),
            exit_ms: Vec::new(),
            ended_us: HashMap::new(),
            taken_back_us: HashMap::new(),
            proxy: None,
            clock_offsets_ms: Vec::new(),
            topics: vec![TOPIC.to_owned()],
            started: Instant::now(),
        })
    }

    /// Spawns `n` workers with the harness' worker settings and waits until they have
    /// registered.
    pub(crate) async fn spawn_workers(&mut self, n: usize) -> anyhow::Result<()> {
        let args = self.worker.clone();
        for _ in 0..n {
            let slot = self.workers.len();
            let child = self.spawn_worker(slot, &args)?;
            self.workers.push(Some(child));
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let live = self.client.workers().await.map(|w| w.len()).unwrap_or(0);
            if live >= self.workers.len() {
                return Ok(());
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "only {live} of {} workers registered within 30 s; see {}",
                self.workers.len(),
                self.dir.display()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Spawns one extra worker with other settings (a holding worker, say); returns its slot.
    pub(crate) fn spawn_extra(&mut self, args: &WorkerArgs) -> anyhow::Result<usize> {
        let slot = self.workers.len();
        let child = self.spawn_worker(slot, args)?;
        self.workers.push(Some(child));
        Ok(slot)
    }

    fn spawn_worker(&self, slot: usize, args: &WorkerArgs) -> anyhow::Result<Child> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("worker-{slot}.log")))?;
        let mut cmd = dq_testkit::process::this_program(["worker", "--url", &args.url])?;
        cmd.arg("--ledger")
            .arg(self.dir.join(format!("worker-{slot}.ledger")))
            .args(["--concurrency", &args.concurrency.to_string()])
            .args(["--work-min-ms", &args.work_min_ms.to_string()])
            .args(["--work-max-ms", &args.work_max_ms.to_string()])
            .args(["--lease-ms", &args.lease_ms.to_string()])
            .args(["--grace-ms", &args.grace_ms.to_string()]);
        if let Some(hold) = args.hold_ms {
            cmd.args(["--hold-ms", &hold.to_string()]);
        }
        if args.beat {
            cmd.arg("--beat");
        }
        if args.diamond {
            cmd.arg("--diamond");
        }
        if args.events {
            cmd.arg("--events");
        }
        let offset = self.clock_offsets_ms.get(slot).copied().unwrap_or(0);
        if offset != 0 {
            // The process' wall clock is off by `offset` (its monotonic clock is not: tokio's
            // timers stay sane, as on a host whose NTP is wrong).
            cmd.env("LD_PRELOAD", faketime_library()?)
                .env("FAKETIME", format!("{:+}", offset as f64 / 1000.0))
                .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
                .arg(format!("--clock-offset-ms={offset}"));
        }
        Ok(cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()?)
    }

    /// The skew each worker measured between its clock and Redis' (ms), by slot; `None` for a
    /// worker that has not written it yet.
    pub(crate) fn measured_skews_ms(&self) -> Vec<Option<i64>> {
        (0..self.workers.len())
            .map(|slot| {
                let path = self.dir.join(format!("worker-{slot}.skew"));
                std::fs::read_to_string(path).ok()?.trim().parse().ok()
            })
            .collect()
    }

    pub(crate) fn worker_slots(&self) -> usize {
        self.workers.len()
    }

    /// SIGKILL of a worker (our own child, by its pid), then a new worker in its place.
    pub(crate) fn kill_and_restart(&mut self, slot: usize) -> anyhow::Result<()> {
        let start = now_us();
        self.kill(slot);
        self.respawn(slot, "worker SIGKILL", start)
    }

    /// A new worker in `slot`, recording the fault that ended the one before (since `start_us`).
    fn respawn(&mut self, slot: usize, kind: &str, start_us: u64) -> anyhow::Result<()> {
        let args = self.worker.clone();
        self.workers[slot] = Some(self.spawn_worker(slot, &args)?);
        self.faults.push(Fault {
            kind: kind.into(),
            start_us,
            end_us: now_us(),
        });
        Ok(())
    }

    /// SIGKILL of a worker, not restarted.
    pub(crate) fn kill(&mut self, slot: usize) {
        if let Some(mut child) = self.workers[slot].take() {
            let pid = child.id();
            dq_testkit::process::kill(&mut child);
            self.ended_us.entry(pid).or_default().push(now_us());
        }
    }

    /// SIGTERM to a worker; waits for it to exit and records how long that took. Returns
    /// false when it did not exit within `limit` (it is then killed).
    pub(crate) async fn terminate(&mut self, slot: usize, limit: Duration) -> bool {
        let Some(mut child) = self.workers[slot].take() else {
            return true;
        };
        let start = Instant::now();
        let pid = child.id();
        let _ = dq_testkit::process::terminate(pid);
        loop {
            if let Ok(Some(_)) = child.try_wait() {
                self.exit_ms
                    .push(u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX));
                self.ended_us.entry(pid).or_default().push(now_us());
                return true;
            }
            if start.elapsed() > limit {
                dq_testkit::process::kill(&mut child);
                self.exit_ms.push(u64::MAX);
                self.ended_us.entry(pid).or_default().push(now_us());
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// SIGTERM then a new worker in its place.
    pub(crate) async fn terminate_and_restart(&mut self, slot: usize) -> anyhow::Result<()> {
        let start = now_us();
        let limit = Duration::from_millis(self.worker.grace_ms) + Duration::from_secs(5);
        self.terminate(slot, limit).await;
        self.respawn(slot, "worker SIGTERM", start)
    }

    /// Sends a command to Redis on a connection of its own, from a blocking thread (DEBUG
    /// SLEEP blocks until Redis wakes up). Records it as a fault from send to reply.
    pub(crate) async fn redis_fault(&mut self, kind: &str, args: &[&str]) -> String {
        let redis = self.single();
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        let start = now_us();
        let reply = tokio::task::spawn_blocking(move || {
            let port = redis.lock().map(|r| r.port()).unwrap_or(0);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            raw_commands(port, &[&args], Duration::from_secs(60))
                .trim()
                .to_owned()
        })
        .await
        .unwrap_or_else(|e| format!("command thread failed: {e}"));
        self.faults.push(Fault {
            kind: kind.to_owned(),
            start_us: start,
            end_us: now_us(),
        });
        reply
    }

    /// Records a fault that ends later than its command returns (CLIENT PAUSE).
    pub(crate) fn record(&mut self, kind: &str, start_us: u64, end_us: u64) {
        self.faults.push(Fault {
            kind: kind.to_owned(),
            start_us,
            end_us,
        });
    }

    /// Records a fault that began at `start_us` and is over now.
    pub(crate) fn record_since(&mut self, kind: &str, start_us: u64) {
        self.record(kind, start_us, now_us());
    }

    /// Pushes `n` jobs of the scenario's topic in one batch, job `i` shaped by `shape` (its
    /// id, due time, options); what was acknowledged, as `produce` reports it.
    pub(crate) async fn push_batch(
        &self,
        n: u64,
        shape: impl Fn(dq::push::PushBuilder, u64) -> dq::push::PushBuilder,
    ) -> anyhow::Result<Pushes> {
        let jobs = (0..n).map(|i| {
            let job = crate::Job {
                n: i,
                pad: String::new(),
            };
            shape(self.client.push_to(crate::TOPIC, &job), i)
        });
        let pushed = self.client.push_batch(jobs).await?;
        let acked_at = now_us();
        Ok(Pushes {
            planned: usize::try_from(n)?,
            acked: pushed
                .iter()
                .map(|p| (p.id.to_string(), acked_at))
                .collect(),
            ..Pushes::default()
        })
    }

    /// SIGKILL of redis-server; it stays down for `down`, then starts again on the same port
    /// and directory (its AOF is loaded).
    pub(crate) async fn kill_redis(&mut self, down: Duration) -> u64 {
        let redis = self.single();
        let start = now_us();
        tokio::task::spawn_blocking(move || {
            if let Ok(mut r) = redis.lock() {
                r.kill();
                std::thread::sleep(down);
                r.restart();
            }
        })
        .await
        .ok();
        self.faults.push(Fault {
            kind: "redis SIGKILL".into(),
            start_us: start,
            end_us: now_us(),
        });
        start
    }

    pub(crate) fn single(&self) -> Arc<Mutex<RedisServer>> {
        self.redis
            .clone()
            .expect("a scenario on one redis-server, not a cluster")
    }

    /// The port of the cluster master that serves `shard`'s keys.
    pub(crate) async fn master_of_shard(&self, shard: u16) -> anyhow::Result<u16> {
        let cluster = self.cluster.clone().expect("a cluster scenario");
        let key = ShardKeys::new(NAMESPACE, shard).jobs();
        let port = tokio::task::spawn_blocking(move || {
            cluster
                .lock()
                .map(|c| c.master_of(&key))
                .map_err(|_| anyhow::anyhow!("cluster lock"))
        })
        .await??;
        Ok(port)
    }

    /// The shards whose keys the master on `port` serves.
    pub(crate) async fn shards_of_master(
        &self,
        port: u16,
    ) -> anyhow::Result<std::collections::HashSet<u16>> {
        let mut out = std::collections::HashSet::new();
        for shard in 0..self.client.config().shards {
            if self.master_of_shard(shard).await? == port {
                out.insert(shard);
            }
        }
        Ok(out)
    }

    /// The ports of the cluster's masters now.
    pub(crate) async fn master_ports(&self) -> anyhow::Result<Vec<u16>> {
        let cluster = self.cluster.clone().expect("a cluster scenario");
        tokio::task::spawn_blocking(move || {
            cluster
                .lock()
                .map(|c| c.masters().iter().map(|n| n.port()).collect())
                .map_err(|_| anyhow::anyhow!("cluster lock"))
        })
        .await?
    }

    /// Moves the slot of `shard` from the master on `from` to the one on `to`, `masters` being
    /// every master's port, as `redis-cli --cluster reshard --cluster-pipeline 1` does:
    /// IMPORTING and MIGRATING, then one key per `MIGRATE` with `pause` between them (dq keeps
    /// working meanwhile, with the slot's keys split between the two nodes), then `SETSLOT
    /// NODE` on every master. The ready and dead lists go last, `lists_after` after the others:
    /// redis-cli moves keys in whatever order the node lists them, and this is the order in
    /// which a script that writes a list it did not declare goes wrong. `MIGRATE` refuses a key the new node already has (BUSYKEY), as
    /// redis-cli's reshard does; the key is then moved with REPLACE, as `--cluster-replace`
    /// would, overwriting the new node's copy. Returns (keys moved, keys that were busy).
    pub(crate) async fn move_shard(
        &self,
        shard: u16,
        from: u16,
        to: u16,
        masters: &[u16],
        pause: Duration,
        lists_after: Duration,
    ) -> anyhow::Result<(u64, u64)> {
        let key = ShardKeys::new(NAMESPACE, shard).jobs();
        let slot = last_line(&self.node_command(from, &["CLUSTER", "KEYSLOT", &key]).await)
            .trim_start_matches(':')
            .to_owned();
        let from_id = last_line(&self.node_command(from, &["CLUSTER", "MYID"]).await);
        let to_id = last_line(&self.node_command(to, &["CLUSTER", "MYID"]).await);
        let ok = |what: &str, reply: String| {
            anyhow::ensure!(reply.starts_with("+OK"), "{what} answered {reply:?}");
            Ok(())
        };
        ok(
            "SETSLOT IMPORTING",
            self.node_command(to, &["CLUSTER", "SETSLOT", &slot, "IMPORTING", &from_id])
                .await,
        )?;
        ok(
            "SETSLOT MIGRATING",
            self.node_command(from, &["CLUSTER", "SETSLOT", &slot, "MIGRATING", &to_id])
                .await,
        )?;
        let (mut moved, mut busy) = (0, 0);
        let to_port = to.to_string();
        // The lists last, after a longer pause: the split that scripts must not write across.
        let listed = self
            .node_command(from, &["CLUSTER", "GETKEYSINSLOT", &slot, "1000"])
            .await;
        let is_list = |k: &str| k.contains(":ready:") || k.contains(":dead:");
        let mut keys: Vec<String> = listed
            .lines()
            .filter(|l| !l.starts_with('*') && !l.starts_with('$') && !l.is_empty())
            .map(str::to_owned)
            .collect();
        keys.sort_by_key(|k| is_list(k));
        let mut lists_begun = false;
        loop {
            let key = match (!keys.is_empty()).then(|| keys.remove(0)) {
                Some(k) => k,
                None => {
                    // Keys made since the listing (a topic's first list, a new dead letter).
                    let reply = self
                        .node_command(from, &["CLUSTER", "GETKEYSINSLOT", &slot, "1"])
                        .await;
                    match reply.lines().nth(2) {
                        Some(k) => k.to_owned(),
                        None => break,
                    }
                }
            };
            if is_list(&key) && !lists_begun {
                lists_begun = true;
                tokio::time::sleep(lists_after).await;
            }
            let mut args = vec!["MIGRATE", "127.0.0.1", &to_port, "", "0", "10000"];
            let plain = self
                .node_command(from, &[&args[..], &["KEYS", &key]].concat())
                .await;
            if plain.contains("BUSYKEY") {
                busy += 1;
                args.push("REPLACE");
                let replaced = self
                    .node_command(from, &[&args[..], &["KEYS", &key]].concat())
                    .await;
                ok("MIGRATE REPLACE", replaced)?;
            } else if plain.starts_with("+NOKEY") {
                continue; // gone meanwhile (a list emptied by a fetch)
            } else {
                ok("MIGRATE", plain)?;
            }
            moved += 1;
            tokio::time::sleep(pause).await;
        }
        // The new owner first (it bumps its epoch), then the old one, then the others.
        let mut order = vec![to, from];
        order.extend(masters.iter().filter(|&&p| p != to && p != from));
        for port in order {
            ok(
                "SETSLOT NODE",
                self.node_command(port, &["CLUSTER", "SETSLOT", &slot, "NODE", &to_id])
                    .await,
            )?;
        }
        Ok((moved, busy))
    }

    /// Sends one command to the node on `port` (from a blocking thread) and returns the reply.
    pub(crate) async fn node_command(&self, port: u16, args: &[&str]) -> String {
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            raw_commands(port, &[&args], Duration::from_secs(60))
                .trim()
                .to_owned()
        })
        .await
        .unwrap_or_else(|e| format!("command thread failed: {e}"))
    }

    /// SIGKILL of the cluster master that serves shard 0, then waits until its replica has
    /// taken over (the cluster says `cluster_state:ok` again), then starts the killed node
    /// again (it rejoins as a replica). With `lag`, replication is broken that long before the
    /// kill: the writes of that time are on the master only, as when replication lags under
    /// load or on a slow link. Returns when the master was killed (us).
    pub(crate) async fn kill_cluster_master(
        &mut self,
        lag: Option<Duration>,
    ) -> anyhow::Result<u64> {
        let cluster = self.cluster.clone().expect("a cluster scenario");
        let key = ShardKeys::new(NAMESPACE, 0).jobs();
        let (start, took_over) = tokio::task::spawn_blocking(move || {
            let mut c = cluster
                .lock()
                .map_err(|_| anyhow::anyhow!("cluster lock"))?;
            let port = c.master_of(&key);
            if let Some(lag) = lag {
                // Break replication: a password the replica does not know (connections already
                // made keep working), then cut its link; its reconnections now fail, so for
                // `lag` the master's writes reach no replica. (Freezing the replica is not
                // enough: the kernel's socket buffers carry the writes across.)
                // One connection for both: after the password, a new connection would need it.
                let reply = raw_commands(
                    port,
                    &[
                        &["CONFIG", "SET", "requirepass", "dq-chaos-broken-link"],
                        &["CLIENT", "KILL", "TYPE", "replica"],
                    ],
                    Duration::from_secs(5),
                );
                anyhow::ensure!(
                    reply.contains(":1"),
                    "cutting the replica off answered {reply:?}"
                );
                std::thread::sleep(lag);
            }
            let start = now_us();
            c.node_mut(port).kill();
            let survivor = c
                .nodes()
                .iter()
                .find(|n| n.port() != port)
                .map(|n| n.port())
                .ok_or_else(|| anyhow::anyhow!("no other node"))?;
            let deadline = Instant::now() + Duration::from_secs(30);
            // The survivor first notices the failure, then the replica's promotion.
            loop {
                let info = c.node(survivor).command(&["CLUSTER", "INFO"]);
                let masters = c.masters().len();
                if info.contains("cluster_state:ok") && masters == 3 && now_us() > start + 500_000 {
                    break;
                }
                if Instant::now() > deadline {
                    let logs: Vec<String> = c
                        .nodes()
                        .iter()
                        .map(|n| {
                            let log = std::fs::read_to_string(n.dir().join("redis.log"))
                                .unwrap_or_default();
                            let tail: Vec<&str> = log.lines().rev().take(8).collect();
                            format!("node {}:\n{}", n.port(), tail.join("\n"))
                        })
                        .collect();
                    anyhow::bail!(
                        "no replica took over in 30 s; the nodes' logs end:\n{}",
                        logs.join("\n")
                    );
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let took_over = now_us();
            c.node_mut(port).restart();
            Ok::<_, anyhow::Error>((start, took_over))
        })
        .await??;
        self.faults.push(Fault {
            kind: "cluster master SIGKILL".into(),
            start_us: start,
            end_us: took_over,
        });
        Ok(start)
    }

    /// A raw connection to the test Redis, for the checks the oracle makes.
    pub(crate) async fn redis_conn(&self) -> anyhow::Result<redis::aio::MultiplexedConnection> {
        // A long SLOWLOG or HKEYS reply takes longer than the client's default timeout.
        let config =
            redis::AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(60)));
        Ok(redis::Client::open(self.url.as_str())?
            .get_multiplexed_async_connection_with_config(&config)
            .await?)
    }

    /// Jobs in the `jobs` hash that are in none of delayed, ready, running or dead: a job like
    /// that would never run. Checked right after Redis comes back from a crash.
    pub(crate) async fn orphans(&self) -> anyhow::Result<usize> {
        let keys = ShardKeys::new(NAMESPACE, 0);
        let topic = Topic::new(TOPIC)?;
        let mut c = self.redis_conn().await?;
        let jobs: Vec<String> = redis::cmd("HKEYS")
            .arg(keys.jobs())
            .query_async(&mut c)
            .await?;
        let mut placed: HashSet<String> = HashSet::new();
        for key in [keys.delayed(), keys.inflight(), keys.dead(&topic)] {
            let members: Vec<String> = redis::cmd("ZRANGE")
                .arg(key)
                .arg(0)
                .arg(-1)
                .query_async(&mut c)
                .await?;
            placed.extend(members);
        }
        let ready: Vec<String> = redis::cmd("LRANGE")
            .arg(keys.ready(&topic))
            .arg(0)
            .arg(-1)
            .query_async(&mut c)
            .await?;
        placed.extend(ready.into_iter().map(|id| format!("{TOPIC}:{id}")));
        Ok(jobs.iter().filter(|j| !placed.contains(*j)).count())
    }

    /// Waits until Redis has no delayed, ready or running job of the topics and every acked
    /// push ran or was dead-lettered, or until nothing pending is left to wait for, or `limit`.
    pub(crate) async fn drain(&mut self, acked: &HashMap<String, u64>, limit: Duration) {
        let deadline = Instant::now() + limit;
        let mut idle_since: Option<Instant> = None;
        loop {
            let _ = self.ledger.refresh(&self.dir);
            let pending = self.pending().await;
            if pending == Some(0) {
                let handled: HashSet<&str> =
                    self.ledger.runs.iter().map(|r| r.id.as_str()).collect();
                let dead = self.dead_ids().await.unwrap_or_default();
                let missing = acked
                    .keys()
                    .filter(|id| !handled.contains(id.as_str()) && !dead.contains(*id))
                    .count();
                if missing == 0 {
                    return;
                }
                // Nothing is pending, yet jobs are missing: they are lost; stop waiting soon.
                let since = *idle_since.get_or_insert_with(Instant::now);
                if since.elapsed() > Duration::from_secs(3) {
                    return;
                }
            } else {
                idle_since = None;
            }
            if Instant::now() > deadline {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Delayed, ready and running jobs of the topics; `None` when Redis did not answer.
    async fn pending(&self) -> Option<u64> {
        let mut pending = 0;
        for topic in &self.topics {
            let c = self.client.counts(topic).await.ok()?;
            pending += c.delayed + c.ready + c.running;
        }
        Some(pending)
    }

    /// The ids of the dead letters of the topics.
    async fn dead_ids(&self) -> anyhow::Result<HashSet<String>> {
        let mut ids = HashSet::new();
        for topic in &self.topics {
            let mut cursor = dq::admin::Cursor::START;
            loop {
                let page = self
                    .client
                    .jobs(topic, JobState::Dead, cursor, 1000)
                    .await?;
                ids.extend(page.jobs.into_iter().map(|j| j.id.to_string()));
                match page.next {
                    Some(next) => cursor = next,
                    None => break,
                }
            }
        }
        Ok(ids)
    }

    /// SIGTERM to every worker, each given the grace period and 5 s more.
    pub(crate) async fn stop_workers(&mut self) {
        let limit = Duration::from_millis(self.worker.grace_ms) + Duration::from_secs(5);
        for slot in 0..self.workers.len() {
            let _ = self.terminate(slot, limit).await;
        }
    }

    /// Command latencies of dq's scripts (EVALSHA) from SLOWLOG, in microseconds, for a
    /// server started with `slowlog-log-slower-than 0`.
    pub(crate) async fn script_latency(&self) -> anyhow::Result<Value> {
        let mut c = self.redis_conn().await?;
        let entries: Vec<redis::Value> = redis::cmd("SLOWLOG")
            .arg("GET")
            .arg(1_000_000)
            .query_async(&mut c)
            .await?;
        let names: HashMap<String, &str> = dq::store::script_hashes()
            .into_iter()
            .map(|(name, sha)| (sha, name))
            .collect();
        let mut us = Vec::new();
        let mut by_script: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
        for entry in entries {
            let redis::Value::Array(fields) = entry else {
                continue;
            };
            let (Some(redis::Value::Int(d)), Some(redis::Value::Array(args))) =
                (fields.get(2), fields.get(3))
            else {
                continue;
            };
            let name = match args.first() {
                Some(redis::Value::BulkString(b)) => String::from_utf8_lossy(b).to_lowercase(),
                _ => continue,
            };
            if name == "evalsha" || name == "eval" {
                us.push(*d as f64);
                let script = match args.get(1) {
                    Some(redis::Value::BulkString(sha)) => names
                        .get(String::from_utf8_lossy(sha).as_ref())
                        .copied()
                        .unwrap_or("other"),
                    _ => "other",
                };
                by_script.entry(script).or_default().push(*d as f64);
            }
        }
        let mut out = summary(&mut us);
        if let Some(obj) = out.as_object_mut() {
            for (script, mut xs) in by_script {
                obj.insert(script.to_owned(), summary(&mut xs));
            }
        }
        Ok(out)
    }

    /// What the oracle found, as one JSON object.
    pub(crate) async fn report(&mut self, pushes: &Pushes) -> anyhow::Result<Value> {
        let _ = self.ledger.refresh(&self.dir);
        let dead = self.dead_ids().await.unwrap_or_default();
        let by_id = self.ledger.by_id();
        let acked = &pushes.acked;
        let handled = acked.keys().filter(|id| by_id.contains_key(id.as_str()));
        let handled_unique = handled.clone().count();
        let duplicated = handled
            .clone()
            .filter(|id| by_id[id.as_str()].len() > 1)
            .count();
        let second_jobs = by_id
            .values()
            .filter(|runs| runs.iter().filter(|r| r.attempt == 1).count() > 1)
            .count();
        let dead_acked = acked
            .keys()
            .filter(|id| !by_id.contains_key(id.as_str()) && dead.contains(*id))
            .count();
        let lost_ids: Vec<&String> = acked
            .keys()
            .filter(|id| !by_id.contains_key(id.as_str()) && !dead.contains(*id))
            .collect();
        let mut lateness: Vec<f64> = by_id
            .values()
            .filter_map(|runs| runs.iter().min_by_key(|r| r.start_us))
            .map(|r| (r.start_us as f64 - r.due_us as f64) / 1000.0)
            .collect();
        let recovery_ms = self
            .faults
            .iter()
            .filter_map(|f| {
                self.ledger
                    .runs
                    .iter()
                    .filter(|r| r.end_us > f.end_us)
                    .map(|r| r.end_us)
                    .min()
                    .map(|first| (first - f.end_us) as f64 / 1000.0)
            })
            .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))));
        let mut errors = pushes.errors.clone();
        for (kind, n) in self.worker_log_errors() {
            *errors.entry(kind).or_default() += n;
        }
        let mut lost_sample: Vec<&String> = lost_ids.clone();
        lost_sample.sort();
        lost_sample.truncate(10);
        let integrity = self
            .integrity()
            .await
            .unwrap_or_else(|e| json!(e.to_string()));
        Ok(json!({
            "jobs": pushes.planned,
            "workers": self.worker_slots(),
            "faults": self.faults.iter().fold(BTreeMap::new(), |mut m, f| {
                *m.entry(f.kind.clone()).or_insert(0u64) += 1;
                m
            }),
            "fault_time_s": self.faults.iter().map(|f| (f.end_us - f.start_us) as f64 / 1e6).sum::<f64>(),
            "pushed_acked": acked.len(),
            "push_errors": pushes.errors.values().sum::<u64>(),
            "push_gave_up": pushes.gave_up,
            "handled_unique": handled_unique,
            "runs": self.ledger.runs.len(),
            "duplicated": duplicated,
            "second_jobs": second_jobs,
            "dead": dead_acked,
            "lost": lost_ids.len(),
            "lost_sample": lost_sample,
            "lateness_ms": summary(&mut lateness),
            "recovery_ms": recovery_ms,
            "redis_errors": errors,
            "push_error_samples": pushes.error_samples,
            "ledger_malformed": self.ledger.malformed,
            "redis_after": integrity,
            "elapsed_s": self.started.elapsed().as_secs_f64(),
        }))
    }

    /// Warnings and errors in the workers' logs, by kind.
    fn worker_log_errors(&self) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return out;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_none_or(|e| e != "log") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            for line in text.lines() {
                if line.contains(" WARN ") || line.contains(" ERROR ") {
                    *out.entry(format!("worker {}", kind_of_text(line)))
                        .or_default() += 1;
                }
            }
        }
        out
    }

    /// What is left in Redis after the drain, over every shard and the topics: nothing but
    /// dead letters should be.
    async fn integrity(&self) -> anyhow::Result<Value> {
        let topics = self
            .topics
            .iter()
            .map(|t| Topic::new(t.as_str()))
            .collect::<Result<Vec<Topic>, _>>()?;
        let shards = self.client.config().shards;
        let mut sums = [0u64; 6];
        if let Some(seeds) = self.url.strip_prefix("cluster:") {
            let client = redis::cluster::ClusterClient::new(seeds.split(',').collect::<Vec<_>>())?;
            let mut c = client.get_async_connection().await?;
            for shard in 0..shards {
                add(&mut sums, shard_counts(&mut c, shard, &topics).await?);
            }
        } else {
            let mut c = self.redis_conn().await?;
            for shard in 0..shards {
                add(&mut sums, shard_counts(&mut c, shard, &topics).await?);
            }
        }
        let [jobs, delayed, inflight, ready, dead, leases] = sums;
        Ok(json!({
            "jobs": jobs, "delayed": delayed, "inflight": inflight, "ready": ready,
            "dead": dead, "leases": leases,
            "clean": delayed == 0 && inflight == 0 && ready == 0 && leases == 0 && jobs == dead,
        }))
    }

    /// Removes the scenario's files unless asked to keep them.
    pub(crate) fn cleanup(&self, keep: bool) {
        if keep {
            eprintln!("dq-chaos: ledgers and logs kept in {}", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        for slot in 0..self.workers.len() {
            self.kill(slot);
        }
    }
}

fn add(sums: &mut [u64; 6], counts: [u64; 6]) {
    for (s, c) in sums.iter_mut().zip(counts) {
        *s += c;
    }
}

/// Job records, delayed, running (the inflight set's finite scores: not its `:skiplist` keeper),
/// ready and dead jobs (of `topics`) of one shard, and lease tokens held (the `leases` hash
/// without its `:next` counter and its `:table` field).
async fn shard_counts<C: redis::aio::ConnectionLike>(
    c: &mut C,
    shard: u16,
    topics: &[Topic],
) -> anyhow::Result<[u64; 6]> {
    let keys = ShardKeys::new(NAMESPACE, shard);
    type Counts = (u64, u64, u64, u64, u64, u64);
    let (jobs, delayed, inflight, tokens, counter, table): Counts = redis::pipe()
        .cmd("HLEN")
        .arg(keys.jobs())
        .cmd("ZCARD")
        .arg(keys.delayed())
        .cmd("ZCOUNT")
        .arg(keys.inflight())
        .arg("-inf")
        .arg("(+inf")
        .cmd("HLEN")
        .arg(keys.leases())
        .cmd("HEXISTS")
        .arg(keys.leases())
        .arg(":next")
        .cmd("HEXISTS")
        .arg(keys.leases())
        .arg(":table")
        .query_async(&mut *c)
        .await?;
    let (mut ready, mut dead) = (0u64, 0u64);
    for topic in topics {
        let (r, d): (u64, u64) = redis::pipe()
            .cmd("LLEN")
            .arg(keys.ready(topic))
            .cmd("ZCARD")
            .arg(keys.dead(topic))
            .query_async(&mut *c)
            .await?;
        ready += r;
        dead += d;
    }
    Ok([
        jobs,
        delayed,
        inflight,
        ready,
        dead,
        tokens.saturating_sub(counter + table),
    ])
}

/// p50, p99 and max of a sample.
pub(crate) fn summary(xs: &mut [f64]) -> Value {
    if xs.is_empty() {
        return json!(null);
    }
    xs.sort_by(f64::total_cmp);
    let at = |q: f64| dq_testkit::stats::percentile(xs, q);
    let r = |x: f64| (x * 100.0).round() / 100.0;
    json!({"n": xs.len(), "p50": r(at(0.5)), "p99": r(at(0.99)), "max": r(at(1.0))})
}

/// An error's kind for the tally: connection, timeout, oom, loading, readonly, script or other, from
/// [`dq::Error::kind`] and the Redis error code (worker logs, which are text, go through
/// `kind_of_text`).
pub(crate) fn kind_of(e: &dq::Error) -> &'static str {
    fn code(e: &dq::Error) -> Option<&str> {
        match e {
            dq::Error::Redis { source, .. } => redis_error(source.as_ref())?.code(),
            dq::Error::Batch(inner) => code(inner),
            _ => None,
        }
    }
    let code = code(e);
    match (e.kind(), code) {
        (dq::ErrorKind::Full, _) => "oom",
        (_, Some("LOADING")) => "loading",
        (_, Some("NOSCRIPT")) => "script",
        (dq::ErrorKind::Unavailable, _) if is_timeout(e) => "timeout",
        (dq::ErrorKind::Unavailable, _) => "connection",
        (dq::ErrorKind::ReadOnly, _) => "readonly",
        (dq::ErrorKind::Script | dq::ErrorKind::Other, _) => "script",
        _ => "other",
    }
}

fn is_timeout(e: &dq::Error) -> bool {
    match e {
        dq::Error::Timeout { .. } => true,
        dq::Error::Redis { source, .. } => {
            redis_error(source.as_ref()).is_some_and(|r| r.is_timeout())
        }
        dq::Error::Batch(inner) => is_timeout(inner),
        _ => false,
    }
}

/// The redis-rs error behind a [`dq::Error::Redis`].
fn redis_error<'a>(
    source: &'a (dyn std::error::Error + Send + Sync + 'static),
) -> Option<&'a redis::RedisError> {
    source.downcast_ref::<redis::RedisError>()
}

fn kind_of_text(text: &str) -> &'static str {
    let lower = text.to_lowercase();
    if text.contains("OOM") {
        "oom"
    } else if text.contains("READONLY") || lower.contains("read-only replica") {
        "readonly"
    } else if text.contains("LOADING") || lower.contains("loading the dataset") {
        "loading"
    } else if lower.contains("timed out") || lower.contains("timeout") {
        "timeout"
    } else if text.contains("@user_script")
        || text.contains("NOSCRIPT")
        || text.contains("Error running script")
    {
        "script"
    } else if lower.contains("connect")
        || lower.contains("broken pipe")
        || lower.contains("reset")
        || lower.contains("refused")
        || lower.contains("closed")
        || lower.contains("eof")
    {
        "connection"
    } else {
        "other"
    }
}

/// The last line of a reply: the value of a bulk or integer reply.
fn last_line(reply: &str) -> String {
    reply.lines().last().unwrap_or_default().trim().to_owned()
}

/// Commands in RESP on one fresh connection, each reply awaited up to `timeout` (DEBUG SLEEP
/// answers only when Redis wakes up); their raw replies, or what failed.
fn raw_commands(port: u16, commands: &[&[&str]], timeout: Duration) -> String {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return "connect failed".into();
    };
    let _ = stream.set_read_timeout(Some(timeout));
    let mut out = String::new();
    for args in commands {
        let mut req = format!("*{}\r\n", args.len());
        for a in *args {
            req.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        if stream.write_all(req.as_bytes()).is_err() {
            return out + "write failed";
        }
        let mut buf = vec![0u8; 64 * 1024];
        match stream.read(&mut buf) {
            Ok(n) => out.push_str(&String::from_utf8_lossy(&buf[..n])),
            Err(e) => return out + &format!("read failed: {e}"),
        }
    }
    out
}

/// libfaketime's preload library (Debian's `faketime` package).
fn faketime_library() -> anyhow::Result<PathBuf> {
    let found = std::fs::read_dir("/usr/lib")?
        .flatten()
        .map(|arch| arch.path().join("faketime/libfaketime.so.1"))
        .chain([PathBuf::from("/usr/lib/faketime/libfaketime.so.1")])
        .find(|p| p.exists());
    found.ok_or_else(|| {
        anyhow::anyhow!(
            "libfaketime is not installed: install it (apt-get install -y faketime); scripts/test does this for you"
        )
    })
}

/// The producer's plan: `n` jobs pushed at an even pace over `window`, each due `delay_ms`
/// (a range) after its push time, at most `concurrency` pushes in flight.
#[derive(Debug, Clone)]
pub(crate) struct PushPlan {
    pub(crate) n: usize,
    pub(crate) window: Duration,
    pub(crate) delay_ms: (u64, u64),
    pub(crate) payload_bytes: usize,
    pub(crate) concurrency: usize,
    /// How long one push is retried (same id) before the producer gives up on it.
    pub(crate) retry_for: Duration,
    /// How many groups the jobs are spread over (0: none): job `j<i>` is in group `g<i mod
    /// groups>` (its id `j<i>-<s>` on several shards: [`grouped_id`]).
    pub(crate) groups: u64,
    /// Each push is a diamond workflow `d<i>` of four jobs ([`crate::diamond`]) instead of
    /// one job `j<i>`; its first step is due as the job would be, the others when released.
    pub(crate) diamonds: bool,
}

/// The id of job `i` of `group`: `j<i>`, or on a namespace of several shards, where every job
/// of a group lives in its group's shard, `j<i>-<s>` with the least `s` whose id leads there
/// when `j<i>` does not.
pub(crate) fn grouped_id(i: usize, group: &str, shards: u16) -> String {
    let topic = dq::Topic::new(crate::TOPIC).unwrap_or_else(|_| unreachable!("a valid topic"));
    let home = dq::store::shard_of_group(&topic, group, shards);
    let leads_home = |id: &str| {
        dq::JobId::new(id)
            .map(|id| dq::store::shard_of(&topic, &id, shards) == home)
            .unwrap_or(false)
    };
    let plain = format!("j{i}");
    if leads_home(&plain) {
        return plain;
    }
    (0..)
        .map(|s| format!("j{i}-{s}"))
        .find(|id| leads_home(id))
        .unwrap_or(plain)
}

/// What the producer saw.
#[derive(Debug, Default)]
pub(crate) struct Pushes {
    pub(crate) planned: usize,
    /// Acknowledged pushes: id -> when the acknowledgement arrived (us).
    pub(crate) acked: HashMap<String, u64>,
    pub(crate) errors: BTreeMap<String, u64>,
    /// The first error message of each kind.
    pub(crate) error_samples: BTreeMap<String, String>,
    pub(crate) gave_up: u64,
}

/// Pushes the plan's jobs (or workflows); a push that fails is sent again with the same id
/// (never a second job) until it succeeds or `retry_for` runs out; an OOM refusal is not
/// retried. A workflow's acknowledgement acknowledges each of its steps' jobs.
pub(crate) async fn produce(client: dq::Client, plan: PushPlan, seed: u64) -> Pushes {
    let jobs_per_push = if plan.diamonds {
        crate::diamond::STEPS.len()
    } else {
        1
    };
    let pushes = Arc::new(Mutex::new(Pushes {
        planned: plan.n * jobs_per_push,
        ..Pushes::default()
    }));
    let permits = Arc::new(tokio::sync::Semaphore::new(plan.concurrency.max(1)));
    let mut rng = Rng::new(seed ^ 0x5eed);
    let start = Instant::now();
    let t0 = SystemTime::now();
    let pad = "x".repeat(plan.payload_bytes);
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..plan.n {
        let offset = plan.window.mul_f64(i as f64 / plan.n.max(1) as f64);
        tokio::time::sleep_until((start + offset).into()).await;
        let due = t0 + offset + Duration::from_millis(rng.range(plan.delay_ms.0, plan.delay_ms.1));
        let Ok(permit) = permits.clone().acquire_owned().await else {
            break;
        };
        let (client, pushes, pad) = (client.clone(), pushes.clone(), pad.clone());
        let (retry_for, groups, diamonds) = (plan.retry_for, plan.groups, plan.diamonds);
        tasks.spawn(async move {
            let _permit = permit;
            let id = if diamonds {
                crate::diamond::workflow_id(i)
            } else if groups > 0 {
                grouped_id(
                    i,
                    &format!("g{}", i as u64 % groups),
                    client.config().shards,
                )
            } else {
                format!("j{i}")
            };
            let job = Job { n: i as u64, pad };
            let deadline = Instant::now() + retry_for;
            loop {
                let pushed = if diamonds {
                    // A step's due time counts from its release: the first one's from the push.
                    let delay = due.duration_since(SystemTime::now()).unwrap_or_default();
                    crate::diamond::push(&client, &id, &job, delay)
                        .await
                        .map(drop)
                } else {
                    let mut push = client.push_to(TOPIC, &job).id(id.clone()).at(due);
                    if groups > 0 {
                        push = push.group(format!("g{}", i as u64 % groups));
                    }
                    push.await.map(drop)
                };
                match pushed {
                    Ok(()) => {
                        let ids = if diamonds {
                            crate::diamond::step_ids(&id)
                        } else {
                            vec![id]
                        };
                        if let Ok(mut p) = pushes.lock() {
                            let acked_at = now_us();
                            for id in ids {
                                p.acked.insert(id, acked_at);
                            }
                        }
                        return;
                    }
                    Err(e) => {
                        let kind = kind_of(&e);
                        let Ok(mut p) = pushes.lock() else { return };
                        *p.errors.entry(format!("push {kind}")).or_default() += 1;
                        p.error_samples
                            .entry(format!("push {kind}"))
                            .or_insert_with(|| e.to_string());
                        if kind == "oom" || Instant::now() > deadline {
                            p.gave_up += 1;
                            return;
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    Arc::try_unwrap(pushes)
        .ok()
        .and_then(|m| m.into_inner().ok())
        .unwrap_or_default()
}
