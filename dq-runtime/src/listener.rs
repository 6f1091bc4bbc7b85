//! Listeners: a topic, its handler and the handler's settings. Built with [`Listener::new`],
//! by hand (the seed's `MessageListener`) or by `#[dq::listener]`, which registers the one it
//! builds through `inventory`.

use std::any::TypeId;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use dq_core::schedule::{Missed, Tick, TickPayload};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::backoff::Backoff;
use crate::context::JobContext;
use crate::extract::{Handler, HandlerFuture};
use crate::states::States;

/// A handler with its payload type erased: decodes the payload (or says why it cannot) and
/// starts the run.
pub type ErasedHandler =
    Arc<dyn Fn(&[u8], JobContext) -> Result<HandlerFuture, String> + Send + Sync>;

/// Checks at start that a handler's arguments can be provided (see [`crate::FromJob::check`]).
pub type ArgumentCheck = fn(&States) -> Result<(), String>;

/// What each tick's job of a listener's schedule carries: `None` for a [`Tick`], else the JSON
/// of the message; `Err` says why there is none (and fails the start).
type TickPayloadFn = fn() -> Result<Option<serde_json::Value>, String>;

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
///
/// It may declare a schedule for its topic as `#[dq::listener(cron = .., every = ..)]` does:
/// see [`cron`](Listener::cron) and [`every`](Listener::every); and keep the values its
/// handler returns for the programs that pushed the jobs, as `#[dq::listener(retain = "1h")]`
/// does: see [`retain`](Listener::retain); and turn on its topic's job events, as
/// `#[dq::listener(events = true)]` does: see [`events`](Listener::events).
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
    /// How long the records of succeeded jobs are kept (`retain`); none by default.
    pub(crate) retain: Option<Duration>,
    /// How many of them are kept per shard (`retain_count`); it goes with `retain`.
    pub(crate) retain_count: Option<u64>,
    /// Whether the topic's job events are on (`events`); off by default.
    pub(crate) events: bool,
    /// How many of them each shard keeps (`events_cap`); it goes with `events`.
    pub(crate) events_cap: Option<u64>,
    /// The most jobs of the topic pending at once (`max_pending`); none by default.
    pub(crate) max_pending: Option<u64>,
    /// How many jobs of the topic start per period in all processes (`rate`); none by default.
    pub(crate) rate: Option<dq_core::Rate>,
    /// The most jobs of the topic running at once in all processes; none by default.
    pub(crate) global_concurrency: Option<u32>,
    /// The most jobs of one group of the topic holding a slot at once; the store's (1 by
    /// default) when none.
    pub(crate) group_concurrency: Option<u32>,
    /// How many jobs of each group of the topic start per period in all processes
    /// (`group_rate`); none by default.
    pub(crate) group_rate: Option<dq_core::Rate>,
    /// What the ticks of a schedule set later carry.
    tick_payload: TickPayloadFn,
    /// The handler's payload type, when known (not for an erased handler).
    payload_type: Option<TypeId>,
}

