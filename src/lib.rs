//! # dq: delayed jobs on Redis
//!
//! Push typed messages with a delay; handle them in plain async functions; lose nothing.
//!
//! ```no_run
//! use std::time::Duration;
//!
//! #[derive(serde::Serialize, serde::Deserialize, dq::Message)]
//! #[message(topic = "order-cancel")]
//! struct OrderCancel { order_id: u64 }
//!
//! #[dq::listener(concurrency = 32, timeout = "5s", retries = 2)]
//! async fn cancel_order(msg: OrderCancel, ctx: dq::JobContext) -> Result<(), String> {
//!     println!("cancelling order {} (attempt {})", msg.order_id, ctx.attempt());
//!     Ok(())
//! }
//!
//! #[tokio::main]
//! async fn main() -> dq::Result<()> {
//!     let rt = dq::Runtime::start().await?;          // DQ_REDIS_URL, DQ_NAMESPACE, ...
//!     rt.client().push(OrderCancel { order_id: 42 }).delay(Duration::from_secs(600)).id("42").await?;
//!     rt.run_until_shutdown_signal().await?;         // SIGINT/SIGTERM: graceful shutdown
//!     Ok(())
//! }
//! ```
//!
//! See `README.md` for the whole story, and the `order_cancel` example.

//!
//! ## What is where
//!
//! The root holds what a program that pushes and handles jobs uses (21 names); the rest is in
//! modules: [`push`] (the push builder and its outcomes), [`admin`] (counts, listings, workers),
//! [`events`] (a topic's job events as a stream, resumable),
//! [`limits`] (defaults and bounds), [`runtime`] (the shutdown handle, what a handler may
//! return), [`schedule`] (periodic schedules), [`config`], [`metric`] (metric names), [`store`] (the store's role traits, the Redis
//! and memory stores and their records, for tools that work below the client) and [`testing`].
//!
//! ## Features
//!
//! None is on by default.
//!
//! * `web`: the dashboard, `dq::web::router(client, options)`.
//! * `prometheus`: metrics served over HTTP, `Runtime::builder().metrics_addr(..)`.
//! * `otel`: traces across processes: a push records the W3C trace context of the span it is
//!   made in, and the job's run continues it (`dq::trace`; README's "Tracing across processes").
//! * `rustls`, `tls`: `rediss://` URLs, through rustls or the system's OpenSSL.

pub use dq_core::{
    Client, Config, Due, Error, ErrorKind, JobId, JobInfo, JobResult, JobState, Message, Rate,
    Result, RunError, Topic, RUN_ERRORS_KEPT, RUN_ERROR_TEXT,
};
pub use dq_runtime::{
    Backoff, FromJob, JobContext, Listener, Outcome, Runtime, RuntimeBuilder, State,
};

/// The due-time type's name before 0.2: "schedule" now means only periodic schedules
/// ([`schedule`]). Write [`Due`] instead.
#[deprecated(
    since = "0.2.0",
    note = "renamed to `dq::Due` (a job's due time); `dq::schedule` is about periodic schedules"
)]
#[doc(hidden)]
pub type Schedule = Due;

pub use dq_core::metric;

/// The store below the client: its role traits and records, the Redis store ([`RedisStore`],
/// what [`Client::connect`] opens) and the in-memory one, for tools that work below the
/// client.
pub mod store {
    pub use dq_core::store::*;
    pub use dq_redis::{RedisStore, ACL_RULES};

    #[doc(hidden)]
    pub use dq_redis::internals::{script_hashes, ShardKeys};
}

/// Periodic jobs: [`Client::schedule`] declares one (cron in a time zone, or an interval), and
/// each tick is one job, however many processes run. See README's "Periodic jobs".
pub mod schedule {
    pub use dq_core::schedule::{
        fire_due, tick_job_id, Missed, Repeat, ScheduleBuilder, ScheduleInfo, ScheduleSpec, Tick,
        MAX_SCHEDULE_ID_LEN, MIN_INTERVAL,
    };
}

