//! The one error type of dq, returned by every fallible call.

use std::time::Duration;

/// Everything that can go wrong when pushing, inspecting or running jobs.
///
/// Each variant names what went wrong and with which value, so that a log line alone
/// tells the person on call what to fix.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A topic name that would break the key layout or is not allowed.
    #[error("invalid topic {topic:?}: {reason}")]
    InvalidTopic {
        /// The rejected name.
        topic: String,
        /// Why it was rejected.
        reason: &'static str,
    },
    /// A job id that would break the key layout or is not allowed.
    #[error("invalid job id {id:?}: {reason}")]
    InvalidJobId {
        /// The rejected id.
        id: String,
        /// Why it was rejected.
        reason: &'static str,
    },
    /// A payload larger than the configured limit (`Config::max_payload_bytes`).
    #[error("payload of {size} bytes for topic {topic:?} exceeds the limit of {limit} bytes (raise Config::max_payload_bytes or send a reference instead)")]
    PayloadTooLarge {
        /// The job's topic.
        topic: String,
        /// The encoded payload size.
        size: usize,
        /// The configured limit.
        limit: usize,
    },
    /// The message could not be encoded as JSON.
    #[error("cannot serialize the payload for topic {topic:?}: {source}")]
    Serialize {
        /// The job's topic.
        topic: String,
        /// What serde said.
        #[source]
        source: serde_json::Error,
    },
    /// A configuration value that cannot be used.
    #[error("invalid configuration {key}={value:?}: {reason}")]
    Config {
        /// The setting (an environment variable or builder field).
        key: &'static str,
        /// The rejected value.
        value: String,
        /// Why it was rejected.
        reason: String,
    },
    /// A push whose options mean nothing or cannot be kept: a debounce without an id or of no
    /// time, a uniqueness window of no time or over [`MAX_DELAY`](crate::MAX_DELAY), more
    /// retries than [`MAX_RETRIES`](crate::MAX_RETRIES). Nothing was stored.
    #[error("invalid push to topic {topic:?}: {reason}")]
    InvalidPush {
        /// The job's topic.
        topic: String,
        /// What is wrong, quoting the value and the limit.
        reason: String,
    },
    /// A delay or due time that cannot be represented (before 1970 or centuries ahead).
    #[error("invalid schedule for job {topic}:{id}: {reason}")]
    InvalidSchedule {
        /// The job's topic.
        topic: String,
        /// The job's id.
        id: String,
        /// Why the time was rejected.
        reason: &'static str,
    },
    /// A periodic schedule that cannot be: a cron expression or time zone that does not parse,
    /// an interval under a second.
    #[error("invalid schedule: {reason}")]
    InvalidPeriodic {
        /// What is wrong, quoting the value.
        reason: String,
    },
    /// Data found in Redis that this version of dq cannot read.
    #[error("malformed data in Redis at {location}: {reason}")]
    Malformed {
        /// The key and field where it was found.
        location: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Redis answered with an error or could not be reached. The message says which
    /// ([`ErrorKind`]: unreachable, full, denied by its ACL, a replica, a cluster node, a script
    /// error) and what to do about it.
    #[error("{}", redis_message(.op, .source))]
    Redis {
        /// The store operation that failed.
        op: &'static str,
        /// The client's error.
        #[source]
        source: redis::RedisError,
    },
    /// A push reached the master, but fewer replicas than `wait_replicas` confirmed it in time.
    #[error("the push is on the Redis master but only {acked} of {wanted} replicas confirmed it within {timeout:?}: a failover now could lose it; pushing again with the same id is safe (check the replicas' link to the master)")]
    NotReplicated {
        /// Replicas asked for.
        wanted: u32,
        /// Replicas that confirmed.
        acked: u32,
        /// How long Redis waited.
        timeout: Duration,
    },
    /// Two listeners were registered for one topic.
    #[error("two listeners for topic {topic:?}: {first} and {second}; a topic has exactly one listener (remove one, or give it another topic)")]
    DuplicateListener {
        /// The topic.
        topic: String,
        /// Where the first listener was defined.
        first: String,
        /// Where the second listener was defined.
        second: String,
    },
    /// A listener whose settings cannot work.
    #[error("invalid listener {name} for topic {topic:?}: {reason}")]
    InvalidListener {
        /// The topic.
        topic: String,
        /// The handler's name and location.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// A push that was sent in one batch with others, which failed as a whole.
    #[error("{0}")]
    Batch(std::sync::Arc<Error>),
    /// The operation did not finish in time.
    #[error("{op} timed out after {after:?}")]
    Timeout {
        /// The operation.
        op: &'static str,
        /// How long it was given.
        after: Duration,
    },
    /// A part of dq failed in a way it should not (a task panicked): a bug to report.
    #[error("{what} failed: {reason} (a bug in dq or in a hook; please report it with the log)")]
    Internal {
        /// The part that failed.
        what: &'static str,
        /// What happened.
        reason: String,
    },
}

/// What kind of failure an [`Error`] is: what a caller decides by, without reading messages.
///
/// OPERATIONS.md ("Redis errors") has a table of what each Redis failure looks like in the log,
/// what it means and what to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A topic, id, payload, schedule, push option or listener that cannot be used: fix the
    /// caller.
    InvalidInput,
    /// A configuration value that cannot be used.
    Config,
    /// Redis could not be reached or asked to be retried later (connection, timeout, `LOADING`
    /// after a restart, `BUSY` with a slow script, `TRYAGAIN`, `MASTERDOWN` or `CLUSTERDOWN`
    /// during a failover): worth retrying with backoff.
    Unavailable,
    /// Redis is out of memory (`OOM` under `noeviction`): nothing was written. Free memory or
    /// raise `maxmemory`.
    Full,
    /// Redis' ACL does not let dq's user run a command or touch a key (`NOPERM`, or a script's
    /// command denied), or the user and password were not accepted (`WRONGPASS`, `NOAUTH`).
    /// Grant what [`ACL_RULES`](crate::store::ACL_RULES) lists, or fix the credentials in
    /// `DQ_REDIS_URL`.
    Denied,
    /// The Redis answered `READONLY`: it is a replica (`DQ_REDIS_URL` names a replica, or a
    /// failover demoted the master). Nothing was written; the connection is replaced and
    /// retrying with backoff goes through once the URL leads to a master again, so
    /// [`Error::is_connection`] is true for it.
    ReadOnly,
    /// The Redis answered `MOVED` or `ASK`: it is a node of a Redis Cluster reached as a single
    /// Redis (`DQ_REDIS_URL`). Set `DQ_REDIS_CLUSTER` to its nodes instead; retrying does not
    /// help.
    Moved,
    /// A dq script failed in Redis (a Lua error, or a Redis that does not run scripts): a bug
    /// to report, or a Redis that refuses `EVALSHA`.
    Script,
    /// The push is on the master but too few replicas confirmed it.
    NotReplicated,
    /// Data found in Redis (or a reply) that dq cannot read.
    Malformed,
    /// A bug: a task of dq (or a hook) panicked.
    Internal,
    /// Any other error Redis returned.
    Other,
}

