//! The `push-latency` workload: how long one awaited push takes with nothing else in flight
//! (issue 34, item 4), beside the round trips it is made of. In this process, against the
//! target's Redis, one round of `--n` (default 5,000) measures, one call at a time after a
//! warm-up, the same number of each of:
//!
//! - `push`: `client.push_to(..).delay(1h).send().await` of the bench payload (no worker runs;
//!   the jobs stay delayed; `DQ_BENCH_PUSH_DELAY_S` sets another delay, in seconds: an hour
//!   ahead is stored compact, README "How jobs are stored", a minute ahead is not);
//! - `ping_redis_rs`: `PING` on a redis-rs multiplexed connection of this process, the kind dq's
//!   store uses: the round trip of the client library;
//! - `evalsha_return`: `EVALSHA` of a script that only returns, on that connection: a script
//!   call that does no work;
//! - `ping_redis_benchmark`: `redis-benchmark -c 1 -t ping` on the same server in the same run
//!   (the C client's round trip, the floor of the goal).
//!
//! And, to show where a push's own time goes:
//!
//! - `ping_redis_rs_response_timeout`: `PING` on a multiplexed connection with a reply timeout
//!   (a timer per command), and `ping_connection_manager`: on a redis-rs `ConnectionManager`
//!   with that timeout, the kind dq's connection wraps;
//! - `store_time`: `client.store_time()`, a `TIME` through dq's connection (its reconnecting
//!   manager and reply timeout around redis-rs): dq's round trip, beside redis-rs' bare one;
//! - `store_push`: the same push as `push`, made by the store directly
//!   (`RedisStore::push` of one `NewJob`, on a second store of its own): the push without the
//!   client's builder.
//!
//! Each is printed with p50, p99 and mean in microseconds, and the push's Redis time per call
//! (`INFO commandstats` of `EVALSHA`), so that where the time goes shows: the script, the round
//! trip, or the client's own work. `--reps` repeats the whole round, alternating nothing: each
//! round's figures come from one run of the same server.

use std::time::{Duration, Instant};

use dq::push::OnConflict;
use dq::store::{NewJob, Producer, RedisStore};
use dq::Client;
use serde_json::{json, Value};

use crate::driver::payload;
use crate::stats::round3;
use crate::target::Target;

const TOPIC: &str = "bench-latency";
const WARM_UP: usize = 500;

pub(crate) async fn run(target: &Target, n: usize) -> anyhow::Result<Value> {
    target.flushall();
    let config = crate::target::config(&target.url(), target.wait_replicas)?;
    let client = Client::connect(config).await?;
    let redis = redis::Client::open(target.masters()[0].url())?;
    let mut conn = redis.get_multiplexed_async_connection().await?;
    let noop = redis::Script::new("return 1");

    for i in 0..WARM_UP {
        push_one(&client, i).await?;
        let _: String = redis::cmd("PING").query_async(&mut conn).await?;
        let _: i64 = noop.invoke_async(&mut conn).await?;
    }
    let usec0 = evalsha_usec(target);
    let mut push = Vec::with_capacity(n);
    for i in 0..n {
        let t = Instant::now();
        push_one(&client, WARM_UP + i).await?;
        push.push(micros(t.elapsed()));
    }
    let usec1 = evalsha_usec(target);
    let script_us = (usec1.0 - usec0.0) as f64 / usec1.1.saturating_sub(usec0.1) as f64;

    let mut ping = pings(&mut conn, 0, n).await?;
    let mut timed = redis
        .get_multiplexed_async_connection_with_config(
            &redis::AsyncConnectionConfig::new()
                .set_response_timeout(Some(Duration::from_secs(10))),
        )
        .await?;
    let mut ping_timed = pings(&mut timed, WARM_UP, n).await?;
    let mut manager = redis::aio::ConnectionManager::new_with_config(
        redis.clone(),
        redis::aio::ConnectionManagerConfig::new()
            .set_response_timeout(Some(Duration::from_secs(10))),
    )
    .await?;
    let mut ping_manager = pings(&mut manager, WARM_UP, n).await?;
    let mut evalsha = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let _: i64 = noop.invoke_async(&mut conn).await?;
        evalsha.push(micros(t.elapsed()));
    }
    let mut store_time = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        client.store_time().await?;
        store_time.push(micros(t.elapsed()));
    }
    let store =
        RedisStore::connect(&crate::target::config(&target.url(), target.wait_replicas)?).await?;
    let topic = dq::Topic::new(TOPIC)?;
    let one = |i: usize| -> anyhow::Result<NewJob> {
        Ok(NewJob {
            topic: topic.clone(),
            id: dq::JobId::new(format!("store-{i}"))?,
            due: dq::Due::After(push_delay()),
            // As the client's push: the default retries, then dead-lettered.
            max_attempts: dq::limits::DEFAULT_RETRIES + 1,
            unique_for: None,
            fence: None,
            trace: None,
            priority: 0,
            group: None,
            id_drawn: false,
            payload: serde_json::to_vec(&payload(i as u64))?,
        })
    };
    for i in 0..WARM_UP {
        store.push(vec![one(i)?], OnConflict::Keep).await?;
    }
    let mut store_push = Vec::with_capacity(n);
    for i in 0..n {
        let job = one(WARM_UP + i)?;
        let t = Instant::now();
        store.push(vec![job], OnConflict::Keep).await?;
        store_push.push(micros(t.elapsed()));
    }
    let c_ping = redis_benchmark_ping(target, n)?;
    let push_s = spread(&mut push);
    let ping_s = spread(&mut ping);
    Ok(json!({
        "system": "dq",
        "workload": "push-latency",
        "n": n,
        "push_us": push_s,
        "push_redis_us_per_call": round3(script_us),
        "ping_redis_rs_us": ping_s,
        "evalsha_return_us": spread(&mut evalsha),
        "ping_redis_rs_response_timeout_us": spread(&mut ping_timed),
        "ping_connection_manager_us": spread(&mut ping_manager),
        "store_time_us": spread(&mut store_time),
        "store_push_us": spread(&mut store_push),
        "ping_redis_benchmark_us": c_ping,
        "push_p50_over_ping_p50": round3(
            push_s["p50"].as_f64().unwrap_or(f64::NAN)
                / c_ping["p50"].as_f64().unwrap_or(f64::NAN)
        ),
        "target": target.describe(),
        "version": env!("CARGO_PKG_VERSION"),
    }))
}

