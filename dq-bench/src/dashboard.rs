//! The `dashboard` workload (issue 18): the `dq web` binary against a Redis holding `--n` jobs
//! (default 1,000,000) of one topic in every state, and how long each page takes to serve.
//!
//! The jobs: 70 % delayed (due in an hour or more), 10 % dead letters (with an error), 0.1 %
//! running (leased for an hour), the rest ready; nine small topics beside them. Then `dq web`
//! (the binary built next to this one: `cargo build --release -p dq-cli`) is started on a free
//! loopback port and every page is fetched `REQUESTS` times, one request at a time; one JSON
//! line per page gives its median and slowest time, and whether the overview showed the
//! counts that were filled in.

use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use dq::store::{Leases, RedisStore};
use dq::Client;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

use crate::target::Target;

const TOPIC: &str = "bench-dash";
const REQUESTS: usize = 20;

/// How many jobs of each state the fill made.
struct Filled {
    delayed: usize,
    ready: usize,
    running: usize,
    dead: usize,
}

pub(crate) async fn run(target: &Target, n: usize) -> anyhow::Result<Vec<Value>> {
    anyhow::ensure!(
        target.masters().len() == 1,
        "the dashboard workload runs on one redis-server"
    );
    target.flushall();
    let config = crate::target::config(&target.url(), None)?;
    let store = std::sync::Arc::new(RedisStore::connect(&config).await?);
    let client = Client::new(store.clone(), config);
    let started = Instant::now();
    let filled = fill(&client, &store, n).await?;
    eprintln!(
        "dq-bench: dashboard: {n} jobs filled in {:.1}s",
        started.elapsed().as_secs_f64()
    );

    let dq = std::env::current_exe()?
        .parent()
        .map(|dir| dir.join("dq"))
        .filter(|p| p.exists())
        .context(
            "no `dq` binary beside dq-bench: build it first (cargo build --release -p dq-cli)",
        )?;
    let mut web = Command::new(&dq)
        .args([
            "web",
            "--listen",
            "127.0.0.1:0",
            "--redis-url",
            &target.url(),
        ])
        .args(["--namespace", client.config().namespace.as_str()])
        .env_remove("DQ_WEB_TOKEN")
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("cannot start {}", dq.display()))?;
    let stdout = web.stdout.take().context("no stdout from dq web")?;
    let mut lines = BufReader::new(stdout).lines();
    let first = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .context("dq web printed no address in 30 s")??
        .unwrap_or_default();
    let addr = first
        .strip_prefix("dq web: serving the dashboard on http://")
        .and_then(|a| a.strip_suffix('/'))
        .with_context(|| format!("unexpected first line from dq web: {first:?}"))?
        .to_owned();

    let overview = get(&addr, "/").await?.1;
    let counts_ok = shows(&overview, "delayed", filled.delayed)
        && shows(&overview, "ready", filled.ready)
        && shows(&overview, "running", filled.running)
        && shows(&overview, "dead", filled.dead);
    anyhow::ensure!(
        counts_ok,
        "the overview does not show the counts filled in: {overview:.3000}"
    );
    let next_delayed = next_page(
        &get(&addr, &format!("/topics/{TOPIC}?state=delayed"))
            .await?
            .1,
    );
    let pages = [
        ("overview", "/".to_owned()),
        ("overview-refresh", "/fragments/topics".to_owned()),
        ("topic-delayed", format!("/topics/{TOPIC}?state=delayed")),
        ("topic-delayed-next-page", next_delayed.unwrap_or_default()),
        ("topic-ready", format!("/topics/{TOPIC}?state=ready")),
        ("topic-running", format!("/topics/{TOPIC}?state=running")),
        ("topic-dead", format!("/topics/{TOPIC}?state=dead")),
        (
            "topic-delayed-id-filter",
            format!("/topics/{TOPIC}?state=delayed&id=d12"),
        ),
        (
            "topic-dead-error-filter",
            format!("/topics/{TOPIC}?state=dead&error=job+9"),
        ),
        (
            "job",
            format!("/topics/{TOPIC}/jobs/d{}", filled.delayed / 2),
        ),
        ("workers", "/workers".to_owned()),
    ];
    let mut out = Vec::new();
    for (page, path) in pages {
        anyhow::ensure!(!path.is_empty(), "the delayed listing had no next page");
        let mut ms = Vec::with_capacity(REQUESTS);
        let mut status = 0;
        for _ in 0..REQUESTS {
            let t = Instant::now();
            let (s, _) = get(&addr, &path).await?;
            ms.push(t.elapsed().as_secs_f64() * 1000.0);
            status = s;
        }
        ms.sort_by(f64::total_cmp);
        out.push(json!({
            "system": "dq",
            "workload": "dashboard",
            "page": page,
            "path": path,
            "jobs": n,
            "status": status,
            "requests": REQUESTS,
            // p50 by the one percentile definition (the 10th of 20, nearest rank).
            "median_ms": round2(dq_testkit::stats::percentile(&ms, 0.5)),
            "max_ms": round2(ms[ms.len() - 1]),
                        "version": env!("CARGO_PKG_VERSION"),
        }));
    }
    dq_testkit::process::terminate(web.id().unwrap_or(0))?;
    let _ = web.wait().await;
    Ok(out)
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// Whether the overview's row of the topic shows `n` jobs in `state`.
fn shows(overview: &str, state: &str, n: usize) -> bool {
    let Some(row) = overview.find(&format!("data-topic=\"{TOPIC}\"")) else {
        return false;
    };
    let cell = format!("data-count=\"{state}\"");
    overview[row..].find(&cell).is_some_and(|at| {
        let rest = &overview[row + at..];
        rest.find('>')
            .and_then(|a| rest[a..].find(&format!(">{n}<")))
            .is_some_and(|b| b < 120)
    })
}

