//! A worker process: one topic, a handler that takes a job-specific 0-200 ms (or holds its job
//! for `hold`), then appends its run to the ledger. Graceful shutdown on SIGTERM.

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
}

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
    let a = args.clone();
    let listener = dq::Listener::new(TOPIC, move |_: Job, ctx: dq::JobContext| {
        let file = file.clone();
        let a = a.clone();
        async move {
            let start = true_now_us(a.clock_offset_ms);
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
            append_run(&file, &ctx, start, end)
        }
    })
    .concurrency(args.concurrency)
    .no_timeout()
    .retries(2);
    let config = crate::config(&args.url)?
        .lease(Duration::from_millis(args.lease_ms))
        .shutdown_grace(Duration::from_millis(args.grace_ms))
        .build()?;
    // Redis may be down or paused when a worker (re)starts: keep trying, as a supervisor would.
    let rt = loop {
        let mut builder = dq::Runtime::builder()
            .config(config.clone())
            .listener(listener.clone());
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
