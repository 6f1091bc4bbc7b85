//! `dq`: see and steer dq's queues in Redis from the shell.
//!
//! ```sh
//! export DQ_REDIS_URL=redis://127.0.0.1:6379/
//! dq stats                                   # every topic: counts, lag, runs done/failed in the last hour
//! dq jobs order-cancel --state delayed       # a page of jobs (--limit, --cursor)
//! dq show order-cancel 42                    # one job: state, attempts, last error, payload
//! dq dead retry order-cancel --all           # run dead letters again
//! dq pause order-cancel; dq resume order-cancel  # --force: a topic not pushed to yet
//! dq watch                                   # a live view, refreshed every second
//! dq schedules; dq schedules pause <id>       # periodic schedules: list, pause, resume, remove, run
//! dq web --listen 127.0.0.1:8080             # the web dashboard (DQ_WEB_TOKEN to require a token)
//! ```
//!
//! Every command takes `--json` for scripts. Exit codes: 0 done, 1 error (Redis unreachable,
//! bad input), 2 usage, 3 no such job or topic, 4 refused because the job is running.

mod output;

use std::io::Write as _;
use std::time::Duration;

use clap::builder::TypedValueParser as _;
use clap::{Parser, Subcommand};
use dq::admin::{ChangeOutcome, Cursor};
use dq::{Client, JobInfo, JobState, Schedule};
use serde_json::json;

use crate::output::{ago, job_json, print_page, print_table, stats_json, until};

/// See and steer dq's queues in Redis.
#[derive(Debug, Parser)]
#[command(version, about, long_about = None)]
struct Cli {
    /// Redis to connect to.
    #[arg(long, env = "DQ_REDIS_URL", global = true, hide_env_values = true)]
    redis_url: Option<String>,
    /// Redis Cluster seed nodes, comma-separated (instead of --redis-url).
    #[arg(
        long,
        env = "DQ_REDIS_CLUSTER",
        global = true,
        hide_env_values = true,
        value_delimiter = ','
    )]
    redis_cluster: Vec<String>,
    /// Namespace of the queues (as the runtime's DQ_NAMESPACE).
    #[arg(long, env = "DQ_NAMESPACE", default_value = "dq", global = true)]
    namespace: String,
    /// Shards of the namespace (as the runtime's DQ_SHARDS; default 1, or 16 on a cluster).
    #[arg(long, env = "DQ_SHARDS", global = true)]
    shards: Option<u16>,
    /// Print JSON instead of tables.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Counts per topic, the age of the oldest ready job (how far behind the workers are) and
    /// the next due time.
    Stats,
    /// A page of one topic's jobs in one state.
    Jobs {
        topic: String,
        #[arg(long, default_value = "delayed", value_parser = job_state())]
        state: JobState,
        #[arg(long, default_value_t = 20)]
        limit: usize,
        /// The `next` cursor printed with the previous page.
        #[arg(long, default_value_t = Cursor::START)]
        cursor: Cursor,
    },
    /// One job: state, attempts, times, last error, payload.
    Show { topic: String, id: String },
    /// Delete a job that has not started (or a dead letter).
    Cancel { topic: String, id: String },
    /// Move a job that has not started to a new due time.
    Reschedule {
        topic: String,
        id: String,
        /// Due this long from now: 30s, 10m, 2h, 1d.
        #[arg(long = "in", value_parser = duration)]
        delay: Duration,
    },
    /// Push a job with a JSON payload.
    Push {
        topic: String,
        /// The payload, as JSON.
        #[arg(value_name = "JSON")]
        payload: String,
        #[arg(long)]
        id: Option<String>,
        /// Due this long from now: 30s, 10m, 2h, 1d (default, as 0s: now; at most 200 years).
        #[arg(long = "in", value_parser = duration)]
        delay: Option<Duration>,
        /// Retries after a failed first run before the job is dead-lettered (at most 1000).
        #[arg(
            long,
            default_value_t = dq::limits::DEFAULT_RETRIES,
            value_parser = clap::value_parser!(u32).range(0..=i64::from(dq::limits::MAX_RETRIES))
        )]
        retries: u32,
        /// Keep the id reserved this long after the job succeeds (give --id; more than 0s, at
        /// most 200 years).
        #[arg(long, value_parser = duration, requires = "id")]
        unique_for: Option<Duration>,
        /// Replace a pending job of this id and make it due this long from now (give --id;
        /// more than 0s).
        #[arg(long, value_parser = duration, requires = "id", conflicts_with = "delay")]
        debounce: Option<Duration>,
    },
    /// Dead letters: list, retry, purge.
    Dead {
        #[command(subcommand)]
        command: DeadCommand,
    },
    /// Stop workers from fetching a topic (running jobs finish); survives restarts.
    Pause {
        topic: String,
        /// Pause a topic nothing was pushed to yet (it is then listed by `dq stats` as paused).
        /// Without it, an unknown topic is refused: more often a typo than a plan.
        #[arg(long)]
        force: bool,
    },
    /// Let workers fetch a paused topic again.
    Resume { topic: String },
    /// Worker processes heard from in the last minute.
    Workers,
    /// `dq stats`, refreshed every second until Ctrl-C.
    Watch {
        /// Stop after this many refreshes.
        #[arg(long)]
        iterations: Option<u64>,
    },
    /// Periodic schedules: list them (the default), pause, resume, remove or run one now.
    Schedules {
        #[command(subcommand)]
        command: Option<ScheduleCommand>,
    },
    /// Serve the web dashboard (every topic and job, live, with actions) until Ctrl-C.
    Web {
        /// Address to listen on. Keep it on loopback or behind your proxy unless a token is set.
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: std::net::SocketAddr,
        /// Show everything, allow no action.
        #[arg(long)]
        read_only: bool,
        /// Ask every request for this token (`Authorization: Bearer <token>`, or as the
        /// password of the browser's login prompt).
        #[arg(long, env = "DQ_WEB_TOKEN", hide_env_values = true)]
        token: Option<String>,
        /// A host name the dashboard answers to besides localhost and IP addresses (its name
        /// in the browser's address bar, e.g. behind a proxy); repeat it or separate names with
        /// commas. Other names get 421, against DNS rebinding.
        #[arg(long = "allowed-host", value_name = "HOST", value_delimiter = ',')]
        allowed_hosts: Vec<String>,
    },
}

