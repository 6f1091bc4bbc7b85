//! The `workflow` workload: what a workflow's bookkeeping costs (issue 35, item 5). One round
//! runs, in this process against the target's Redis, 1,000 plain jobs (one bulk push, a
//! listener of `--concurrency` acking each) and then one workflow of 1,000 steps, a fan-out
//! and fan-in: a root, 998 steps after it, and one step after all of those, which reads the
//! 998 values (`JobContext::dependencies`). Each part is timed from the push to its last job's
//! ack, with the Redis CPU it used (`used_cpu_sys` + `used_cpu_user`, per job); `--reps`
//! rounds alternate the two, so their ratio comes from one run. With `DQ_BENCH_PROFILE` set,
//! the workflow part also prints Redis' time by command and by script on stderr (`profile`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dq::workflow::WorkflowState;
use dq::{Client, JobContext, Listener, Runtime};
use serde_json::{json, Value};

use crate::driver::payload;
use crate::stats::round3;
use crate::target::Target;

const PLAIN: &str = "bench-plain";
const STEP: &str = "bench-step";
const SINK: &str = "bench-sink";
/// Steps of the workflow: a root, `STEPS - 2` after it, and the fan-in.
const STEPS: usize = 1000;

pub(crate) async fn run(
    target: &Target,
    reps: usize,
    concurrency: usize,
) -> anyhow::Result<Vec<Value>> {
    target.flushall();
    let config = crate::target::config(&target.url(), target.wait_replicas)?;
    let done = Arc::new(AtomicUsize::new(0));
    let d = done.clone();
    let plain = Listener::new(PLAIN, move |_: crate::driver::Payload| {
        let d = d.clone();
        async move {
            d.fetch_add(1, Ordering::SeqCst);
        }
    })
    .concurrency(concurrency);
    let step = Listener::new(STEP, |p: crate::driver::Payload| async move {
        Ok::<u64, String>(p.order_id)
    })
    .concurrency(concurrency);
    let read = Arc::new(AtomicUsize::new(0));
    let r = read.clone();
    let sink = Listener::new(SINK, move |_: crate::driver::Payload, ctx: JobContext| {
        let r = r.clone();
        async move {
            let deps = ctx.dependencies().await.map_err(|e| e.to_string())?;
            let sum: u64 = deps
                .iter()
                .map(|d| d.value::<u64>().map_err(|e| e.to_string()))
                .sum::<Result<u64, String>>()?;
            anyhow_free(sum);
            r.fetch_add(deps.iter().count(), Ordering::SeqCst);
            Ok::<(), String>(())
        }
    });
    let rt = Runtime::builder()
        .config(config.clone())
        .without_registered_listeners()
        .listener(plain)
        .listener(step)
        .listener(sink)
        .start()
        .await?;
    let client = rt.client().clone();
    let mut lines = Vec::new();
    for rep in 0..reps {
        // Plain jobs.
        let cpu0 = target.cpu_s();
        let started = Instant::now();
        let before = done.load(Ordering::SeqCst);
        let jobs = (0..STEPS).map(|i| client.push_to(PLAIN, &payload(i as u64)));
        client.push_batch(jobs).await?;
        while done.load(Ordering::SeqCst) < before + STEPS {
            anyhow::ensure!(
                started.elapsed() < Duration::from_secs(120),
                "plain jobs stalled"
            );
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        let plain_s = started.elapsed().as_secs_f64();
        let plain_cpu = target.cpu_s() - cpu0;

        // The fan-out and fan-in.
        let profile = crate::profile::Profile::start(target);
        let cpu0 = target.cpu_s();
        let started = Instant::now();
        let id = format!("fan-{rep}");
        let read_before = read.load(Ordering::SeqCst);
        push_fan(&client, &id).await?;
        // The fan-in's handler says when it ran (no status read loads Redis meanwhile).
        while read.load(Ordering::SeqCst) == read_before {
            anyhow::ensure!(
                started.elapsed() < Duration::from_secs(120),
                "workflow stalled"
            );
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        let state = loop {
            anyhow::ensure!(
                started.elapsed() < Duration::from_secs(120),
                "workflow stalled"
            );
            let info = client.workflow_status(&id).await?;
            match info.map(|i| i.state) {
                Some(WorkflowState::Running) | None => {}
                Some(s) => break s,
            }
            tokio::time::sleep(Duration::from_micros(200)).await;
        };
        let workflow_s = started.elapsed().as_secs_f64();
        let workflow_cpu = target.cpu_s() - cpu0;
        if let Some(profile) = profile.finish(target, STEPS) {
            eprintln!("workflow part, Redis us per step: {profile}");
        }
        anyhow::ensure!(
            state == WorkflowState::Succeeded,
            "workflow {id} ended {state:?}"
        );
        anyhow::ensure!(
            read.load(Ordering::SeqCst) - read_before == STEPS - 2,
            "the fan-in read every value"
        );
        lines.push(json!({
            "system": "dq",
            "workload": "workflow",
            "rep": rep,
            "jobs": STEPS,
            "concurrency": concurrency,
            "plain_ms": round3(plain_s * 1e3),
            "workflow_ms": round3(workflow_s * 1e3),
            "time_ratio": round3(workflow_s / plain_s),
            "plain_redis_cpu_us_per_job": round3(plain_cpu * 1e6 / STEPS as f64),
            "workflow_redis_cpu_us_per_job": round3(workflow_cpu * 1e6 / STEPS as f64),
            "cpu_ratio": round3(workflow_cpu / plain_cpu.max(1e-9)),
            "lost": 0,
            "dup": 0,
            "target": target.describe(),
            "version": env!("CARGO_PKG_VERSION"),
        }));
    }
    rt.shutdown().await?;
    Ok(lines)
}

/// Keeps the fan-in's sum from being optimised away.
fn anyhow_free(sum: u64) {
    std::hint::black_box(sum);
}

/// Root -> 998 steps -> fan-in.
async fn push_fan(client: &Client, id: &str) -> anyhow::Result<()> {
    let mut flow = client.workflow(id);
    flow.step_to("root", STEP, &payload(0));
    for i in 1..STEPS - 1 {
        flow.step_to(&format!("s{i}"), STEP, &payload(i as u64))
            .after("root");
    }
    let sink = flow.step_to("sink", SINK, &payload(0));
    for i in 1..STEPS - 1 {
        sink.after(&format!("s{i}"));
    }
    flow.push().await?;
    Ok(())
}
