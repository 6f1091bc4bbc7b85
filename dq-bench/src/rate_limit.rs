//! The `rate-limit` workload: how exactly a topic's rate limit holds with several worker
//! processes fetching at once (issue 33, item 5).
//!
//! The topic gets the rate (`Client::set_rate`) and is paused while it is filled with more
//! ready jobs than the rate lets start in the run; `--workers` worker processes (each a
//! listener of `--concurrency`) start, the topic is resumed, and after `--seconds` it is paused
//! again and each worker hands over the start time of every job it ran. The line gives the
//! rate they achieved together (over the whole window from the first start, and its ratio to
//! the limit) and the most starts in any window of one period, against the most GCRA allows
//! there (`count + burst - 1`); and, as every workload, lost and dup (every job ran once or is
//! still ready).

use std::time::Duration;

use dq::{Client, Rate};
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;

use crate::driver::{payload, spawn_worker, TOPIC};
use crate::stats::round3;
use crate::target::Target;

pub(crate) async fn run(
    target: &Target,
    rate: Rate,
    workers: usize,
    seconds: u64,
    concurrency: usize,
) -> anyhow::Result<Value> {
    target.flushall();
    let client = Client::connect(crate::target::config(&target.url(), None)?).await?;
    let per_s = rate.count() as f64 / rate.period().as_secs_f64();
    // More than can start, so that the workers never run dry.
    let n = (per_s * seconds as f64 * 1.2) as usize + 1000;
    client.set_rate(TOPIC, Some(rate)).await?;
    client.pause(TOPIC).await?;
    let ids: Vec<usize> = (0..n).collect();
    for chunk in ids.chunks(1000) {
        let jobs = chunk
            .iter()
            .map(|&i| client.push_to(TOPIC, &payload(i as u64)));
        client.push_batch(jobs).await?;
    }
    let mut spawned = Vec::new();
    for _ in 0..workers {
        spawned.push(spawn_worker(target, n, concurrency).await?);
    }
    client.resume(TOPIC).await?;
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    client.pause(TOPIC).await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut starts = Vec::new();
    let mut runs = vec![0u32; n];
    for (mut worker, mut stdin, mut lines) in spawned {
        stdin.write_all(b"dump\n").await?;
        stdin.flush().await?;
        let mut i = 0;
        while let Some(line) = lines.next_line().await? {
            if line == "end" {
                break;
            }
            let (s, c) = line
                .split_once(' ')
                .ok_or_else(|| anyhow::anyhow!("bad worker line {line:?}"))?;
            let (s, c): (u64, u32) = (s.parse()?, c.parse()?);
            if s > 0 {
                starts.push(s);
            }
            if let Some(r) = runs.get_mut(i) {
                *r += c;
            }
            i += 1;
        }
        let _ = tokio::time::timeout(Duration::from_secs(30), worker.wait()).await;
    }
    starts.sort_unstable();
    anyhow::ensure!(!starts.is_empty(), "no job started");
    let first = starts[0];
    let last = *starts.last().unwrap_or(&first);
    let window_s = (last - first) as f64 / 1e6;
    let achieved = (starts.len() - 1) as f64 / window_s.max(1e-9);
    // The most starts in any window of one period (two pointers over the sorted starts).
    let period_us = rate.period().as_micros() as u64;
    let (mut most, mut lo) = (0, 0);
    for hi in 0..starts.len() {
        while starts[hi] - starts[lo] >= period_us {
            lo += 1;
        }
        most = most.max(hi - lo + 1);
    }
    let dup = runs.iter().filter(|&&r| r > 1).count();
    // Every job ran or is still waiting: none gone.
    let ran = runs.iter().filter(|&&r| r > 0).count();
    let left = client.counts(TOPIC).await?;
    let lost = n.saturating_sub(ran + (left.ready + left.delayed + left.running) as usize);
    Ok(json!({
        "system": "dq",
        "workload": "rate-limit",
        "rate": rate.to_string(),
        "burst": rate.burst(),
        "workers": workers,
        "concurrency": concurrency,
        "seconds": seconds,
        "started": starts.len(),
        "achieved_per_s": round3(achieved),
        "achieved_of_limit": round3(achieved / per_s),
        "most_in_one_period": most,
        "allowed_in_one_period": rate.most_in_one_period(),
        "lost": lost,
        "dup": dup,
        "target": target.describe(),
        "version": env!("CARGO_PKG_VERSION"),
    }))
}
