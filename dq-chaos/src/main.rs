//! `dq-chaos`: real faults against real worker processes and a real redis-server, with a
//! ledger outside Redis and an oracle that counts what was lost and duplicated.
//!
//! Each scenario starts its own `redis-server` on a free loopback port, spawns worker
//! processes (this binary's `worker` role) whose handlers take 0-200 ms and append
//! `id attempt pid start_us end_us due_us` to a per-worker append-only file, pushes jobs with
//! unique ids and delays spread over a window while it injects the fault, waits for the drain
//! and prints one JSON line: pushed_acked, push_errors, handled_unique, lost (acked - handled -
//! dead), duplicated, dead, lateness p50/p99/max, recovery time, Redis errors by kind. It exits
//! non-zero when a scenario fails (a job lost where Redis kept the data, a second job from one
//! id, Redis not clean after the drain, ...).
//!
//! ```sh
//! cargo run --release -p dq-chaos                        # every scenario, short (about 2 min)
//! cargo run --release -p dq-chaos -- --full              # full size (RELIABILITY.md)
//! cargo run --release -p dq-chaos -- --scenario worker-kill,sigterm --full
//! ```

mod bad_states;
mod diamond;
mod harness;
mod ledger;
mod proxy;
mod rng;
mod scenario;
mod setup;
mod worker;

use clap::{Parser, Subcommand};
use serde::{Deserialize, Serialize};

/// The topic and namespace of every scenario.
pub(crate) const TOPIC: &str = "chaos";
pub(crate) const NAMESPACE: &str = "chaos";

/// A configuration for `url`: `redis://...` for one server, `cluster:redis://a,redis://b`
/// for a cluster.
pub(crate) fn config(url: &str) -> anyhow::Result<dq::config::ConfigBuilder> {
    let b = dq::Config::builder().namespace(NAMESPACE);
    Ok(match url.strip_prefix("cluster:") {
        Some(seeds) => b.redis_cluster(seeds.split(',').map(str::to_owned)),
        None => b.redis_url(url),
    })
}

/// The message the scenarios push.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Job {
    pub(crate) n: u64,
    pub(crate) pad: String,
}

/// Runs dq's fault scenarios; one JSON line per scenario on stdout.
#[derive(Debug, Parser)]
#[command(version)]
struct Cli {
    #[command(subcommand)]
    role: Option<Role>,
    /// Comma-separated scenarios, or `all`.
    #[arg(long, default_value = "all")]
    scenario: String,
    /// Full-size runs (100k jobs and 200 kills for worker-kill; minutes each).
    #[arg(long)]
    full: bool,
    /// Seed of the fault timings.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Keep the ledgers and logs (they are kept anyway when a scenario fails).
    #[arg(long)]
    keep: bool,
}

#[derive(Debug, Subcommand)]
enum Role {
    /// A worker process (spawned by the scenarios).
    #[command(hide = true)]
    Worker(worker::WorkerArgs),
    /// Lists the scenarios.
    List,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let rt = tokio::runtime::Runtime::new()?;
    match cli.role {
        Some(Role::Worker(args)) => {
            tracing_subscriber::fmt()
                .with_ansi(false)
                .with_writer(std::io::stderr)
                .with_max_level(tracing::Level::INFO)
                .init();
            rt.block_on(worker::run(args))
        }
        Some(Role::List) => {
            for name in scenario::ALL {
                println!("{name}");
            }
            Ok(())
        }
        None => {
            let names: Vec<&str> = if cli.scenario == "all" {
                scenario::ALL.to_vec()
            } else {
                cli.scenario.split(',').map(str::trim).collect()
            };
            let mut failed = Vec::new();
            for name in names {
                eprintln!(
                    "dq-chaos: running {name} ({})",
                    if cli.full { "full" } else { "short" }
                );
                let report = rt.block_on(scenario::run(name, cli.full, cli.seed, cli.keep))?;
                println!("{report}");
                if report["ok"] != serde_json::json!(true) {
                    failed.push(name);
                }
            }
            anyhow::ensure!(failed.is_empty(), "scenarios failed: {failed:?}");
            Ok(())
        }
    }
}
