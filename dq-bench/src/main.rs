//! `dq-bench`: runs the workloads of BENCH.md against dq and prints one JSON line per run.
//!
//! It starts its own `redis-server` on a free loopback port (`--save '' --appendonly no`,
//! default `hz`), runs FLUSHALL before each run, spawns a worker process (this binary with the
//! hidden `worker` role) and waits until it reports that it is connected and idle before
//! pushing. The worker records each job's first start time and delivery count in memory and
//! hands them over through a pipe at the end. A run with lost or duplicated jobs makes the
//! program exit non-zero, whatever its speed.
//!
//! ```sh
//! cargo run --release -p dq-bench -- --workload all --reps 3
//! cargo run --release -p dq-bench -- --workload burst --n 100000 --push-mode bulk
//! ```

mod dashboard;
mod driver;
mod embedded;
mod profile;
mod push_latency;
mod rate_limit;
mod schedules;
mod stats;
mod target;
mod worker;
mod workflow;

use clap::{Parser, Subcommand};

/// Runs BENCH.md's workloads against dq; one JSON line per run on stdout.
#[derive(Debug, Parser)]
#[command(version)]
struct Cli {
    #[command(subcommand)]
    role: Option<Role>,
    /// all, burst, steady, sparse, sparse-offset, cross-process, pending, several of these
    /// joined by commas (`burst,pending`: the same burst on an empty Redis, then on top of
    /// --pending-fill delayed jobs, in one run), or, not in all:
    /// ready-changes (the cost of replacing, cancelling and rescheduling ready jobs),
    /// dashboard (`dq web`'s page times over --n jobs, default 1,000,000; build dq-cli first)
    /// schedules (tick lateness of --n one-second schedules, default 100, for 30 s),
    /// rate-limit (--workers worker processes drain a topic limited to --limit for --seconds:
    /// the rate they achieve together, and the most starts in one period) and
    /// embedded-memory (RSS of the embedded runtime after a tenth of --n tiny jobs and after
    /// all of them, default 2,000,000; no Redis) and workflow (1,000 plain jobs against one
    /// workflow of 1,000 steps, a fan-out and fan-in, in this process: time and Redis CPU) and
    /// push-latency (--n one-at-a-time awaited pushes, default 5,000, beside PING round trips
    /// of redis-rs and of `redis-benchmark -c 1`: p50, p99 and mean, us).
    #[arg(long, default_value = "all")]
    workload: String,
    /// Jobs in a burst (default: 100000 and 5000).
    #[arg(long)]
    n: Option<usize>,
    /// Push mode of the burst workloads: all, seq, concurrent or bulk.
    #[arg(long, default_value = "all")]
    push_mode: String,
    /// Repetitions of each run.
    #[arg(long, default_value_t = 1)]
    reps: usize,
    /// Delayed jobs filled in before the pending workload's burst.
    #[arg(long, default_value_t = 1_000_000)]
    pending_fill: usize,
    /// Worker concurrency for the one topic.
    #[arg(long, default_value_t = 256)]
    concurrency: usize,
    /// Jobs per second of the steady workload (15 s of them unless --n says otherwise).
    #[arg(long, default_value_t = 2000)]
    rate: usize,
    /// Topics the jobs are spread over, round robin (`bench-0`, `bench-1`, ...), each with a
    /// listener of --concurrency in the worker.
    #[arg(long, default_value_t = 1)]
    topics: usize,
    /// Run on a local Redis Cluster with this many masters (0: one redis-server).
    #[arg(long, default_value_t = 0)]
    cluster: usize,
    /// Replicas per master (0 or 1).
    #[arg(long, default_value_t = 0)]
    replicas: usize,
    /// Pushes wait until this many replicas have them (Redis WAIT, DQ_WAIT_REPLICAS).
    #[arg(long)]
    wait_replicas: Option<u32>,
    /// The workers' listeners keep each succeeded job's record with a small value (retain 1h),
    /// as `#[dq::listener(retain = "1h")]` does: the cost of results on the drain.
    #[arg(long)]
    retain: bool,
    /// The workers' listeners turn their topics' job events on, as
    /// `#[dq::listener(events = true)]` does: every push, start and ack also appends an event
    /// (in the same script call), the cost of events on the drain.
    #[arg(long)]
    events: bool,
    /// Bound each bench topic's pending jobs to this many (`Client::set_max_pending`) before a
    /// burst's pushes: with a bound above the burst every push pays the check and none is
    /// refused, the cost of backpressure on the push.
    #[arg(long)]
    max_pending: Option<u64>,
    /// Limit each bench topic's jobs running at once in all processes to this many
    /// (`Client::set_global_concurrency`) before a burst's pushes: the cost of counting them at
    /// every fetch, and of waiting for room when the workers' own concurrency is higher.
    #[arg(long)]
    global_concurrency: Option<u32>,
    /// Limit each bench topic's starts in all processes to this rate, `<count>/<period>`
    /// (`Client::set_rate`), before a burst's pushes: with a rate above the drain's every fetch
    /// pays the check and none waits, the cost of a rate limit on the drain.
    #[arg(long)]
    topic_rate: Option<dq::Rate>,
    /// Limit each group's starts to this rate (`Client::set_group_rate`, with `--groups`),
    /// before a burst's pushes: the cost of group rates on the drain.
    #[arg(long)]
    group_rate: Option<dq::Rate>,
    /// Leave a burst's job ids to dq (drawn at the push, `NewJob::id_drawn`) instead of `<i>`:
    /// a push of ids dq drew looks for none among the jobs stored compact (`--pending-fill`
    /// stores its jobs so), one of ids of the caller's does.
    #[arg(long)]
    drawn_ids: bool,
    /// Give a burst's job i the priority (i mod 21) - 10 (`PushBuilder::priority`): every level
    /// from -10 to 10, 20 jobs in 21 in the topic's ranked set, the cost of priorities.
    #[arg(long)]
    priorities: bool,
    /// Spread a burst's jobs over this many groups (`PushBuilder::group`, job i in group
    /// `g<i mod N>`), each running one job at a time: the cost of groups.
    #[arg(long, default_value_t = 0)]
    groups: usize,
    /// Pin every redis-server to these CPUs (e.g. `1` or `2,3`) and this program and its worker
    /// processes to the others, so that Redis has cores of its own (Linux `taskset`).
    #[arg(long, value_delimiter = ',')]
    pin_redis: Vec<usize>,
    /// The rate-limit workload's limit, `<count>/<period>`.
    #[arg(long, default_value = "1000/1s")]
    limit: String,
    /// The rate-limit workload's worker processes.
    #[arg(long, default_value_t = 4)]
    workers: usize,
    /// How long the rate-limit workload runs.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
}