impl Command {
    /// The topic a command reads, which must exist (push, pause and resume may name a new one).
    fn reads_topic(&self) -> Option<&str> {
        match self {
            Command::Jobs { topic, .. }
            | Command::Show { topic, .. }
            | Command::Cancel { topic, .. }
            | Command::Reschedule { topic, .. } => Some(topic),
            Command::Dead { command } => match command {
                DeadCommand::List { topic, .. } | DeadCommand::Purge { topic, .. } => Some(topic),
                DeadCommand::Retry { topic, .. } => topic.as_deref(),
            },
            _ => None,
        }
    }
}

async fn known_topic(client: &Client, topic: &str) -> Result<(), Exit> {
    dq::Topic::new(topic)?;
    let topics = client.topics().await?;
    if topics.iter().any(|t| t.as_str() == topic) {
        return Ok(());
    }
    let names: Vec<&str> = topics.iter().map(|t| t.as_str()).collect();
    Err(Exit(
        3,
        format!(
            "unknown topic {topic:?}: nothing was ever pushed to it in this namespace (known topics: {})",
            if names.is_empty() { "none".to_owned() } else { names.join(", ") }
        ),
    ))
}

#[derive(Debug, Subcommand)]
enum ScheduleCommand {
    /// Every schedule: how it repeats, its topic, next and last tick.
    List,
    /// Stop a schedule from ticking, in every process, until it is resumed.
    Pause { id: String },
    /// Let a paused schedule tick again from its next tick (missed ones are not made up).
    Resume { id: String },
    /// Delete a schedule (the jobs it made stay).
    Remove { id: String },
    /// Create one job of the schedule now, outside its ticks.
    Run { id: String },
}

#[derive(Debug, Subcommand)]
enum DeadCommand {
    /// A page of a topic's dead letters, newest first, with their errors.
    List {
        topic: String,
        #[arg(long, default_value_t = 20)]
        limit: usize,
        /// The `next` cursor printed with the previous page (`--offset` is its old name).
        #[arg(long, alias = "offset", default_value_t = Cursor::START)]
        cursor: Cursor,
    },
    /// Run dead letters again with fresh attempts: some ids, a whole topic, or every topic.
    Retry {
        #[arg(required_unless_present = "all_topics")]
        topic: Option<String>,
        /// The ids to retry.
        ids: Vec<String>,
        /// Retry every dead letter of the topic.
        #[arg(long, conflicts_with = "ids")]
        all: bool,
        /// Retry every dead letter of every topic.
        #[arg(long, conflicts_with_all = ["topic", "ids", "all"])]
        all_topics: bool,
    },
    /// Delete dead letters older than a duration.
    Purge {
        topic: String,
        #[arg(long, value_parser = duration)]
        older_than: Duration,
    },
}

