//! State shared by every task of one runtime. The store is not part of it: each chore holds
//! the store's roles it uses (see `chores`).

use std::sync::Arc;

use dq_core::{Client, Config, Succeeded};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::running::RunningLeases;
use crate::states::States;

#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) config: Config,
    /// Cancelled when shutdown starts: stop moving and fetching.
    pub(crate) stop: CancellationToken,
    /// Cancelled when the grace period is over: cancel running handlers.
    pub(crate) abort: CancellationToken,
    /// The job tasks, waited for at shutdown.
    pub(crate) jobs: TaskTracker,
    /// Leases of this process's jobs, from the start of the handler until the job's fate is
    /// written: renewed by the heartbeat, counted in the worker record.
    pub(crate) running: RunningLeases,
    /// Finished jobs waiting to be acked in a batch, each with its handler's value.
    pub(crate) acks: mpsc::UnboundedSender<Succeeded>,
    /// Bumped when some topic is resumed (by any process): paused consumers look again.
    pub(crate) resumed: watch::Sender<u64>,
    /// What listeners are handed: the runtime's client and the registered state.
    pub(crate) client: Client,
    pub(crate) states: Arc<States>,
}

impl Shared {
    pub(crate) fn new(
        config: Config,
        acks: mpsc::UnboundedSender<Succeeded>,
        client: Client,
        states: Arc<States>,
    ) -> Shared {
        Shared {
            config,
            stop: CancellationToken::new(),
            abort: CancellationToken::new(),
            jobs: TaskTracker::new(),
            running: RunningLeases::default(),
            acks,
            resumed: watch::Sender::new(0),
            client,
            states,
        }
    }
}
