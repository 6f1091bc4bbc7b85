//! The driver: one redis-server, then for each run FLUSHALL, a fresh worker process, the
//! pushes of the workload, the wait for the drain, the worker's records, one JSON line.

use std::future::IntoFuture;
use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::target::Target;
use dq::Client;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};

use crate::stats::{rate, round3, summary};

pub(crate) const TOPIC: &str = "bench";

/// Topics the jobs are spread over (`--topics`, 1 by default): job i goes to `topic_of(i)`.
pub(crate) static TOPICS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(1);

/// Whether the workers keep their succeeded jobs' records (`--retain`).
pub(crate) static RETAIN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The bound on each bench topic's pending jobs (`--max-pending`; 0: none).
pub(crate) static MAX_PENDING: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The global concurrency of each bench topic (`--global-concurrency`; 0: none).
pub(crate) static GLOBAL_CONCURRENCY: std::sync::atomic::AtomicU32 =
    std::sync::atomic::AtomicU32::new(0);

/// The rate limit of each bench topic (`--topic-rate`) and of each of its groups
/// (`--group-rate`), set before a burst's pushes.
pub(crate) static RATES: std::sync::OnceLock<(Option<dq::Rate>, Option<dq::Rate>)> =
    std::sync::OnceLock::new();

/// Whether a burst's job ids are left to dq (`--drawn-ids`) instead of `<i>`.
pub(crate) static DRAWN_IDS: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Whether a burst's jobs have priorities (`--priorities`): job i gets (i mod 21) - 10, every
/// level from -10 to 10, so 20 jobs in 21 wait in the topic's ranked set.
pub(crate) static PRIORITIES: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// The priority of burst job i (0 without `--priorities`).
fn priority_of(i: usize) -> i8 {
    if PRIORITIES.load(std::sync::atomic::Ordering::Relaxed) {
        i8::try_from(i % 21).unwrap_or(0) - 10
    } else {
        0
    }
}

/// How many groups a burst's jobs are spread over (`--groups`; 0: none): job i is in group
/// `g<i mod groups>`, each group running one job at a time (the default group concurrency).
pub(crate) static GROUPS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The group of burst job i (none without `--groups`).
fn group_of(i: usize) -> Option<String> {
    match GROUPS.load(std::sync::atomic::Ordering::Relaxed) {
        0 => None,
        n => Some(format!("g{}", i % n)),
    }
}

/// Whether the workers' topics have their job events on (`--events`).
pub(crate) static EVENTS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The topic of job i: `bench` with one topic, else `bench-<i mod topics>`.
pub(crate) fn topic_of(i: usize) -> String {
    match TOPICS.load(std::sync::atomic::Ordering::Relaxed) {
        0 | 1 => TOPIC.to_owned(),
        t => format!("{TOPIC}-{}", i % t),
    }
}

/// Every topic of the run.
pub(crate) fn all_topics() -> Vec<String> {
    let t = TOPICS.load(std::sync::atomic::Ordering::Relaxed).max(1);
    (0..t).map(topic_of).collect()
}
const BURST_DELAY_MS: f64 = 3000.0;

/// BENCH.md's payload: `{"order_id": i, "pad": "<80 x>"}`.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Payload {
    pub(crate) order_id: u64,
    pub(crate) pad: String,
}

pub(crate) fn payload(i: u64) -> Payload {
    Payload {
        order_id: i,
        pad: "x".repeat(80),
    }
}

pub(crate) use dq_testkit::stats::now_us;

/// [`now_us`] in milliseconds.
fn now_ms() -> f64 {
    now_us() as f64 / 1000.0
}

fn at(ms: f64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs_f64(ms / 1000.0)
}

async fn sleep_until_ms(target: f64) {
    let wait = target - now_ms();
    if wait > 0.0 {
        tokio::time::sleep(Duration::from_secs_f64(wait / 1000.0)).await;
    }
}

