//! The command line: every subcommand and option of `dq`. Their `///` comments are the text of
//! `--help`; clap appends `[default: ...]`, `[env: ...]` and `[possible values: ...]` itself, so
//! the comments only name a default that clap cannot show.
//!
//! The structs that hold a subcommand's options carry `//` comments, not `///`: clap would take
//! a `///` there as the subcommand's description, over the one written on its variant.

use std::net::SocketAddr;
use std::time::Duration;

use clap::builder::TypedValueParser as _;
use clap::{Args, Parser, Subcommand};
use dq::admin::Cursor;
use dq::events::EventCursor;
use dq::JobState;

/// The help heading of the options every subcommand takes, listed after its own.
const CONNECTION: &str = "Connection";
/// The help heading of `--json`, which every subcommand takes too.
const OUTPUT: &str = "Output";

/// See and steer dq's queues in Redis.
#[derive(Debug, Parser)]
#[command(version, about, long_about = None)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) connection: Connection,
    /// Print JSON instead of tables, for scripts.
    #[arg(long, global = true, help_heading = OUTPUT)]
    pub(crate) json: bool,
    #[command(subcommand)]
    pub(crate) command: Command,
}

// Which Redis and which queues in it. Global, so they may come before or after the subcommand,
// and under their own heading, so that `dq push --help` shows push's options first.
#[derive(Debug, Args)]
#[group(skip)]
pub(crate) struct Connection {
    /// Redis to connect to: redis://[user:password@]host:6379/[db], rediss:// for TLS.
    #[arg(
        long,
        env = "DQ_REDIS_URL",
        global = true,
        hide_env_values = true,
        help_heading = CONNECTION
    )]
    pub(crate) redis_url: Option<String>,
    /// Redis Cluster seed nodes, comma-separated, instead of --redis-url.
    #[arg(
        long,
        env = "DQ_REDIS_CLUSTER",
        global = true,
        hide_env_values = true,
        value_delimiter = ',',
        help_heading = CONNECTION
    )]
    pub(crate) redis_cluster: Vec<String>,
    /// Namespace of the queues: the same as the workers' DQ_NAMESPACE.
    #[arg(
        long,
        env = "DQ_NAMESPACE",
        default_value = "dq",
        global = true,
        help_heading = CONNECTION
    )]
    pub(crate) namespace: String,
    /// Shards of the namespace, as the workers' DQ_SHARDS (default: the count recorded in
    /// Redis, else 1, or 16 on a cluster).
    #[arg(long, env = "DQ_SHARDS", global = true, help_heading = CONNECTION)]
    pub(crate) shards: Option<u16>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Counts per topic (DONE: the succeeded jobs it keeps, with a retention), the age of the
    /// oldest ready job (how far behind the workers are), the next due time, and the runs done
    /// and failed in the last hour.
    Stats,
    /// A page of one topic's jobs in one state.
    Jobs(JobsArgs),
    /// One job: state, attempts, times, last error, payload, and a done job's result.
    Show {
        /// The job's topic.
        topic: String,
        /// The job's id.
        id: String,
    },
    /// Delete a job that has not started (or a dead letter, or a done job's record); a running
    /// job's worker is asked to stop it.
    Cancel {
        /// The job's topic.
        topic: String,
        /// The job's id.
        id: String,
    },
    /// Move a job that has not started to a new due time.
    Reschedule(RescheduleArgs),
    /// One workflow: each step's state (a pending one's job: delayed, ready or running), the
    /// steps it comes after, and its value or error; or cancel it.
    #[command(alias = "workflows")]
    Workflow {
        /// The workflow's id.
        id: String,
        /// Cancel it: blocked and waiting steps are cancelled, running ones asked to stop, and
        /// no step starts after this.
        #[arg(long)]
        cancel: bool,
    },
    /// Push a job with a JSON payload.
    Push(PushArgs),
    /// Dead letters: list, retry, purge.
    Dead {
        #[command(subcommand)]
        command: DeadCommand,
    },
    /// Move every job stored compact (due far ahead, on Redis or a cluster) into the layout every
    /// release reads, with its exact due time: before a rollback to a release before compact
    /// storage, once every process runs with DQ_COMPACT=off, and again once the older release
    /// is deployed (OPERATIONS.md). Jobs take about 190 bytes more each in Redis then.
    Expand,
    /// Stop workers from fetching a topic (running jobs finish); survives restarts.
    Pause {
        /// The topic to pause.
        topic: String,
        /// Pause a topic nothing was pushed to yet (it is then listed by `dq stats` as paused).
        /// Without it, an unknown topic is refused: more often a typo than a plan.
        #[arg(long)]
        force: bool,
    },
    /// Let workers fetch a paused topic again.
    Resume {
        /// The topic to resume.
        topic: String,
    },
    /// A topic's bound on pending jobs: print it, set it (a push past it is refused with
    /// "topic is full"), or lift it with `off`.
    MaxPending {
        /// The topic.
        topic: String,
        /// The most jobs it may hold pending (delayed, ready and running together), or `off`.
        /// Without it, the bound is printed.
        bound: Option<String>,
    },
    /// A topic's rate limit, in all worker processes together: print it, set it (`100/1s`,
    /// `6000/1m`), or lift it with `off`. Workers see a change at their next fetch.
    Rate {
        /// The topic.
        topic: String,
        /// Jobs per period, `<count>/<period>` (`100/1s`, `5/250ms`), or `off`. Without it,
        /// the rate is printed.
        rate: Option<String>,
        /// End the hold a handler's `Outcome::RateLimited` put on the topic, now, in every
        /// process (the provider is back sooner than it said).
        #[arg(long, conflicts_with = "rate")]
        lift_hold: bool,
    },
    /// A topic's limit on jobs running at once in all worker processes together: print it,
    /// set it, or lift it with `off`. Each worker's own concurrency still holds within it.
    GlobalConcurrency {
        /// The topic.
        topic: String,
        /// The most of its jobs running at once (at least 1), or `off`. Without it, the limit
        /// is printed.
        max: Option<String>,
    },
    /// A topic's groups (jobs pushed with `--group`): print its group concurrency, its group
    /// rate and the groups with the most jobs waiting for a slot, or set the concurrency
    /// (`off`: back to the default of 1, one job of a group at a time) and the rate (`off`:
    /// none).
    Groups {
        /// The topic.
        topic: String,
        /// How many jobs of one group run at once (at least 1), or `off`. Without it and
        /// `--rate`, the limits and the busiest groups are printed.
        #[arg(long)]
        concurrency: Option<String>,
        /// How many jobs of each group start per period, `<count>/<period>` (`10/1s`), in all
        /// processes together, or `off`. Workers use a new rate from their next fetch; jobs
        /// already held back keep their due time. A listener that declares `group_rate` writes
        /// its own value again when it starts.
        #[arg(long)]
        rate: Option<String>,
    },
    /// Worker processes heard from in the last minute.
    Workers,
    /// `dq stats`, refreshed every second until Ctrl-C.
    Watch {
        /// Stop after this many refreshes (default: never).
        #[arg(long)]
        iterations: Option<u64>,
    },
    /// Periodic schedules: list them (the default), pause, resume, remove or run one now.
    Schedules {
        #[command(subcommand)]
        command: Option<ScheduleCommand>,
    },
    /// Serve the web dashboard (every topic and job, live, with actions) until Ctrl-C.
    Web(WebArgs),
    /// Tail a topic's job events, one line each, until Ctrl-C (its listener turns them on:
    /// `events = true`); then print the cursor to resume from.
    Events(EventsArgs),
}

