//! dq's runtime: the mover, consumer loops, retries, dead letters and graceful shutdown.
//! Application code uses it through the `dq` crate.

mod backoff;
mod chores;
mod consumer;
mod context;
mod dependencies;
mod events;
mod extract;
mod fate;
mod flow;
mod health;
mod job;
mod listener;
pub mod metrics;
mod mover;
mod outcome;
mod retention;
mod running;
mod runtime;
mod settle;
mod shared;
mod shutdown;
mod start;
mod states;
pub mod testing;
mod ticker;
mod upkeep;

pub use backoff::Backoff;
pub use context::JobContext;
pub use dependencies::{Dependencies, Dependency};
pub use dq_core::Rate;
pub use extract::{erase, extract, FromJob, Handler, HandlerFuture, State};
pub use listener::{
    decode, ArgumentCheck, ErasedHandler, Listener, ListenerRegistration, ListenerSchedule,
    DEFAULT_CONCURRENCY, DEFAULT_TIMEOUT,
};
pub use outcome::{IntoOutcome, Outcome, Output};
pub use runtime::{Runtime, RuntimeBuilder, ShutdownHandle};
pub use shutdown::{ShutdownReport, HOOK_DEADLINE};
pub use states::States;

#[doc(hidden)]
pub use inventory;
