//! The one error type of dq, returned by every fallible call.

use std::time::Duration;

/// Everything that can go wrong when pushing, inspecting or running jobs.
///
/// Each variant names what went wrong and with which value, so that a log line alone
/// tells the person on call what to fix.
///
/// Its `Debug` is its message too: `fn main() -> dq::Result<()>` prints
/// `Error: invalid listener cancel_order ...: <reason>` on one line, not the variant's fields.
#[derive(thiserror::Error)]
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
    #[error("invalid due time for job {topic}:{id}: {reason}")]
    InvalidSchedule {
        /// The job's topic.
        topic: String,
        /// The job's id.
        id: String,
        /// Why the time was rejected.
        reason: &'static str,
    },
    /// A progress report that cannot be stored: its value does not serialize, or its JSON is
    /// over [`MAX_PROGRESS_BYTES`](crate::MAX_PROGRESS_BYTES). Nothing was written.
    #[error("invalid progress of job {topic}:{id}: {reason}")]
    InvalidProgress {
        /// The job's topic.
        topic: String,
        /// The job's id.
        id: String,
        /// What is wrong, quoting the size and the limit, or what serde said.
        reason: String,
    },
    /// A cursor of a topic's job events that cannot be read, or that belongs to another
    /// number of shards than the namespace's
    /// ([`EventCursor`](crate::events::EventCursor)).
    #[error("invalid event cursor {cursor:?}: {reason}")]
    InvalidCursor {
        /// The cursor as given.
        cursor: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A periodic schedule that cannot be: a cron expression or time zone that does not parse,
    /// an interval under a second.
    #[error("invalid schedule: {reason}")]
    InvalidPeriodic {
        /// What is wrong, quoting the value.
        reason: String,
    },
    /// A rate limit that cannot be: not `<count>/<period>`, a count of 0 or over a billion, a
    /// period under 1 ms or over a day ([`Rate`](crate::Rate)).
    #[error("invalid rate {rate:?}: {reason}")]
    InvalidRate {
        /// The rate as given.
        rate: String,
        /// What is wrong with it.
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
    #[error("{message}")]
    Redis {
        /// The store operation that failed.
        op: &'static str,
        /// What kind of failure it is ([`Error::kind`] answers it).
        kind: ErrorKind,
        /// What failed, what Redis said, what it means and what to do.
        message: String,
        /// The Redis client's error (a `redis::RedisError` of redis-rs).
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
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
    /// A push refused because its topic holds as many jobs as its `max_pending` allows
    /// (delayed, ready and running together): nothing was stored. The workers make room as
    /// they finish jobs; push again later (with backoff), or raise the bound
    /// (`Client::set_max_pending`, the listener's `max_pending`).
    #[error("topic {topic:?} is full: it is at its max_pending of {max_pending} jobs (delayed, ready and running; with several shards, the share of the shard this job's id falls in); nothing was stored. Push again once its workers have caught up, or raise the bound (the listener's max_pending, Client::set_max_pending, dq max-pending)")]
    TopicFull {
        /// The topic.
        topic: String,
        /// Its bound.
        max_pending: u64,
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

impl std::fmt::Debug for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
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
    /// The topic holds as many jobs as its `max_pending` allows ([`Error::TopicFull`]): nothing
    /// was stored. Push again later, with backoff, or raise the bound.
    TopicFull,
    /// Redis' ACL does not let dq's user run a command or touch a key (`NOPERM`, or a script's
    /// command denied), or the user and password were not accepted (`WRONGPASS`, `NOAUTH`).
    /// Grant what `dq::store::ACL_RULES` lists, or fix the credentials in
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
    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::InvalidTopic { .. }
            | Error::InvalidJobId { .. }
            | Error::PayloadTooLarge { .. }
            | Error::Serialize { .. }
            | Error::InvalidPush { .. }
            | Error::InvalidSchedule { .. }
            | Error::InvalidProgress { .. }
            | Error::InvalidCursor { .. }
            | Error::InvalidPeriodic { .. }
            | Error::InvalidRate { .. }
            | Error::DuplicateListener { .. }
            | Error::InvalidListener { .. } => ErrorKind::InvalidInput,
            Error::Config { .. } => ErrorKind::Config,
            Error::Malformed { .. } => ErrorKind::Malformed,
            Error::NotReplicated { .. } => ErrorKind::NotReplicated,
            Error::Internal { .. } => ErrorKind::Internal,
            Error::Batch(inner) => inner.kind(),
            Error::Timeout { .. } => ErrorKind::Unavailable,
            Error::TopicFull { .. } => ErrorKind::TopicFull,
            Error::Redis { kind, .. } => *kind,
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
            Error::Redis { kind, .. } => {
                matches!(kind, ErrorKind::Unavailable | ErrorKind::ReadOnly)
            }
            Error::Timeout { .. } => true,
            Error::Batch(inner) => inner.is_connection(),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_returned_from_main_prints_its_message_not_its_fields() {
        let e = Error::InvalidListener {
            topic: "order-cancel".into(),
            name: "cancel_order (src/main.rs:12)".into(),
            reason: "concurrency must be at least 1".into(),
        };
        assert_eq!(format!("{e:?}"), e.to_string());
        assert_eq!(
            format!("{e:?}"),
            "invalid listener cancel_order (src/main.rs:12) for topic \"order-cancel\": concurrency must be at least 1"
        );
    }
}
