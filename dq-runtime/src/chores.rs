//! Starts the runtime's tasks, each holding only the roles of the store it uses: the movers,
//! the consumer loops, the reclaimers and the acker hold its lease role; the heartbeat that and
//! the worker registry; the ticker the registry (the namespace's epoch) and the lease role (the
//! retries it declares); the queue and limit gauges the runtime's client (`Client::stats`).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use dq_core::store::{Leases, Registry};
use dq_core::{Store, Succeeded, Topic, WorkerInfo};
use tokio::sync::{mpsc, Semaphore};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::consumer::{consumer_name, ConsumerLoop};
use crate::listener::Listener;
use crate::mover::{route_wakeups, Mover};
use crate::shared::Shared;
use crate::ticker::{ticker, Declared};
use crate::upkeep::{acker, reclaimer, Heartbeat};

/// The runtime's tasks, as shutdown stops them.
pub(crate) struct Chores {
    /// Movers, reclaimers, the ticker, the wake router, the gauges and the consumer loops:
    /// they end when shutdown cancels [`Shared::stop`].
    pub(crate) loops: Vec<JoinHandle<()>>,
    /// Renews the leases until the last ack is written, then removes the worker's record.
    pub(crate) heartbeat: Closing,
    /// Acks what the job tasks finished, until they all have.
    pub(crate) acker: Closing,
}

/// A task that runs on after the job tasks ended, until told to end: it has its last work to
/// do then.
pub(crate) struct Closing {
    task: JoinHandle<()>,
    done: CancellationToken,
}

impl Closing {
    fn spawn<F>(start: impl FnOnce(CancellationToken) -> F) -> Closing
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        let done = CancellationToken::new();
        let task = tokio::spawn(start(done.clone()));
        Closing { task, done }
    }

    /// Tells the task to end, and waits for it up to `limit`; then it is aborted.
    pub(crate) async fn close(self, limit: Duration) {
        self.done.cancel();
        let abort = self.task.abort_handle();
        if tokio::time::timeout(limit, self.task).await.is_err() {
            abort.abort();
        }
    }
}

/// What the tasks are started with, besides the shared state.
pub(crate) struct Plan<'a> {
    pub(crate) store: &'a Arc<dyn Store>,
    pub(crate) listeners: &'a [(Topic, Listener)],
    pub(crate) declared: Declared,
    /// This worker's record, renewed by the heartbeat; its id names the consumers.
    pub(crate) me: WorkerInfo,
    /// The finished jobs the acker acks, with their handlers' values.
    pub(crate) acks: mpsc::UnboundedReceiver<Succeeded>,
}

/// Starts every task of the runtime.
pub(crate) fn spawn(shared: &Arc<Shared>, plan: Plan<'_>) -> Chores {
    let leases: Arc<dyn Leases> = plan.store.clone();
    let registry: Arc<dyn Registry> = plan.store.clone();
    let topics: Vec<Topic> = plan.listeners.iter().map(|(t, _)| t.clone()).collect();
    let mut loops = spawn_movers(shared, &leases);
    let schedules = ticker(
        shared.clone(),
        registry.clone(),
        leases.clone(),
        plan.declared,
    );
    loops.push(tokio::spawn(schedules));
    let gauges = crate::metrics::queue_gauges(shared.client.clone(), shared.stop.clone(), topics);
    loops.push(tokio::spawn(gauges));
    loops.extend(spawn_consumers(
        shared,
        &leases,
        plan.listeners,
        &plan.me.id,
    ));
    let heartbeat = Heartbeat {
        shared: shared.clone(),
        leases: leases.clone(),
        registry,
        me: plan.me,
    };
    let (acks, acker_shared) = (plan.acks, shared.clone());
    let retained: Arc<HashSet<Topic>> = Arc::new(
        plan.listeners
            .iter()
            .filter(|(_, l)| l.retention().is_some())
            .map(|(t, _)| t.clone())
            .collect(),
    );
    Chores {
        loops,
        heartbeat: Closing::spawn(|done| heartbeat.run(done)),
        acker: Closing::spawn(|done| acker(acker_shared, leases, acks, retained, done)),
    }
}

/// A mover and a reclaimer for each shard, and the router of the wake announcements to the
/// movers.
fn spawn_movers(shared: &Arc<Shared>, leases: &Arc<dyn Leases>) -> Vec<JoinHandle<()>> {
    let mut tasks = Vec::new();
    let mut wake_senders = Vec::new();
    for shard in 0..leases.shards() {
        let (tx, rx) = mpsc::channel(1024);
        wake_senders.push(tx);
        let mover = Mover {
            shared: shared.clone(),
            leases: leases.clone(),
            shard,
            wake: rx,
        };
        tasks.push(tokio::spawn(mover.run()));
        tasks.push(tokio::spawn(reclaimer(
            shared.clone(),
            leases.clone(),
            shard,
        )));
    }
    let router = route_wakeups(shared.clone(), leases.clone(), wake_senders);
    tasks.push(tokio::spawn(router));
    tasks
}

/// A consumer loop for each listener and shard; a listener's loops share its permits.
fn spawn_consumers(
    shared: &Arc<Shared>,
    leases: &Arc<dyn Leases>,
    listeners: &[(Topic, Listener)],
    worker: &str,
) -> Vec<JoinHandle<()>> {
    let mut tasks = Vec::new();
    for (topic, listener) in listeners {
        let permits = Arc::new(Semaphore::new(listener.concurrency));
        let listener = Arc::new(listener.clone());
        for shard in 0..leases.shards() {
            let consumer = ConsumerLoop {
                shared: shared.clone(),
                leases: leases.clone(),
                listener: listener.clone(),
                topic: topic.clone(),
                shard,
                permits: permits.clone(),
                consumer: consumer_name(worker, topic),
                full_in_a_row: Default::default(),
            };
            tasks.push(tokio::spawn(consumer.run()));
        }
    }
    tasks
}
