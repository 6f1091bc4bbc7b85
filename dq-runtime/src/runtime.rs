//! [`Runtime`]: starts the movers, consumer loops and chores for every listener, and shuts
//! them down gracefully.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use dq_core::{Client, Config, Error, ErrorKind, MemoryStore, Result, Store, Topic};
use dq_redis::RedisStore;
use tokio::sync::{mpsc, Semaphore};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::consumer::ConsumerLoop;
use crate::extract::States;
use crate::listener::{self, Listener};
use crate::mover::{self, Mover};
use crate::shared::Shared;
use crate::shutdown::{ShutdownReport, Supervisor};
use crate::ticker::{check_schedule, Declared};
use crate::upkeep;

pub(crate) type Hook = Box<dyn FnOnce() -> Pin<Box<dyn Future<Output = ()> + Send>> + Send>;

/// How long `start` tries to declare its listeners' schedules and retries in the store (all of
/// them) before it starts anyway and leaves them to the ticker.
const DECLARE_AT_START: Duration = Duration::from_secs(5);

/// Runs the listeners of this program against the store.
///
/// ```no_run
/// # async fn demo() -> dq_core::Result<()> {
/// let rt = dq_runtime::Runtime::start().await?;      // config from DQ_* variables
/// // rt.client().push(...).await?;
/// rt.run_until_shutdown_signal().await?;              // SIGINT / SIGTERM: graceful shutdown
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Runtime {
    client: Client,
    /// The topics of this runtime's listeners.
    topics: Vec<Topic>,
    handle: ShutdownHandle,
    task: JoinHandle<ShutdownReport>,
    exit_on_second_signal: bool,
}

/// Triggers a graceful shutdown from anywhere; cheap to clone.
#[derive(Clone, Debug)]
pub struct ShutdownHandle {
    token: CancellationToken,
}

impl ShutdownHandle {
    /// Starts the graceful shutdown (idempotent).
    pub fn shutdown(&self) {
        self.token.cancel();
    }

    /// Resolves when shutdown has been requested.
    pub async fn requested(&self) {
        self.token.cancelled().await
    }
}

/// Configures a [`Runtime`]: its config, store, extra listeners and shutdown hooks.
#[must_use]
pub struct RuntimeBuilder {
    #[cfg(feature = "prometheus")]
    metrics_addr: Option<std::net::SocketAddr>,
    config: Option<Config>,
    store: Option<Arc<dyn Store>>,
    listeners: Vec<Listener>,
    registered: bool,
    hooks: Vec<(String, Hook)>,
    exit_on_second_signal: bool,
    states: States,
    /// Types given to `state` more than once: refused at start.
    twice: Vec<&'static str>,
}