/// `Result` with dq's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn redis(op: &'static str) -> impl FnOnce(redis::RedisError) -> Error {
        move |source| Error::Redis { op, source }
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::InvalidTopic { .. }
            | Error::InvalidJobId { .. }
            | Error::PayloadTooLarge { .. }
            | Error::Serialize { .. }
            | Error::InvalidPush { .. }
            | Error::InvalidSchedule { .. }
            | Error::InvalidPeriodic { .. }
            | Error::DuplicateListener { .. }
            | Error::InvalidListener { .. } => ErrorKind::InvalidInput,
            Error::Config { .. } => ErrorKind::Config,
            Error::Malformed { .. } => ErrorKind::Malformed,
            Error::NotReplicated { .. } => ErrorKind::NotReplicated,
            Error::Internal { .. } => ErrorKind::Internal,
            Error::Batch(inner) => inner.kind(),
            Error::Timeout { .. } => ErrorKind::Unavailable,
            Error::Redis { source, .. } => match Failure::of(source) {
                Failure::Connection | Failure::Later => ErrorKind::Unavailable,
                Failure::Full => ErrorKind::Full,
                Failure::Denied | Failure::Credentials => ErrorKind::Denied,
                Failure::ReadOnly => ErrorKind::ReadOnly,
                Failure::Moved => ErrorKind::Moved,
                Failure::Script => ErrorKind::Script,
                Failure::Other => ErrorKind::Other,
            },
        }
    }

    /// True when the error came from the connection to Redis or from a Redis that asked to
    /// be retried later (`LOADING` after a restart, `BUSY` while a slow script runs,
    /// `TRYAGAIN`, `MASTERDOWN`, `CLUSTERDOWN` during a failover) or that is a replica now
    /// (`READONLY`: a failover demoted it; dq replaces the connection, and once the address
    /// leads to the new master the retry goes through): worth retrying with backoff, unlike an
    /// error of the input or data, a full Redis, a denied command or a cluster node reached as
    /// a single Redis.
    pub fn is_connection(&self) -> bool {
        match self {
            Error::Redis { source, .. } => matches!(
                Failure::of(source),
                Failure::Connection | Failure::Later | Failure::ReadOnly
            ),
            Error::Timeout { .. } => true,
            Error::Batch(inner) => inner.is_connection(),
            _ => false,
        }
    }
}

