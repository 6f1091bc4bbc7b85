//! Connections to Redis: one server through redis-rs's `ConnectionManager`, or a Redis Cluster
//! through its cluster client (MOVED and ASK are followed by the client), behind one
//! [`Conn`] that the store's commands and scripts run on. Blocking commands and pub/sub get
//! connections of their own (on a cluster, pub/sub only: see `hub`). Where a command goes on
//! a cluster when it names no key, and where each channel is subscribed: see `cluster`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, ConnectionInfo, Pipeline, RedisFuture, Value};

use crate::url::{open_client, redact_url, tcp_settings};
use dq_core::Config;
use dq_core::{Error, Result};

/// Where the jobs are: one Redis, or a cluster reached through its seed nodes.
#[derive(Clone)]
pub(crate) enum Server {
    Single(redis::Client),
    Cluster {
        /// The seeds' connection settings (password, TLS), reused for the nodes found.
        seed: ConnectionInfo,
    },
}

/// The shared, multiplexed connection; reconnects by itself.
#[derive(Clone)]
pub(crate) enum Conn {
    Single(SingleConn),
    Cluster(ClusterConnection),
}

/// redis-rs's `ConnectionManager`, replaced by a new one when a command gets no reply in time.
///
/// The manager reconnects when the connection reports an error, but a reply that never comes
/// (a peer that lost power, a partition, a firewall that drops the flow without a reset) only
/// times the command out and leaves the connection in place: every later command would time out
/// too, until the kernel gives up on the socket. So a timeout here means "this connection is
/// gone": the next command goes out on a new one.
#[derive(Clone)]
pub(crate) struct SingleConn {
    inner: Arc<SingleInner>,
}

struct SingleInner {
    client: redis::Client,
    config: ConnectionManagerConfig,
    /// The manager in use and its generation (so that concurrent timeouts replace it once).
    current: Mutex<(u64, ConnectionManager)>,
    /// The generation in use: commands still waiting on an older connection give up when it
    /// changes, instead of each waiting out its own timeout on a connection known to be dead.
    generation: tokio::sync::watch::Sender<u64>,
}

impl SingleConn {
    fn new(
        client: redis::Client,
        config: ConnectionManagerConfig,
        manager: ConnectionManager,
    ) -> SingleConn {
        SingleConn {
            inner: Arc::new(SingleInner {
                client,
                config,
                current: Mutex::new((0, manager)),
                generation: tokio::sync::watch::Sender::new(0),
            }),
        }
    }

    fn current(&self) -> (u64, ConnectionManager) {
        self.inner
            .current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Opens a new connection in place of generation `seen`, unless that was done already;
    /// `why` is logged.
    fn replace(&self, seen: u64, error: &redis::RedisError, why: &str) {
        let mut current = self.inner.current.lock().unwrap_or_else(|p| p.into_inner());
        if current.0 != seen {
            return;
        }
        match ConnectionManager::new_lazy_with_config(
            self.inner.client.clone(),
            self.inner.config.clone(),
        ) {
            Ok(manager) => {
                tracing::warn!(server = %self.inner.client.get_connection_info().addr(), %error, "{why}");
                *current = (seen + 1, manager);
                self.inner.generation.send_replace(seen + 1);
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not prepare a new Redis connection; the old one stays");
            }
        }
    }

    /// Runs `send` on the current connection: a timeout replaces the connection, and a
    /// replacement (by this command or another) ends the wait at once with an error.
    ///
    /// A `READONLY` reply replaces it too: the server is a replica now (a failover demoted it),
    /// and a new connection to the same address reaches the new master when the address follows
    /// failovers (a DNS name or a virtual IP moved to it). The manager would keep the old
    /// connection for ever: the reply is not a connection error.
    async fn send<'a, T, F>(&self, send: F) -> redis::RedisResult<T>
    where
        F: FnOnce(ConnectionManager) -> RedisFuture<'a, T>,
    {
        let mut replaced = self.inner.generation.subscribe();
        let (seen, manager) = self.current();
        let result = tokio::select! {
            biased;
            result = send(manager) => result,
            _ = replaced.wait_for(|g| *g != seen) => Err(redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                "the connection was replaced: Redis stopped answering on it",
            ))),
        };
        if let Err(e) = &result {
            if e.is_timeout() {
                self.replace(seen, e, "Redis did not answer in time: the connection is dropped and the next command opens a new one");
            } else if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly) {
                self.replace(seen, e, "Redis answered READONLY (it is a replica now: a failover demoted it, or the URL names a replica): the connection is dropped and the next command opens a new one, to the master if the address leads there now");
            }
        }
        result
    }
}

