//! Testing handlers without Redis and without waiting: a runtime on the in-memory store whose
//! clock the test moves.
//!
//! ```
//! use std::time::Duration;
//!
//! #[derive(serde::Serialize, serde::Deserialize)]
//! struct OrderCancel { order_id: u64 }
//! impl dq_core::Message for OrderCancel { const TOPIC: &'static str = "order-cancel"; }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> dq_core::Result<()> {
//! let cancelled = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
//! let seen = cancelled.clone();
//! let listener = dq_runtime::Listener::new("order-cancel", move |msg: OrderCancel, _ctx: dq_runtime::JobContext| {
//!     let seen = seen.clone();
//!     async move { seen.lock().unwrap().push(msg.order_id) }
//! });
//! let rt = dq_runtime::testing::TestRuntime::start_with(
//!     dq_runtime::Runtime::builder().without_registered_listeners().listener(listener),
//! ).await?;
//!
//! rt.client().push(OrderCancel { order_id: 42 }).delay(Duration::from_secs(600)).await?;
//! rt.advance(Duration::from_secs(599)).await;
//! assert!(cancelled.lock().unwrap().is_empty(), "not yet due");
//! rt.advance(Duration::from_secs(1)).await;           // ten minutes, no real waiting
//! assert_eq!(*cancelled.lock().unwrap(), [42]);
//! assert_eq!(rt.handled("order-cancel").len(), 1);
//! rt.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! # Results and waits on the test clock
//!
//! `rt.client().result::<M, T>(id)` and `rt.client().wait::<M, T>(id, timeout)` work as on
//! Redis, for the topics whose listener keeps its ends ([`Listener::retain`]), and the
//! timeout of a wait counts the test clock, not real time. A wait runs beside
//! [`advance`](TestRuntime::advance) (in `tokio::join!`, or a spawned task): it answers the
//! job's end when a move of the clock makes the job run, and `Pending` when the clock reaches
//! its deadline first, however little real time passed. A move in one step from before a
//! job's due time to after a wait's deadline ends the wait before the job runs, as real time
//! would have. A wait the clock never reaches still ends after its timeout of real time, so a
//! test that forgets to advance fails instead of hanging. A wait for a pending job of a topic
//! that keeps nothing waits for its end too, then answers `NotKept` (or `Dead`).
//!
//! # Job events, progress and cancels on the test clock
//!
//! `rt.client().events(topic)` reads a topic's job events (its listener with
//! [`Listener::events`]) as on Redis, each stamped by the test clock: a job pushed with a
//! delay of an hour shows `pushed` at [`now`](TestRuntime::now) and `promoted`, `started`,
//! `succeeded` an hour later once [`advance`](TestRuntime::advance) moved the clock. A running
//! handler's `ctx.progress(..)` is read with `rt.client().status(..)` (`JobInfo::progress`),
//! and `rt.client().cancel(..)` of a running job reaches its handler through
//! `JobContext::cancelled`, as in production. These are the store's events, for any program;
//! [`history`](TestRuntime::history) is another record, the test runtime's own list of what
//! the store was asked to do (pushes, acks, retries, dead letters), for asserting on in tests.
//!
//! ```
//! use std::time::Duration;
//!
//! #[derive(serde::Serialize, serde::Deserialize)]
//! struct Invoice { order_id: u64 }
//! impl dq_core::Message for Invoice { const TOPIC: &'static str = "invoice"; }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> dq_core::Result<()> {
//! let invoicing = dq_runtime::Listener::new("invoice", |msg: Invoice| async move {
//!     Ok::<_, String>(format!("R-{}", msg.order_id))
//! })
//! .retain(Duration::from_secs(3600));
//! let rt = dq_runtime::testing::TestRuntime::start_with(
//!     dq_runtime::Runtime::builder().without_registered_listeners().listener(invoicing),
//! ).await?;
//!
//! let id = rt.client().push(Invoice { order_id: 42 }).delay(Duration::from_secs(600)).await?;
//! let wait = rt.client().wait::<Invoice, String>(id.as_str(), Duration::from_secs(900));
//! let (end, ()) = tokio::join!(wait, rt.advance(Duration::from_secs(600)));
//! assert_eq!(end?, dq_core::JobResult::Succeeded("R-42".to_owned()));
//! rt.shutdown().await;
//! # Ok(()) }
//! ```

use std::time::{Duration, Instant, SystemTime};

use dq_core::store::{Admin, Leases};
use dq_core::{Client, Config, Event, JobId, JobInfo, MemoryStore, Result, Topic};

use crate::listener::Listener;
use crate::runtime::{Runtime, RuntimeBuilder};

