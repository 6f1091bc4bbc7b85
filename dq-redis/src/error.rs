//! Reading a Redis failure: what kind it is ([`ErrorKind`]) and the message that says what to
//! do, from its reply code (or that of the first failed command of a pipeline) and its text.

use dq_core::{Error, ErrorKind};

/// Turns a redis-rs error met during `op` into dq's [`Error::Redis`].
pub(crate) fn redis(op: &'static str) -> impl FnOnce(redis::RedisError) -> Error {
    move |source| from_redis(op, source)
}

/// dq's [`Error::Redis`] for `source`, met during `op`: its kind and its message read now.
pub(crate) fn from_redis(op: &'static str, source: redis::RedisError) -> Error {
    Error::Redis {
        op,
        kind: Failure::of(&source).kind(),
        message: redis_message(op, &source),
        source: Box::new(source),
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
    /// The kind a caller decides by.
    fn kind(self) -> ErrorKind {
        match self {
            Failure::Connection | Failure::Later => ErrorKind::Unavailable,
            Failure::Full => ErrorKind::Full,
            Failure::Denied | Failure::Credentials => ErrorKind::Denied,
            Failure::ReadOnly => ErrorKind::ReadOnly,
            Failure::Moved => ErrorKind::Moved,
            Failure::Script => ErrorKind::Script,
            Failure::Other => ErrorKind::Other,
        }
    }

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
    use std::time::Duration;

    /// The error Redis would send as `-<line>\r\n`, as redis-rs reads it.
    fn reply(line: &str) -> redis::RedisError {
        redis::parse_redis_value(format!("-{line}\r\n").as_bytes())
            .expect("a RESP error parses")
            .extract_error()
            .expect_err("an error reply")
    }

    fn during_push(line: &str) -> Error {
        from_redis("push", reply(line))
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
        let refused = from_redis(
            "connect",
            redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::ConnectionRefused,
                "connection refused",
            )),
        );
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
