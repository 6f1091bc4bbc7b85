//! Configuration shared by the client and the runtime: where Redis is, the namespace, shards,
//! limits and timings. Read it from the environment with [`Config::from_env`] or build it.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Parses `250ms`, `5s`, `1.5s`, `10m`, `2h` or `1d`, as the `DQ_*` variables and the macros do.
pub use dq_syntax::parse_duration;

/// Default cap on one job's encoded payload: 1 MiB.
pub const DEFAULT_MAX_PAYLOAD_BYTES: usize = 1024 * 1024;

/// Settings for a dq client or runtime.
///
/// | variable | field | default |
/// | --- | --- | --- |
/// | `DQ_REDIS_URL` | `redis_url` | unset: the in-process memory store |
/// | `DQ_REDIS_CLUSTER` | `redis_cluster` | unset; comma-separated seed URLs of a Redis Cluster |
/// | `DQ_NAMESPACE` | `namespace` | `dq` |
/// | `DQ_SHARDS` | `shards` | `1`; `16` on a cluster |
/// | `DQ_MAX_PAYLOAD_BYTES` | `max_payload_bytes` | `1048576` |
/// | `DQ_LEASE` | `lease` | `10s` |
/// | `DQ_SAFETY_TICK` | `safety_tick` | `60s` |
/// | `DQ_SHUTDOWN_GRACE` | `shutdown_grace` | `20s` |
/// | `DQ_POLL_INTERVAL` | `poll_interval` | unset: wait for Redis' pub/sub messages instead of polling |
/// | `DQ_WAIT_REPLICAS` | `wait_replicas` | unset: a push returns once the master has it |
/// | `DQ_WAIT_TIMEOUT` | `wait_timeout` | `1s` (at most `5s`) |
/// | `DQ_COMPACT` | `compact` | `on`; `off` stores no new job compact (before a rollback) |
/// | `DQ_TLS_CA_FILE` | `tls_ca_file` | unset: the system's trust store |
/// | `DQ_TLS_CERT_FILE` | `tls_cert_file` | unset: no client certificate |
/// | `DQ_TLS_KEY_FILE` | `tls_key_file` | unset |
///
/// TLS is used for a `rediss://` URL (build with the `tls` feature); the CA file lets a
/// private certificate authority be trusted, the certificate and key files authenticate the
/// client (Redis `tls-auth-clients yes`). All three are PEM files.
///
/// Durations are written `250ms`, `5s`, `10m` or `1h`.
///
/// ```
/// use std::time::Duration;
/// let config = dq_core::Config::builder()
///     .redis_url("redis://127.0.0.1:6379")
///     .namespace("shop")
///     .lease(Duration::from_secs(30))
///     .build()?;
/// assert_eq!(config.namespace, "shop");
/// # Ok::<(), dq_core::Error>(())
/// ```
///
/// Read with serde (`serde_json::from_str::<Config>`, a field of your own config struct), a
/// config is checked as [`Config::validate`] checks one built in code. (The inherent
/// `Config::deserialize` and `Config::serialize` that serde's derive leaves beside the trait
/// impls are not checked: use the traits.)
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[non_exhaustive]
#[serde(default, remote = "Self")]
pub struct Config {
    /// `redis://` or `rediss://` URL; `None` runs on the in-process memory store.
    pub redis_url: Option<String>,
    /// Seed nodes of a Redis Cluster (`redis://host:port` each); when set, dq uses the cluster
    /// and spreads its shards over the cluster's masters.
    pub redis_cluster: Vec<String>,
    /// Prefix that keeps several applications apart on one Redis.
    pub namespace: String,
    /// How many shards the jobs are spread over (each shard is one Redis hash slot).
    pub shards: u16,
    /// Largest encoded payload accepted by `push`.
    pub max_payload_bytes: usize,
    /// How long a fetched job stays leased to its worker before another may take it over.
    /// Running jobs renew it every third of this, so it bounds how long a job of a dead
    /// worker waits, not how long a handler may run.
    pub lease: Duration,
    /// Longest the mover sleeps without checking for due jobs, whatever it was told.
    pub safety_tick: Duration,
    /// How long shutdown waits for running handlers before cancelling them.
    pub shutdown_grace: Duration,
    /// Poll for ready jobs at this interval instead of blocking on Redis (for proxies such as
    /// Codis or Twemproxy that do not support blocking commands).
    pub poll_interval: Option<Duration>,
    /// Most jobs the mover moves from delayed to ready in one script call.
    pub promote_batch: usize,
    /// After each push, wait (Redis `WAIT`) until this many replicas have it, so that a
    /// failover right after the push cannot lose it; a push that fewer replicas confirm within
    /// `wait_timeout` fails with [`Error::NotReplicated`](crate::Error::NotReplicated).
    pub wait_replicas: Option<u32>,
    /// How long a push waits for its replicas.
    pub wait_timeout: Duration,
    /// Whether pushes store jobs due far ahead compact (on one Redis and on a cluster: README,
    /// "How jobs are stored"). Off, a push stores every job as the releases before compact storage do, and
    /// the jobs already stored compact are still found, moved and run: set it off on every
    /// process before a rollback to such a release, then run `dq expand` (OPERATIONS.md).
    pub compact: bool,
    /// PEM file of the certificate authority that signed the server's certificate, for a
    /// `rediss://` URL; `None` trusts the system's store.
    pub tls_ca_file: Option<PathBuf>,
    /// PEM file of the client's certificate, when Redis asks clients for one.
    pub tls_cert_file: Option<PathBuf>,
    /// PEM file of the client certificate's private key.
    pub tls_key_file: Option<PathBuf>,
}

