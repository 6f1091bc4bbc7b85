//! Redis' clock as this process last read it: what an ack stamps its kept records with, so that
//! ack.lua stores each record as the caller wrote it (no text built per job in Lua; on one Redis
//! the saving was within the noise of the ack measured alone, BENCHMARKS.md, "What keeping
//! results costs the drain").
//!
//! Every fetch and promotion reply carries Redis' `TIME`; the difference from this machine's
//! clock is kept, and a stamp is this machine's clock plus that difference: Redis' time within
//! about a round trip. Before the first reply the difference is 0 (this machine's clock).

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Redis' time minus this machine's, in microseconds, as last seen.
#[derive(Debug, Default)]
pub(crate) struct RedisClock {
    ahead_us: AtomicI64,
}

impl RedisClock {
    /// Records Redis' time from a reply, `redis_us` microseconds since the epoch.
    pub(crate) fn saw(&self, redis_us: u64) {
        let ahead = i64::try_from(redis_us).unwrap_or(i64::MAX) - local_us();
        self.ahead_us.store(ahead, Ordering::Relaxed);
    }

    /// Redis' time now, as far as this process knows, in microseconds since the epoch.
    pub(crate) fn now_us(&self) -> u64 {
        let now = local_us().saturating_add(self.ahead_us.load(Ordering::Relaxed));
        u64::try_from(now).unwrap_or(0)
    }
}

fn local_us() -> i64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since.as_micros()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamp_follows_the_redis_clock_it_last_saw() {
        let clock = RedisClock::default();
        let local = u64::try_from(local_us()).unwrap();
        // A Redis an hour ahead of this machine.
        clock.saw(local + 3_600_000_000);
        let stamp = clock.now_us();
        assert!(
            stamp >= local + 3_600_000_000,
            "{stamp} is behind Redis' clock"
        );
        assert!(
            stamp < local + 3_601_000_000,
            "{stamp} is a second or more ahead"
        );
    }
}
