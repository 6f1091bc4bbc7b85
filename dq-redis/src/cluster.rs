//! Routing on a Redis Cluster: commands that name no key (sent to a master of dq's choosing),
//! the pipeline that must stay on one connection (push and `WAIT`), and where each pub/sub
//! channel is subscribed. On a single server every one of them simply runs there.

use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, ConnectionAddr, ConnectionInfo, Pipeline, Value};

use crate::connection::{Conn, Server};
use crate::url::tcp_settings;
use dq_core::{Error, Result};

/// Runs a command that names no key on one node: a master of a cluster, or the one server.
pub(crate) async fn on_any_node<T: redis::FromRedisValue>(
    conn: &Conn,
    cmd: Cmd,
) -> redis::RedisResult<T> {
    on_node(conn, cmd, SingleNodeRoutingInfo::RandomPrimary).await
}

/// Runs a command that names no key on the master that owns `key`'s slot (on a cluster), or
/// on the one server.
pub(crate) async fn on_owner_of<T: redis::FromRedisValue>(
    conn: &Conn,
    key: &str,
    cmd: Cmd,
) -> redis::RedisResult<T> {
    on_node(conn, cmd, owner_of(key)).await
}

/// Runs the first `count` commands of `pipe` on one connection to the master that owns `key`'s
/// slot (on a cluster), or on the one server; one reply a command.
pub(crate) async fn pipeline_on_owner_of(
    conn: &Conn,
    key: &str,
    pipe: &Pipeline,
    count: usize,
) -> redis::RedisResult<Vec<Value>> {
    match conn {
        Conn::Single(_) => pipe.query_async(&mut conn.clone()).await,
        Conn::Cluster(c) => {
            c.clone()
                .route_pipeline(pipe.clone(), 0, count, owner_of(key))
                .await
        }
    }
}

/// The master that owns `key`'s slot.
fn owner_of(key: &str) -> SingleNodeRoutingInfo {
    SingleNodeRoutingInfo::SpecificNode(Route::new(crate::keys::slot(key), SlotAddr::Master))
}

/// Runs `cmd` on `node` of a cluster, or on the one server.
async fn on_node<T: redis::FromRedisValue>(
    conn: &Conn,
    cmd: Cmd,
    node: SingleNodeRoutingInfo,
) -> redis::RedisResult<T> {
    match conn {
        Conn::Single(_) => cmd.query_async(&mut conn.clone()).await,
        Conn::Cluster(c) => {
            let value = c
                .clone()
                .route_command(cmd, RoutingInfo::SingleNode(node))
                .await?;
            redis::from_redis_value(value).map_err(Into::into)
        }
    }
}

impl Server {
    /// Where to subscribe to each of `channels`: on one server, there; on a cluster, on the
    /// master that owns the channel's slot (dq's channels carry their shard's hashtag), so
    /// that a message is delivered by the node that published it, without the hop over the
    /// cluster bus (see `subscription`). One entry per node: its address, a client for it and
    /// the channels to subscribe there. A slot that no master serves (a cluster not fully
    /// covered) goes to the first master: a cluster delivers PUBLISH to every node.
    pub(crate) async fn subscription_plan(
        &self,
        conn: &Conn,
        channels: &[String],
    ) -> Result<Vec<(String, redis::Client, Vec<String>)>> {
        match (self, conn) {
            (Server::Single(client), _) => Ok(vec![(
                client.get_connection_info().addr().to_string(),
                client.clone(),
                channels.to_vec(),
            )]),
            (Server::Cluster { seed }, Conn::Cluster(cluster)) => {
                let ranges = masters(&mut cluster.clone()).await?;
                channels_by_master(&ranges, channels)?
                    .into_iter()
                    .map(|((host, port), list)| {
                        let client = node_client(seed, host.clone(), port)?;
                        Ok((format!("{host}:{port}"), client, list))
                    })
                    .collect()
            }
            (Server::Cluster { .. }, Conn::Single(_)) => {
                unreachable!("a cluster server always has a cluster connection")
            }
        }
    }
}

/// A master's address.
type Node = (String, u16);

/// `channels` grouped by the master that serves their slot in `ranges` (the first master for
/// a slot none serves), in the order the masters are first met.
fn channels_by_master(
    ranges: &[(u16, u16, Node)],
    channels: &[String],
) -> Result<Vec<(Node, Vec<String>)>> {
    let first = ranges.first().ok_or_else(|| Error::Malformed {
        location: "CLUSTER SLOTS".into(),
        reason: "the cluster has no master".into(),
    })?;
    let mut by_node: Vec<(Node, Vec<String>)> = Vec::new();
    for channel in channels {
        let slot = crate::keys::slot(channel);
        let (_, _, node) = ranges
            .iter()
            .find(|(start, end, _)| (*start..=*end).contains(&slot))
            .unwrap_or(first);
        match by_node.iter_mut().find(|(n, _)| n == node) {
            Some((_, list)) => list.push(channel.clone()),
            None => by_node.push((node.clone(), vec![channel.clone()])),
        }
    }
    Ok(by_node)
}

/// `(first slot, last slot, (host, port))` of each slot range's master, from `CLUSTER SLOTS`.
async fn masters(cluster: &mut ClusterConnection) -> Result<Vec<(u16, u16, Node)>> {
    let ranges: Vec<Vec<Value>> = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query_async(cluster)
        .await
        .map_err(crate::error::redis("read the cluster's slots"))?;
    let mut out = Vec::new();
    for range in ranges {
        let parsed = (|| {
            let start: u16 = redis::from_redis_value_ref(range.first()?).ok()?;
            let end: u16 = redis::from_redis_value_ref(range.get(1)?).ok()?;
            let node: Vec<Value> = redis::from_redis_value_ref(range.get(2)?).ok()?;
            let host: String = redis::from_redis_value_ref(node.first()?).ok()?;
            let port: u16 = redis::from_redis_value_ref(node.get(1)?).ok()?;
            Some((start, end, (host, port)))
        })();
        out.push(parsed.ok_or_else(|| Error::Malformed {
            location: "CLUSTER SLOTS".into(),
            reason: format!("unexpected entry {range:?}"),
        })?);
    }
    Ok(out)
}

/// A client for `host:port` with the seed's password, database and TLS settings.
fn node_client(seed: &ConnectionInfo, host: String, port: u16) -> Result<redis::Client> {
    let mut addr = seed.addr().clone();
    // A node that does not know its own address (a one-node cluster) reports "": it is then
    // the seed's host.
    let host = match (&addr, host.as_str()) {
        (ConnectionAddr::Tcp(seed_host, _), "" | "?")
        | (
            ConnectionAddr::TcpTls {
                host: seed_host, ..
            },
            "" | "?",
        ) => seed_host.clone(),
        _ => host,
    };
    match &mut addr {
        ConnectionAddr::Tcp(h, p) => (*h, *p) = (host, port),
        ConnectionAddr::TcpTls {
            host: h, port: p, ..
        } => (*h, *p) = (host, port),
        other => {
            return Err(Error::Config {
                key: "redis_cluster",
                value: other.to_string(),
                reason: "cluster seeds must be redis:// or rediss:// URLs".into(),
            })
        }
    }
    redis::Client::open(seed.clone().set_addr(addr).set_tcp_settings(tcp_settings()))
        .map_err(crate::error::redis("connect to a cluster node"))
}
