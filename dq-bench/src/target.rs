//! What the benchmark runs against: one redis-server (optionally with a replica), or a local
//! Redis Cluster of N masters (optionally one replica each), all on loopback ports, and how
//! dq connects to it: `--url` of the worker and producer processes is `redis://...` for one
//! server, or `cluster:redis://a,redis://b,...` for a cluster.

use dq_testkit::{RedisCluster, RedisServer};

/// The servers of one benchmark run, killed on drop.
#[derive(Debug)]
pub(crate) struct Target {
    single: Option<RedisServer>,
    replica: Option<RedisServer>,
    cluster: Option<RedisCluster>,
    pub(crate) wait_replicas: Option<u32>,
}

const PLAIN: &[&str] = &["--save", "", "--appendonly", "no"];

impl Target {
    /// `masters` = 0: one redis-server; otherwise a cluster of that many masters. `replicas`
    /// per master (0 or 1).
    pub(crate) fn start(masters: usize, replicas: usize, wait_replicas: Option<u32>) -> Target {
        if masters > 0 {
            return Target {
                single: None,
                replica: None,
                cluster: Some(RedisCluster::start(masters, replicas)),
                wait_replicas,
            };
        }
        let single = RedisServer::start_with(PLAIN);
        let replica = (replicas > 0).then(|| {
            let port = single.port().to_string();
            let r =
                RedisServer::start_with(&[PLAIN, &["--replicaof", "127.0.0.1", &port]].concat());
            while !r
                .command(&["INFO", "replication"])
                .contains("master_link_status:up")
            {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            r
        });
        Target {
            single: Some(single),
            replica,
            cluster: None,
            wait_replicas,
        }
    }

    /// The `--url` argument for worker and producer processes.
    pub(crate) fn url(&self) -> String {
        match (&self.single, &self.cluster) {
            (Some(s), _) => s.url(),
            (None, Some(c)) => format!("cluster:{}", c.urls().join(",")),
            (None, None) => unreachable!("a target has a server"),
        }
    }

    /// The masters (the one server, or the cluster's masters).
    pub(crate) fn masters(&self) -> Vec<&RedisServer> {
        match (&self.single, &self.cluster) {
            (Some(s), _) => vec![s],
            (None, Some(c)) => c.masters(),
            (None, None) => Vec::new(),
        }
    }

    /// `single`, `single+replica` or `cluster-<masters>[+replicas]`.
    pub(crate) fn describe(&self) -> String {
        match (&self.cluster, &self.replica) {
            (Some(c), _) => format!(
                "cluster-{}{}",
                c.masters().len(),
                if c.nodes().len() > c.masters().len() {
                    "+replicas"
                } else {
                    ""
                }
            ),
            (None, Some(_)) => "single+replica".into(),
            (None, None) => "single".into(),
        }
    }

    pub(crate) fn flushall(&self) {
        for m in self.masters() {
            m.command(&["FLUSHALL"]);
        }
    }

    /// CPU seconds used by the masters so far.
    pub(crate) fn cpu_s(&self) -> f64 {
        self.masters()
            .iter()
            .map(|m| info_field(m, "cpu", "used_cpu_sys:") + info_field(m, "cpu", "used_cpu_user:"))
            .sum()
    }

    /// Memory used by the masters, bytes.
    pub(crate) fn used_memory(&self) -> f64 {
        self.masters()
            .iter()
            .map(|m| info_field(m, "memory", "used_memory:"))
            .sum()
    }

    pub(crate) fn version(&self) -> String {
        self.masters()
            .first()
            .map(|m| m.command(&["INFO", "server"]))
            .and_then(|info| {
                info.lines()
                    .find_map(|l| l.strip_prefix("redis_version:"))
                    .map(|v| v.trim().to_owned())
            })
            .unwrap_or_else(|| "unknown".into())
    }

    /// Pins every node to `cpus` and this process (whose worker and producer processes inherit
    /// it) to the other CPUs of the machine.
    pub(crate) fn pin(&self, cpus: &[usize]) -> anyhow::Result<()> {
        let all = std::thread::available_parallelism()?.get();
        let others: Vec<usize> = (0..all).filter(|c| !cpus.contains(c)).collect();
        anyhow::ensure!(
            !others.is_empty() && cpus.iter().all(|&c| c < all),
            "--pin-redis {cpus:?} must leave at least one of the {all} CPUs to the benchmark"
        );
        let list = |cs: &[usize]| {
            cs.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(",")
        };
        let nodes = match (&self.single, &self.replica, &self.cluster) {
            (Some(s), r, _) => std::iter::once(s).chain(r.iter()).collect(),
            (None, _, Some(c)) => c.nodes().iter().collect(),
            (None, _, None) => Vec::new(),
        };
        let pids = nodes.iter().map(|n| (n.pid(), list(cpus)));
        for (pid, cpus) in pids.chain(std::iter::once((std::process::id(), list(&others)))) {
            let status = std::process::Command::new("taskset")
                .args(["-a", "-c", "-p", &cpus, &pid.to_string()])
                .stdout(std::process::Stdio::null())
                .status()?;
            anyhow::ensure!(status.success(), "taskset -a -c -p {cpus} {pid} failed");
        }
        eprintln!(
            "dq-bench: redis-server pinned to CPU {}, the benchmark to CPU {}",
            list(cpus),
            list(&others)
        );
        Ok(())
    }

    /// The first master's port, for the progress line.
    pub(crate) fn port(&self) -> u16 {
        self.masters().first().map_or(0, |m| m.port())
    }
}

fn info_field(server: &RedisServer, section: &str, name: &str) -> f64 {
    server
        .command(&["INFO", section])
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

/// A configuration for `url` as [`Target::url`] writes it.
pub(crate) fn config(url: &str, wait_replicas: Option<u32>) -> anyhow::Result<dq::Config> {
    let mut b = dq::Config::builder().namespace("bench");
    b = match url.strip_prefix("cluster:") {
        Some(seeds) => b.redis_cluster(seeds.split(',').map(str::to_owned)),
        None => b.redis_url(url),
    };
    // DQ_SHARDS (inherited by the worker and producer processes) overrides the default.
    if let Ok(shards) = std::env::var("DQ_SHARDS") {
        b = b.shards(shards.trim().parse()?);
    }
    // DQ_COMPACT=off (inherited too) stores nothing compact: the layout of jobs due sooner for
    // every job, to compare with in the same build.
    if std::env::var("DQ_COMPACT").is_ok_and(|v| v.trim() == "off") {
        b = b.compact(false);
    }
    if let Some(n) = wait_replicas {
        b = b.wait_replicas(n, std::time::Duration::from_secs(1));
    }
    Ok(b.build()?)
}