#[derive(Clone, Debug)]
struct Spec {
    workload: &'static str,
    mode: &'static str,
    n: usize,
}

fn plan(workload: &str, n: Option<usize>, push_mode: &str) -> anyhow::Result<Vec<Spec>> {
    let modes: Vec<&'static str> = match push_mode {
        "all" => vec!["seq", "concurrent", "bulk"],
        "seq" => vec!["seq"],
        "concurrent" => vec!["concurrent"],
        "bulk" => vec!["bulk"],
        other => anyhow::bail!("unknown push mode {other:?}: use all, seq, concurrent or bulk"),
    };
    let bursts = |sizes: Vec<usize>| {
        sizes
            .into_iter()
            .flat_map(|n| {
                modes.iter().map(move |&mode| Spec {
                    workload: "burst",
                    mode,
                    n,
                })
            })
            .collect::<Vec<_>>()
    };
    let one = |workload, mode, default| Spec {
        workload,
        mode,
        n: n.unwrap_or(default),
    };
    Ok(match workload {
        "burst" => bursts(n.map_or(vec![100_000, 5_000], |n| vec![n])),
        "steady" => vec![one("steady", "paced", 30_000)],
        "sparse" => vec![one("sparse", "seq", 100)],
        "sparse-offset" => vec![one("sparse-offset", "seq", 100)],
        "cross-process" => vec![one("cross-process", "seq", 100)],
        "pending" => vec![one("pending", "bulk", 100_000)],
        "all" => {
            let mut all = bursts(vec![100_000, 5_000]);
            for w in ["steady", "sparse", "sparse-offset", "cross-process", "pending"] {
                all.extend(plan(w, None, push_mode)?);
            }
            all
        }
        other => anyhow::bail!(
            "unknown workload {other:?}: use all, burst, steady, sparse, sparse-offset, cross-process or pending"
        ),
    })
}

/// Runs the plan; returns how many runs lost or duplicated jobs.
pub(crate) async fn run_all(
    workload: &str,
    n: Option<usize>,
    push_mode: &str,
    reps: usize,
    concurrency: usize,
    pending_fill: usize,
    target: &Target,
) -> anyhow::Result<usize> {
    if workload == "ready-changes" {
        for rep in 0..reps {
            let mut line = ready_changes(target, n.unwrap_or(200_000)).await?;
            line["rep"] = json!(rep);
            line["redis_version"] = json!(target.version());
            println!("{line}");
        }
        return Ok(0);
    }
    let mut plan = Vec::new();
    for w in workload.split(',') {
        plan.extend(self::plan(w.trim(), n, push_mode)?);
    }
    let redis = target;
    let redis_version = redis.version();
    let mut failed = 0;
    for rep in 0..reps {
        for spec in &plan {
            eprintln!(
                "dq-bench: {} {} n={} rep {rep} (redis {redis_version}, port {})",
                spec.workload,
                spec.mode,
                spec.n,
                redis.port()
            );
            let mut line = run_one(redis, spec, concurrency, pending_fill).await?;
            line["rep"] = json!(rep);
            line["redis_version"] = json!(redis_version);
            line["target"] = json!(redis.describe());
            line["wait_replicas"] = json!(redis.wait_replicas);
            if line["lost"] != json!(0) || line["dup"] != json!(0) {
                failed += 1;
            }
            println!("{line}");
        }
    }
    Ok(failed)
}

/// What the pushes of a run produced, per job: when it is due and when its push returned.
struct Pushes {
    t0: f64,
    push_end: f64,
    /// The burst's common due instant.
    burst_due: Option<f64>,
    due: Vec<f64>,
    ret: Vec<f64>,
}

impl Pushes {
    /// Pushes made one by one from `t0`, the last of them returning now.
    fn ended_now(t0: f64, due: Vec<f64>, ret: Vec<f64>) -> Pushes {
        Pushes {
            t0,
            push_end: now_ms(),
            burst_due: None,
            due,
            ret,
        }
    }
}

