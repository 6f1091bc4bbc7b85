//! Backoff and logging for a loop that talks to the store: the first failure is a warning
//! that says what failed and that dq keeps retrying; recovery is logged once.

use std::time::Duration;

use dq_core::Error;

#[derive(Debug)]
pub(crate) struct Health {
    what: String,
    failures: u32,
}

impl Health {
    pub(crate) fn new(what: impl Into<String>) -> Health {
        Health {
            what: what.into(),
            failures: 0,
        }
    }

    /// Records a failure and returns how long to wait before trying again (100 ms doubling to
    /// 5 s).
    pub(crate) fn failed(&mut self, error: &Error) -> Duration {
        self.failures += 1;
        let delay = Duration::from_millis(100)
            .saturating_mul(2u32.saturating_pow(self.failures.min(16) - 1))
            .min(Duration::from_secs(5));
        if self.failures == 1 || self.failures.is_multiple_of(20) {
            tracing::warn!(
                task = %self.what, failures = self.failures, retry_in = ?delay, error = %error,
                "store call failed; dq keeps retrying with backoff (jobs stay safe in Redis; check that Redis is up and reachable)"
            );
        } else {
            tracing::debug!(task = %self.what, failures = self.failures, error = %error, "store call failed again");
        }
        delay
    }

    pub(crate) fn ok(&mut self) {
        if self.failures > 0 {
            tracing::info!(task = %self.what, failures = self.failures, "store reachable again; resuming");
            self.failures = 0;
        }
    }
}
