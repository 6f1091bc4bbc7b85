//! [`Runtime`]: starts the movers, consumer loops and chores for every listener, and shuts
//! them down gracefully.

use std::future::Future;
use std::sync::Arc;

use dq_core::{Client, Config, Error, Result, Store, Topic, WorkerInfo};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::chores;
use crate::listener::Listener;
use crate::shared::Shared;
use crate::shutdown::{Hook, ShutdownReport, Supervisor};
use crate::start;
use crate::states::States;

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
        let config = start::config(self.config, &self.twice)?;
        let listeners = start::collect_listeners(self.registered, self.listeners, &self.states)?;
        #[cfg(feature = "prometheus")]
        if let Some(addr) = self.metrics_addr {
            crate::metrics::install_prometheus(addr)?;
            tracing::info!(%addr, "serving Prometheus metrics");
        }
        let store = start::open_store(&config, self.store).await?;
        let client = Client::new(store.clone(), config.clone());
        let mut declared = start::declarations(&listeners);
        start::declare(&mut declared, &client, &store).await?;
        let (acks, acks_rx) = mpsc::unbounded_channel();
        let states = Arc::new(self.states);
        let shared = Arc::new(Shared::new(config, acks, client.clone(), states));
        let topics: Vec<Topic> = listeners.iter().map(|(t, _)| t.clone()).collect();
        let me =
            WorkerInfo::for_this_process(topics.iter().map(|t| t.as_str().to_owned()).collect());
        let plan = chores::Plan {
            store: &store,
            listeners: &listeners,
            declared,
            me,
            acks: acks_rx,
        };
        let tasks = chores::spawn(&shared, plan);
        tracing::info!(
            store = ?store, shards = store.shards(),
            topics = ?topics.iter().map(Topic::as_str).collect::<Vec<_>>(),
            "dq runtime started"
        );
        let supervisor = Supervisor {
            shared,
            leases: store,
            chores: tasks,
            hooks: self.hooks,
        };
        let handle = ShutdownHandle {
            token: CancellationToken::new(),
        };
        Ok(Runtime {
            client,
            topics,
            task: supervise(&handle, supervisor),
            handle,
            exit_on_second_signal: self.exit_on_second_signal,
        })
    }
}

/// The supervisor's task: it shuts the runtime down once the handle asks for it.
fn supervise(handle: &ShutdownHandle, supervisor: Supervisor) -> JoinHandle<ShutdownReport> {
    let token = handle.token.clone();
    tokio::spawn(async move {
        token.cancelled().await;
        supervisor.shut_down().await
    })
}
