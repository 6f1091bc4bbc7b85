//! What every scenario starts from: the Redis options, the workers' and the producer's
//! settings, and how long the jobs may take to drain.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::task::JoinHandle;

use crate::harness::{produce, Harness, PushPlan, Pushes};
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
        diamond: false,
        events: false,
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
        groups: 0,
        diamonds: false,
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
    // A job of a killed worker waits for its lease to expire and the reclaim then (or, should
    // no reclaimer know the lease, at most half a lease later): allow three leases and a
    // minute more for the backlog.
    Duration::from_millis(h.worker.lease_ms * 3) + Duration::from_secs(60)
}

/// Waits, at most [`drain_limit`], for the jobs of `acked` to drain.
pub(crate) async fn drain_acked(h: &mut Harness, acked: &HashMap<String, u64>) {
    let limit = drain_limit(h).await;
    h.drain(acked, limit).await;
}

/// Waits for the producer, then for the jobs it got acknowledged to drain: what it pushed.
pub(crate) async fn finish(
    h: &mut Harness,
    producer: JoinHandle<Pushes>,
) -> anyhow::Result<Pushes> {
    let pushes = producer.await?;
    drain_acked(h, &pushes.acked).await;
    Ok(pushes)
}

/// Spawns `workers` workers, then the producer of `plan`: when it started, and its task.
pub(crate) async fn load(
    h: &mut Harness,
    workers: usize,
    plan: PushPlan,
    seed: u64,
) -> anyhow::Result<(Instant, JoinHandle<Pushes>)> {
    h.spawn_workers(workers).await?;
    let t0 = Instant::now();
    let producer = tokio::spawn(produce(h.client.clone(), plan, seed));
    Ok((t0, producer))
}

/// Sleeps until `at` seconds after `t0`.
pub(crate) async fn sleep_until(t0: Instant, at: f64) {
    tokio::time::sleep_until((t0 + secs(at)).into()).await;
}

/// One fault of `fault_ms` at `at` seconds into a load of 20,000 jobs (short: 2,000) pushed
/// until 4 s after the fault (at 10 s; short: 2 s).
#[derive(Debug, Clone)]
pub(crate) struct OneFault {
    pub(crate) at: f64,
    pub(crate) fault_ms: u64,
    pub(crate) plan: PushPlan,
}

/// The [`OneFault`] of a full or short run, with the fault's length in each.
pub(crate) fn one_fault(full: bool, (full_ms, short_ms): (u64, u64)) -> OneFault {
    let (n, at, fault_ms) = if full {
        (20_000, 10.0, full_ms)
    } else {
        (2_000, 2.0, short_ms)
    };
    let window = secs(at + fault_ms as f64 / 1000.0 + 4.0);
    OneFault {
        at,
        fault_ms,
        plan: plan(n, window),
    }
}

/// Three workers and the load of `fault`; returns the producer's task once the fault is due.
pub(crate) async fn load_until_fault(
    h: &mut Harness,
    fault: OneFault,
    seed: u64,
) -> anyhow::Result<JoinHandle<Pushes>> {
    let (t0, producer) = load(h, 3, fault.plan, seed).await?;
    sleep_until(t0, fault.at).await;
    Ok(producer)
}

/// A scenario's own figures, in this order.
pub(crate) fn figures<const N: usize>(pairs: [(&str, Value); N]) -> serde_json::Map<String, Value> {
    pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}