impl Serialize for Config {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        Config::serialize(self, serializer)
    }
}

/// A config read with serde is checked as [`Config::validate`] checks one built in code.
impl<'de> Deserialize<'de> for Config {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Config::deserialize(deserializer)?
            .validate()
            .map_err(serde::de::Error::custom)
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            redis_url: None,
            redis_cluster: Vec::new(),
            namespace: "dq".to_owned(),
            shards: 1,
            max_payload_bytes: DEFAULT_MAX_PAYLOAD_BYTES,
            lease: Duration::from_secs(10),
            safety_tick: Duration::from_secs(60),
            shutdown_grace: Duration::from_secs(20),
            poll_interval: None,
            promote_batch: 1000,
            wait_replicas: None,
            wait_timeout: Duration::from_secs(1),
            compact: true,
            tls_ca_file: None,
            tls_cert_file: None,
            tls_key_file: None,
        }
    }
}

impl Config {
    /// Starts a builder from the defaults.
    pub fn builder() -> ConfigBuilder {
        ConfigBuilder {
            config: Config::default(),
            shards_set: false,
        }
    }

    /// Reads the `DQ_*` variables of the table above over the defaults.
    pub fn from_env() -> Result<Config> {
        Config::from_vars(|key| std::env::var(key).ok())
    }

    /// Like [`Config::from_env`], with variables from `lookup` (for tests and embedding).
    pub fn from_vars(lookup: impl Fn(&str) -> Option<String>) -> Result<Config> {
        let mut c = Config::default();
        let var = |key: &str| lookup(key).filter(|v| !v.trim().is_empty());
        if let Some(url) = var("DQ_REDIS_URL") {
            c.redis_url = Some(url);
        }
        if let Some(seeds) = var("DQ_REDIS_CLUSTER") {
            c.redis_cluster = split_seeds(&seeds);
            c.shards = CLUSTER_SHARDS;
        }
        if let Some(v) = var("DQ_SHARDS") {
            c.shards = parse_number("DQ_SHARDS", &v)?;
        }
        if let Some(ns) = var("DQ_NAMESPACE") {
            c.namespace = ns;
        }
        if let Some(v) = var("DQ_MAX_PAYLOAD_BYTES") {
            c.max_payload_bytes = parse_number("DQ_MAX_PAYLOAD_BYTES", &v)?;
        }
        if let Some(v) = var("DQ_LEASE") {
            c.lease = parse_duration_var("DQ_LEASE", &v)?;
        }
        if let Some(v) = var("DQ_SAFETY_TICK") {
            c.safety_tick = parse_duration_var("DQ_SAFETY_TICK", &v)?;
        }
        if let Some(v) = var("DQ_SHUTDOWN_GRACE") {
            c.shutdown_grace = parse_duration_var("DQ_SHUTDOWN_GRACE", &v)?;
        }
        if let Some(v) = var("DQ_POLL_INTERVAL") {
            c.poll_interval = Some(parse_duration_var("DQ_POLL_INTERVAL", &v)?);
        }
        if let Some(v) = var("DQ_WAIT_REPLICAS") {
            c.wait_replicas = Some(parse_number("DQ_WAIT_REPLICAS", &v)?);
        }
        if let Some(v) = var("DQ_WAIT_TIMEOUT") {
            c.wait_timeout = parse_duration_var("DQ_WAIT_TIMEOUT", &v)?;
        }
        if let Some(v) = var("DQ_COMPACT") {
            c.compact = match v.trim() {
                "on" | "true" | "1" => true,
                "off" | "false" | "0" => false,
                _ => {
                    return Err(Error::Config {
                        key: "DQ_COMPACT",
                        value: v,
                        reason: "expected on or off".into(),
                    })
                }
            };
        }
        c.tls_ca_file = var("DQ_TLS_CA_FILE").map(PathBuf::from);
        c.tls_cert_file = var("DQ_TLS_CERT_FILE").map(PathBuf::from);
        c.tls_key_file = var("DQ_TLS_KEY_FILE").map(PathBuf::from);
        c.validate()
    }