/// Pushing jobs: the builder [`Client::push`] returns, and what a push reports.
pub mod push {
    pub use dq_core::{OnConflict, PushBuilder, PushOutcome, Pushed};
}

/// What operators see and do through the [`Client`](crate::Client): counts, pages of jobs,
/// workers, the outcome of a cancel or reschedule.
pub mod admin {
    pub use dq_core::{
        ChangeOutcome, Cursor, GroupLoad, MinuteTally, Page, Throughput, TopicCounts, TopicStats,
        WorkerInfo, BUSIEST_GROUPS,
    };
}

/// Workflows: jobs that wait for other jobs, fan out and fan in, with their results passed on.
/// [`Client::workflow`](crate::Client::workflow) builds one; a step's handler reads what the steps it
/// comes after returned with [`JobContext::dependencies`](crate::JobContext::dependencies).
/// See README's "Workflows".
pub mod workflow {
    pub use dq_core::workflow::{
        NewStep, NewWorkflow, OnFailure, StepInfo, StepRef, StepState, WorkflowInfo,
        WorkflowOutcome, WorkflowState, DEFAULT_WORKFLOW_KEEP, MAX_STEPS, MAX_STEP_NAME_LEN,
        MAX_WORKFLOW_ID_LEN,
    };
    pub use dq_core::{Step, WorkflowBuilder};
    pub use dq_runtime::{Dependencies, Dependency};
}

/// Job events: what happened to the jobs of a topic (pushed, started, succeeded, failed,
/// retrying, dead, ...), read as a `Stream` (the `futures` trait) from
/// [`Client::events`](crate::Client::events), resumed after a restart from a saved
/// [`EventCursor`] with [`Client::events_from`](crate::Client::events_from). A topic's listener
/// turns its events on: `#[dq::listener(events = true)]`. See README's "Job events".
pub mod events {
    pub use dq_core::events::{
        EventCursor, EventItem, EventKind, EventPosition, JobEvent, DEFAULT_EVENTS_CAP,
    };
    pub use dq_core::EventStream;
}

/// Defaults and bounds.
pub mod limits {
    pub use dq_core::{
        DEFAULT_MAX_PAYLOAD_BYTES, DEFAULT_RETRIES, MAX_DELAY, MAX_JOB_ID_LEN, MAX_PRIORITY,
        MAX_PROGRESS_BYTES, MAX_RETRIES, MAX_TOPIC_LEN, MIN_PRIORITY,
    };
    pub use dq_runtime::{DEFAULT_CONCURRENCY, DEFAULT_TIMEOUT};
}

/// The running side beyond [`Runtime`](crate::Runtime): a handle that stops it from anywhere,
/// what a handler may return (and what the `Ok` of its `Result` may hold: [`Output`]), what
/// [`Listener::new`](crate::Listener::new) accepts, and the registered state a
/// [`FromJob`](crate::FromJob) may check.
pub mod runtime {
    pub use dq_runtime::{Handler, IntoOutcome, Output, ShutdownHandle, ShutdownReport, States};
}

/// Configuration: the builder [`Config::builder`] returns, and reading values as the `DQ_*`
/// variables and the macro do.
pub mod config {
    pub use dq_core::{parse_duration, ConfigBuilder, CLUSTER_SHARDS};
}

/// Testing handlers without Redis and without waiting; see [`testing::TestRuntime`].
pub use dq_runtime::testing;

/// Traces across processes (feature `otel`): what a push records of the current span, and how
/// a run continues it. The runtime and the client use it by themselves; install a
/// `tracing-opentelemetry` layer to export the spans (README's "Tracing across processes").
#[cfg(feature = "otel")]
pub use dq_core::trace;

/// The web dashboard (feature `web`): [`web::router`] gives an axum `Router` to mount under
/// any path of your web server; `dq web` serves it on its own. See README's Dashboard section.
#[cfg(feature = "web")]
pub use dq_web as web;

