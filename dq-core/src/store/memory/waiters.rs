//! Waits for ready jobs and for new due times, on the store's channels.

use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::{broadcast, watch};

use super::{lock, MemoryStore};
use crate::error::Result;
use crate::name::Topic;
use crate::store::{ReadyWaiter, Wake, WakeListener};

#[derive(Debug)]
pub(super) struct MemoryReadyWaiter {
    pub(super) store: MemoryStore,
    pub(super) topic: Topic,
    pub(super) rx: watch::Receiver<u64>,
}

#[async_trait]
impl ReadyWaiter for MemoryReadyWaiter {
    async fn wait(&mut self, timeout: Duration) -> Result<bool> {
        // Mark the current signal seen before looking, so a push in between still wakes us.
        self.rx.borrow_and_update();
        let has_jobs = lock(&self.store.state)
            .ready
            .get(&self.topic)
            .is_some_and(|q| !q.is_empty());
        if has_jobs {
            return Ok(true);
        }
        Ok(matches!(
            tokio::time::timeout(timeout, self.rx.changed()).await,
            Ok(Ok(()))
        ))
    }
}

#[derive(Debug)]
pub(super) struct MemoryWakeListener {
    pub(super) rx: broadcast::Receiver<Wake>,
}

#[async_trait]
impl WakeListener for MemoryWakeListener {
    async fn next(&mut self) -> Result<Wake> {
        loop {
            match self.rx.recv().await {
                Ok(wake) => return Ok(wake),
                // Missed announcements: wake now and let the mover look.
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    return Ok(Wake::Due {
                        shard: 0,
                        due_us: 0,
                    })
                }
                Err(broadcast::error::RecvError::Closed) => std::future::pending::<()>().await,
            }
        }
    }
}
