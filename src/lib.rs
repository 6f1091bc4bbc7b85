//! # dq: delayed jobs on Redis
//!
//! Push typed messages with a delay; handle them in plain async functions; lose nothing.
//!
//! ```no_run
//! use std::time::Duration;
//!
//! #[derive(serde::Serialize, serde::Deserialize)]
//! struct OrderCancel { order_id: u64 }
//! impl dq::Message for OrderCancel { const TOPIC: &'static str = "order-cancel"; }
//!
//! # async fn demo() -> dq::Result<()> {
//! let client = dq::Client::connect(dq::Config::from_env()?).await?;
//! client.push(OrderCancel { order_id: 42 }).delay(Duration::from_secs(600)).id("42").await?;
//! # Ok(()) }
//! ```
//!
//! See `README.md` for the whole story, and the `order_cancel` example.

pub use dq_core::{
    from_us, parse_duration, store, to_us, Acked, ChangeOutcome, Client, Config, ConfigBuilder,
    Envelope, Error, Fetched, JobId, JobInfo, JobState, LeaseRef, LeasedJob, Message, NewJob,
    OnConflict, Promoted, PushBuilder, PushOutcome, Pushed, Reclaimed, RedisStore, Result,
    Schedule, Store, Topic, TopicCounts, DEFAULT_MAX_PAYLOAD_BYTES, DEFAULT_RETRIES,
};