impl Command {
    /// The topic a command reads, which must exist (push, pause and resume may name a new one).
    pub(crate) fn reads_topic(&self) -> Option<&str> {
        match self {
            Command::Jobs(JobsArgs { topic, .. })
            | Command::Show { topic, .. }
            | Command::Cancel { topic, .. }
            | Command::Reschedule(RescheduleArgs { topic, .. }) => Some(topic),
            Command::Dead { command } => match command {
                DeadCommand::List { topic, .. } | DeadCommand::Purge { topic, .. } => Some(topic),
                DeadCommand::Retry { topic, .. } => topic.as_deref(),
            },
            _ => None,
        }
    }
}

// `dq jobs`.
#[derive(Debug, Args)]
pub(crate) struct JobsArgs {
    /// The topic whose jobs to list.
    pub(crate) topic: String,
    /// The state of the jobs to list (done: succeeded jobs with their results, newest first,
    /// kept only when the topic's listener has a retention, `retain = "1h"`).
    #[arg(long, default_value = "delayed", value_parser = job_state())]
    pub(crate) state: JobState,
    /// Most jobs on the page (at most 1000).
    #[arg(long, default_value_t = 20)]
    pub(crate) limit: usize,
    /// The `next` cursor printed with the previous page (default: the first page).
    #[arg(long, default_value_t = Cursor::START)]
    pub(crate) cursor: Cursor,
}

