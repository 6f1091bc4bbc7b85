//! A local Redis Cluster owned by a test, made of [`RedisServer`]s.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::net::{free_port, ping};
use crate::{RedisServer, INSTALL_HINT};

/// A local Redis Cluster owned by a test: `masters` masters with `replicas` replicas each, on
/// free loopback ports, joined with `redis-cli --cluster create`. Every node is killed (by its
/// pid) when the handle is dropped.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts the nodes, creates the cluster and waits until every node says `cluster_state:ok`.
    pub fn start(masters: usize, replicas: usize) -> RedisCluster {
        // A node that dies while the cluster is created (its bus port taken by another test's
        // server after its start) leaves `redis-cli --cluster create` waiting for the join for
        // good: that attempt is given up after a while and the cluster made again on new ports.
        let mut failed = Vec::new();
        for _ in 0..3 {
            let nodes: Vec<RedisServer> = (0..masters * (1 + replicas))
                .map(|_| start_node())
                .collect();
            if masters < 3 {
                // redis-cli --cluster create wants three masters: join one or two by hand.
                assert_eq!(
                    replicas, 0,
                    "a cluster of fewer than 3 masters has no replicas here"
                );
                join_by_hand(&nodes);
            } else if let Err(e) = create_with_redis_cli(&nodes, replicas) {
                failed.push(e);
                continue;
            }
            let cluster = RedisCluster { nodes };
            cluster.wait_ok(Duration::from_secs(30));
            return cluster;
        }
        panic!("could not create a local Redis Cluster in 3 attempts: {failed:?}");
    }

    /// Waits until every node reports `cluster_state:ok` and knows all its peers, and every
    /// replica has synced with its master.
    pub fn wait_ok(&self, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            let ok = self.nodes.iter().all(|n| {
                let info = n.command(&["CLUSTER", "INFO"]);
                let replication = n.command(&["INFO", "replication"]);
                info.contains("cluster_state:ok")
                    && info.contains(&format!("cluster_known_nodes:{}", self.nodes.len()))
                    && (replication.contains("role:master")
                        || replication.contains("master_link_status:up"))
            });
            if ok {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the cluster did not reach cluster_state:ok in {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `redis://127.0.0.1:<port>/` of every node, to use as seeds.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// The nodes, masters and replicas alike.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// The running nodes that are masters now (`INFO replication`).
    pub fn masters(&self) -> Vec<&RedisServer> {
        self.nodes
            .iter()
            .filter(|n| ping(n.port()))
            .filter(|n| n.command(&["INFO", "replication"]).contains("role:master"))
            .collect()
    }

    /// A node that answers now, to ask about the cluster.
    fn any_running(&self) -> &RedisServer {
        self.nodes
            .iter()
            .find(|n| ping(n.port()))
            .expect("a running node")
    }

    /// The port of the master that serves `key` now (`CLUSTER KEYSLOT` and `CLUSTER NODES`
    /// of a running node).
    pub fn master_of(&self, key: &str) -> u16 {
        let any = self.any_running();
        let reply = any.command(&["CLUSTER", "KEYSLOT", key]);
        let slot: u16 = reply
            .trim()
            .trim_start_matches(':')
            .parse()
            .expect("CLUSTER KEYSLOT answers a number");
        let nodes = any.command(&["CLUSTER", "NODES"]);
        nodes
            .lines()
            .filter(|l| l.contains("master") && !l.contains("fail"))
            .find_map(|line| {
                let serves = line.split_whitespace().skip(8).any(|range| {
                    let (a, b) = range.split_once('-').unwrap_or((range, range));
                    matches!((a.parse::<u16>(), b.parse::<u16>()), (Ok(a), Ok(b)) if (a..=b).contains(&slot))
                });
                serves.then(|| port_of(line)).flatten()
            })
            .expect("a master serves every slot")
    }

    /// The port of a replica of the master on `master_port`.
    pub fn replica_of(&self, master_port: u16) -> u16 {
        let nodes = self.any_running().command(&["CLUSTER", "NODES"]);
        let master_id = nodes
            .lines()
            .find(|l| port_of(l) == Some(master_port))
            .and_then(|l| l.split_whitespace().next())
            .expect("the master is known")
            .to_owned();
        nodes
            .lines()
            .filter(|l| l.split_whitespace().nth(3) == Some(master_id.as_str()))
            .find_map(port_of)
            .expect("the master has a replica")
    }

    /// The node listening on `port`.
    pub fn node(&self, port: u16) -> &RedisServer {
        self.nodes
            .iter()
            .find(|n| n.port() == port)
            .expect("a node of this cluster")
    }

    /// The node listening on `port`, to kill or restart it.
    pub fn node_mut(&mut self, port: u16) -> &mut RedisServer {
        self.nodes
            .iter_mut()
            .find(|n| n.port() == port)
            .expect("a node of this cluster")
    }
}

/// The port of the node a line of `CLUSTER NODES` describes (`<id> <ip>:<port>@<bus> ...`).
fn port_of(line: &str) -> Option<u16> {
    line.split_whitespace()
        .nth(1)?
        .split('@')
        .next()?
        .rsplit(':')
        .next()?
        .parse()
        .ok()
}

/// A server in cluster mode, with a bus port of its own.
fn start_node() -> RedisServer {
    // A fresh bus port at each try: one taken by another test's server between its choice
    // and the node's start fails the start ("Address already in use"), and would fail every
    // retry with the same port.
    let mut last_error = String::new();
    for _ in 0..5 {
        let bus = free_port().expect("a free port for the cluster bus");
        let bus = bus.to_string();
        match RedisServer::try_start(&[
            "--save",
            "",
            "--appendonly",
            "no",
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            "2000",
            "--cluster-port",
            &bus,
            // Replicas sync at once instead of after the default 5 s (a replica that has
            // not synced yet cannot take over from its master).
            "--repl-diskless-sync-delay",
            "0",
        ]) {
            Ok(node) => return node,
            Err(e) => last_error = e,
        }
    }
    panic!("could not start a cluster node: {last_error}");
}

/// One or two masters: each is given its share of the slots and meets the first.
fn join_by_hand(nodes: &[RedisServer]) {
    let masters = nodes.len();
    let per = 16384 / masters;
    for (i, node) in nodes.iter().enumerate() {
        let first = (i * per).to_string();
        let last = if i + 1 == masters {
            16383
        } else {
            (i + 1) * per - 1
        }
        .to_string();
        let reply = node.command(&["CLUSTER", "ADDSLOTSRANGE", &first, &last]);
        assert!(reply.starts_with("+OK"), "CLUSTER ADDSLOTSRANGE: {reply}");
        if i > 0 {
            let port = nodes[0].port().to_string();
            node.command(&["CLUSTER", "MEET", "127.0.0.1", &port]);
        }
    }
}

/// Three masters or more: `redis-cli --cluster create` with `replicas` replicas a master,
/// given up (killed, by its pid) after 30 s.
fn create_with_redis_cli(nodes: &[RedisServer], replicas: usize) -> Result<(), String> {
    let addrs: Vec<String> = nodes
        .iter()
        .map(|n| format!("127.0.0.1:{}", n.port()))
        .collect();
    let mut child = Command::new("redis-cli")
        .args(["--cluster", "create"])
        .args(&addrs)
        .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| match e.kind() {
            std::io::ErrorKind::NotFound => panic!("{INSTALL_HINT} (redis-cli comes with it)"),
            _ => panic!("running redis-cli --cluster create: {e}"),
        });
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                let alive: Vec<bool> = nodes.iter().map(|n| ping(n.port())).collect();
                return Err(format!(
                    "redis-cli --cluster create did not finish in 30 s (nodes answering: {alive:?})"
                ));
            }
        }
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("redis-cli --cluster create: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "redis-cli --cluster create failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_of_three_masters_and_three_replicas_comes_up() {
        let started = Instant::now();
        let cluster = RedisCluster::start(3, 1);
        eprintln!("cluster up in {:?}", started.elapsed());
        assert_eq!(cluster.nodes().len(), 6);
        assert_eq!(cluster.masters().len(), 3);
    }
}