/// What a Redis error is, read from its reply code (or that of the first failed command of a
/// pipeline) and its text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Failure {
    /// No connection, or no answer in time.
    Connection,
    /// Redis asked to be retried later: loading, busy, a failover or slot move under way.
    Later,
    /// `OOM`.
    Full,
    /// The ACL denies a command, key or channel (`NOPERM`, or a script's command).
    Denied,
    /// User and password not accepted (`WRONGPASS`, `NOAUTH`).
    Credentials,
    /// `READONLY`: a replica.
    ReadOnly,
    /// `MOVED`/`ASK` on a connection to a single Redis.
    Moved,
    /// A script failed, or scripts cannot run.
    Script,
    /// Anything else.
    Other,
}

impl Failure {
    fn of(source: &redis::RedisError) -> Failure {
        if source.is_io_error()
            || source.is_connection_dropped()
            || source.is_connection_refusal()
            || source.is_timeout()
            // The cluster client lost the connection to the node of a slot.
            || source.kind() == redis::ErrorKind::ClusterConnectionNotFound
        {
            return Failure::Connection;
        }
        if source.kind() == redis::ErrorKind::AuthenticationFailed {
            return Failure::Credentials;
        }
        let (code, detail) = reply_of(source);
        let lower = detail.to_ascii_lowercase();
        match code.as_deref() {
            Some("OOM") => return Failure::Full,
            Some("NOPERM") => return Failure::Denied,
            Some("WRONGPASS" | "NOAUTH") => return Failure::Credentials,
            Some("READONLY") => return Failure::ReadOnly,
            Some("MOVED" | "ASK") => return Failure::Moved,
            Some("LOADING" | "BUSY" | "TRYAGAIN" | "MASTERDOWN" | "CLUSTERDOWN") => {
                return Failure::Later
            }
            Some("NOSCRIPT") => return Failure::Script,
            _ => {}
        }
        if matches!(source.retry_method(), redis::RetryMethod::WaitAndRetry)
            // A script that met a key its node no longer holds, while a cluster slot migrates:
            // it was aborted before its first write (every dq script touches its keys first),
            // and goes through once the slot has moved.
            || lower.contains("non local key")
        {
            return Failure::Later;
        }
        // Redis 7.0 reports a command a script may not run as `ERR The user executing the
        // script can't run this command ...`; later versions say NOPERM.
        if lower.contains("user executing the script can't") {
            return Failure::Denied;
        }
        if lower.contains("script:")
            || lower.contains("user_script")
            || lower.contains("error running script")
            || (lower.contains("unknown command") && lower.contains("eval"))
        {
            return Failure::Script;
        }
        Failure::Other
    }
}

/// The reply code and detail of a Redis error: its own, or the first failed command's of a
/// pipeline or transaction (whose `code()` is `None` for codes redis-rs does not name, such as
/// `OOM`); without a reply, no code and the error's text.
fn reply_of(source: &redis::RedisError) -> (Option<String>, String) {
    if let Some(errors) = source.clone().into_server_errors() {
        if let Some((_, first)) = errors.first() {
            return (
                Some(first.code().to_owned()),
                first.details().unwrap_or_default().to_owned(),
            );
        }
    }
    (
        source.code().map(str::to_owned),
        source
            .detail()
            .map_or_else(|| source.to_string(), str::to_owned),
    )
}