/// The times (us) of `n` `PING`s on `conn`, one at a time, after `warm_up` untimed ones.
async fn pings(
    conn: &mut impl redis::aio::ConnectionLike,
    warm_up: usize,
    n: usize,
) -> anyhow::Result<Vec<f64>> {
    for _ in 0..warm_up {
        let _: String = redis::cmd("PING").query_async(conn).await?;
    }
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let _: String = redis::cmd("PING").query_async(conn).await?;
        times.push(micros(t.elapsed()));
    }
    Ok(times)
}

async fn push_one(client: &Client, i: usize) -> anyhow::Result<()> {
    client
        .push_to(TOPIC, &payload(i as u64))
        .delay(push_delay())
        .send()
        .await?;
    Ok(())
}

/// How far ahead the measured pushes are due: `DQ_BENCH_PUSH_DELAY_S` seconds, an hour unless
/// set.
fn push_delay() -> Duration {
    let secs = std::env::var("DQ_BENCH_PUSH_DELAY_S").ok();
    Duration::from_secs(secs.and_then(|s| s.trim().parse().ok()).unwrap_or(3600))
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// p50, p99 and mean of `values` (us).
fn spread(values: &mut [f64]) -> Value {
    values.sort_by(f64::total_cmp);
    let mean = values.iter().sum::<f64>() / values.len().max(1) as f64;
    json!({
        "p50": round3(dq_testkit::stats::percentile(values, 0.50)),
        "p99": round3(dq_testkit::stats::percentile(values, 0.99)),
        "mean": round3(mean),
    })
}

/// `EVALSHA`'s Redis time so far (us) and its calls, from `INFO commandstats`.
fn evalsha_usec(target: &Target) -> (u64, u64) {
    let info = target.masters()[0].command(&["INFO", "commandstats"]);
    let line = info
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:"))
        .unwrap_or("");
    let field = |name: &str| {
        line.split(',')
            .find_map(|kv| kv.strip_prefix(name))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    (field("usec="), field("calls="))
}

/// `redis-benchmark -c 1 -n N -t ping --csv` against the first master: its PING_MBULK line's
/// p50 and p99, converted to us.
fn redis_benchmark_ping(target: &Target, n: usize) -> anyhow::Result<Value> {
    let port = target.masters()[0].port().to_string();
    let out = std::process::Command::new("redis-benchmark")
        .args(["-h", "127.0.0.1", "-p", &port, "-c", "1", "-n"])
        .arg(n.to_string())
        .args(["-t", "ping", "--csv"])
        .output()
        .map_err(|e| anyhow::anyhow!("redis-benchmark could not run ({e}): it comes with redis-server (apt-get install -y redis-server)"))?;
    anyhow::ensure!(
        out.status.success(),
        "redis-benchmark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    // "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
    let line = text
        .lines()
        .find(|l| l.starts_with("\"PING_MBULK\""))
        .ok_or_else(|| anyhow::anyhow!("redis-benchmark printed no PING_MBULK line: {text}"))?;
    let cols: Vec<f64> = line
        .split(',')
        .skip(1)
        .map(|c| c.trim_matches('"').parse().unwrap_or(f64::NAN))
        .collect();
    anyhow::ensure!(
        cols.len() >= 7,
        "redis-benchmark's line has {} numbers: {line}",
        cols.len()
    );
    Ok(json!({
        "p50": round3(cols[3] * 1e3),
        "p99": round3(cols[5] * 1e3),
        "mean": round3(cols[1] * 1e3),
    }))
}
