//! The embedded store's memory over many jobs (issue 29, finding 11): `n` tiny jobs run through
//! a runtime on the in-memory store (what `Runtime::start` uses without `DQ_REDIS_URL`), in
//! waves of 10,000, and the process's resident memory is read after a tenth of them and after
//! all. With nothing pending at either point, the two should be about the same.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dq::store::MemoryStore;

/// Jobs pushed (and waited for) at a time.
const WAVE: usize = 10_000;

/// Runs `n` jobs; one JSON object with the RSS after `n / 10` and after `n` jobs.
pub(crate) async fn run(n: usize) -> anyhow::Result<serde_json::Value> {
    let done = Arc::new(AtomicUsize::new(0));
    let d = done.clone();
    let listener = dq::Listener::new("tiny", move |_: u32, _: dq::JobContext| {
        d.fetch_add(1, Ordering::Relaxed);
        async {}
    })
    .concurrency(256);
    let rt = dq::Runtime::builder()
        .store(Arc::new(MemoryStore::new()))
        .without_registered_listeners()
        .listener(listener)
        .start()
        .await?;
    let client = rt.client().clone();
    let started = Instant::now();
    let tenth = (n / 10).max(1);
    let (mut pushed, mut rss_tenth) = (0, None);
    let mut by_tenth = Vec::new();
    let rss_start = rss_mib()?;
    while pushed < n {
        let wave = WAVE.min(n - pushed);
        let batch = (0..wave).map(|i| client.push_to("tiny", &((pushed + i) as u32)));
        client.push_batch(batch).await?;
        pushed += wave;
        while done.load(Ordering::Relaxed) < pushed {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        if pushed >= tenth * (by_tenth.len() + 1) {
            let rss = rss_mib()?;
            rss_tenth.get_or_insert(rss);
            by_tenth.push(rss);
        }
    }
    let rss_end = rss_mib()?;
    let elapsed = started.elapsed().as_secs_f64();
    rt.shutdown().await?;
    let rss_tenth = rss_tenth.unwrap_or(rss_end);
    Ok(serde_json::json!({
        "workload": "embedded-memory",
        "jobs": n,
        "rss_start_mib": rss_start,
        "rss_after_tenth_mib": rss_tenth,
        "rss_after_all_mib": rss_end,
        "growth_mib": rss_end - rss_tenth,
        "rss_by_tenth_mib": by_tenth,
        "jobs_per_s": (n as f64 / elapsed).round(),
    }))
}

/// This process's resident memory in MiB (Linux: `/proc/self/statm`, in pages of 4 KiB).
fn rss_mib() -> anyhow::Result<f64> {
    let statm = std::fs::read_to_string("/proc/self/statm")?;
    let pages: f64 = statm
        .split_whitespace()
        .nth(1)
        .ok_or_else(|| anyhow::anyhow!("/proc/self/statm has no resident field: {statm:?}"))?
        .parse()?;
    Ok((pages * 4096.0 / 1_048_576.0 * 100.0).round() / 100.0)
}