    /// Checks the values against each other; every constructor calls it.
    pub fn validate(self) -> Result<Config> {
        let bad = |key: &'static str, value: String, reason: &str| Error::Config {
            key,
            value,
            reason: reason.to_owned(),
        };
        crate::Topic::new(self.namespace.clone()).map_err(|_| {
            bad(
                "namespace",
                self.namespace.clone(),
                "use 1-128 ASCII letters, digits, '-', '_' or '.'",
            )
        })?;
        if self.shards == 0 {
            return Err(bad("shards", "0".into(), "at least one shard is needed"));
        }
        if self.lease < Duration::from_millis(100) {
            return Err(bad(
                "lease",
                format!("{:?}", self.lease),
                "a lease shorter than 100ms would expire while the renewal is in flight",
            ));
        }
        if self.promote_batch == 0 || self.promote_batch > crate::store::policy::PROMOTE_BATCH {
            return Err(bad(
                "promote_batch",
                self.promote_batch.to_string(),
                &format!(
                    "use 1 to {} jobs per call",
                    crate::store::policy::PROMOTE_BATCH
                ),
            ));
        }
        if self.safety_tick.is_zero() {
            return Err(bad("safety_tick", "0s".into(), "must be positive"));
        }
        if self.wait_replicas.is_some() && self.wait_timeout > MAX_WAIT_TIMEOUT {
            // WAIT runs on the shared connection, whose replies must come within 10 s: a
            // longer WAIT would be taken for a dead connection and replace it.
            return Err(bad(
                "wait_timeout",
                format!("{:?}", self.wait_timeout),
                "use at most 5s: replicas that lag longer should fail the push (NotReplicated) rather than hold it",
            ));
        }
        if !self.redis_cluster.is_empty() && self.redis_url.is_some() {
            return Err(bad(
                "redis_cluster",
                self.redis_cluster.join(","),
                "set either DQ_REDIS_URL (one Redis) or DQ_REDIS_CLUSTER (a cluster's seed nodes), not both",
            ));
        }
        if self.tls_cert_file.is_some() != self.tls_key_file.is_some() {
            return Err(bad(
                "tls_cert_file",
                format!("{:?} with key {:?}", self.tls_cert_file, self.tls_key_file),
                "a client certificate needs its key, and a key its certificate: set both DQ_TLS_CERT_FILE and DQ_TLS_KEY_FILE",
            ));
        }
        Ok(self)
    }
}

/// Longest `wait_timeout` (`DQ_WAIT_TIMEOUT`).
pub(crate) const MAX_WAIT_TIMEOUT: Duration = Duration::from_secs(5);

/// Shards on a Redis Cluster unless `DQ_SHARDS` says otherwise: enough to spread over a
/// dozen masters.
pub const CLUSTER_SHARDS: u16 = 16;

fn split_seeds(text: &str) -> Vec<String> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

fn parse_number<T: std::str::FromStr>(key: &'static str, value: &str) -> Result<T> {
    value.trim().parse().map_err(|_| Error::Config {
        key,
        value: value.to_owned(),
        reason: "expected a whole number".into(),
    })
}

fn parse_duration_var(key: &'static str, value: &str) -> Result<Duration> {
    parse_duration(value).map_err(|reason| Error::Config {
        key,
        value: value.to_owned(),
        reason,
    })
}

/// Builds a [`Config`] from the defaults; see the table on [`Config`].
#[derive(Clone, Debug)]
#[must_use]
pub struct ConfigBuilder {
    config: Config,
    shards_set: bool,
}

