//! A worker process: one topic, a handler that takes a job-specific 0-200 ms (or holds its job
//! for `hold`), then appends its run to the ledger. Graceful shutdown on SIGTERM. With
//! `--diamond`, also the four topics of the diamond workflows ([`crate::diamond`]).

use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::ledger;
use crate::rng::hash;
use crate::{Job, TOPIC};

/// What a worker is told on its command line.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct WorkerArgs {
    #[arg(long)]
    pub(crate) url: String,
    /// The append-only ledger file.
    #[arg(long)]
    pub(crate) ledger: PathBuf,
    #[arg(long, default_value_t = 32)]
    pub(crate) concurrency: usize,
    /// Shortest and longest handler run, in milliseconds (chosen per job and attempt).
    #[arg(long, default_value_t = 0)]
    pub(crate) work_min_ms: u64,
    #[arg(long, default_value_t = 200)]
    pub(crate) work_max_ms: u64,
    /// Hold every job this long instead (a worker that is to be killed with its jobs).
    #[arg(long)]
    pub(crate) hold_ms: Option<u64>,
    #[arg(long, default_value_t = 10_000)]
    pub(crate) lease_ms: u64,
    #[arg(long, default_value_t = 5_000)]
    pub(crate) grace_ms: u64,
    /// The offset libfaketime gives this process' clock (the harness injects it): the
    /// ledger's times are written corrected by it, and the skew this process measures
    /// against Redis' clock is written beside the ledger (`<ledger>.skew`).
    #[arg(long, default_value_t = 0, allow_hyphen_values = true)]
    pub(crate) clock_offset_ms: i64,
    /// Also runs the `beat` listener, whose schedule (every second) and retries this worker
    /// declares itself (`redis-empty-restart`).
    #[arg(long)]
    pub(crate) beat: bool,
    /// Also runs the listeners of the diamond workflows' four topics (`diamond`).
    #[arg(long)]
    pub(crate) diamond: bool,
    /// Turns the topic's job events on, keeping [`EVENTS_CAP`] per shard: the harness reads
    /// when each lease a kill left behind was taken back (`flow-*`).
    #[arg(long)]
    pub(crate) events: bool,
}

/// How many job events a shard's stream keeps when the worker turns them on: more than a
/// full run writes, so none is trimmed before the harness reads them.
pub(crate) const EVENTS_CAP: u64 = 1_000_000;

/// The topic (and schedule) of the `beat` listener.
pub(crate) const BEAT: &str = "chaos-beat";

/// Where `beat` writes its runs: the worker's ledger.
#[derive(Clone)]
struct BeatLedger {
    file: Arc<Mutex<std::fs::File>>,
    offset_ms: i64,
}

/// A schedule declared by the worker's listener, not by the harness: after Redis comes back
/// empty, only the workers can declare it again.
#[dq::listener(topic = "chaos-beat", every = "1s", retries = 3)]
async fn beat(
    _tick: dq::schedule::Tick,
    ctx: dq::JobContext,
    ledger: dq::State<BeatLedger>,
) -> Result<(), String> {
    let now = true_now_us(ledger.offset_ms);
    append_run(&ledger.file, &ctx, now, now)
}

/// Appends the run of `ctx`'s job from `start_us` to `end_us` to the ledger `file`.
fn append_run(
    file: &Mutex<std::fs::File>,
    ctx: &dq::JobContext,
    start_us: u64,
    end_us: u64,
) -> Result<(), String> {
    let entry = ledger::line(
        ctx.id().as_str(),
        ctx.attempt(),
        start_us,
        end_us,
        dq::store::to_us(ctx.due()),
    );
    // One write(2) of one short line to an O_APPEND file: a SIGKILL leaves it whole or absent,
    // and the file is outside Redis.
    let mut f = file.lock().map_err(|_| "ledger lock poisoned".to_owned())?;
    f.write_all(entry.as_bytes())
        .map_err(|e| format!("writing the ledger: {e}"))
}

/// This process' clock, corrected by the injected offset, in microseconds since the epoch.
fn true_now_us(offset_ms: i64) -> u64 {
    let local = dq::store::to_us(std::time::SystemTime::now());
    local.saturating_add_signed(-offset_ms.saturating_mul(1000))
}

