//! What every scenario starts from: the Redis options, the workers' and the producer's
//! settings, and how long the jobs may take to drain.

use std::time::Duration;

use serde_json::Value;

use crate::harness::{Harness, PushPlan, Pushes};
use crate::worker::WorkerArgs;

/// A Redis that keeps nothing on disk.
pub(crate) const PLAIN: &[&str] = &["--save", "", "--appendonly", "no"];

/// The workers' settings of a short (or `full`) run.
pub(crate) fn worker(full: bool) -> WorkerArgs {
    WorkerArgs {
        url: String::new(),
        ledger: Default::default(),
        concurrency: 32,
        work_min_ms: 0,
        work_max_ms: 200,
        hold_ms: None,
        // The full runs use dq's default lease; the short ones a short lease, to stay short.
        lease_ms: if full { 10_000 } else { 2_000 },
        grace_ms: 5_000,
        clock_offset_ms: 0,
        beat: false,
    }
}

/// Pushes `n` jobs over `window`.
pub(crate) fn plan(n: usize, window: Duration) -> PushPlan {
    PushPlan {
        n,
        window,
        delay_ms: (500, 2_000),
        payload_bytes: 64,
        concurrency: 64,
        retry_for: Duration::from_secs(60),
    }
}

/// `s` seconds.
pub(crate) fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

/// What a scenario hands to the report: the harness, what was pushed, its own figures.
pub(crate) type Outcome = (Harness, Pushes, serde_json::Map<String, Value>);

/// How long to wait for the jobs to drain after the faults.
pub(crate) async fn drain_limit(h: &Harness) -> Duration {
    // A job of a killed worker waits for its lease to expire and the next reclaim (every
    // half lease): allow three leases and a minute more for the backlog.
    Duration::from_millis(h.worker.lease_ms * 3) + Duration::from_secs(60)
}