/// The command named by a `NOPERM` reply: `'hset'` in "this user has no permissions to run
/// the 'hset' command".
fn denied_command(detail: &str) -> Option<&str> {
    let start = detail.find("run the '")? + "run the '".len();
    let rest = &detail[start..];
    let end = rest.find('\'')?;
    Some(&rest[..end]).filter(|c| !c.is_empty())
}

/// Where the ACL rules dq needs are written down.
const GRANT: &str = "dq::store::ACL_RULES lists every command, key and channel dq needs (OPERATIONS.md, \"Least rights\"): ACL SETUSER <user> with those rules";

/// The message of [`Error::Redis`]: what failed, what Redis said, what it means and what to do.
fn redis_message(op: &str, source: &redis::RedisError) -> String {
    let (code, detail) = reply_of(source);
    let lower = detail.to_ascii_lowercase();
    let advice = match Failure::of(source) {
        Failure::Connection => {
            "is Redis reachable at the configured DQ_REDIS_URL (or DQ_REDIS_CLUSTER)? worth retrying with backoff".to_owned()
        }
        Failure::Later => match code.as_deref() {
            Some("LOADING") => "Redis is loading its data after a restart and answers once it has; worth retrying with backoff".to_owned(),
            Some("BUSY") => "Redis is busy running a slow script (SCRIPT KILL ends it if it wrote nothing); worth retrying with backoff".to_owned(),
            _ => "the Redis Cluster is failing over or moving slots; worth retrying with backoff until it settles".to_owned(),
        },
        Failure::Full => "Redis is full (maxmemory, under noeviction): nothing was written; free memory (dq stats shows where jobs pile up; purge dead letters) or raise maxmemory".to_owned(),
        Failure::Denied => {
            let what = match denied_command(&detail) {
                Some(command) => format!("Redis' ACL does not let dq's user run the '{command}' command: grant it (+{command})"),
                None if lower.contains("keys") => "Redis' ACL does not let dq's user touch dq's keys: grant ~dq:*".to_owned(),
                None if lower.contains("channel") => "Redis' ACL does not let dq's user use dq's channels: grant &dq:*".to_owned(),
                None => "Redis' ACL does not let dq's user run a command dq needs (ACL LOG on the Redis names it)".to_owned(),
            };
            format!("{what}; {GRANT}")
        }
        Failure::Credentials => "Redis did not accept the user and password: check them in DQ_REDIS_URL (redis://user:password@host:6379/) against the Redis' ACL".to_owned(),
        Failure::ReadOnly => "this Redis is a read-only replica (DQ_REDIS_URL names a replica, or a failover demoted this master): nothing was written; dq opens a new connection, so retrying with backoff goes through once DQ_REDIS_URL leads to the master (point it there, or at an address your failover moves to the new master)".to_owned(),
        Failure::Moved => "this Redis is a node of a Redis Cluster, and the key lives on another node: set DQ_REDIS_CLUSTER=redis://host:port,... (any of its nodes) instead of DQ_REDIS_URL; nothing works until then".to_owned(),
        Failure::Script => "a dq script failed in Redis: a bug in dq (please report it with this message) or a Redis that does not run Lua scripts (dq needs EVALSHA and EVAL)".to_owned(),
        Failure::Other => "an error dq does not expect from Redis: see OPERATIONS.md, \"Redis errors\"".to_owned(),
    };
    format!("redis error during {op}: {source} ({advice})")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The error Redis would send as `-<line>\r\n`, as redis-rs reads it.
    fn reply(line: &str) -> redis::RedisError {
        redis::parse_redis_value(format!("-{line}\r\n").as_bytes())
            .expect("a RESP error parses")
            .extract_error()
            .expect_err("an error reply")
    }

    fn during_push(line: &str) -> Error {
        Error::Redis {
            op: "push",
            source: reply(line),
        }
    }

    #[test]
    fn each_redis_failure_has_its_kind_and_says_what_to_do() {
        let cases: &[(&str, ErrorKind, bool, &[&str])] = &[
            (
                "OOM command not allowed when used memory > 'maxmemory'. script: 5c77, on @user_script:1.",
                ErrorKind::Full,
                false,
                &["Redis is full", "nothing was written", "maxmemory"],
            ),
            (
                "NOPERM this user has no permissions to run the 'sadd' command",
                ErrorKind::Denied,
                false,
                &["'sadd' command", "+sadd", "ACL_RULES", "OPERATIONS.md"],
            ),
            (
                "NOPERM this user has no permissions to access one of the keys used as arguments",
                ErrorKind::Denied,
                false,
                &["~dq:*", "ACL_RULES"],
            ),
            (
                "ERR The user executing the script can't run this command or subcommand script: 30ad, on @user_script:1.",
                ErrorKind::Denied,
                false,
                &["ACL LOG", "ACL_RULES"],
            ),
            (
                "WRONGPASS invalid username-password pair or user is disabled.",
                ErrorKind::Denied,
                false,
                &["user and password", "DQ_REDIS_URL"],
            ),
            (
                "NOAUTH Authentication required.",
                ErrorKind::Denied,
                false,
                &["user and password"],
            ),
            (
                "READONLY You can't write against a read only replica. script: b0e7, on @user_script:1.",
                ErrorKind::ReadOnly,
                true,
                &["replica", "DQ_REDIS_URL", "master"],
            ),
            (
                "MOVED 7629 127.0.0.1:7001",
                ErrorKind::Moved,
                false,
                &["Redis Cluster", "DQ_REDIS_CLUSTER"],
            ),
            (
                "ASK 7629 127.0.0.1:7001",
                ErrorKind::Moved,
                false,
                &["DQ_REDIS_CLUSTER"],
            ),
            (
                "ERR user_script:1: Script attempted to access nonexistent global variable 'x' script: c797, on @user_script:1.",
                ErrorKind::Script,
                false,
                &["dq script failed", "report"],
            ),
            (
                "ERR unknown command 'EVALSHA', with args beginning with: ",
                ErrorKind::Script,
                false,
                &["Lua scripts"],
            ),
            (
                "LOADING Redis is loading the dataset in memory",
                ErrorKind::Unavailable,
                true,
                &["loading its data", "retrying"],
            ),
            (
                "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.",
                ErrorKind::Unavailable,
                true,
                &["slow script", "retrying"],
            ),
            (
                "CLUSTERDOWN The cluster is down",
                ErrorKind::Unavailable,
                true,
                &["failing over", "retrying"],
            ),
            (
                "ERR Script attempted to access a non local key in a cluster node script: 1f2e, on @user_script:3.",
                ErrorKind::Unavailable,
                true,
                &["retrying"],
            ),
            (
                "WRONGTYPE Operation against a key holding the wrong kind of value",
                ErrorKind::Other,
                false,
                &["does not expect"],
            ),
        ];
        for (line, kind, retry, says) in cases {
            let error = during_push(line);
            let text = error.to_string();
            assert_eq!(error.kind(), *kind, "{line}: {text}");
            assert_eq!(error.is_connection(), *retry, "{line}: {text}");
            assert!(text.starts_with("redis error during push: "), "{text}");
            for said in *says {
                assert!(
                    text.contains(said),
                    "{line}: {text:?} does not say {said:?}"
                );
            }
            assert!(
                !text.contains("is Redis reachable"),
                "only an unreachable Redis is told to be reachable: {text}"
            );
            // The same inside a batch.
            let batched = Error::Batch(std::sync::Arc::new(during_push(line)));
            assert_eq!(batched.kind(), *kind, "{line}");
        }
    }

    #[test]
    fn an_unreachable_redis_is_asked_about_and_nothing_else() {
        let refused = Error::Redis {
            op: "connect",
            source: redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::ConnectionRefused,
                "connection refused",
            )),
        };
        assert_eq!(refused.kind(), ErrorKind::Unavailable);
        assert!(refused.is_connection());
        assert!(
            refused
                .to_string()
                .contains("is Redis reachable at the configured DQ_REDIS_URL"),
            "{refused}"
        );
        let timeout = Error::Timeout {
            op: "push",
            after: Duration::from_secs(1),
        };
        assert_eq!(timeout.kind(), ErrorKind::Unavailable);
    }

    #[test]
    fn the_refused_command_is_read_from_noperm() {
        assert_eq!(
            denied_command("this user has no permissions to run the 'config|get' command"),
            Some("config|get")
        );
        assert_eq!(
            denied_command("User dq has no permissions to run the 'hset' command script: 1, on @user_script:1."),
            Some("hset")
        );
        assert_eq!(
            denied_command(
                "this user has no permissions to access one of the keys used as arguments"
            ),
            None
        );
    }
}