/// The store's commands and scripts run alike on either kind of connection.
impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => Box::pin(async move {
                c.send(|mut manager| {
                    Box::pin(async move { manager.send_packed_command(cmd).await })
                })
                .await
            }),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => Box::pin(async move {
                c.send(|mut manager| {
                    Box::pin(
                        async move { manager.send_packed_commands(pipeline, offset, count).await },
                    )
                })
                .await
            }),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.current().1.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// Longest wait for a TCP connection (and the handshake) to Redis.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Longest wait for the reply to a command that does not block on purpose.
pub(crate) const RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);

/// Connects as `config` says: `redis_cluster` seeds, or `redis_url`.
pub(crate) async fn connect(config: &Config) -> Result<(Server, Conn)> {
    if config.redis_cluster.is_empty() {
        connect_single(config).await
    } else {
        connect_cluster(config).await
    }
}

/// Connects to the cluster of the `redis_cluster` seeds.
async fn connect_cluster(config: &Config) -> Result<(Server, Conn)> {
    if config.tls_ca_file.is_some() || config.tls_cert_file.is_some() {
        // redis-rs's cluster client takes certificates only with its rustls backend; dq
        // uses the system's OpenSSL, which trusts the system's store.
        return Err(Error::Config {
            key: "tls_ca_file",
            value: format!("{:?}", config.tls_ca_file),
            reason: "CA and client certificate files are not supported on a cluster: add the CA to the system's trust store and use rediss:// seeds".into(),
        });
    }
    let mut seeds = Vec::new();
    for url in &config.redis_cluster {
        seeds.push(open_client(url, config)?.get_connection_info().clone());
    }
    let builder = redis::cluster::ClusterClientBuilder::new(seeds.clone())
        .connection_timeout(CONNECT_TIMEOUT)
        .response_timeout(RESPONSE_TIMEOUT)
        .tcp_settings(tcp_settings());
    let client = builder.build().map_err(|e| Error::Config {
        key: "redis_cluster",
        value: config
            .redis_cluster
            .iter()
            .map(|u| redact_url(u))
            .collect::<Vec<_>>()
            .join(","),
        reason: e.to_string(),
    })?;
    let conn = client
        .get_async_connection()
        .await
        .map_err(crate::error::redis("connect to the cluster"))?;
    Ok((
        Server::Cluster {
            seed: seeds[0].clone(),
        },
        Conn::Cluster(conn),
    ))
}

/// Connects to the one Redis of `redis_url`.
async fn connect_single(config: &Config) -> Result<(Server, Conn)> {
    let url = config.redis_url.as_deref().ok_or_else(|| Error::Config {
        key: "redis_url",
        value: String::new(),
        reason: "the Redis store needs a URL (set DQ_REDIS_URL, or DQ_REDIS_CLUSTER)".into(),
    })?;
    let client = open_client(url, config)?;
    // One direct attempt first: a refused connection, a wrong password or an unknown host is
    // reported now, in milliseconds, instead of after the manager's reconnect round (6
    // attempts with backoff: 7.5 s). The manager reconnects by itself later on.
    client
        .get_multiplexed_async_connection_with_config(
            &redis::AsyncConnectionConfig::new()
                .set_connection_timeout(Some(CONNECT_TIMEOUT))
                .set_response_timeout(Some(RESPONSE_TIMEOUT)),
        )
        .await
        .map_err(crate::error::redis("connect"))?;
    let manager = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        .set_response_timeout(Some(RESPONSE_TIMEOUT))
        .set_max_delay(Duration::from_secs(2));
    let conn = ConnectionManager::new_with_config(client.clone(), manager.clone())
        .await
        .map_err(crate::error::redis("connect"))?;
    Ok((
        Server::Single(client.clone()),
        Conn::Single(SingleConn::new(client, manager, conn)),
    ))
}

impl Server {
    /// Whether this is a cluster (whose slots can move).
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self, Server::Cluster { .. })
    }

    /// The address of the one server, or of the first seed, for `Debug`.
    pub(crate) fn describe(&self) -> String {
        match self {
            Server::Single(c) => c.get_connection_info().addr().to_string(),
            Server::Cluster { seed } => format!("cluster via {}", seed.addr()),
        }
    }
}