/// The schedule a listener declares for its topic ([`Listener::cron`], [`Listener::every`],
/// or `#[dq::listener(cron = "..", every = "..")]`); `Runtime::start` stores it under the
/// topic's name.
#[derive(Clone, Copy, Debug)]
#[doc(hidden)]
pub struct ListenerSchedule {
    pub cron: Option<&'static str>,
    pub every: Option<Duration>,
    pub tz: Option<&'static str>,
    pub missed: Missed,
    /// What each tick's job carries (`None`: a [`Tick`](dq_core::schedule::Tick)).
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
            .field("retain", &self.retain)
            .field("retain_count", &self.retain_count)
            .field("events", &self.events)
            .field("events_cap", &self.events_cap)
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
        let mut listener = Listener::from_erased(
            topic,
            format!("closure at {}:{}", location.file(), location.line()),
            Arc::new(move |payload, ctx| Ok(handler.call(decode::<M>(payload)?, &ctx))),
            <H as Handler<M, Args>>::check,
        );
        listener.tick_payload = ticks_of::<M>;
        listener.payload_type = Some(TypeId::of::<M>());
        listener
    }

    /// A listener from an erased handler and the check of its arguments. The ticks of a
    /// schedule it declares carry a [`Tick`].
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
            retain: None,
            retain_count: None,
            events: false,
            events_cap: None,
            max_pending: None,
            rate: None,
            global_concurrency: None,
            group_concurrency: None,
            group_rate: None,
            tick_payload: <Tick as TickPayload>::tick_payload,
            payload_type: None,
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

    /// Declares a schedule for this listener's topic, as `#[dq::listener(cron = "..")]` does:
    /// five cron fields (minute first) or six (second first), read in UTC unless
    /// [`tz`](Listener::tz) says otherwise. `Runtime::start` stores it under the topic's name
    /// (a bad expression fails the start, naming the listener), and each tick is one job of the
    /// topic, however many processes run it.
    ///
    /// The handler takes a [`Tick`] (which schedule fired, and when), or a message whose
    /// `Default` value each tick carries: say so with
    /// [`ticks_carry_default`](Listener::ticks_carry_default).
    ///
    /// A `&'static str`, as the macro's literal: an expression read at run time can be leaked
    /// once at start (`Box::leak(expr.into_boxed_str())`).
    ///
    /// ```
    /// use dq_core::schedule::Tick;
    /// use dq_runtime::Listener;
    ///
    /// // 9:00 in Paris on weekdays, whatever the offset from UTC that day.
    /// let report = Listener::new("daily-report", |tick: Tick| async move {
    ///     println!("the report of {:?}", tick.at);
    /// })
    /// .cron("0 9 * * MON-FRI")
    /// .tz("Europe/Paris");
    /// ```
    pub fn cron(mut self, expr: &'static str) -> Self {
        self.schedule_mut().cron = Some(expr);
        self
    }

    /// The IANA time zone the [`cron`](Listener::cron) expression is read in (default `UTC`),
    /// as `#[dq::listener(tz = "..")]`. It goes with `cron` only: with `every`, or without a
    /// schedule, `Runtime::start` fails.
    pub fn tz(mut self, zone: &'static str) -> Self {
        self.schedule_mut().tz = Some(zone);
        self
    }

    /// Declares a schedule ticking at the multiples of `interval` since 1970-01-01 UTC (at
    /// least one second), as `#[dq::listener(every = "5m")]` does; see
    /// [`cron`](Listener::cron) for what is stored and what the handler takes. Give one of
    /// `cron` and `every`: both fail the start.
    ///
    /// ```
    /// use std::time::Duration;
    /// use dq_core::schedule::Missed;
    /// use dq_runtime::Listener;
    ///
    /// /// What each tick's job carries: `Sweep::default()`.
    /// #[derive(Default, serde::Serialize, serde::Deserialize)]
    /// struct Sweep { older_than_days: u32 }
    ///
    /// let sweep = Listener::new("sweep", |msg: Sweep| async move {
    ///     println!("sweeping what is older than {} days", msg.older_than_days);
    /// })
    /// .every(Duration::from_secs(300))
    /// .missed(Missed::RunOnce)
    /// .ticks_carry_default::<Sweep>();
    /// ```
    pub fn every(mut self, interval: Duration) -> Self {
        self.schedule_mut().every = Some(interval);
        self
    }

    /// What happens to the ticks missed while every process was down (default
    /// [`Missed::Skip`]), as `#[dq::listener(missed = "run_once")]`. It goes with a schedule:
    /// alone, it fails the start.
    pub fn missed(mut self, policy: Missed) -> Self {
        self.schedule_mut().missed = policy;
        self
    }

    /// Each tick's job of this listener's schedule carries `M::default()`, `M` being the
    /// handler's payload: for a message rather than a [`Tick`] (`#[dq::listener]` does this by
    /// itself). Without it, the schedule of a listener whose payload is not a `Tick` fails the
    /// start, and so does an `M` that is not the handler's payload.
    pub fn ticks_carry_default<M: Default + Serialize + 'static>(self) -> Self {
        let is_payload = self
            .payload_type
            .is_none_or(|payload| payload == TypeId::of::<M>());
        let ticks: TickPayloadFn = if is_payload {
            <M as TickPayload>::tick_payload
        } else {
            not_the_payload::<M>
        };
        self.with_tick_payload(ticks)
    }

    /// Sets what each tick's job carries (what `#[dq::listener]` passes: the payload type's
    /// `TickPayload`, checked where the macro can point at the type).
    #[doc(hidden)]
    pub fn with_tick_payload(
        mut self,
        payload: fn() -> Result<Option<serde_json::Value>, String>,
    ) -> Self {
        self.tick_payload = payload;
        if let Some(schedule) = &mut self.schedule {
            schedule.payload = payload;
        }
        self
    }

    /// The schedule the builder's calls fill, made at the first of them; what it lacks (no
    /// `cron` nor `every`, or both) is refused by `Runtime::start` with the listener's name.
    fn schedule_mut(&mut self) -> &mut ListenerSchedule {
        let payload = self.tick_payload;
        self.schedule.get_or_insert(ListenerSchedule {
            cron: None,
            every: None,
            tz: None,
            missed: Missed::default(),
            payload,
        })
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

/// What the ticks of a listener built with [`Listener::new`] carry until told otherwise: a
/// [`Tick`] when the handler takes one. `new` cannot make any other `M` (the macro can: it
/// requires `Default`), so it says what to call instead.
fn ticks_of<M: 'static>() -> Result<Option<serde_json::Value>, String> {
    if TypeId::of::<M>() == TypeId::of::<Tick>() {
        return Ok(None);
    }
    let name = std::any::type_name::<M>();
    Err(format!(
        "each tick's job would carry a `{name}`, and `Listener::new` cannot make one: call \
         `.ticks_carry_default::<{name}>()` to send `{name}::default()` (what \
         `#[dq::listener]` does), or take a `dq::schedule::Tick`"
    ))
}

/// The ticks of a listener whose `ticks_carry_default::<M>()` names another type than its
/// payload: every tick would be a poison message, so the start fails instead.
fn not_the_payload<M>() -> Result<Option<serde_json::Value>, String> {
    Err(format!(
        "`.ticks_carry_default::<{}>()` names another type than the handler's payload: \
         each tick would be a poison message",
        std::any::type_name::<M>()
    ))
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
    /// Builds the listener: `Listener::new(topic, the_fn)` and the attribute's options.
    pub listener: fn() -> Listener,
    pub name: &'static str,
    pub module: &'static str,
    pub file: &'static str,
    pub line: u32,
}

inventory::collect!(ListenerRegistration);

impl ListenerRegistration {
    /// The listener, named after its function and where it is defined.
    pub(crate) fn listener(&self) -> Listener {
        let mut listener = (self.listener)();
        listener.name = format!(
            "{}::{} ({}:{})",
            self.module, self.name, self.file, self.line
        );
        listener
    }
}

/// Every listener registered with `#[dq::listener]` in the program.
pub(crate) fn registered() -> Vec<Listener> {
    inventory::iter::<ListenerRegistration>
        .into_iter()
        .map(ListenerRegistration::listener)
        .collect()
}