/// Longest [`TestRuntime::wait_idle`] waits, in real time, before it panics.
pub const IDLE_LIMIT: Duration = Duration::from_secs(30);

/// What [`TestRuntime::builder`] returns: the parts of a [`RuntimeBuilder`] a test sets (for
/// the others, build a `RuntimeBuilder` and pass it to [`TestRuntime::start_with`]).
#[derive(Debug)]
#[must_use]
pub struct TestRuntimeBuilder {
    runtime: RuntimeBuilder,
    start: Option<SystemTime>,
}

impl TestRuntimeBuilder {
    /// Registers state for the listeners, as [`RuntimeBuilder::state`] does.
    pub fn state<T: Clone + Send + Sync + 'static>(self, value: T) -> Self {
        TestRuntimeBuilder {
            runtime: self.runtime.state(value),
            ..self
        }
    }

    /// Adds a listener built by hand, as [`RuntimeBuilder::listener`] does.
    pub fn listener(self, listener: Listener) -> Self {
        TestRuntimeBuilder {
            runtime: self.runtime.listener(listener),
            ..self
        }
    }

    /// Runs only the listeners added here, as [`RuntimeBuilder::without_registered_listeners`].
    pub fn without_registered_listeners(self) -> Self {
        TestRuntimeBuilder {
            runtime: self.runtime.without_registered_listeners(),
            ..self
        }
    }

    /// Starts the test clock at `time` instead of the current time: for a schedule, say, that
    /// is to be seen on a given weekday or across a daylight-saving change.
    pub fn starting_at(self, time: SystemTime) -> Self {
        TestRuntimeBuilder {
            start: Some(time),
            ..self
        }
    }

    /// Starts the test runtime; fails as [`RuntimeBuilder::start`] does (a listener asking for
    /// state nobody registered, say).
    pub async fn start(self) -> Result<TestRuntime> {
        TestRuntime::start_at(self.runtime, self.start.unwrap_or_else(SystemTime::now)).await
    }
}

/// A [`Runtime`] on a [`MemoryStore`] with a manual clock.
#[derive(Debug)]
pub struct TestRuntime {
    runtime: Runtime,
    store: MemoryStore,
    /// The topics this runtime's listeners handle.
    topics: Vec<Topic>,
}

impl TestRuntime {
    /// Runs every `#[dq::listener]` of the program, on a clock starting at the current time.
    pub async fn start() -> Result<TestRuntime> {
        TestRuntime::start_with(Runtime::builder()).await
    }

    /// A builder for the state and listeners of a test runtime:
    /// `TestRuntime::builder().state(shop).start().await?`.
    pub fn builder() -> TestRuntimeBuilder {
        TestRuntimeBuilder {
            runtime: Runtime::builder(),
            start: None,
        }
    }

    /// Runs what `builder` describes (listeners, state, hooks); its store and clock are
    /// replaced.
    pub async fn start_with(builder: RuntimeBuilder) -> Result<TestRuntime> {
        TestRuntime::start_at(builder, SystemTime::now()).await
    }

    async fn start_at(builder: RuntimeBuilder, start: SystemTime) -> Result<TestRuntime> {
        let store = MemoryStore::with_manual_clock(start);
        // Timers of the runtime run in real time; leases long enough that a test never sees
        // one expire by accident.
        let config = Config::builder()
            .lease(Duration::from_secs(3600))
            .shutdown_grace(Duration::from_secs(5))
            .build()?;
        let runtime = builder
            .config(config)
            .store(std::sync::Arc::new(store.clone()))
            .start()
            .await?;
        let topics = runtime.topics().to_vec();
        Ok(TestRuntime {
            runtime,
            store,
            topics,
        })
    }

    /// A client that pushes to this runtime. The values handlers return work through it as
    /// on Redis: `client().result::<M, T>(id)` reads a job's value (or its last error) and
    /// `client().wait::<M, T>(id, timeout)` waits for its end, for the topics whose listener
    /// keeps them ([`Listener::retain`]). The records live in the memory store, and a wait's
    /// `timeout` counts the test clock: see the [module documentation](crate::testing).
    pub fn client(&self) -> &Client {
        self.runtime.client()
    }

    /// The store, for inspection.
    pub fn store(&self) -> &MemoryStore {
        &self.store
    }

    /// The test clock's current time.
    pub fn now(&self) -> SystemTime {
        dq_core::from_us(self.store.now_us())
    }