/// `--state`: the states `JobState` reads, listed in `--help` and completions.
fn job_state() -> impl clap::builder::TypedValueParser<Value = JobState> {
    clap::builder::PossibleValuesParser::new(["delayed", "ready", "running", "dead"])
        .try_map(|s| s.parse::<JobState>())
}

fn duration(text: &str) -> Result<Duration, String> {
    dq::config::parse_duration(text)
}

/// How the program ends: the exit code and what to say on stderr.
struct Exit(i32, String);

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
    let mut builder = dq::Config::builder().namespace(cli.namespace.clone());
    builder = match (&cli.redis_url, cli.redis_cluster.is_empty()) {
        (Some(url), true) => builder.redis_url(url.clone()),
        (None, false) => builder.redis_cluster(cli.redis_cluster.clone()),
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
    if let Some(shards) = cli.shards {
        builder = builder.shards(shards);
    }
    let config = builder.build()?;
    let client = Client::connect(config).await?;
    let json = cli.json;
    if let Some(topic) = cli.command.reads_topic() {
        known_topic(&client, topic).await?;
    }
    match cli.command {
        Command::Stats => stats(&client, json).await?,
        Command::Watch { iterations } => {
            let mut n = 0;
            loop {
                if !json {
                    print!("\x1b[2J\x1b[H");
                    println!("dq watch: {} (Ctrl-C to stop)\n", cli.namespace);
                }
                stats(&client, json).await?;
                n += 1;
                if iterations.is_some_and(|max| n >= max) {
                    break;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
        Command::Jobs {
            topic,
            state,
            limit,
            cursor,
        } => {
            let page = client.jobs(&topic, state, cursor, limit).await?;
            let row = |j: &JobInfo| {
                vec![
                    j.id.to_string(),
                    j.state.as_str().to_owned(),
                    format!("{}/{}", j.attempt, j.max_attempts),
                    until(j.due),
                    j.last_error.clone().unwrap_or_default(),
                ]
            };
            let next = format!("dq jobs {topic} --state {state} --limit {limit} --cursor");
            let headers = ["ID", "STATE", "ATTEMPT", "DUE", "LAST ERROR"];
            print_page(json, &page, &headers, row, &next);
        }
        Command::Show { topic, id } => {
            let Some(job) = client.status_in(&topic, &id).await? else {
                return Err(Exit(
                    3,
                    format!(
                        "no job {id:?} in topic {topic:?} (finished, cancelled, or never pushed)"
                    ),
                ));
            };
            if json {
                println!("{}", job_json(&job));
            } else {
                let rows = vec![
                    vec!["topic".into(), job.topic.to_string()],
                    vec!["id".into(), job.id.to_string()],
                    vec!["state".into(), job.state.as_str().into()],
                    vec![
                        "attempt".into(),
                        format!("{} of {}", job.attempt, job.max_attempts),
                    ],
                    vec!["due".into(), until(job.due)],
                    vec!["pushed".into(), ago(job.created)],
                    vec![
                        "last error".into(),
                        job.last_error.clone().unwrap_or_else(|| "-".into()),
                    ],
                    vec![
                        "payload".into(),
                        String::from_utf8_lossy(&job.payload).into_owned(),
                    ],
                ];
                print_table(&["FIELD", "VALUE"], rows);
            }
        }
        Command::Cancel { topic, id } => change(
            client.cancel_in(&topic, &id).await?,
            "cancelled",
            &topic,
            &id,
            json,
        )?,
        Command::Reschedule { topic, id, delay } => change(
            client
                .reschedule_in(&topic, &id, Schedule::After(delay))
                .await?,
            "rescheduled",
            &topic,
            &id,
            json,
        )?,
        Command::Push {
            topic,
            payload,
            id,
            delay,
            retries,
            unique_for,
            debounce,
        } => {
            serde_json::from_str::<serde_json::Value>(&payload)
                .map_err(|e| Exit(1, format!("the payload is not JSON: {e}")))?;
            let mut push = client.push_json(&topic, payload).max_retries(retries);
            if let Some(id) = id {
                push = push.id(id);
            }
            if let Some(d) = delay {
                push = push.delay(d);
            }
            if let Some(window) = unique_for {
                push = push.unique_for(window);
            }
            if let Some(quiet) = debounce {
                push = push.debounce(quiet);
            }
            let pushed = push.send().await?;
            let outcome = format!("{:?}", pushed.outcome);
            if json {
                println!(
                    "{}",
                    json!({ "id": pushed.id.as_str(), "outcome": outcome })
                );
            } else {
                println!("{}: {outcome}", pushed.id);
            }
        }
        Command::Dead { command } => match command {
            DeadCommand::List {
                topic,
                limit,
                cursor,
            } => {
                let page = client.jobs(&topic, JobState::Dead, cursor, limit).await?;
                let row = |j: &JobInfo| {
                    vec![
                        j.id.to_string(),
                        j.state_since_or_until.map(ago).unwrap_or_default(),
                        format!("{}/{}", j.attempt, j.max_attempts),
                        j.last_error.clone().unwrap_or_default(),
                    ]
                };
                let next = format!("dq dead list {topic} --limit {limit} --cursor");
                print_page(
                    json,
                    &page,
                    &["ID", "DIED", "ATTEMPTS", "ERROR"],
                    row,
                    &next,
                );
            }
            DeadCommand::Retry {
                topic,
                ids,
                all,
                all_topics,
            } => {
                let (n, what) = match topic {
                    _ if all_topics => (client.retry_all_dead().await?, "every topic".to_owned()),
                    Some(topic) if all || !ids.is_empty() => {
                        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
                        (client.retry_dead(&topic, &ids).await?, topic)
                    }
                    _ => {
                        return Err(Exit(
                            2,
                            "name the ids to retry, or pass --all (one topic) or --all-topics"
                                .into(),
                        ))
                    }
                };
                report(
                    json,
                    json!({ "retried": n }),
                    &format!("{n} dead letter(s) of {what} will run again"),
                );
            }
            DeadCommand::Purge { topic, older_than } => {
                let n = client.purge_dead(&topic, older_than).await?;
                report(
                    json,
                    json!({ "purged": n }),
                    &format!("{n} dead letter(s) of {topic} deleted"),
                );
            }
        },
        Command::Pause { topic, force } => {
            if !force {
                known_topic(&client, &topic)
                    .await
                    .map_err(|Exit(code, said)| match code {
                        3 => Exit(
                            code,
                            format!("{said}; to pause it before its first push, pass --force"),
                        ),
                        _ => Exit(code, said),
                    })?;
            }
            client.pause(&topic).await?;
            let said =
                format!("{topic} paused: workers finish what they run and fetch nothing more");
            report(json, json!({ "paused": topic }), &said);
        }
        Command::Resume { topic } => {
            client.resume(&topic).await?;
            let said = format!("{topic} resumed");
            report(json, json!({ "resumed": topic }), &said);
        }
        Command::Schedules { command } => schedules(&client, command, json).await?,
        Command::Web {
            listen,
            read_only,
            token,
            allowed_hosts,
        } => web(client, listen, read_only, token, allowed_hosts).await?,
        Command::Workers => {
            let workers = client.workers().await?;
            if json {
                println!("{}", serde_json::to_string(&workers)?);
            } else {
                let rows = workers
                    .iter()
                    .map(|w| {
                        vec![
                            w.id.clone(),
                            w.host.clone(),
                            w.pid.to_string(),
                            w.topics.join(","),
                            w.running.to_string(),
                            ago(dq::store::from_us(w.last_seen_ms * 1000)),
                        ]
                    })
                    .collect();
                print_table(
                    &["WORKER", "HOST", "PID", "TOPICS", "RUNNING", "LAST SEEN"],
                    rows,
                );
            }
        }
    }
    Ok(())
}

/// `dq schedules ...`; an unknown id exits 3.
async fn schedules(
    client: &Client,
    command: Option<ScheduleCommand>,
    json: bool,
) -> Result<(), Exit> {
    let unknown = |id: &str| Exit(3, format!("no schedule {id:?} (dq schedules lists them)"));
    let (id, done) = match command.unwrap_or(ScheduleCommand::List) {
        ScheduleCommand::List => {
            let all = client.schedules().await?;
            if json {
                let list: Vec<_> = all
                    .iter()
                    .map(|s| {
                        json!({
                            "id": s.id,
                            "repeat": s.spec.repeat.describe(),
                            "topic": s.spec.topic,
                            "missed": format!("{:?}", s.spec.missed),
                            "paused": s.next.is_none(),
                            "next_ms": s.next.map(|t| dq::store::to_us(t) / 1000),
                            "last_ms": s.last.map(|t| dq::store::to_us(t) / 1000),
                        })
                    })
                    .collect();
                println!("{}", serde_json::Value::Array(list));
                return Ok(());
            }
            let rows = all
                .iter()
                .map(|s| {
                    vec![
                        s.id.clone(),
                        s.spec.repeat.describe(),
                        s.spec.topic.clone(),
                        s.next.map_or("paused".into(), until),
                        s.last.map_or("-".into(), ago),
                        format!("{:?}", s.spec.missed),
                    ]
                })
                .collect();
            print_table(
                &["SCHEDULE", "REPEATS", "TOPIC", "NEXT", "LAST", "MISSED"],
                rows,
            );
            return Ok(());
        }
        ScheduleCommand::Pause { id } => {
            let found = client.pause_schedule(&id).await?;
            (id, found.then_some("paused"))
        }
        ScheduleCommand::Resume { id } => {
            let found = client.resume_schedule(&id).await?;
            (id, found.then_some("resumed"))
        }
        ScheduleCommand::Remove { id } => {
            let found = client.unschedule(&id).await?;
            (id, found.then_some("removed"))
        }
        ScheduleCommand::Run { id } => {
            let pushed = client.run_schedule_now(&id).await?;
            let said = pushed.map(|p| {
                let text = format!("{id}: job {} created", p.id);
                report(json, json!({ "schedule": id, "job": p.id.as_str() }), &text);
            });
            return said.ok_or_else(|| unknown(&id));
        }
    };
    let done = done.ok_or_else(|| unknown(&id))?;
    report(
        json,
        json!({ "schedule": id, "done": done }),
        &format!("{id} {done}"),
    );
    Ok(())
}

/// `dq web`: the dashboard on its own, until Ctrl-C or SIGTERM.
async fn web(
    client: Client,
    listen: std::net::SocketAddr,
    read_only: bool,
    token: Option<String>,
    allowed_hosts: Vec<String>,
) -> Result<(), Exit> {
    let mut options = dq::web::Options::new()
        .read_only(read_only)
        .allowed_hosts(allowed_hosts);
    let protected = token.as_ref().is_some_and(|t| !t.is_empty());
    if let Some(token) = token {
        options = options.token(token);
    }
    let app = dq::web::router(client, options);
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| Exit(1, format!("cannot listen on {listen}: {e}")))?;
    let at = listener.local_addr()?;
    // Scripts and tests read this line for the address (with port 0, the port chosen).
    println!("dq web: serving the dashboard on http://{at}/");
    if !protected && !at.ip().is_loopback() {
        eprintln!(
            "dq web: warning: no token set (DQ_WEB_TOKEN) and listening beyond loopback: anyone who reaches {at} can act on the queues"
        );
    }
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => {}
            }
        })
        .await?;
    // stdout may be gone by now (a supervisor that read the address and closed the pipe).
    let _ = writeln!(std::io::stdout(), "dq web: stopped");
    Ok(())
}

