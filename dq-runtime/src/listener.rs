//! Listeners: a topic, its handler and the handler's settings. Registered by
//! `#[dq::listener]` through `inventory`, or built by hand with [`Listener::new`] (the seed's
//! `MessageListener`).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use dq_core::periodic::Missed;
use serde::de::DeserializeOwned;

use crate::backoff::Backoff;
use crate::context::JobContext;
use crate::extract::{Handler, States};
use crate::outcome::Outcome;

/// The future a type-erased handler returns.
pub type HandlerFuture = Pin<Box<dyn Future<Output = Outcome> + Send>>;

/// A handler with its payload type erased: decodes the payload (or says why it cannot) and
/// starts the run.
pub type ErasedHandler =
    Arc<dyn Fn(&[u8], JobContext) -> Result<HandlerFuture, String> + Send + Sync>;

/// Checks at start that a handler's arguments can be provided (see [`crate::FromJob::check`]).
pub type ArgumentCheck = fn(&States) -> Result<(), String>;

/// Concurrency of a listener that does not set one.
pub const DEFAULT_CONCURRENCY: usize = 16;
/// Timeout of a listener that does not set one.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// A handler for one topic, with its settings.
///
/// The handler takes what a `#[dq::listener]` function takes: the payload, then extractors
/// ([`JobContext`], [`State<T>`](crate::State), `Client`, your own [`FromJob`](crate::FromJob)
/// types) in any order.
///
/// ```
/// use dq_runtime::{JobContext, Listener, State};
/// # #[derive(serde::Deserialize)] struct OrderCancel { order_id: u64 }
/// # #[derive(Clone)] struct Shop;
/// let listener = Listener::new("order-cancel", |msg: OrderCancel, shop: State<Shop>, ctx: JobContext| async move {
///     println!("cancel order {} (attempt {})", msg.order_id, ctx.attempt());
/// })
/// .concurrency(32)
/// .timeout(std::time::Duration::from_secs(5))
/// .retries(2);
/// ```
#[derive(Clone)]
#[must_use]
pub struct Listener {
    pub(crate) topic: String,
    pub(crate) concurrency: usize,
    pub(crate) timeout: Option<Duration>,
    pub(crate) retries: Option<u32>,
    pub(crate) backoff: Backoff,
    pub(crate) handler: ErasedHandler,
    pub(crate) check: ArgumentCheck,
    pub(crate) name: String,
    pub(crate) schedule: Option<ListenerSchedule>,
}

/// The schedule `#[dq::listener(cron = "..", tz = "..")]` (or `every = ".."`) declares for its
/// topic; `Runtime::start` stores it under the topic's name.
#[derive(Clone, Copy, Debug)]
#[doc(hidden)]
pub struct ListenerSchedule {
    pub cron: Option<&'static str>,
    pub every: Option<Duration>,
    pub tz: Option<&'static str>,
    pub missed: Missed,
    /// What each tick's job carries (`None`: a [`Tick`](dq_core::periodic::Tick)).
    pub payload: fn() -> Result<Option<serde_json::Value>, String>,
}

impl fmt::Debug for Listener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Listener")
            .field("topic", &self.topic)
            .field("name", &self.name)
            .field("concurrency", &self.concurrency)
            .field("timeout", &self.timeout)
            .field("retries", &self.retries)
            .field("backoff", &self.backoff)
            .field("schedule", &self.schedule)
            .finish_non_exhaustive()
    }
}

impl Listener {
    /// A listener calling `handler(message, extractors...)` for each job of `topic`.
    #[track_caller]
    pub fn new<M, Args, H>(topic: &str, handler: H) -> Listener
    where
        M: DeserializeOwned + Send + 'static,
        H: Handler<M, Args>,
    {
        let location = std::panic::Location::caller();
        Listener::from_erased(
            topic,
            format!("closure at {}:{}", location.file(), location.line()),
            Arc::new(move |payload, ctx| Ok(handler.call(decode::<M>(payload)?, &ctx))),
            <H as Handler<M, Args>>::check,
        )
    }

    /// A listener from an erased handler and the check of its arguments (what the macro
    /// registers).
    pub fn from_erased(
        topic: &str,
        name: String,
        handler: ErasedHandler,
        check: ArgumentCheck,
    ) -> Listener {
        Listener {
            topic: topic.to_owned(),
            concurrency: DEFAULT_CONCURRENCY,
            timeout: Some(DEFAULT_TIMEOUT),
            retries: None,
            backoff: Backoff::default(),
            handler,
            check,
            name,
            schedule: None,
        }
    }

    /// Most jobs of this topic running at once in this process (default 16).
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n;
        self
    }

    /// Longest a run may take before it is cancelled and counted as failed (default 60 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Lets runs take as long as they need (the lease is renewed while they run).
    pub fn no_timeout(mut self) -> Self {
        self.timeout = None;
        self
    }

    /// Retries after a failed first run, overriding the count stored with each job at push.
    /// It also bounds runs lost with their worker: the runtime records it in the store at start,
    /// and whichever process reclaims a job whose worker died dead-letters it once these runs
    /// are spent (`retries(0)`: such a job is dead-lettered, not run again). At most
    /// `dq::limits::MAX_RETRIES` (1,000): more fails the runtime's start.
    pub fn retries(mut self, retries: u32) -> Self {
        self.retries = Some(retries);
        self
    }

    /// The delay before each retry (default: exponential from 1 s, +/-20 % jitter).
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// The topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The handler's name and where it was defined.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// The payload decoded as `M`, or why it is a poison message.
#[doc(hidden)]
pub fn decode<M: DeserializeOwned>(payload: &[u8]) -> Result<M, String> {
    serde_json::from_slice(payload).map_err(|e| {
        format!(
            "poison message: the payload cannot be deserialized as {}: {e}",
            std::any::type_name::<M>()
        )
    })
}

/// A listener registered by `#[dq::listener]`; collected with `inventory` at start-up.
#[derive(Debug)]
#[doc(hidden)]
pub struct ListenerRegistration {
    pub topic: &'static str,
    pub concurrency: Option<usize>,
    pub timeout: Option<Option<Duration>>,
    pub retries: Option<u32>,
    pub backoff: Option<Backoff>,
    pub call: fn(&[u8], JobContext) -> Result<HandlerFuture, String>,
    pub check: ArgumentCheck,
    pub name: &'static str,
    pub schedule: Option<ListenerSchedule>,
    pub module: &'static str,
    pub file: &'static str,
    pub line: u32,
}

inventory::collect!(ListenerRegistration);

impl ListenerRegistration {
    pub(crate) fn listener(&self) -> Listener {
        let call = self.call;
        let mut l = Listener::from_erased(
            self.topic,
            format!(
                "{}::{} ({}:{})",
                self.module, self.name, self.file, self.line
            ),
            Arc::new(call),
            self.check,
        );
        if let Some(n) = self.concurrency {
            l.concurrency = n;
        }
        if let Some(t) = self.timeout {
            l.timeout = t;
        }
        l.retries = self.retries;
        if let Some(b) = self.backoff {
            l.backoff = b;
        }
        l.schedule = self.schedule;
        l
    }
}

/// Every listener registered with `#[dq::listener]` in the program.
pub(crate) fn registered() -> Vec<Listener> {
    inventory::iter::<ListenerRegistration>
        .into_iter()
        .map(ListenerRegistration::listener)
        .collect()
}
