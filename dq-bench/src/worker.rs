//! The worker process: one listener of concurrency C per topic of the run, a no-op handler that records its own start
//! time and delivery count; hands them to the driver over stdout when told to on stdin.

use std::io::Write;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncBufReadExt;

use crate::driver::{all_topics, now_us, Payload};

struct Record {
    starts: Vec<AtomicU64>,
    counts: Vec<AtomicU32>,
}

pub(crate) async fn run(url: String, n: usize, concurrency: usize) -> anyhow::Result<()> {
    let record = Arc::new(Record {
        starts: (0..n).map(|_| AtomicU64::new(0)).collect(),
        counts: (0..n).map(|_| AtomicU32::new(0)).collect(),
    });
    let config = crate::target::config(&url, None)?;
    let mut builder = dq::Runtime::builder()
        .config(config)
        .without_registered_listeners();
    for topic in all_topics() {
        builder = builder.listener(listener(&topic, &record, concurrency));
    }
    let rt = builder.start().await?;
    // Let the loops reach their blocking waits: connected and idle.
    tokio::time::sleep(Duration::from_millis(200)).await;
    println!("ready");
    std::io::stdout().flush()?;

    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = lines.next_line().await? {
        if line.trim() == "dump" {
            break;
        }
    }
    {
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        for i in 0..n {
            writeln!(
                out,
                "{} {}",
                record.starts[i].load(Ordering::SeqCst),
                record.counts[i].load(Ordering::SeqCst)
            )?;
        }
        writeln!(out, "end")?;
        out.flush()?;
    }
    rt.shutdown().await?;
    Ok(())
}

/// A listener that records each job's first start and counts its runs.
fn listener(topic: &str, record: &Arc<Record>, concurrency: usize) -> dq::Listener {
    let r = record.clone();
    let keep = crate::driver::RETAIN.load(Ordering::Relaxed);
    let listener = dq::Listener::new(topic, move |p: Payload, _ctx: dq::JobContext| {
        let r = r.clone();
        async move {
            let now = now_us();
            if let Ok(i) = usize::try_from(p.order_id) {
                if i < r.starts.len() {
                    let _ =
                        r.starts[i].compare_exchange(0, now, Ordering::SeqCst, Ordering::SeqCst);
                    r.counts[i].fetch_add(1, Ordering::SeqCst);
                }
            }
            // A small value when the run retains results (`--retain`); none otherwise (null).
            Ok::<_, String>(keep.then_some(p.order_id))
        }
    })
    .concurrency(concurrency)
    .events(crate::driver::EVENTS.load(Ordering::Relaxed));
    if keep {
        listener.retain(Duration::from_secs(3600))
    } else {
        listener
    }
}