impl std::fmt::Debug for RuntimeBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeBuilder")
            .field("config", &self.config)
            .field("listeners", &self.listeners)
            .field("registered", &self.registered)
            .field("states", &self.states)
            .field(
                "hooks",
                &self.hooks.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl Runtime {
    /// Starts with the config from the environment and every `#[dq::listener]` of the program.
    pub async fn start() -> Result<Runtime> {
        Runtime::builder().start().await
    }

    /// A builder for everything [`Runtime::start`] takes from the environment.
    pub fn builder() -> RuntimeBuilder {
        RuntimeBuilder {
            #[cfg(feature = "prometheus")]
            metrics_addr: None,
            config: None,
            store: None,
            listeners: Vec::new(),
            registered: true,
            hooks: Vec::new(),
            exit_on_second_signal: true,
            states: States::default(),
            twice: Vec::new(),
        }
    }

    /// A client that pushes through the runtime's store.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The topics this runtime has listeners for.
    pub fn topics(&self) -> &[Topic] {
        &self.topics
    }

    /// A handle that starts the graceful shutdown.
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        self.handle.clone()
    }

    /// Shuts down gracefully now and waits until it is done.
    pub async fn shutdown(self) -> Result<ShutdownReport> {
        self.handle.shutdown();
        self.wait().await
    }

    /// Waits until a shutdown started by a [`ShutdownHandle`] is done.
    ///
    /// # Errors
    /// [`Error::Internal`] when the runtime's supervisor task failed (a bug): the report of
    /// what the shutdown did is lost with it, so it is not pretended to be empty.
    pub async fn wait(self) -> Result<ShutdownReport> {
        self.task.await.map_err(|e| {
            tracing::error!(error = %e, "the runtime's supervisor task failed");
            Error::Internal {
                what: "the runtime's supervisor",
                reason: e.to_string(),
            }
        })
    }

    /// Runs until SIGINT or SIGTERM, then shuts down gracefully. A second SIGINT during the
    /// shutdown exits the process at once (status 130), unless the builder's
    /// [`exit_on_second_signal(false)`](RuntimeBuilder::exit_on_second_signal) says otherwise;
    /// jobs still running then are not lost: their leases expire and another worker runs them.
    pub async fn run_until_shutdown_signal(self) -> Result<ShutdownReport> {
        let handle = self.handle.clone();
        tokio::select! {
            _ = shutdown_signal() => {
                if self.exit_on_second_signal {
                    tracing::info!("shutdown signal received; finishing running jobs (press Ctrl-C again to exit at once)");
                } else {
                    tracing::info!("shutdown signal received; finishing running jobs");
                }
                handle.shutdown();
            }
            _ = handle.requested() => {}
        }
        let exit = self.exit_on_second_signal;
        let force = tokio::spawn(async move {
            if exit && tokio::signal::ctrl_c().await.is_ok() {
                tracing::warn!("second interrupt: exiting now; running jobs will run again after their lease expires");
                std::process::exit(130);
            }
        });
        let report = self.wait().await;
        force.abort();
        report
    }
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

impl RuntimeBuilder {
    /// Uses this configuration instead of the environment's.
    pub fn config(mut self, config: Config) -> Self {
        self.config = Some(config);
        self
    }

    /// Serves Prometheus metrics (see [`crate::metrics`]) over HTTP on `addr`, for example
    /// `127.0.0.1:9464`. Installs the process-wide `metrics` recorder, so only one runtime of a
    /// process can do it.
    #[cfg(feature = "prometheus")]
    pub fn metrics_addr(mut self, addr: std::net::SocketAddr) -> Self {
        self.metrics_addr = Some(addr);
        self
    }

    /// Runs on this store instead of the one the configuration names.
    pub fn store(mut self, store: Arc<dyn Store>) -> Self {
        self.store = Some(store);
        self
    }

    /// Adds a listener built by hand (see [`Listener::new`]).
    pub fn listener(mut self, listener: Listener) -> Self {
        self.listeners.push(listener);
        self
    }

    /// Registers `value` for the listeners that take a [`State<T>`](crate::State) of its type
    /// (several types side by side; one value per type). Each run gets a clone: put a pool, a
    /// client or an `Arc` of your services here, not a value the runs should each own.
    ///
    /// ```
    /// # #[derive(Clone)] struct Shop;
    /// # #[derive(Clone)] struct Mailer;
    /// let builder = dq_runtime::Runtime::builder().state(Shop).state(Mailer);
    /// ```
    ///
    /// `start` fails when a listener asks for a state nobody registered, or when one type is
    /// registered twice (wrap the second value in a type of its own).
    pub fn state<T: Clone + Send + Sync + 'static>(mut self, value: T) -> Self {
        if let Err(name) = self.states.insert(value) {
            self.twice.push(name);
        }
        self
    }

    /// Runs only the listeners added to this builder, not those registered with
    /// `#[dq::listener]` (for tests that run one handler of a larger program).
    pub fn without_registered_listeners(mut self) -> Self {
        self.registered = false;
        self
    }

    /// Whether a second Ctrl-C during the shutdown of [`Runtime::run_until_shutdown_signal`]
    /// exits the process at once with status 130 (default: yes, as a terminal user expects).
    /// Turn it off when the application handles signals itself; dq never exits the process
    /// otherwise.
    pub fn exit_on_second_signal(mut self, exit: bool) -> Self {
        self.exit_on_second_signal = exit;
        self
    }

    /// Adds a hook run at shutdown, after the handlers stopped, in the order added, each with
    /// a deadline of 5 s.
    pub fn on_shutdown<F, Fut>(mut self, name: &str, hook: F) -> Self
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.hooks
            .push((name.to_owned(), Box::new(move || Box::pin(hook()))));
        self
    }

    /// Connects and starts every loop.
    pub async fn start(self) -> Result<Runtime> {
        let config = match self.config {
            Some(c) => c.validate()?,
            None => Config::from_env()?,
        };
        if let Some(name) = self.twice.first() {
            return Err(Error::Config {
                key: "state",
                value: (*name).to_owned(),
                reason: format!("`{name}` is registered twice with `Runtime::builder().state(..)`: one value per type; wrap the second in a type of its own (`struct ReadReplica(Pool)`) and ask for `State<ReadReplica>`"),
            });
        }
        let listeners = collect_listeners(self.registered, self.listeners, &self.states)?;
        #[cfg(feature = "prometheus")]
        if let Some(addr) = self.metrics_addr {
            crate::metrics::install_prometheus(addr)?;
            tracing::info!(%addr, "serving Prometheus metrics");
        }
        let store: Arc<dyn Store> = match self.store {
            Some(s) => s,
            None if config.redis_url.is_some() || !config.redis_cluster.is_empty() => {
                let redis = RedisStore::connect(&config).await?;
                match redis.server_warnings().await {
                    Ok(warnings) => {
                        for w in warnings {
                            tracing::warn!("{w}");
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "could not read Redis' settings"),
                }
                Arc::new(redis)
            }
            None => {
                tracing::warn!("DQ_REDIS_URL is not set: running on the in-memory store, inside this process only; jobs will not survive a restart (set DQ_REDIS_URL=redis://host:6379/ to use Redis)");
                Arc::new(MemoryStore::new())
            }
        };
        let client = Client::new(store.clone(), config.clone());
        let mut declared = declarations(&listeners);
        // Declared now when the store answers; else the ticker declares it as soon as it does:
        // a master down or a full Redis must not keep workers from starting. Bounded as a
        // whole, so that a stalled Redis does not delay the start either.
        match tokio::time::timeout(DECLARE_AT_START, declared.keep(&client, store.as_ref())).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) if e.kind() == ErrorKind::InvalidInput => {
                tracing::error!(error = %e, "a listener's schedule cannot be stored; the runtime does not start");
                return Err(e);
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "could not declare the listeners' schedules and retries in the store yet; the runtime starts anyway and declares them as soon as the store answers (until then a job of theirs whose worker dies is judged by the retries given at push, and their schedules do not tick unless another process declared them)");
            }
            Err(_) => {
                tracing::warn!(after = ?DECLARE_AT_START, "the store did not answer while the listeners' schedules and retries were declared; the runtime starts anyway and declares them as soon as it does");
            }
        }
        let (ack_tx, ack_rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared::new(
            store.clone(),
            config.clone(),
            ack_tx,
            client.clone(),
            Arc::new(self.states),
        ));
        let handle = ShutdownHandle {
            token: CancellationToken::new(),
        };

        let mut chores = Vec::new();
        let shards = store.shards();
        let mut wake_senders = Vec::new();
        for shard in 0..shards {
            let (tx, rx) = mpsc::channel(1024);
            wake_senders.push(tx);
            chores.push(tokio::spawn(
                Mover {
                    shared: shared.clone(),
                    shard,
                    wake: rx,
                }
                .run(),
            ));
            chores.push(tokio::spawn(upkeep::reclaimer(shared.clone(), shard)));
        }
        chores.push(tokio::spawn(crate::ticker::ticker(
            shared.clone(),
            declared,
        )));
        chores.push(tokio::spawn(mover::route_wakeups(
            shared.clone(),
            wake_senders,
        )));
        let topics: Vec<Topic> = listeners.iter().map(|(t, _)| t.clone()).collect();
        chores.push(tokio::spawn(crate::metrics::queue_gauges(
            shared.clone(),
            topics.clone(),
        )));
        let me = dq_core::WorkerInfo::for_this_process(
            topics.iter().map(|t| t.as_str().to_owned()).collect(),
        );
        for (topic, listener) in &listeners {
            let permits = Arc::new(Semaphore::new(listener.concurrency));
            let listener = Arc::new(listener.clone());
            for shard in 0..shards {
                chores.push(tokio::spawn(
                    ConsumerLoop {
                        shared: shared.clone(),
                        listener: listener.clone(),
                        topic: topic.clone(),
                        shard,
                        permits: permits.clone(),
                        consumer: crate::consumer::consumer_name(&me.id, topic),
                    }
                    .run(),
                ));
            }
        }
        let heartbeat_done = CancellationToken::new();
        let heartbeat = tokio::spawn(upkeep::heartbeat(
            shared.clone(),
            heartbeat_done.clone(),
            me,
        ));
        let acker_done = CancellationToken::new();
        let acker = tokio::spawn(upkeep::acker(shared.clone(), ack_rx, acker_done.clone()));

        tracing::info!(
            store = ?store, shards, topics = ?topics.iter().map(Topic::as_str).collect::<Vec<_>>(),
            "dq runtime started"
        );
        let supervisor = Supervisor {
            shared,
            chores,
            heartbeat,
            heartbeat_done,
            acker,
            acker_done,
            hooks: self.hooks,
        };
        let token = handle.token.clone();
        let task = tokio::spawn(async move {
            token.cancelled().await;
            supervisor.shut_down().await
        });
        Ok(Runtime {
            client,
            topics,
            handle,
            task,
            exit_on_second_signal: self.exit_on_second_signal,
        })
    }
}