    /// Moves the clock forward by `by`, stopping at every due time and every schedule tick on
    /// the way and letting the jobs due then (retries and ticks' jobs included) run, as they
    /// would have in real time: a week of a 5-minute schedule takes a moment. Returns when
    /// nothing is ready or running.
    pub async fn advance(&self, by: Duration) {
        self.wait_idle().await;
        let target = self
            .store
            .now_us()
            .saturating_add(u64::try_from(by.as_micros()).unwrap_or(u64::MAX));
        self.fire_schedules().await;
        loop {
            let next_job = self.store.next_due_us();
            // A tick at or before now was tried by the last firing: one still there could not
            // be fired (its topic at its max_pending) and is tried again at the next step; it
            // is no reason to stop the clock again where it stands.
            let now = self.store.now_us();
            let next_tick = self.store.next_schedule_us().filter(|t| *t > now);
            // A topic's rate limit or hold lets its next job start then.
            let next_release = self.store.next_release_us();
            let next = next_job
                .into_iter()
                .chain(next_tick)
                .chain(next_release)
                .min();
            let Some(at) = next.filter(|d| *d <= target) else {
                break;
            };
            self.store.advance_to(at.max(self.store.now_us()));
            self.fire_schedules().await;
            self.promote().await;
            self.wait_idle().await;
        }
        self.store.advance_to(target);
        self.fire_schedules().await;
        self.promote().await;
        self.wait_idle().await;
    }

    /// Makes the jobs due now ready (the runtime's mover does it too, woken by the clock's
    /// move; doing it here spares a round through its timers at every step).
    async fn promote(&self) {
        while let Ok(p) = self.store.promote(0, dq_core::MAX_BATCH).await {
            if p.moved < dq_core::MAX_BATCH {
                break;
            }
        }
    }

    /// Creates the jobs of the schedule ticks due now (the runtime's ticker does it too, every
    /// real second; here it keeps pace with the test clock).
    async fn fire_schedules(&self) {
        if let Err(e) = dq_core::schedule::fire_due(self.client(), Duration::ZERO).await {
            panic!("the in-memory store refused to fire schedules: {e}");
        }
    }

    /// Waits (in real time) until nothing is left that this runtime can run now: no job running
    /// or due, and no job ready in a topic it has a listener for and that is not paused. Jobs
    /// pushed to topics handled elsewhere (a follow-up for another service) stay ready and do
    /// not keep it busy.
    ///
    /// # Panics
    /// When the runtime is still busy after [`IDLE_LIMIT`]: a handler that never returns.
    pub async fn wait_idle(&self) {
        let started = Instant::now();
        let mut quiet = 0;
        let mut polls = 0u32;
        while quiet < 3 {
            if self.store.is_idle_for(|t| self.topics.contains(t)) {
                quiet += 1;
            } else {
                quiet = 0;
            }
            assert!(
                started.elapsed() < IDLE_LIMIT,
                "the test runtime is still busy after {IDLE_LIMIT:?}: a handler does not return"
            );
            // The store's state is the whole truth (a job fetched is running until its ack or
            // retry is applied), so the first polls only let the runtime's tasks run; a
            // handler that takes real time is then polled every millisecond.
            polls += 1;
            if polls < 1_000 {
                // Give the OS thread up as well: the test's own thread spinning here would
                // otherwise take a core from the runtime's workers.
                std::thread::yield_now();
                tokio::task::yield_now().await;
            } else {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    }

    /// Ids of the jobs of `topic` that finished, in the order they did.
    pub fn handled(&self, topic: &str) -> Vec<JobId> {
        self.store
            .history()
            .into_iter()
            .filter_map(|e| match e {
                Event::Acked { topic: t, id, .. } if t.as_str() == topic => Some(id),
                _ => None,
            })
            .collect()
    }

    /// Everything that happened to jobs so far: pushes, acks, retries, postponements, dead
    /// letters (`dq::store::Event`).
    pub fn history(&self) -> Vec<Event> {
        self.store.history()
    }

    /// The dead letters of `topic`, newest first.
    pub async fn dead(&self, topic: &str) -> Result<Vec<JobInfo>> {
        let topic = Topic::new(topic)?;
        let mut all = Vec::new();
        let mut cursor = Some(dq_core::Cursor::START);
        while let Some(c) = cursor {
            let page = self.store.dead_jobs(&topic, c, dq_core::MAX_BATCH).await?;
            all.extend(page.jobs);
            cursor = page.next;
        }
        Ok(all)
    }

    /// Shuts the runtime down.
    ///
    /// # Panics
    /// When the runtime's supervisor failed (it panicked): the test sees it.
    pub async fn shutdown(self) {
        if let Err(e) = self.runtime.shutdown().await {
            panic!("the test runtime did not shut down cleanly: {e}");
        }
    }
}