/// The "Next page" link of a listing.
fn next_page(page: &str) -> Option<String> {
    let at = page.find("class=\"next\" href=\"")? + "class=\"next\" href=\"".len();
    let end = page[at..].find('"')?;
    Some(page[at..at + end].replace("&amp;", "&"))
}

/// One GET on a fresh connection: the status and the body.
async fn get(addr: &str, path: &str) -> anyhow::Result<(u16, String)> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut text = String::new();
    stream.read_to_string(&mut text).await?;
    let status = text.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    anyhow::ensure!(
        status == 200,
        "GET {path}: {}",
        &text[..text.len().min(300)]
    );
    Ok((status, text))
}

async fn fill(client: &Client, store: &RedisStore, n: usize) -> anyhow::Result<Filled> {
    let dead = n / 10;
    let running = n / 1000;
    let delayed = n * 7 / 10;
    let ready = n - dead - running - delayed;
    let topic = dq::Topic::new(TOPIC)?;
    let hour = Duration::from_secs(3600);
    // Delayed: due over the hour after the next one.
    let ids: Vec<usize> = (0..delayed).collect();
    for chunk in ids.chunks(1000) {
        let jobs = chunk.iter().map(|&i| {
            client
                .push_to(TOPIC, &json!({ "order_id": i, "note": "delayed" }))
                .id(format!("d{i}"))
                .delay(hour + Duration::from_millis(i as u64))
        });
        client.push_batch(jobs).await?;
    }
    // Dead letters and running jobs: pushed ready, leased, then dead-lettered or kept.
    for (prefix, count) in [("x", dead), ("r", running)] {
        let ids: Vec<usize> = (0..count).collect();
        for chunk in ids.chunks(1000) {
            push_ready(client, prefix, chunk).await?;
            let leased = store.fetch(0, &topic, chunk.len(), hour).await?;
            if prefix == "x" {
                let deaths = leased.jobs.iter().map(|j| {
                    let error = format!("payment service answered 503 (job {})", j.lease.id);
                    async move { store.dead_letter(&j.lease, &error).await }
                });
                futures_util::future::try_join_all(deaths).await?;
            }
        }
    }
    // Ready: due now, and no worker takes them.
    let ids: Vec<usize> = (0..ready).collect();
    for chunk in ids.chunks(1000) {
        push_ready(client, "y", chunk).await?;
    }
    for t in 1..10 {
        client
            .push_to(&format!("small-{t}"), &json!({ "t": t }))
            .await?;
    }
    Ok(Filled {
        delayed,
        ready,
        running,
        dead,
    })
}

/// One ready order per `i`, with id `<prefix><i>`, in one batch.
async fn push_ready(client: &Client, prefix: &str, ids: &[usize]) -> dq::Result<()> {
    let jobs = ids.iter().map(|&i| {
        client
            .push_to(TOPIC, &json!({ "order_id": i }))
            .id(format!("{prefix}{i}"))
    });
    client.push_batch(jobs).await.map(drop)
}
