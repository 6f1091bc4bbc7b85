//! `dq`: see and steer dq's queues in Redis from the shell.
//!
//! ```sh
//! export DQ_REDIS_URL=redis://127.0.0.1:6379/
//! dq stats                                   # every topic: counts, lag, runs done/failed in the last hour
//! dq jobs order-cancel --state delayed       # a page of jobs (--limit, --cursor)
//! dq jobs order-cancel --state done          # succeeded jobs and their results (kept with `retain`)
//! dq show order-cancel 42                    # one job: state, attempts, last error, payload, result
//! dq push order-cancel @order.json --in 10m  # the payload as JSON, `-` (stdin) or `@file`
//! dq dead retry order-cancel --all           # run dead letters again
//! dq pause order-cancel; dq resume order-cancel  # --force: a topic not pushed to yet
//! dq max-pending order-cancel 100000             # refuse pushes past it; `off` lifts it
//! dq rate charge-card 100/1s                     # at most 100 starts a second, all workers; `off` lifts it
//! dq global-concurrency charge-card 10           # at most 10 running at once, all workers; `off` lifts it
//! dq watch                                   # a live view, refreshed every second
//! dq schedules; dq schedules pause <id>       # periodic schedules: list, pause, resume, remove, run
//! dq web --listen 127.0.0.1:8080             # the web dashboard (DQ_WEB_TOKEN to require a token)
//! dq events order-cancel --from start        # tail job events (a listener with `events = true`)
//! ```
//!
//! Every command takes `--json` for scripts. Exit codes: 0 done, 1 error (Redis unreachable,
//! bad input), 2 usage, 3 no such job or topic, 4 refused because the job is running (a
//! reschedule; a cancel of a running job asks its worker to stop it and exits 0).
//!
//! Here: the connection and the dispatch to one module per group of commands; `args` holds the
//! command line, `output` the tables and JSON.

mod args;
mod dead;
mod events;
mod jobs;
mod output;
mod push;
mod schedules;
mod topics;
mod web;
mod workers;
mod workflows;

use clap::Parser as _;
use dq::Client;

use crate::args::{Cli, Command, Connection};

/// How the program ends: the exit code and what to say on stderr, on one line after `dq: `.
pub(crate) struct Exit(pub(crate) i32, pub(crate) String);

impl<E: std::fmt::Display> From<E> for Exit {
    fn from(e: E) -> Exit {
        Exit(1, format!("{e}"))
    }
}

fn main() {
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("dq: cannot start: {e}");
            std::process::exit(1);
        }
    };
    if let Err(Exit(code, message)) = rt.block_on(run(cli)) {
        eprintln!("dq: {message}");
        std::process::exit(code);
    }
}

async fn run(cli: Cli) -> Result<(), Exit> {
    let client = connect(&cli.connection).await?;
    // A command about an existing topic says so when there is none, with the known ones,
    // rather than printing an empty page that looks like an empty queue.
    if let Some(topic) = cli.command.reads_topic() {
        topics::known_topic(&client, topic).await?;
    }
    dispatch(client, cli.command, &cli.connection.namespace, cli.json).await
}

/// Connects to the Redis (or Redis Cluster) the options or the environment name.
async fn connect(connection: &Connection) -> Result<Client, Exit> {
    let mut builder = dq::Config::builder().namespace(connection.namespace.clone());
    builder = match (&connection.redis_url, connection.redis_cluster.is_empty()) {
        (Some(url), true) => builder.redis_url(url.clone()),
        (None, false) => builder.redis_cluster(connection.redis_cluster.clone()),
        (Some(_), false) => {
            return Err(Exit(
                1,
                "set either DQ_REDIS_URL / --redis-url or DQ_REDIS_CLUSTER / --redis-cluster, not both".into(),
            ))
        }
        (None, true) => {
            return Err(Exit(
                1,
                "no Redis to talk to: set DQ_REDIS_URL or pass --redis-url redis://host:6379/ (DQ_REDIS_CLUSTER for a cluster)".into(),
            ))
        }
    };
    if let Some(shards) = connection.shards {
        builder = builder.shards(shards);
    }
    let config = with_environment(builder)?.build()?;
    Ok(Client::connect(config).await?)
}

/// What the command takes from the `DQ_*` variables beside the connection options, as a
/// runtime does: the TLS files of a `rediss://` Redis signed by a private authority or asking
/// for a client certificate, and the payload limit `dq push` checks.
fn with_environment(
    mut builder: dq::config::ConfigBuilder,
) -> Result<dq::config::ConfigBuilder, Exit> {
    const READ: [&str; 4] = [
        "DQ_TLS_CA_FILE",
        "DQ_TLS_CERT_FILE",
        "DQ_TLS_KEY_FILE",
        "DQ_MAX_PAYLOAD_BYTES",
    ];
    let env = dq::Config::from_vars(|key| {
        READ.contains(&key)
            .then(|| std::env::var(key).ok())
            .flatten()
    })?;
    builder = builder.max_payload_bytes(env.max_payload_bytes);
    if let Some(ca) = env.tls_ca_file {
        builder = builder.tls_ca_file(ca);
    }
    // One without the other was refused by `from_vars` (both, or neither).
    if let (Some(cert), Some(key)) = (env.tls_cert_file, env.tls_key_file) {
        builder = builder.tls_client_cert(cert, key);
    }
    Ok(builder)
}

/// Runs one command; each group of commands has its module.
async fn dispatch(
    client: Client,
    command: Command,
    namespace: &str,
    json: bool,
) -> Result<(), Exit> {
    match command {
        Command::Stats => topics::stats(&client, json).await,
        Command::Watch { iterations } => topics::watch(&client, namespace, iterations, json).await,
        Command::Expand => topics::expand(&client, json).await,
        Command::Pause { topic, force } => topics::pause(&client, &topic, force, json).await,
        Command::Resume { topic } => topics::resume(&client, &topic, json).await,
        Command::GlobalConcurrency { topic, max } => {
            topics::global_concurrency(&client, &topic, max.as_deref(), json).await
        }
        Command::Groups {
            topic,
            concurrency,
            rate,
        } => {
            topics::groups(
                &client,
                &topic,
                concurrency.as_deref(),
                rate.as_deref(),
                json,
            )
            .await
        }
        Command::Rate {
            topic,
            lift_hold: true,
            ..
        } => topics::lift_hold(&client, &topic, json).await,
        Command::Rate { topic, rate, .. } => {
            topics::rate(&client, &topic, rate.as_deref(), json).await
        }
        Command::MaxPending { topic, bound } => {
            topics::max_pending(&client, &topic, bound.as_deref(), json).await
        }
        Command::Jobs(page) => jobs::list(&client, page, json).await,
        Command::Show { topic, id } => jobs::show(&client, &topic, &id, json).await,
        Command::Cancel { topic, id } => jobs::cancel(&client, &topic, &id, json).await,
        Command::Reschedule(to) => jobs::reschedule(&client, to, json).await,
        Command::Workflow { id, cancel } => workflows::run(&client, &id, cancel, json).await,
        Command::Push(job) => push::push(&client, job, json).await,
        Command::Dead { command } => dead::run(&client, command, json).await,
        Command::Schedules { command } => schedules::run(&client, command, json).await,
        Command::Workers => workers::list(&client, json).await,
        Command::Web(options) => web::serve(client, options).await,
        Command::Events(args) => events::tail(&client, args, json).await,
    }
}
