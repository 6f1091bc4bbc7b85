//! A listener's arguments after the payload: [`FromJob`] (what may be asked for), [`State`] (a
//! value the application registered at start), and [`States`] (all of them).
//!
//! Spring hands a listener bean its repository and payment client through its constructor;
//! axum hands a request handler `State<T>`. A dq listener asks for what it needs in its
//! signature, and the runtime checks at start that it can provide it:
//!
//! ```
//! use dq_runtime::{JobContext, State};
//! # #[derive(Clone)] struct Shop; impl Shop { async fn cancel(&self, _id: u64) {} }
//! # #[derive(Clone)] struct Mailer; impl Mailer { async fn send(&self, _id: u64) {} }
//! # #[derive(serde::Deserialize)] struct OrderCancel { order_id: u64 }
//! // The payload first; then any extractors, in any order.
//! async fn cancel(msg: OrderCancel, shop: State<Shop>, ctx: JobContext, mail: State<Mailer>) {
//!     shop.cancel(msg.order_id).await;
//!     if ctx.attempt() == 1 {
//!         mail.send(msg.order_id).await;
//!     }
//! }
//! ```

use std::future::Future;
use std::ops::Deref;
use std::pin::Pin;

use dq_core::Client;

use crate::context::JobContext;
use crate::outcome::{IntoOutcome, Outcome};
use crate::states::States;

/// A value a listener takes after its payload, produced from the job being run.
///
/// dq provides [`JobContext`], [`State<T>`] and [`Client`]; implement it for your own types to
/// have them injected too. [`check`](FromJob::check) runs once per listener when the runtime
/// starts, so a listener that cannot be served fails `start()`, not its first job;
/// [`from_job`](FromJob::from_job) runs before each run of the handler.
///
/// A failed extraction does not run the handler: the job ends with the [`Outcome`] returned,
/// as if the handler had returned it (`Outcome::DeadLetter` for a job that can never be
/// served, `Outcome::Error` to retry it with the listener's backoff). Do not return
/// `Outcome::Done` or `Outcome::DoneWith` (the job would be acked without its handler ever
/// running) or `Outcome::RetryAfter` for a condition that lasts (a postponed run spends no
/// attempt, so it would be postponed for ever). A panic in `from_job` counts as
/// `Outcome::Error`.
///
/// The default [`check`](FromJob::check) accepts every listener; override it when your
/// extractor needs something registered (as `State<T>` does), or a listener missing it fails
/// at each job instead of at `start()`.
///
/// Extraction is synchronous: it picks values out of the job and the registered state. Work
/// that waits (a database lookup) belongs in the handler, under its timeout.
///
/// # A user-written extractor
///
/// Every payload of a multi-tenant application carries a `"tenant"` field; handlers take the
/// tenant as an argument instead of each decoding it, and a job naming a tenant that is not
/// configured is dead-lettered before any handler code runs:
///
/// ```
/// use dq_runtime::{FromJob, JobContext, Outcome, States};
///
/// /// The tenants this service knows, registered with `Runtime::builder().state(..)`.
/// #[derive(Clone)]
/// struct Tenants(Vec<String>);
///
/// /// The tenant a job belongs to.
/// struct Tenant(String);
///
/// impl FromJob for Tenant {
///     fn from_job(job: &JobContext) -> Result<Self, Outcome> {
///         #[derive(serde::Deserialize)]
///         struct Meta { tenant: String }
///         let meta: Meta = serde_json::from_slice(job.payload())
///             .map_err(|e| Outcome::DeadLetter(format!("the payload names no tenant: {e}")))?;
///         let known = job.state::<Tenants>().is_some_and(|t| t.0.contains(&meta.tenant));
///         if !known {
///             return Err(Outcome::DeadLetter(format!("unknown tenant {:?}", meta.tenant)));
///         }
///         Ok(Tenant(meta.tenant))
///     }
///
///     /// A listener taking `Tenant` needs `Tenants` registered: checked at start.
///     fn check(states: &States) -> Result<(), String> {
///         <dq_runtime::State<Tenants> as FromJob>::check(states)
///     }
/// }
///
/// #[derive(serde::Deserialize)]
/// struct Invoice { tenant: String, amount: u64 }
///
/// async fn send_invoice(msg: Invoice, tenant: Tenant) {
///     assert_eq!(msg.tenant, tenant.0);
/// }
///
/// let ctx = JobContext::for_test("invoice", "1").unwrap()
///     .with_payload(r#"{"tenant":"acme","amount":12}"#)
///     .with_state(Tenants(vec!["acme".into()]));
/// assert_eq!(Tenant::from_job(&ctx).ok().map(|t| t.0).as_deref(), Some("acme"));
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be an argument of a dq listener",
    label = "not an extractor: `{Self}` does not implement `dq::FromJob`",
    note = "the first argument is the payload; after it a listener takes `dq::JobContext`, `dq::State<T>`, `dq::Client`, or a type of yours that implements `dq::FromJob`"
)]
pub trait FromJob: Sized {
    /// The value for this run of the handler, or the outcome of the job when there is none.
    fn from_job(job: &JobContext) -> Result<Self, Outcome>;

    /// Called once per listener when the runtime starts: `Err` says what is missing and how
    /// to provide it, and fails the start with the listener's name. Nothing by default.
    fn check(states: &States) -> Result<(), String> {
        let _ = states;
        Ok(())
    }
}