#[derive(Debug, Subcommand)]
enum Role {
    /// The worker process (spawned by the driver).
    #[command(hide = true)]
    Worker {
        #[arg(long)]
        url: String,
        #[arg(long)]
        n: usize,
        #[arg(long)]
        concurrency: usize,
        #[arg(long, default_value_t = 1)]
        topics: usize,
        #[arg(long)]
        retain: bool,
        #[arg(long)]
        events: bool,
    },
    /// The producer process of the cross-process workload (spawned by the driver).
    #[command(hide = true)]
    Producer {
        #[arg(long)]
        url: String,
        #[arg(long)]
        n: usize,
        #[arg(long)]
        delay_ms: u64,
        #[arg(long)]
        interval_ms: u64,
        /// Push schedule start, epoch milliseconds.
        #[arg(long)]
        t0_ms: f64,
        #[arg(long)]
        wait_replicas: Option<u32>,
        #[arg(long, default_value_t = 1)]
        topics: usize,
    },
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    // DQ_BENCH_RUNTIME=current runs the bench's own process on one thread (tokio's
    // current-thread runtime): the push-latency workload's client wakes no other thread.
    let rt = if std::env::var("DQ_BENCH_RUNTIME").is_ok_and(|v| v == "current") {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
    } else {
        tokio::runtime::Runtime::new()?
    };
    match cli.role {
        Some(Role::Worker {
            url,
            n,
            concurrency,
            topics,
            retain,
            events,
        }) => {
            driver::TOPICS.store(topics, std::sync::atomic::Ordering::Relaxed);
            driver::RETAIN.store(retain, std::sync::atomic::Ordering::Relaxed);
            driver::EVENTS.store(events, std::sync::atomic::Ordering::Relaxed);
            rt.block_on(worker::run(url, n, concurrency))
        }
        Some(Role::Producer {
            url,
            n,
            delay_ms,
            interval_ms,
            t0_ms,
            wait_replicas,
            topics,
        }) => {
            driver::TOPICS.store(topics, std::sync::atomic::Ordering::Relaxed);
            rt.block_on(driver::produce(
                url,
                n,
                delay_ms,
                interval_ms,
                t0_ms,
                wait_replicas,
            ))
        }
        None => {
            driver::STEADY_RATE.store(cli.rate, std::sync::atomic::Ordering::Relaxed);
            driver::TOPICS.store(cli.topics.max(1), std::sync::atomic::Ordering::Relaxed);
            driver::RETAIN.store(cli.retain, std::sync::atomic::Ordering::Relaxed);
            driver::EVENTS.store(cli.events, std::sync::atomic::Ordering::Relaxed);
            driver::PRIORITIES.store(cli.priorities, std::sync::atomic::Ordering::Relaxed);
            driver::DRAWN_IDS.store(cli.drawn_ids, std::sync::atomic::Ordering::Relaxed);
            driver::GROUPS.store(cli.groups, std::sync::atomic::Ordering::Relaxed);
            driver::MAX_PENDING.store(
                cli.max_pending.unwrap_or(0),
                std::sync::atomic::Ordering::Relaxed,
            );
            driver::GLOBAL_CONCURRENCY.store(
                cli.global_concurrency.unwrap_or(0),
                std::sync::atomic::Ordering::Relaxed,
            );
            let _ = driver::RATES.set((cli.topic_rate, cli.group_rate));
            let n = match (cli.workload.as_str(), cli.n) {
                ("steady", None) => Some(cli.rate * 15),
                (_, n) => n,
            };
            if cli.workload == "embedded-memory" {
                for rep in 0..cli.reps {
                    let mut line = rt.block_on(embedded::run(n.unwrap_or(2_000_000)))?;
                    line["rep"] = serde_json::json!(rep);
                    println!("{line}");
                }
                return Ok(());
            }
            let target = target::Target::start(cli.cluster, cli.replicas, cli.wait_replicas);
            if !cli.pin_redis.is_empty() {
                target.pin(&cli.pin_redis)?;
            }
            if cli.workload == "schedules" {
                for rep in 0..cli.reps {
                    let mut line = rt.block_on(schedules::run(&target, n.unwrap_or(100)))?;
                    line["rep"] = serde_json::json!(rep);
                    line["redis_version"] = serde_json::json!(target.version());
                    println!("{line}");
                }
                return Ok(());
            }
            if cli.workload == "rate-limit" {
                let limit: dq::Rate = cli.limit.parse()?;
                for rep in 0..cli.reps {
                    let mut line = rt.block_on(rate_limit::run(
                        &target,
                        limit,
                        cli.workers,
                        cli.seconds,
                        cli.concurrency,
                    ))?;
                    line["rep"] = serde_json::json!(rep);
                    line["redis_version"] = serde_json::json!(target.version());
                    println!("{line}");
                }
                return Ok(());
            }
            if cli.workload == "push-latency" {
                for rep in 0..cli.reps {
                    let mut line = rt.block_on(push_latency::run(&target, n.unwrap_or(5000)))?;
                    line["rep"] = serde_json::json!(rep);
                    line["redis_version"] = serde_json::json!(target.version());
                    println!("{line}");
                }
                return Ok(());
            }
            if cli.workload == "workflow" {
                for mut line in rt.block_on(workflow::run(&target, cli.reps, cli.concurrency))? {
                    line["redis_version"] = serde_json::json!(target.version());
                    println!("{line}");
                }
                return Ok(());
            }
            if cli.workload == "dashboard" {
                for rep in 0..cli.reps {
                    for mut line in rt.block_on(dashboard::run(&target, n.unwrap_or(1_000_000)))? {
                        line["rep"] = serde_json::json!(rep);
                        line["redis_version"] = serde_json::json!(target.version());
                        println!("{line}");
                    }
                }
                return Ok(());
            }
            let failed = rt.block_on(driver::run_all(
                &cli.workload,
                n,
                &cli.push_mode,
                cli.reps,
                cli.concurrency,
                cli.pending_fill,
                &target,
            ))?;
            if failed > 0 {
                eprintln!("dq-bench: {failed} run(s) lost or duplicated jobs");
                std::process::exit(1);
            }
            Ok(())
        }
    }
}