macro_rules! setters {
    ($($(#[$doc:meta])* $name:ident: $ty:ty => $set:expr;)*) => {
        impl ConfigBuilder {
            $(
                $(#[$doc])*
                pub fn $name(mut self, value: $ty) -> Self {
                    #[allow(clippy::redundant_closure_call)]
                    ($set)(&mut self.config, value);
                    self
                }
            )*
        }
    };
}

setters! {
    /// Runs on Redis at this URL instead of the in-process memory store.
    redis_url: impl Into<String> => |c: &mut Config, v: _| c.redis_url = Some(Into::<String>::into(v));
    /// Sets the namespace that prefixes every key.
    namespace: impl Into<String> => |c: &mut Config, v: _| c.namespace = Into::<String>::into(v);
    /// Sets the largest payload accepted by `push`.
    max_payload_bytes: usize => |c: &mut Config, v| c.max_payload_bytes = v;
    /// Sets the lease of a fetched job.
    lease: Duration => |c: &mut Config, v| c.lease = v;
    /// Sets the mover's safety tick.
    safety_tick: Duration => |c: &mut Config, v| c.safety_tick = v;
    /// Sets the grace period of a graceful shutdown.
    shutdown_grace: Duration => |c: &mut Config, v| c.shutdown_grace = v;
    /// Polls at this interval instead of blocking on Redis.
    poll_interval: Duration => |c: &mut Config, v| c.poll_interval = Some(v);
    /// Sets the mover's batch size.
    promote_batch: usize => |c: &mut Config, v| c.promote_batch = v;
    /// Stores jobs due far ahead compact (`true`, the default) or not (before a rollback).
    compact: bool => |c: &mut Config, v| c.compact = v;
    /// Trusts this PEM certificate authority for a `rediss://` URL.
    tls_ca_file: impl Into<PathBuf> => |c: &mut Config, v: _| c.tls_ca_file = Some(Into::<PathBuf>::into(v));
}

impl ConfigBuilder {
    /// Sets the number of shards (every process of a namespace must use the same number).
    pub fn shards(mut self, shards: u16) -> Self {
        self.config.shards = shards;
        self.shards_set = true;
        self
    }

    /// Runs on the Redis Cluster with these seed nodes (`redis://host:port` each), with
    /// [`CLUSTER_SHARDS`] shards unless [`ConfigBuilder::shards`] says otherwise.
    pub fn redis_cluster<S: Into<String>>(mut self, seeds: impl IntoIterator<Item = S>) -> Self {
        self.config.redis_cluster = seeds.into_iter().map(Into::into).collect();
        if !self.shards_set {
            self.config.shards = CLUSTER_SHARDS;
        }
        self
    }

    /// Makes every push wait until `replicas` replicas have it, at most `timeout` (Redis
    /// `WAIT`); see [`Config::wait_replicas`].
    pub fn wait_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.config.wait_replicas = Some(replicas);
        self.config.wait_timeout = timeout;
        self
    }

    /// Presents this client certificate and its key (PEM files) to a Redis that asks for one
    /// (`tls-auth-clients yes`).
    pub fn tls_client_cert(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.config.tls_cert_file = Some(cert.into());
        self.config.tls_key_file = Some(key.into());
        self
    }

    /// Checks and returns the configuration.
    pub fn build(self) -> Result<Config> {
        self.config.validate()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_vars_reads_every_variable() {
        let c = Config::from_vars(|k| {
            Some(
                match k {
                    "DQ_REDIS_URL" => "redis://127.0.0.1:1/",
                    "DQ_NAMESPACE" => "shop",
                    "DQ_SHARDS" => "4",
                    "DQ_MAX_PAYLOAD_BYTES" => "100",
                    "DQ_LEASE" => "30s",
                    "DQ_SAFETY_TICK" => "5m",
                    "DQ_SHUTDOWN_GRACE" => "1500ms",
                    "DQ_POLL_INTERVAL" => "1s",
                    _ => return None,
                }
                .to_owned(),
            )
        })
        .unwrap();
        assert_eq!(c.redis_url.as_deref(), Some("redis://127.0.0.1:1/"));
        assert_eq!(
            (c.namespace.as_str(), c.shards, c.max_payload_bytes),
            ("shop", 4, 100)
        );
        assert_eq!(c.lease, Duration::from_secs(30));
        assert_eq!(c.safety_tick, Duration::from_secs(300));
        assert_eq!(c.shutdown_grace, Duration::from_millis(1500));
        assert_eq!(c.poll_interval, Some(Duration::from_secs(1)));
    }

    #[test]
    fn a_wait_timeout_over_five_seconds_is_refused() {
        let err = Config::builder()
            .redis_url("redis://127.0.0.1:1/")
            .wait_replicas(1, Duration::from_secs(12))
            .build()
            .unwrap_err();
        assert!(err.to_string().contains("wait_timeout"), "{err}");
        assert!(Config::builder()
            .redis_url("redis://127.0.0.1:1/")
            .wait_replicas(1, MAX_WAIT_TIMEOUT)
            .build()
            .is_ok());
    }

    #[test]
    fn bad_variable_names_the_variable_and_value() {
        let err = Config::from_vars(|k| (k == "DQ_SHARDS").then(|| "many".to_owned())).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid configuration DQ_SHARDS=\"many\": expected a whole number"
        );
        let err =
            Config::from_vars(|k| (k == "DQ_NAMESPACE").then(|| "a{b".to_owned())).unwrap_err();
        assert!(err.to_string().contains("namespace"), "{err}");
    }
}
