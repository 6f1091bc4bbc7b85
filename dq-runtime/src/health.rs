//! Backoff and logging for a loop that talks to the store: the first failure is a warning
//! that says what failed and that dq keeps retrying; recovery is logged once.

use std::time::Duration;

use dq_core::{Error, ErrorKind};

#[derive(Debug)]
pub(crate) struct Health {
    what: String,
    failures: u32,
    /// The kind of failure last said in the log, and when: a loop whose calls fail and succeed
    /// by turns the same way (a replica answers the calls that write nothing) says it again
    /// after `SAY_AGAIN`, not at every first failure.
    said: Option<(ErrorKind, std::time::Instant)>,
    /// Whether this run of failures was said (so that its end is said too).
    streak_said: bool,
}

/// How long a failure of the same kind, once said, goes to the debug log only.
const SAY_AGAIN: Duration = Duration::from_secs(60);

impl Health {
    pub(crate) fn new(what: impl Into<String>) -> Health {
        Health {
            what: what.into(),
            failures: 0,
            said: None,
            streak_said: false,
        }
    }

    /// Records a failure and returns how long to wait before trying again (100 ms doubling to
    /// 5 s). The first failure, and every 20th, is logged with what it means and what to do;
    /// those that retrying cannot end (a full Redis, a denied command, a cluster node reached
    /// as a single Redis, a script error) as errors.
    pub(crate) fn failed(&mut self, error: &Error) -> Duration {
        self.failures += 1;
        let delay = Duration::from_millis(100)
            .saturating_mul(2u32.saturating_pow(self.failures.min(16) - 1))
            .min(Duration::from_secs(5));
        let kind = error.kind();
        let said_lately = self
            .said
            .is_some_and(|(k, at)| k == kind && at.elapsed() < SAY_AGAIN);
        if (self.failures == 1 && !said_lately) || self.failures.is_multiple_of(20) {
            self.said = Some((kind, std::time::Instant::now()));
            self.streak_said = true;
            let (needs_someone, said) = advice(kind);
            if needs_someone {
                tracing::error!(
                    task = %self.what, failures = self.failures, retry_in = ?delay, error = %error,
                    "store call failed: {said}"
                );
            } else {
                tracing::warn!(
                    task = %self.what, failures = self.failures, retry_in = ?delay, error = %error,
                    "store call failed: {said}"
                );
            }
        } else {
            tracing::debug!(task = %self.what, failures = self.failures, error = %error, "store call failed again");
        }
        delay
    }

    pub(crate) fn ok(&mut self) {
        if self.failures > 0 {
            if self.streak_said {
                tracing::info!(task = %self.what, failures = self.failures, "store reachable again; resuming");
            } else {
                tracing::debug!(task = %self.what, failures = self.failures, "store call works again");
            }
            self.failures = 0;
            self.streak_said = false;
        }
    }
}

/// What a failure of a store call means for the person reading the log, and whether it needs
/// someone (retrying alone will not end it). Each says dq keeps retrying: the loop goes on.
fn advice(kind: ErrorKind) -> (bool, &'static str) {
    match kind {
        ErrorKind::Unavailable => (false, "dq keeps retrying with backoff (jobs stay safe in Redis; check that Redis is up and reachable)"),
        ErrorKind::ReadOnly => (false, "Redis answered as a read-only replica (a failover demoted it, or the URL names a replica); dq keeps retrying with backoff, each time on a new connection (check that DQ_REDIS_URL leads to the master)"),
        ErrorKind::Full => (true, "Redis is full (maxmemory, under noeviction) and wrote nothing; dq keeps retrying with backoff (free memory or raise maxmemory; jobs already stored stay safe)"),
        ErrorKind::Denied => (true, "Redis' ACL denies dq's user a command or key, or did not accept its password; dq keeps retrying with backoff, in vain until the user gets the rules of dq::store::ACL_RULES (OPERATIONS.md) or the right password"),
        ErrorKind::Moved => (true, "DQ_REDIS_URL names a node of a Redis Cluster; dq keeps retrying with backoff, in vain until DQ_REDIS_CLUSTER is set to its nodes instead"),
        ErrorKind::Script => (true, "a dq script failed in Redis; dq keeps retrying with backoff (a bug in dq: please report it with this log, or a Redis that does not run Lua scripts)"),
        ErrorKind::Malformed => (true, "Redis holds data this version of dq cannot read; dq keeps retrying with backoff (see the error for the key; a newer dq may have written it)"),
        _ => (false, "dq keeps retrying with backoff (jobs stay safe in Redis; see the error)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_that_comes_back_between_successes_is_said_once_a_minute() {
        let mut health = Health::new("consumer");
        let readonly = Error::Timeout {
            op: "fetch",
            after: Duration::from_secs(1),
        };
        health.failed(&readonly);
        assert!(health.streak_said, "the first failure is said");
        for _ in 0..10 {
            health.ok();
            health.failed(&readonly);
            assert!(!health.streak_said, "said again within a minute");
        }
        let a_minute_ago = std::time::Instant::now().checked_sub(SAY_AGAIN).unwrap();
        health.said = Some((readonly.kind(), a_minute_ago));
        health.ok();
        health.failed(&readonly);
        assert!(health.streak_said, "said again after a minute");
    }

    #[test]
    fn only_an_unreachable_redis_is_told_to_be_checked_for_reachability() {
        for kind in [
            ErrorKind::ReadOnly,
            ErrorKind::Full,
            ErrorKind::Denied,
            ErrorKind::Moved,
            ErrorKind::Script,
        ] {
            let (_, said) = advice(kind);
            assert!(!said.contains("reachable"), "{kind:?}: {said}");
            assert!(said.contains("dq keeps retrying"), "{kind:?}: {said}");
        }
        assert!(advice(ErrorKind::Unavailable)
            .1
            .contains("up and reachable"));
        assert!(advice(ErrorKind::Full).1.contains("Redis is full"));
        assert!(advice(ErrorKind::Denied).1.contains("ACL_RULES"));
        assert!(advice(ErrorKind::ReadOnly).1.contains("replica"));
        assert!(advice(ErrorKind::Moved).1.contains("DQ_REDIS_CLUSTER"));
    }
}