/// A handler's run from `start_us`: a job-specific 0-200 ms (or the hold), then the run
/// appended to the ledger `file`.
async fn work(
    a: &WorkerArgs,
    file: &Mutex<std::fs::File>,
    ctx: &dq::JobContext,
    start_us: u64,
) -> Result<(), String> {
    let ms = match a.hold_ms {
        Some(hold) => hold,
        None => {
            let h = hash(&format!("{}:{}", ctx.id(), ctx.attempt()));
            a.work_min_ms + h % (a.work_max_ms.saturating_sub(a.work_min_ms) + 1)
        }
    };
    if ms > 0 {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    let end = true_now_us(a.clock_offset_ms);
    append_run(file, ctx, start_us, end)
}

/// Where the handlers of the diamond steps write: the worker's ledger; each run's start, when
/// it starts, as a run that ends then (`<ledger>.starts`: the runs a kill cut are there too);
/// and what a step d found wrong with its dependencies (`<ledger>.violations`).
#[derive(Clone)]
struct DiamondFiles {
    ledger: Arc<Mutex<std::fs::File>>,
    starts: Arc<Mutex<std::fs::File>>,
    violations: Arc<Mutex<std::fs::File>>,
}

/// The listeners of the diamond workflows' four topics, run as the chaos listener is.
fn diamond_listeners(
    args: &WorkerArgs,
    ledger: &Arc<Mutex<std::fs::File>>,
) -> anyhow::Result<Vec<dq::Listener>> {
    let append = |extension: &str| -> anyhow::Result<Arc<Mutex<std::fs::File>>> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(args.ledger.with_extension(extension))?;
        Ok(Arc::new(Mutex::new(file)))
    };
    let files = DiamondFiles {
        ledger: ledger.clone(),
        starts: append("starts")?,
        violations: append("violations")?,
    };
    let mut listeners = Vec::new();
    for (step, topic) in crate::diamond::STEPS {
        let (a, files) = (args.clone(), files.clone());
        let listener = dq::Listener::new(topic, move |_: Job, ctx: dq::JobContext| {
            let (a, files) = (a.clone(), files.clone());
            async move { diamond_step(step, &a, &files, &ctx).await }
        })
        .concurrency(args.concurrency)
        .no_timeout()
        .retries(2);
        listeners.push(listener);
    }
    Ok(listeners)
}

/// One run of diamond step `step`: its start written first; for d, its dependencies read and
/// checked ([`crate::diamond::dependency_problem`]: what is wrong is written to the violations
/// and fails the run); then the run of every chaos handler. b and c return their job's id as
/// their value, which d must read.
async fn diamond_step(
    step: &str,
    a: &WorkerArgs,
    files: &DiamondFiles,
    ctx: &dq::JobContext,
) -> Result<Option<String>, String> {
    let start = true_now_us(a.clock_offset_ms);
    append_run(&files.starts, ctx, start, start)?;
    if step == "d" {
        let deps = ctx
            .dependencies()
            .await
            .map_err(|e| format!("reading the dependencies: {e}"))?;
        let id = ctx.id().as_str();
        let workflow = id.strip_suffix(".d").unwrap_or(id);
        if let Some(problem) = crate::diamond::dependency_problem(workflow, &deps) {
            let line = format!("{id} {} {problem}\n", ctx.attempt());
            let mut f = files
                .violations
                .lock()
                .map_err(|_| "violations lock poisoned".to_owned())?;
            f.write_all(line.as_bytes())
                .map_err(|e| format!("writing the violations: {e}"))?;
            return Err(problem);
        }
    }
    work(a, &files.ledger, ctx, start).await?;
    Ok(matches!(step, "b" | "c").then(|| ctx.id().as_str().to_owned()))
}

pub(crate) async fn run(args: WorkerArgs) -> anyhow::Result<()> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&args.ledger)?;
    let file = Arc::new(Mutex::new(file));
    let beat_ledger = BeatLedger {
        file: file.clone(),
        offset_ms: args.clock_offset_ms,
    };
    let diamond = if args.diamond {
        diamond_listeners(&args, &file)?
    } else {
        Vec::new()
    };
    let starts = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(args.ledger.with_extension("starts"))?;
    let starts = Arc::new(Mutex::new(starts));
    let a = args.clone();
    let listener = dq::Listener::new(TOPIC, move |_: Job, ctx: dq::JobContext| {
        let (file, starts) = (file.clone(), starts.clone());
        let a = a.clone();
        async move {
            let start = true_now_us(a.clock_offset_ms);
            // Its start first, as a run that ends then: a kill may cut the run (ledger.rs).
            append_run(&starts, &ctx, start, start)?;
            work(&a, &file, &ctx, start).await
        }
    })
    .concurrency(args.concurrency)
    .no_timeout()
    .retries(2);
    let listener = if args.events {
        listener.events(true).events_cap(EVENTS_CAP)
    } else {
        listener
    };
    let config = crate::config(&args.url)?
        .lease(Duration::from_millis(args.lease_ms))
        .shutdown_grace(Duration::from_millis(args.grace_ms))
        .build()?;
    // Redis may be down or paused when a worker (re)starts: keep trying, as a supervisor would.
    let rt = loop {
        let mut builder = dq::Runtime::builder()
            .config(config.clone())
            .listener(listener.clone());
        for l in &diamond {
            builder = builder.listener(l.clone());
        }
        builder = if args.beat {
            builder.state(beat_ledger.clone())
        } else {
            builder.without_registered_listeners()
        };
        match builder.start().await {
            Ok(rt) => break rt,
            Err(e) => {
                tracing::warn!("worker start failed, retrying in 200ms: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    // What dq sees of this host's clock: local time minus Redis' time (the injected skew).
    let redis_now = dq::store::to_us(rt.client().store_time().await?);
    let local_now = dq::store::to_us(std::time::SystemTime::now());
    let skew_ms = (i128::from(local_now) - i128::from(redis_now)) / 1000;
    std::fs::write(args.ledger.with_extension("skew"), skew_ms.to_string())?;
    println!("ready");
    std::io::stdout().flush()?;
    rt.run_until_shutdown_signal().await?;
    Ok(())
}