// `dq events`.
#[derive(Debug, Args)]
pub(crate) struct EventsArgs {
    /// The topic whose job events to tail.
    pub(crate) topic: String,
    /// Where to start: `now`, `start` (every event still kept), or a cursor printed by an
    /// earlier `dq events` (it resumes right after the event it was printed with).
    #[arg(long, default_value = "now", value_parser = cursor)]
    pub(crate) from: EventCursor,
    /// Stop after this many events (default: never).
    #[arg(long)]
    pub(crate) limit: Option<u64>,
    /// Print the events of this one job still kept, oldest first (its history: each run's
    /// start and end, the error of each that failed), and exit.
    #[arg(long, conflicts_with_all = ["from", "limit"])]
    pub(crate) job: Option<String>,
}

// `dq reschedule`.
#[derive(Debug, Args)]
pub(crate) struct RescheduleArgs {
    /// The job's topic.
    pub(crate) topic: String,
    /// The job's id.
    pub(crate) id: String,
    /// Due this long from now: 30s, 10m, 2h, 1d.
    #[arg(long = "in", value_parser = duration)]
    pub(crate) delay: Duration,
}

// `dq push`.
#[derive(Debug, Args)]
pub(crate) struct PushArgs {
    /// The topic to push to (it need not exist yet).
    pub(crate) topic: String,
    /// The payload: JSON, `-` to read it from stdin, or `@FILE` from a file, for those over the
    /// ~128 KiB one argument holds (no JSON starts with `@`: nothing to escape; at most 1 MiB).
    #[arg(value_name = "JSON|-|@FILE")]
    pub(crate) payload: String,
    /// The job's id; a push with the id of a pending job stores nothing (default: a new id).
    #[arg(long)]
    pub(crate) id: Option<String>,
    /// Due this long from now: 30s, 10m, 2h, 1d (default, as 0s: now; at most 200 years).
    #[arg(long = "in", value_parser = duration)]
    pub(crate) delay: Option<Duration>,
    /// Retries after a failed first run before the job is dead-lettered (at most 1000).
    #[arg(
        long,
        default_value_t = dq::limits::DEFAULT_RETRIES,
        value_parser = clap::value_parser!(u32).range(0..=i64::from(dq::limits::MAX_RETRIES))
    )]
    pub(crate) retries: u32,
    /// Keep the id reserved this long after the job succeeds (give --id; more than 0s, at
    /// most 200 years; default: not kept).
    #[arg(long, value_parser = duration, requires = "id")]
    pub(crate) unique_for: Option<Duration>,
    /// Replace a pending job of this id and make it due this long from now (give --id;
    /// more than 0s; default: a pending job of this id is kept as it is).
    #[arg(long, value_parser = duration, requires = "id", conflicts_with = "delay")]
    pub(crate) debounce: Option<Duration>,
    /// Run before the topic's ready jobs of a lower priority: -10 to 10, higher first
    /// (default 0).
    #[arg(
        long,
        default_value_t = 0,
        allow_negative_numbers = true,
        value_parser = clap::value_parser!(i8).range(
            i64::from(dq::limits::MIN_PRIORITY)..=i64::from(dq::limits::MAX_PRIORITY)
        )
    )]
    pub(crate) priority: i8,
    /// Put the job in this group of its topic (an account, a tenant): at most the topic's
    /// group concurrency of one group's jobs run at once, 1 by default, in push order
    /// (`dq groups`).
    #[arg(long)]
    pub(crate) group: Option<String>,
}