async fn run_one(
    redis: &Target,
    spec: &Spec,
    concurrency: usize,
    pending_fill: usize,
) -> anyhow::Result<Value> {
    redis.flushall();
    let n = spec.n;
    let (mut worker, mut stdin, mut lines) = spawn_worker(redis, n, concurrency).await?;
    let client = Client::connect(crate::target::config(&redis.url(), redis.wait_replicas)?).await?;

    let mut extra = serde_json::Map::new();
    if DRAWN_IDS.load(std::sync::atomic::Ordering::Relaxed) {
        extra.insert("burst_ids".into(), json!("drawn"));
    }
    let cpu_before = redis.cpu_s();
    let wall_before = now_ms();
    let mut fill = 0;
    if spec.workload == "pending" {
        let before = redis.used_memory();
        let started = now_ms();
        fill_pending(&client, pending_fill).await?;
        extra.insert("fill_s".into(), round3((now_ms() - started) / 1000.0));
        let after = redis.used_memory();
        fill = pending_fill;
        extra.insert("pending_fill".into(), json!(pending_fill));
        extra.insert(
            "redis_bytes_per_job".into(),
            round3((after - before) / pending_fill.max(1) as f64),
        );
        extra.insert(
            "bytes_per_job_by_key".into(),
            bytes_by_key(redis, pending_fill),
        );
    }
    let profile = crate::profile::Profile::start(redis);
    let pushes = match spec.workload {
        "burst" | "pending" => burst(&client, n, spec.mode).await?,
        "steady" => steady(&client, n).await?,
        "sparse" => sparse(&client, n, 500).await?,
        "sparse-offset" => sparse(&client, n, 550).await?,
        "cross-process" => cross_process(redis, n).await?,
        other => anyhow::bail!("unknown workload {other}"),
    };

    // Drain: until nothing of the run is delayed, ready or running, or 60 s after the last due.
    let last_due = pushes.due.iter().copied().fold(f64::MIN, f64::max);
    loop {
        let mut c = (0, 0, 0); // delayed, ready, running over every topic
        for topic in all_topics() {
            let t = client.counts(&topic).await?;
            c = (c.0 + t.delayed, c.1 + t.ready, c.2 + t.running);
        }
        if c.1 == 0 && c.2 == 0 && c.0 as usize <= fill {
            break;
        }
        if now_ms() > last_due + 60_000.0 {
            eprintln!("dq-bench: jobs still pending 60 s after the last due time: {c:?}");
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    if let Some(profile) = profile.finish(redis, n) {
        extra.insert("redis_us_per_job".into(), profile);
    }
    // Redis' own CPU time over pushes and drain, against the wall time: near 1 s per second
    // means one Redis core was the limit.
    extra.insert("redis_cpu_s".into(), round3(redis.cpu_s() - cpu_before));
    extra.insert(
        "run_wall_s".into(),
        round3((now_ms() - wall_before) / 1000.0),
    );
    tokio::time::sleep(Duration::from_millis(300)).await; // would a duplicate show up?
    stdin.write_all(b"dump\n").await?;
    stdin.flush().await?;
    let mut starts = Vec::with_capacity(n);
    let mut counts = Vec::with_capacity(n);
    while let Some(line) = lines.next_line().await? {
        if line == "end" {
            break;
        }
        let (s, c) = line
            .split_once(' ')
            .ok_or_else(|| anyhow::anyhow!("bad worker line {line:?}"))?;
        let s: u64 = s.parse()?;
        starts.push(if s == 0 { f64::NAN } else { s as f64 / 1000.0 });
        counts.push(c.parse::<u32>()?);
    }
    let _ = tokio::time::timeout(Duration::from_secs(30), worker.wait()).await;
    anyhow::ensure!(
        starts.len() == n,
        "the worker reported {} of {n} jobs",
        starts.len()
    );

    let lost = counts.iter().filter(|&&c| c == 0).count();
    let dup = counts.iter().filter(|&&c| c > 1).count();
    let lateness: Vec<f64> = (0..n).map(|i| starts[i] - pushes.due[i]).collect();
    let eff: Vec<f64> = (0..n)
        .map(|i| starts[i] - pushes.due[i].max(pushes.ret[i]))
        .collect();
    let started: Vec<f64> = starts.iter().copied().filter(|s| s.is_finite()).collect();
    let first = started.iter().copied().fold(f64::MAX, f64::min);
    let last = started.iter().copied().fold(f64::MIN, f64::max);
    let push_ms = pushes.push_end - pushes.t0;
    let (drain, first_to_last) = match pushes.burst_due {
        Some(d) => (
            rate(n, last - d.max(pushes.push_end)),
            rate(n, last - first),
        ),
        None => (Value::Null, Value::Null),
    };
    let mut line = json!({
        "system": "dq",
        "workload": spec.workload,
        "push_mode": spec.mode,
        "n": n,
        "push_jobs_per_s": rate(n, push_ms),
        "drain_jobs_per_s": drain,
        "drain_first_to_last_jobs_per_s": first_to_last,
        "lateness_ms": summary(&lateness),
        "lost": lost,
        "dup": dup,
        "concurrency": concurrency,
        "topics": all_topics().len(),
        "rep": 0,
        "version": env!("CARGO_PKG_VERSION"),
        "lateness_eff_ms": summary(&eff),
        "push_ms": round3(push_ms),
    });
    if let Some(map) = line.as_object_mut() {
        map.extend(extra);
    }
    Ok(line)
}

pub(crate) async fn spawn_worker(
    redis: &Target,
    n: usize,
    concurrency: usize,
) -> anyhow::Result<(
    Child,
    ChildStdin,
    tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
)> {
    let mut child = Command::from(dq_testkit::process::this_program([
        "worker",
        "--url",
        &redis.url(),
    ])?)
    .args([
        "--n",
        &n.to_string(),
        "--concurrency",
        &concurrency.to_string(),
        "--topics",
        &all_topics().len().to_string(),
    ])
    .args(
        RETAIN
            .load(std::sync::atomic::Ordering::Relaxed)
            .then_some("--retain"),
    )
    .args(
        EVENTS
            .load(std::sync::atomic::Ordering::Relaxed)
            .then_some("--events"),
    )
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .kill_on_drop(true)
    .spawn()?;
    let stdin = child
        .stdin
        .take()
        .ok_or_else(|| anyhow::anyhow!("no worker stdin"))?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| anyhow::anyhow!("no worker stdout"))?;
    let mut lines = BufReader::new(stdout).lines();
    let ready = tokio::time::timeout(Duration::from_secs(30), lines.next_line()).await;
    match ready {
        Ok(Ok(Some(line))) if line == "ready" => Ok((child, stdin, lines)),
        other => anyhow::bail!("the worker did not report ready: {other:?}"),
    }
}

async fn fill_pending(client: &Client, fill: usize) -> anyhow::Result<()> {
    let due = at(now_ms() + 3_600_000.0);
    let ids: Vec<u64> = (0..fill as u64).collect();
    for chunk in ids.chunks(1000) {
        let jobs = chunk.iter().map(|&i| {
            client
                .push_to(TOPIC, &payload(u64::MAX))
                .id(format!("f{i}"))
                .at(due)
        });
        client.push_batch(jobs).await?;
    }
    Ok(())
}

/// What each key of the filled shard holds per pending job (`MEMORY USAGE ... SAMPLES 0`:
/// every element counted), bytes: the keys of more than a kilobyte. Keys of one kind (the
/// parts of far jobs, `far:<bucket>:<n>:<topic>`, and their index hashes, `fx:<h>`) are
/// summed as one, from up to 100 of them measured and the count.
fn bytes_by_key(target: &Target, fill: usize) -> Value {
    let mut kinds: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    let mut out = serde_json::Map::new();
    for m in target.masters() {
        kinds.clear();
        let keys = m.command(&["KEYS", "dq:*"]);
        for key in keys.lines().filter(|l| l.starts_with("dq:")) {
            let name = key.rsplit_once("}:").map_or(key, |(_, k)| k);
            let kind = if name.starts_with("far:") {
                "far:<bucket>:<n>:<topic>"
            } else if name.starts_with("fx:") {
                "fx:<h>"
            } else {
                name
            };
            kinds
                .entry(kind.to_owned())
                .or_default()
                .push(key.to_owned());
        }
        for (kind, keys) in &kinds {
            let sample = &keys[..keys.len().min(100)];
            let measured: f64 = sample
                .iter()
                .map(|key| {
                    let used = m.command(&["MEMORY", "USAGE", key, "SAMPLES", "0"]);
                    used.trim()
                        .trim_start_matches(':')
                        .parse::<f64>()
                        .unwrap_or(0.0)
                })
                .sum();
            let bytes = measured / sample.len() as f64 * keys.len() as f64;
            if bytes > 1024.0 {
                let before = out.get(kind).and_then(Value::as_f64).unwrap_or(0.0);
                out.insert(kind.clone(), round3(before + bytes / fill.max(1) as f64));
            }
        }
    }
    Value::Object(out)
}

async fn burst(client: &Client, n: usize, mode: &str) -> anyhow::Result<Pushes> {
    let bound = MAX_PENDING.load(std::sync::atomic::Ordering::Relaxed);
    if bound > 0 {
        for topic in all_topics() {
            client.set_max_pending(&topic, Some(bound)).await?;
        }
    }
    let global = GLOBAL_CONCURRENCY.load(std::sync::atomic::Ordering::Relaxed);
    if global > 0 {
        for topic in all_topics() {
            client.set_global_concurrency(&topic, Some(global)).await?;
        }
    }
    let (rate, group_rate) = RATES.get().copied().unwrap_or_default();
    for topic in all_topics() {
        if rate.is_some() {
            client.set_rate(&topic, rate).await?;
        }
        if group_rate.is_some() {
            client.set_group_rate(&topic, group_rate).await?;
        }
    }
    let t0 = now_ms();
    let d = t0 + BURST_DELAY_MS;
    let mut due = vec![0.0; n];
    let mut ret = vec![0.0; n];
    let drawn = DRAWN_IDS.load(std::sync::atomic::Ordering::Relaxed);
    let job = |i: usize| {
        let push = client.push_to(&topic_of(i), &payload(i as u64));
        let push = if drawn { push } else { push.id(i.to_string()) };
        let push = push.at(at(d)).priority(priority_of(i));
        match group_of(i) {
            Some(group) => push.group(group),
            None => push,
        }
    };
    match mode {
        "seq" => {
            for i in 0..n {
                let tc = now_ms();
                job(i).await?;
                due[i] = d.max(tc);
                ret[i] = now_ms();
            }
        }
        "concurrent" => {
            let indices: Vec<usize> = (0..n).collect();
            for chunk in indices.chunks(1000) {
                let tc = now_ms();
                let results =
                    futures_util::future::join_all(chunk.iter().map(|&i| job(i).into_future()))
                        .await;
                let r = now_ms();
                for (&i, res) in chunk.iter().zip(results) {
                    res?;
                    due[i] = d.max(tc);
                    ret[i] = r;
                }
            }
        }
        _ => {
            let indices: Vec<usize> = (0..n).collect();
            for chunk in indices.chunks(1000) {
                let tc = now_ms();
                client.push_batch(chunk.iter().map(|&i| job(i))).await?;
                let r = now_ms();
                for &i in chunk {
                    due[i] = d.max(tc);
                    ret[i] = r;
                }
            }
        }
    }
    Ok(Pushes {
        t0,
        push_end: now_ms(),
        burst_due: Some(d),
        due,
        ret,
    })
}

/// Jobs per second of the steady workload (`--rate`).
pub(crate) static STEADY_RATE: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(2000);

/// `--rate` jobs/s (2,000 by default): a pacer wakes about every ms and sends the deficit;
/// job i is due `(i * 7919) mod 1000` ms after its push.
async fn steady(client: &Client, n: usize) -> anyhow::Result<Pushes> {
    let rate = STEADY_RATE.load(std::sync::atomic::Ordering::Relaxed) as f64;
    let t0 = now_ms();
    let mut due = vec![0.0; n];
    let mut ret = vec![0.0; n];
    let mut sent = 0usize;
    while sent < n {
        let elapsed = now_ms() - t0;
        let target = (((elapsed * rate / 1000.0).floor() as usize) + 1).min(n);
        if target > sent {
            let tc = now_ms();
            let batch: Vec<_> = (sent..target)
                .map(|i| {
                    let delay = ((i * 7919) % 1000) as f64;
                    due[i] = tc + delay;
                    client
                        .push_to(&topic_of(i), &payload(i as u64))
                        .id(i.to_string())
                        .at(at(tc + delay))
                })
                .collect();
            client.push_batch(batch).await?;
            let r = now_ms();
            ret[sent..target].iter_mut().for_each(|x| *x = r);
            sent = target;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    Ok(Pushes::ended_now(t0, due, ret))
}

/// Job i pushed at `t0 + 100 i` ms, due `delay_ms` after its push.
async fn sparse(client: &Client, n: usize, delay_ms: u64) -> anyhow::Result<Pushes> {
    let t0 = now_ms();
    let (due, ret) = push_sparse(client, n, delay_ms, 100, t0).await?;
    Ok(Pushes::ended_now(t0, due, ret))
}

async fn push_sparse(
    client: &Client,
    n: usize,
    delay_ms: u64,
    interval_ms: u64,
    t0: f64,
) -> anyhow::Result<(Vec<f64>, Vec<f64>)> {
    let mut due = vec![0.0; n];
    let mut ret = vec![0.0; n];
    for i in 0..n {
        sleep_until_ms(t0 + (interval_ms * i as u64) as f64).await;
        let tc = now_ms();
        due[i] = tc + delay_ms as f64;
        client
            .push_to(&topic_of(i), &payload(i as u64))
            .id(i.to_string())
            .at(at(due[i]))
            .await?;
        ret[i] = now_ms();
    }
    Ok((due, ret))
}

/// sparse-offset, with the pushes made by a third process that only produces.
async fn cross_process(redis: &Target, n: usize) -> anyhow::Result<Pushes> {
    let t0 = now_ms() + 500.0;
    let producer = ["producer", "--url", &redis.url(), "--n", &n.to_string()];
    let out = Command::from(dq_testkit::process::this_program(producer)?)
        .args(
            redis
                .wait_replicas
                .map(|w| vec!["--wait-replicas".to_owned(), w.to_string()])
                .unwrap_or_default(),
        )
        .args([
            "--topics",
            &all_topics().len().to_string(),
            "--delay-ms",
            "550",
            "--interval-ms",
            "100",
            "--t0-ms",
            &t0.to_string(),
        ])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .output()
        .await?;
    anyhow::ensure!(
        out.status.success(),
        "the producer failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut due = Vec::with_capacity(n);
    let mut ret = Vec::with_capacity(n);
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        if let Some((d, r)) = line.split_once(' ') {
            due.push(d.parse()?);
            ret.push(r.parse()?);
        }
    }
    anyhow::ensure!(
        due.len() == n,
        "the producer reported {} of {n} pushes",
        due.len()
    );
    Ok(Pushes {
        t0,
        push_end: ret.last().copied().unwrap_or(t0),
        burst_due: None,
        due,
        ret,
    })
}

/// The producer process of the cross-process workload: pushes on schedule, then prints
/// `due ret` per job.
pub(crate) async fn produce(
    url: String,
    n: usize,
    delay_ms: u64,
    interval_ms: u64,
    t0: f64,
    wait_replicas: Option<u32>,
) -> anyhow::Result<()> {
    let client = Client::connect(crate::target::config(&url, wait_replicas)?).await?;
    let (due, ret) = push_sparse(&client, n, delay_ms, interval_ms, t0).await?;
    for (d, r) in due.iter().zip(&ret) {
        println!("{d} {r}");
    }
    Ok(())
}

/// Issue 15, finding 5: what changing ready jobs costs Redis when they wait at the tail of a
/// long ready list. A paused topic holds `n` ready jobs; then one push replaces the last 200
/// (one call), and the 200 before them are cancelled and the 200 before those rescheduled to
/// now (200 calls each). Each call's time inside Redis comes from `SLOWLOG` (every command
/// logged); the line gives the longest call of each kind, in microseconds. One redis-server.
async fn ready_changes(target: &Target, n: usize) -> anyhow::Result<Value> {
    const K: usize = 200;
    anyhow::ensure!(
        target.masters().len() == 1 && n >= 3 * K,
        "ready-changes runs on one redis-server with --n of at least {}",
        3 * K
    );
    target.flushall();
    let redis = target.masters()[0];
    let client = Client::connect(crate::target::config(&target.url(), None)?).await?;
    let topic = "bench-ready";
    client.pause(topic).await?;
    let ids: Vec<usize> = (0..n).collect();
    for chunk in ids.chunks(1000) {
        let jobs = chunk
            .iter()
            .map(|&i| client.push_to(topic, &payload(i as u64)).id(i.to_string()));
        client.push_batch(jobs).await?;
    }
    redis.command(&["CONFIG", "SET", "slowlog-log-slower-than", "0"]);
    redis.command(&["CONFIG", "SET", "slowlog-max-len", "10000"]);
    let longest = |what: &str| -> anyhow::Result<f64> {
        let log = redis.command(&["SLOWLOG", "GET", "10000"]);
        redis.command(&["SLOWLOG", "RESET"]);
        // RESP: each entry is `*6`, `:id`, `:time`, `:duration`, `*<args>`, `$7`, `EVALSHA`...
        let lines: Vec<&str> = log.lines().collect();
        let mut max = 0u64;
        for (i, line) in lines.iter().enumerate() {
            if line.trim() == "EVALSHA" && i >= 3 {
                if let Ok(us) = lines[i - 3].trim().trim_start_matches(':').parse::<u64>() {
                    max = max.max(us);
                }
            }
        }
        anyhow::ensure!(
            max > 0,
            "no EVALSHA in the slow log after {what}: {log:.500}"
        );
        Ok(max as f64)
    };
    redis.command(&["SLOWLOG", "RESET"]);
    let replaced = (n - K..n).map(|i| {
        client
            .push_to(topic, &payload(i as u64))
            .id(i.to_string())
            .replace()
    });
    client.push_batch(replaced).await?;
    let replace_us = longest("the replace")?;
    for i in n - 2 * K..n - K {
        client.cancel_in(topic, &i.to_string()).await?;
    }
    let cancel_us = longest("the cancels")?;
    for i in n - 3 * K..n - 2 * K {
        client
            .reschedule_in(topic, &i.to_string(), dq::Due::After(Duration::ZERO))
            .await?;
    }
    let reschedule_us = longest("the reschedules")?;
    let counts = client.counts(topic).await?;
    Ok(json!({
        "system": "dq",
        "workload": "ready-changes",
        "ready_before": n,
        "ready_after": counts.ready,
        "replace_200_in_one_push_us": replace_us,
        "cancel_longest_us": cancel_us,
        "reschedule_longest_us": reschedule_us,
        "target": target.describe(),
        "version": env!("CARGO_PKG_VERSION"),
    }))
}
