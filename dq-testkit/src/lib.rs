//! Test support for dq: a real `redis-server` on a free loopback port, in a temp directory of
//! its own, killed (by its pid, and only it) when the handle is dropped.
//!
//! ```no_run
//! let redis = dq_testkit::RedisServer::start();
//! println!("{}", redis.url());
//! ```
//!
//! When `redis-server` is not installed the test fails with the command that installs it;
//! it never skips silently.
//!
//! - [`RedisServer`] (`server`): one server, optionally with TLS (`tls`);
//! - [`RedisCluster`] (`cluster`): a Redis Cluster of such servers;
//! - [`unused_port`] (`net`): a free loopback port;
//! - [`KeyAudit`] (`key_audit`): the keys a server's scripts touch without declaring them;
//! - [`process`] and [`stats`]: worker processes and the figures of dq-bench and dq-chaos.

pub mod process;
pub mod stats;

mod cluster;
mod key_audit;
mod net;
mod server;
mod tls;

pub use cluster::RedisCluster;
pub use key_audit::KeyAudit;
pub use net::unused_port;
pub use server::RedisServer;

/// What to tell someone whose machine has no `redis-server`.
pub const INSTALL_HINT: &str =
    "redis-server is not installed: install redis-server (apt-get install -y redis-server); scripts/test does this for you";