impl FromJob for JobContext {
    fn from_job(job: &JobContext) -> Result<Self, Outcome> {
        Ok(job.clone())
    }
}

/// The runtime's client: push follow-up jobs, cancel others.
impl FromJob for Client {
    fn from_job(job: &JobContext) -> Result<Self, Outcome> {
        Ok(job.client().clone())
    }
}

/// A value the application registered with `Runtime::builder().state(value)`, cloned for each
/// run: put a pool, an HTTP client or an `Arc` of your services in it (clones share).
///
/// A listener asking for a `State<T>` that nobody registered fails `Runtime::start()` with
/// the listener's name, the type and the call that provides it.
///
/// It derefs to `&T` only: each run has its own clone, so a change made through it would be
/// lost when the run ends. What runs share goes behind an `Arc<Mutex<..>>` or a pool, as in
/// `examples/order_cancel.rs`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct State<T>(pub T);

impl<T> Deref for State<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T: Clone + Send + Sync + 'static> FromJob for State<T> {
    fn from_job(job: &JobContext) -> Result<Self, Outcome> {
        job.state::<T>().map(State).ok_or_else(|| {
            // Only a context built by hand gets here: the runtime checked at start.
            Outcome::Error(missing::<T>(job.states()))
        })
    }

    fn check(states: &States) -> Result<(), String> {
        if states.contains::<T>() {
            Ok(())
        } else {
            Err(missing::<T>(states))
        }
    }
}

fn missing<T: 'static>(states: &States) -> String {
    let name = std::any::type_name::<T>();
    let registered = if states.is_empty() {
        "none is registered".to_owned()
    } else {
        format!("registered: {}", states.type_names().join(", "))
    };
    format!(
        "it takes `State<{name}>`, but no `{name}` was registered ({registered}): \
         provide one with `Runtime::builder().state(value)` before `start()` \
         (in tests, `TestRuntime::builder().state(value)`)"
    )
}

/// The future a type-erased handler returns.
pub type HandlerFuture = Pin<Box<dyn Future<Output = Outcome> + Send>>;

/// Functions and closures [`Listener::new`](crate::Listener::new) accepts: the payload `M`,
/// then up to eight [`FromJob`] arguments `Args`, returning a future whose output is
/// [`IntoOutcome`]. `#[dq::listener]` builds its listener with `Listener::new` too, so a
/// handler's arguments are extracted here, however it was declared.
#[diagnostic::on_unimplemented(
    message = "this cannot be the handler of a dq listener",
    label = "not a handler",
    note = "a handler takes the payload, then up to eight extractors (`dq::JobContext`, `dq::State<T>`, `dq::Client`, types implementing `dq::FromJob`), and returns a `Send` future of `()`, `dq::Outcome` or `Result<T, E: Display>` (`T`: `()`, `dq::Outcome` or a value that implements `Serialize`, kept as the job's result); annotate the closure's arguments (`|msg: OrderCancel, ctx: dq::JobContext| async move {{ .. }}`)"
)]
pub trait Handler<M, Args>: Send + Sync + 'static {
    /// Extracts the arguments from `job` and starts the run.
    fn call(&self, message: M, job: &JobContext) -> HandlerFuture;
    /// Checks at start that every argument can be provided (see [`FromJob::check`]).
    fn check(states: &States) -> Result<(), String>;
}

/// The value of one argument, or the future that ends the job with the extractor's outcome.
#[doc(hidden)]
pub fn extract<T: FromJob>(job: &JobContext) -> Result<T, HandlerFuture> {
    T::from_job(job).map_err(|outcome| -> HandlerFuture { Box::pin(std::future::ready(outcome)) })
}

/// A handler's future, boxed and read as an [`Outcome`].
#[doc(hidden)]
pub fn erase<Fut, R>(future: Fut) -> HandlerFuture
where
    Fut: Future<Output = R> + Send + 'static,
    R: IntoOutcome,
{
    Box::pin(async move { future.await.into_outcome() })
}

macro_rules! handler_with {
    ($($arg:ident),*) => {
        #[allow(non_snake_case)]
        impl<F, Fut, R, M, $($arg,)*> Handler<M, ($($arg,)*)> for F
        where
            F: Fn(M, $($arg,)*) -> Fut + Send + Sync + 'static,
            Fut: Future<Output = R> + Send + 'static,
            R: IntoOutcome,
            $($arg: FromJob,)*
        {
            #[allow(unused_variables)]
            fn call(&self, message: M, job: &JobContext) -> HandlerFuture {
                $(
                    let $arg = match extract::<$arg>(job) {
                        Ok(value) => value,
                        Err(rejected) => return rejected,
                    };
                )*
                erase(self(message, $($arg,)*))
            }

            #[allow(unused_variables)]
            fn check(states: &States) -> Result<(), String> {
                $($arg::check(states)?;)*
                Ok(())
            }
        }
    };
}

handler_with!();
handler_with!(A1);
handler_with!(A1, A2);
handler_with!(A1, A2, A3);
handler_with!(A1, A2, A3, A4);
handler_with!(A1, A2, A3, A4, A5);
handler_with!(A1, A2, A3, A4, A5, A6);
handler_with!(A1, A2, A3, A4, A5, A6, A7);
handler_with!(A1, A2, A3, A4, A5, A6, A7, A8);
