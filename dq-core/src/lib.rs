//! dq's core: the data model (topics, job ids, messages, envelopes, configuration, errors),
//! the client, the store's role traits and the in-memory store. The Redis store is the crate
//! `dq-redis`. Application code uses both through the `dq` crate.

mod admin;
mod client;
mod config;
mod envelope;
mod error;
pub mod events;
mod job;
mod lease;
mod message;
pub mod metric;
mod name;
mod rate;
mod result;
pub mod schedule;
pub mod store;
#[cfg(feature = "otel")]
pub mod trace;
pub mod workflow;

pub use crate::admin::{
    ChangeOutcome, Cursor, Expanded, GroupLoad, MinuteTally, Page, Throughput, TopicCounts,
    TopicStats, WorkerInfo, BUSIEST_GROUPS,
};
pub use crate::job::{
    from_us, to_us, Due, JobInfo, JobState, NewJob, OnConflict, PushOutcome, DEFAULT_RETRIES,
    MAX_DELAY, MAX_PRIORITY, MAX_RETRIES, MIN_PRIORITY,
};
pub use crate::lease::{
    Acked, Fetched, LeaseRef, LeasedJob, Promoted, Reclaimed, Succeeded, MAX_PROGRESS_BYTES,
};
pub use crate::result::{JobResult, Retention, Waited};
pub use client::{Client, EventStream, PushBuilder, Pushed, Step, WorkflowBuilder};
pub use config::{
    parse_duration, Config, ConfigBuilder, CLUSTER_SHARDS, DEFAULT_MAX_PAYLOAD_BYTES,
};
pub use envelope::{Envelope, RunError, ENVELOPE_VERSION, RUN_ERRORS_KEPT, RUN_ERROR_TEXT};
pub use error::{Error, ErrorKind, Result};
pub use message::Message;
pub use name::{JobId, Topic, MAX_JOB_ID_LEN, MAX_TOPIC_LEN};
pub use rate::{Rate, Throttle};
pub use store::{Event, MemoryStore, ReadyWaiter, Store, Wake, WakeListener, MAX_BATCH};