fn report(json: bool, value: serde_json::Value, text: &str) {
    if json {
        println!("{value}");
    } else {
        println!("{text}");
    }
}

fn change(
    outcome: ChangeOutcome,
    done: &str,
    topic: &str,
    id: &str,
    json: bool,
) -> Result<(), Exit> {
    match outcome {
        ChangeOutcome::Done => {
            report(
                json,
                json!({ "id": id, "result": done }),
                &format!("{topic}:{id} {done}"),
            );
            Ok(())
        }
        ChangeOutcome::Running => Err(Exit(
            4,
            format!("{topic}:{id} is running; it was left alone"),
        )),
        _ => Err(Exit(3, format!("no pending job {id:?} in topic {topic:?}"))),
    }
}

async fn stats(client: &Client, json: bool) -> Result<(), Exit> {
    let topics = client.topics().await?;
    let mut all = Vec::new();
    for t in &topics {
        let (stats, hour) =
            tokio::try_join!(client.stats(t.as_str()), client.throughput(t.as_str()))?;
        all.push((t.to_string(), stats, hour));
    }
    if json {
        let list: Vec<_> = all.iter().map(|(t, s, h)| stats_json(t, s, h)).collect();
        println!("{}", serde_json::Value::Array(list));
        return Ok(());
    }
    // Lag by the store's clock, as the due times were stamped (this host's may be off).
    let now = client.store_time().await?;
    let rows = all
        .iter()
        .map(|(t, s, hour)| {
            vec![
                format!("{t}{}", if s.paused { " (paused)" } else { "" }),
                s.counts.delayed.to_string(),
                s.counts.ready.to_string(),
                s.counts.running.to_string(),
                s.counts.dead.to_string(),
                s.oldest_ready_due
                    .and_then(|d| now.duration_since(d).ok())
                    .map_or("-".into(), |d| format!("{:.1}s", d.as_secs_f64())),
                s.next_due.map_or("-".into(), until),
                hour.done().to_string(),
                hour.failed().to_string(),
            ]
        })
        .collect();
    print_table(
        &[
            "TOPIC",
            "DELAYED",
            "READY",
            "RUNNING",
            "DEAD",
            "LAG",
            "NEXT DUE",
            "DONE 1H",
            "FAILED 1H",
        ],
        rows,
    );
    Ok(())
}
