//! The `schedules` workload (issue 19): how late a schedule's job starts after its tick.
//!
//! Three runtimes in this process share one Redis (as three processes would: each fires every
//! schedule, each tick is one job) and run `--n` schedules (default 100) that each tick every
//! second, for 30 s. The listener records when each job started (this host's clock, which is
//! Redis' here) against its tick; one JSON line gives the lateness p50/p99/max over every
//! tick, how many ticks there were and how many ran more than once (must be 0).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use dq::schedule::Tick;
use dq::{JobContext, Listener, Runtime};
use serde_json::{json, Value};

use crate::target::Target;

const TOPIC: &str = "bench-tick";
const RUN_FOR: Duration = Duration::from_secs(30);
const RUNTIMES: usize = 3;

/// (tick, schedule) -> when its job started, each time it did.
type Seen = Arc<Mutex<HashMap<(SystemTime, String), Vec<SystemTime>>>>;

pub(crate) async fn run(target: &Target, schedules: usize) -> anyhow::Result<Value> {
    target.flushall();
    let seen: Seen = Arc::default();
    let mut runtimes = Vec::new();
    for _ in 0..RUNTIMES {
        let seen = seen.clone();
        let listener = Listener::new(TOPIC, move |tick: Tick, _ctx: JobContext| {
            let started = SystemTime::now();
            let seen = seen.clone();
            async move {
                if let Ok(mut seen) = seen.lock() {
                    seen.entry((tick.at, tick.schedule))
                        .or_default()
                        .push(started);
                }
            }
        })
        .concurrency(256);
        runtimes.push(
            Runtime::builder()
                .config(crate::target::config(&target.url(), None)?)
                .without_registered_listeners()
                .listener(listener)
                .start()
                .await?,
        );
    }
    let client = runtimes[0].client().clone();
    for i in 0..schedules {
        client
            .schedule(&format!("bench-{i}"))
            .cron("* * * * * *")
            .topic(TOPIC)
            .upsert()
            .await?;
    }
    let declared = client.store_time().await?;
    tokio::time::sleep(RUN_FOR).await;
    for i in 0..schedules {
        client.unschedule(&format!("bench-{i}")).await?;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    for rt in runtimes {
        rt.shutdown().await?;
    }
    let seen = seen
        .lock()
        .map_err(|_| anyhow::anyhow!("poisoned"))?
        .clone();
    // The ticks from two seconds after the schedules were declared (the first look may come
    // up to a second after the declaration, as it would after a deploy).
    let from = declared + Duration::from_secs(2);
    let mut lateness = Vec::new();
    let mut twice = 0;
    for ((tick, _), starts) in &seen {
        if *tick < from {
            continue;
        }
        if starts.len() > 1 {
            twice += 1;
        }
        let first = starts.iter().min().copied().unwrap_or(*tick);
        let ms = match first.duration_since(*tick) {
            Ok(late) => late.as_secs_f64() * 1000.0,
            Err(early) => -early.duration().as_secs_f64() * 1000.0,
        };
        lateness.push(ms);
    }
    Ok(json!({
        "system": "dq",
        "workload": "schedules",
        "schedules": schedules,
        "runtimes": RUNTIMES,
        "seconds": RUN_FOR.as_secs(),
        "ticks": lateness.len(),
        "ran_twice": twice,
        "early": lateness.iter().filter(|ms| **ms < 0.0).count(),
        "lateness_ms": crate::stats::summary(&lateness),
        "version": env!("CARGO_PKG_VERSION"),
    }))
}