/// What the runtime declares for its listeners: their schedules, and the most runs each allows
/// a job whose worker died (the last runtime to declare decides, should two disagree).
fn declarations(listeners: &[(Topic, Listener)]) -> Declared {
    let schedules = listeners
        .iter()
        .filter_map(|(t, l)| l.schedule.map(|s| (t.clone(), s)))
        .collect();
    let limits = listeners
        .iter()
        .map(|(t, l)| (t.clone(), l.retries.map(|r| r.saturating_add(1))))
        .collect();
    Declared::new(schedules, limits)
}

/// This runtime's listeners, each with its topic checked once here; refused with an error naming
/// the listener when a topic is invalid, taken twice, a concurrency is zero, its retries are
/// over `MAX_RETRIES`, or an argument cannot be provided (a `State<T>` nobody registered).
fn collect_listeners(
    registered: bool,
    extra: Vec<Listener>,
    states: &States,
) -> Result<Vec<(Topic, Listener)>> {
    let mut all = if registered {
        listener::registered()
    } else {
        Vec::new()
    };
    all.extend(extra);
    let mut seen: HashMap<String, String> = HashMap::new();
    let mut checked = Vec::with_capacity(all.len());
    for l in all {
        let topic = Topic::new(l.topic.clone())?;
        if l.concurrency == 0 {
            return Err(Error::InvalidListener {
                topic: l.topic.clone(),
                name: l.name.clone(),
                reason: "concurrency must be at least 1".into(),
            });
        }
        if let Some(retries) = l.retries.filter(|r| *r > dq_core::MAX_RETRIES) {
            return Err(Error::InvalidListener {
                topic: l.topic.clone(),
                name: l.name.clone(),
                reason: format!(
                    "retries = {retries} is over the limit of {} (dq::limits::MAX_RETRIES); a job that failed that often needs a person (or a longer backoff between runs)",
                    dq_core::MAX_RETRIES
                ),
            });
        }
        if let Err(reason) = (l.check)(states) {
            return Err(Error::InvalidListener {
                topic: l.topic.clone(),
                name: l.name.clone(),
                reason,
            });
        }
        if let Some(schedule) = &l.schedule {
            check_schedule(schedule).map_err(|reason| Error::InvalidListener {
                topic: l.topic.clone(),
                name: l.name.clone(),
                reason,
            })?;
        }
        if let Some(first) = seen.insert(l.topic.clone(), l.name.clone()) {
            return Err(Error::DuplicateListener {
                topic: l.topic.clone(),
                first,
                second: l.name.clone(),
            });
        }
        checked.push((topic, l));
    }
    Ok(checked)
}
