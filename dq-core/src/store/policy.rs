//! Rules both stores follow, in one place: how many jobs one call handles, when a worker counts
//! as gone, and the message a job gets when its worker stopped renewing its lease. The Lua
//! scripts apply the same rules in Redis (`reclaim.lua` writes the same lease-expiry messages).

use super::MAX_BATCH;

/// A worker not heard from for this long is no longer listed.
pub const WORKER_EXPIRY_MS: u64 = 60_000;

/// A caller's limit for one call, between 1 and [`MAX_BATCH`].
pub fn batch_limit(limit: usize) -> usize {
    limit.clamp(1, MAX_BATCH)
}

/// Most due jobs one call of `promote` moves: more than a batch, since moving is cheap.
pub const PROMOTE_BATCH: usize = 10_000;

/// A caller's limit for one `promote`, between 1 and [`PROMOTE_BATCH`].
pub fn promote_limit(limit: usize) -> usize {
    limit.clamp(1, PROMOTE_BATCH)
}

/// The error recorded on a job whose lease expired on run `attempt` (of `max` when that was
/// its last one).
pub fn lease_expired(attempt: u32, last_of: Option<u32>) -> String {
    match last_of {
        Some(max) => format!(
            "lease expired on attempt {attempt} of {max} (the worker died or stopped renewing its lease)"
        ),
        None => format!(
            "lease expired on attempt {attempt} (the worker died or stopped renewing its lease)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_kept_between_one_and_a_batch() {
        assert_eq!(batch_limit(0), 1);
        assert_eq!(batch_limit(10), 10);
        assert_eq!(batch_limit(usize::MAX), MAX_BATCH);
    }

    #[test]
    fn the_lease_expiry_message_names_the_attempt_and_the_cause() {
        // dq-redis' reclaim.lua writes the same words (a test there checks it).
        assert_eq!(
            lease_expired(2, Some(3)),
            "lease expired on attempt 2 of 3 (the worker died or stopped renewing its lease)"
        );
        assert_eq!(
            lease_expired(1, None),
            "lease expired on attempt 1 (the worker died or stopped renewing its lease)"
        );
    }
}
