//! The worker registry: the live workers, as their heartbeats record them, and the epoch that
//! names what the store holds of the namespace.

use async_trait::async_trait;

use super::Sharded;
use crate::admin::WorkerInfo;
use crate::error::Result;

/// The live workers, as their heartbeats record them.
#[async_trait]
pub trait Registry: Sharded {
    /// Records a worker's heartbeat.
    async fn register_worker(&self, worker: &WorkerInfo) -> Result<()>;

    /// Removes a worker that stopped.
    async fn unregister_worker(&self, id: &str) -> Result<()>;

    /// The workers seen in the last minute (older entries are dropped).
    async fn workers(&self) -> Result<Vec<WorkerInfo>>;

    /// A value that names what the store holds of this namespace: made when first asked, the
    /// same from then on, and different once the store has lost it (on Redis: restarted
    /// without persistence, `FLUSHALL`, failed over to a replica that never had it). Runtimes
    /// compare it with the one they saw when they declared their listeners' schedules and
    /// retries, and declare them again when it changed.
    async fn namespace_epoch(&self) -> Result<String>;
}