// `dq web`.
#[derive(Debug, Args)]
pub(crate) struct WebArgs {
    /// Address to listen on. Keep it on loopback or behind your proxy unless a token is set.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub(crate) listen: SocketAddr,
    /// Show everything, allow no action.
    #[arg(long)]
    pub(crate) read_only: bool,
    /// Ask every request for this token (`Authorization: Bearer <token>`, or as the
    /// password of the browser's login prompt; default: no token).
    #[arg(long, env = "DQ_WEB_TOKEN", hide_env_values = true)]
    pub(crate) token: Option<String>,
    /// A host name the dashboard answers to besides localhost and IP addresses (its name
    /// in the browser's address bar, e.g. behind a proxy); repeat it or separate names with
    /// commas. Other names get 421, against DNS rebinding.
    #[arg(long = "allowed-host", value_name = "HOST", value_delimiter = ',')]
    pub(crate) allowed_hosts: Vec<String>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum ScheduleCommand {
    /// Every schedule: how it repeats, its topic, next and last tick.
    List,
    /// Stop a schedule from ticking, in every process, until it is resumed.
    Pause {
        /// The schedule's id.
        id: String,
    },
    /// Let a paused schedule tick again from its next tick (missed ones are not made up).
    Resume {
        /// The schedule's id.
        id: String,
    },
    /// Delete a schedule (the jobs it made stay).
    Remove {
        /// The schedule's id.
        id: String,
    },
    /// Create one job of the schedule now, outside its ticks.
    Run {
        /// The schedule's id.
        id: String,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum DeadCommand {
    /// A page of a topic's dead letters, newest first, with their errors.
    List {
        /// The topic whose dead letters to list.
        topic: String,
        /// Most dead letters on the page (at most 1000).
        #[arg(long, default_value_t = 20)]
        limit: usize,
        /// The `next` cursor printed with the previous page (`--offset` is its old name;
        /// default: the first page).
        #[arg(long, alias = "offset", default_value_t = Cursor::START)]
        cursor: Cursor,
    },
    /// Run dead letters again with fresh attempts: some ids, a whole topic, or every topic.
    Retry {
        /// The topic of the dead letters (not with --all-topics).
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
        /// The topic whose dead letters to delete.
        topic: String,
        /// Delete those that died longer ago than this: 30s, 10m, 2h, 7d.
        #[arg(long, value_parser = duration)]
        older_than: Duration,
    },
}

/// `--state`: the states `JobState` reads, listed in `--help` and completions.
fn job_state() -> impl clap::builder::TypedValueParser<Value = JobState> {
    clap::builder::PossibleValuesParser::new(["delayed", "ready", "running", "dead", "done"])
        .try_map(|s| s.parse::<JobState>())
}

fn cursor(text: &str) -> Result<EventCursor, String> {
    text.parse().map_err(|e: dq::Error| e.to_string())
}

fn duration(text: &str) -> Result<Duration, String> {
    dq::config::parse_duration(text)
}