/// Binds a payload type to its topic.
///
/// ```
/// #[derive(serde::Serialize, serde::Deserialize, dq::Message)]
/// #[message(topic = "order-cancel")]
/// struct OrderCancel { order_id: u64 }
///
/// assert_eq!(<OrderCancel as dq::Message>::TOPIC, "order-cancel");
/// ```
///
/// A topic that would be refused at run time (`"order cancel"`, `"a{b}"`) fails the build.
pub use dq_macros::Message;

/// Registers an async fn as the handler of a topic; the function itself stays as written and
/// can still be called directly (in a unit test, say).
///
/// ```
/// # #[derive(serde::Serialize, serde::Deserialize, dq::Message)]
/// # #[message(topic = "order-cancel")]
/// # struct OrderCancel { order_id: u64 }
/// #[dq::listener(topic = "order-cancel", concurrency = 32, timeout = "5s", retries = 2, backoff = "exponential:1s")]
/// async fn cancel_order(msg: OrderCancel, ctx: dq::JobContext) -> Result<(), std::io::Error> {
///     Ok(())
/// }
/// ```
///
/// | option | default | meaning |
/// | --- | --- | --- |
/// | `topic = "..."` | the payload type's `Message::TOPIC` | the topic handled |
/// | `concurrency = N` | 16 | most runs at once in one process |
/// | `timeout = "5s"` | `"60s"` | a run that takes longer is cancelled and counts as failed; `"none"` for no limit |
/// | `retries = N` | the job's own (2 by default, set at push) | retries after a failed first run |
/// | `backoff = "..."` | `"exponential:1s"` (capped at 10 min, +/-20 % jitter) | `"fixed:5s"`, `"exponential:2s"` |
/// | `cron = "..."` | none | a schedule for this topic: five cron fields, or six with seconds first |
/// | `tz = "..."` | `"UTC"` | the IANA zone `cron` is read in (`"Europe/Paris"`) |
/// | `every = "5m"` | none | a schedule ticking at multiples of the interval (at least `1s`) |
/// | `missed = "..."` | `"skip"` | ticks missed while every process was down: `"skip"`, `"run_once"`, `"all:N"` |
/// | `retain = "1h"` | none | keep each succeeded job's record, with the value its handler returned, this long (see below) |
/// | `retain_count = N` | 10,000 | most records kept per shard of the topic (with `retain` only) |
/// | `events = true` | `false` | write the topic's job events, for [`Client::events`] to read (see below) |
/// | `events_cap = N` | 10,000 | fewest events kept per shard of the topic (with `events = true` only) |
/// | `max_pending = N` | none | most jobs of the topic pending at once; a push past it fails with `Error::TopicFull` |
/// | `rate = "100/1s"` | none | most jobs of the topic started per period, in all processes together |
/// | `global_concurrency = N` | none | most runs of the topic at once, in all processes together |
/// | `group_concurrency = N` | 1 | most runs of one group of the topic at once (jobs pushed with `.group(key)`) |
/// | `group_rate = "10/1s"` | none | most jobs of each group of the topic started per period, in all processes together |
/// | `crate = "..."` | `"dq"` | the path of this crate, for re-exporters |
///
/// With `cron` or `every`, the runtime stores the schedule under the topic's name at start (see
/// [`schedule`] and README "Periodic jobs"); the payload is then a [`schedule::Tick`] (name the
/// `topic`) or a message implementing `Default`, which each tick's job carries.
///
/// Durations are written as the `DQ_*` variables are (`250ms`, `5s`, `1.5s`, `10m`, `2h`, `1d`;
/// one parser, `dq::config::parse_duration`, serves both) and must be positive; topics follow
/// the rules of [`Topic`]. Either mistake fails the build, pointing at the value.
///
/// The first argument is the payload, decoded from JSON; a payload that does not decode is a
/// poison message, dead-lettered at once with the error. After it come up to eight
/// extractors, in any order: [`JobContext`], [`State<T>`](State) (registered with
/// [`RuntimeBuilder::state`]), [`Client`], or your own [`FromJob`] types; one that is not an
/// extractor is a compile error on that argument, and a listener needing state nobody
/// registered fails [`RuntimeBuilder::start`]. The return type is `()`, [`Outcome`], or
/// `Result<T, E>` where `E: Display` and `T` is `()`, [`Outcome`] or a value that implements
/// `Serialize` ([`runtime::Output`]); the handler's future must be `Send` (a compile error
/// names the local that is not). Two listeners on one topic are refused when the runtime
/// starts.
///
/// The value a handler returns in its `Ok` is the job's result: with `retain`, the topic keeps
/// the record of each succeeded job (its value as JSON) for that long, and the program that
/// pushed it reads the value with [`Client::result`] or waits for it with [`Client::wait`]
/// ([`JobResult`]). Without `retain` nothing is kept (the default: memory stays flat), and a
/// wait answers [`JobResult::NotKept`] once the job has ended (a dead letter is kept whatever
/// the retention: a wait for one answers `Dead`). The runtime records the retention at start;
/// a listener without `retain` turns it off for its topic.
///
/// With `events = true`, every step of the topic's jobs (pushed, started, succeeded, failed,
/// retrying, dead, ...) is written to a capped stream per shard in the same atomic step as the
/// change, and any program reads them with [`Client::events`] and resumes after a restart from
/// a saved cursor ([`events`]). Off by default; a listener without it turns them off for its
/// topic at start.
///
/// ```
/// # #[derive(serde::Serialize, serde::Deserialize, dq::Message)]
/// # #[message(topic = "invoice")]
/// # struct Invoice { order_id: u64 }
/// #[derive(Debug, serde::Serialize, serde::Deserialize)]
/// struct Receipt { number: String }
///
/// #[dq::listener(retain = "1h")]
/// async fn send_invoice(msg: Invoice) -> Result<Receipt, String> {
///     Ok(Receipt { number: format!("R-{}", msg.order_id) })
/// }
///
/// # async fn push(client: dq::Client) -> dq::Result<()> {
/// // In the program that pushes:
/// let id = client.push(Invoice { order_id: 42 }).await?;
/// let waited = client.wait::<Invoice, Receipt>(id.as_str(), std::time::Duration::from_secs(30));
/// match waited.await? {
///     dq::JobResult::Succeeded(receipt) => println!("receipt {}", receipt.number),
///     dq::JobResult::Dead { error, .. } => println!("failed: {error}"),
///     other => println!("not yet: {other:?}"),
/// }
/// # Ok(()) }
/// ```
///
/// ```
/// # #[derive(serde::Serialize, serde::Deserialize, dq::Message)]
/// # #[message(topic = "order-cancel")]
/// # struct OrderCancel { order_id: u64 }
/// #[derive(Clone)]
/// struct Shop { /* a pool, a client */ }
///
/// #[dq::listener]
/// async fn cancel_order(msg: OrderCancel, ctx: dq::JobContext, shop: dq::State<Shop>, jobs: dq::Client) {}
///
/// # async fn start() -> dq::Result<()> {
/// let rt = dq::Runtime::builder().state(Shop {}).start().await?;
/// # Ok(()) }
/// ```
pub use dq_macros::listener;

#[doc(hidden)]
pub mod __private {
    pub use dq_core::schedule::TickPayload;
    pub use dq_runtime::inventory;
    pub use dq_runtime::{
        decode, erase, extract, HandlerFuture, ListenerRegistration, ListenerSchedule, States,
    };
}

/// README.md's examples, compiled (and the runnable ones run) as doctests, so the first page a
/// user reads cannot drift from the API. The dashboard's example needs the `web` feature, so
/// they run with it (`scripts/test` runs the tests with every feature).
#[doc = include_str!("../README.md")]
#[cfg(all(doctest, feature = "web"))]
pub struct ReadmeDoctests;
