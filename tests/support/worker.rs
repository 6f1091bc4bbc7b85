//! A worker in another process: this test binary run again with only its entry-point test,
//! which plays the role named in `DQ_TEST_ROLE` against the Redis (or cluster) the parent test
//! started, and says on its stdout when it is ready. The parent kills it (by its pid, SIGKILL)
//! when it drops the handle.
//!
//! Should the parent die without killing it, the worker sees its stdin close and exits: no
//! worker outlives its test run.
//!
//! In a test file:
//!
//! ```ignore
//! #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
//! async fn worker_process_entry_point() {
//!     let Some((role, target)) = support::worker::role() else {
//!         return; // a normal test run: nothing to do
//!     };
//!     let rt = /* start a runtime on target.config(..) for `role` */;
//!     support::worker::serve(rt).await;
//! }
//!
//! let worker = WorkerProcess::start("worker_process_entry_point", "invoicing", &target);
//! ```

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::{RedisCluster, RedisServer};

/// The variable naming the role a child plays; unset in a normal test run.
const ROLE: &str = "DQ_TEST_ROLE";
/// The Redis URL of the one server, or the cluster's seed URLs separated by spaces.
const REDIS: &str = "DQ_TEST_REDIS";
/// Set (to `1`) when [`REDIS`] names a cluster's seeds.
const CLUSTER: &str = "DQ_TEST_CLUSTER";

/// What a worker prints once its runtime started (its listeners and retentions declared).
const STARTED: &str = "dq test worker started";

/// How long a worker may take to start on a loaded machine (a new process, its connections,
/// its declarations).
pub const START_LIMIT: Duration = Duration::from_secs(30);

/// Where the jobs are: one redis-server, or a cluster through its seeds.
#[derive(Clone, Debug)]
pub enum Target {
    /// One server, by URL.
    Server(String),
    /// A Redis Cluster, by its nodes' URLs.
    Cluster(Vec<String>),
}

impl Target {
    /// The one server `redis`.
    pub fn server(redis: &RedisServer) -> Target {
        Target::Server(redis.url())
    }

    /// The cluster `cluster` (its default 16 shards spread over the masters).
    pub fn cluster(cluster: &RedisCluster) -> Target {
        Target::Cluster(cluster.urls())
    }

    /// A config for this target in `namespace`: parent and worker build theirs alike, so
    /// that they agree on the keys and the shards.
    pub fn config(&self, namespace: &str) -> dq::config::ConfigBuilder {
        let builder = dq::Config::builder().namespace(namespace);
        match self {
            Target::Server(url) => builder.redis_url(url.clone()),
            Target::Cluster(urls) => builder.redis_cluster(urls.clone()),
        }
    }

    /// The target a parent named in this process's environment.
    fn from_env() -> Target {
        let redis = std::env::var(REDIS).expect("DQ_TEST_REDIS is set for a worker");
        if std::env::var(CLUSTER).is_ok() {
            Target::Cluster(redis.split(' ').map(str::to_owned).collect())
        } else {
            Target::Server(redis)
        }
    }

    /// The environment that names this target to a worker.
    fn env(&self) -> Vec<(&'static str, String)> {
        match self {
            Target::Server(url) => vec![(REDIS, url.clone())],
            Target::Cluster(urls) => vec![(REDIS, urls.join(" ")), (CLUSTER, "1".to_owned())],
        }
    }
}

/// The role this process was started to play and its target; `None` in a normal test run
/// (the entry-point test then returns at once).
pub fn role() -> Option<(String, Target)> {
    let role = std::env::var(ROLE).ok()?;
    Some((role, Target::from_env()))
}

/// In a child that is not a runtime: tells the parent it started, and exits when the parent
/// goes (its end of our stdin closes).
pub fn say_started() {
    std::thread::spawn(|| {
        let mut rest = Vec::new();
        let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut rest);
        std::process::exit(0);
    });
    println!("{STARTED}");
}

/// In the worker: tells the parent that `rt` started, then runs it until the parent kills
/// this process, or goes itself (its end of our stdin closes).
pub async fn serve(rt: dq::Runtime) {
    let (gone, parent_gone) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        let mut rest = Vec::new();
        let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut rest);
        let _ = gone.send(());
    });
    println!("{STARTED}");
    tokio::select! {
        ended = rt.wait() => {
            ended.expect("the worker's runtime ends cleanly");
        }
        _ = parent_gone => {}
    }
}

/// A worker process of ours, killed (SIGKILL, by its pid) and reaped when dropped.
#[derive(Debug)]
pub struct WorkerProcess {
    child: Child,
    /// The lines it printed after it started.
    lines: mpsc::Receiver<String>,
}

impl WorkerProcess {
    /// Runs the test `entry` of this test binary again, in `role` against `target`, and waits
    /// (blocking the thread, at most [`START_LIMIT`]) until it says it started. Its stderr
    /// goes to the test's, so that a panic in it shows.
    ///
    /// # Panics
    /// When it cannot be started, exits, or says nothing within the limit.
    pub fn start(entry: &str, role: &str, target: &Target) -> WorkerProcess {
        WorkerProcess::start_with(entry, role, target, &[])
    }

    /// [`WorkerProcess::start`], with more variables in its environment.
    ///
    /// # Panics
    /// As [`WorkerProcess::start`].
    pub fn start_with(
        entry: &str,
        role: &str,
        target: &Target,
        env: &[(&str, String)],
    ) -> WorkerProcess {
        let mut cmd = dq_testkit::process::this_test(entry).expect("this test binary");
        // Its stdin stays open while the handle lives: it closes if this process dies.
        cmd.env(ROLE, role)
            .envs(target.env())
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        let mut child = cmd.spawn().expect("start the worker process");
        let stdout = child.stdout.take().expect("the worker's stdout is piped");
        // Read on a thread of its own, to the end, so that the worker never blocks on a full
        // pipe and the wait for its word can be bounded.
        let (lines, heard) = mpsc::channel();
        let mut worker = WorkerProcess {
            child,
            lines: heard,
        };
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let _ = lines.send(line);
            }
        });
        let deadline = Instant::now() + START_LIMIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match worker.lines.recv_timeout(left) {
                Ok(line) if line.contains(STARTED) => return worker,
                Ok(_) => continue,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    panic!("worker {role} did not start within {START_LIMIT:?}")
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let status = worker.child.wait();
                    panic!("worker {role} exited before it started: {status:?}")
                }
            }
        }
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The next line it printed after it started, waiting at most `limit` (`None`: none came).
    pub fn next_line(&self, limit: Duration) -> Option<String> {
        self.lines.recv_timeout(limit).ok()
    }
}

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        // Our own child, by its pid: never a pattern match on process names.
        dq_testkit::process::kill(&mut self.child);
    }
}
