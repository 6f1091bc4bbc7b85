//! Retry delays: exponential with jitter by default, so a failing dependency is not hammered
//! by every job at the same instant.

use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

/// How long to wait before running a failed job again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Backoff {
    /// The same delay after every failure.
    Fixed(Duration),
    /// `base * 2^(attempt - 1)`, capped at `max`.
    Exponential {
        /// The first delay.
        base: Duration,
        /// The longest delay.
        max: Duration,
    },
}

impl Default for Backoff {
    /// Exponential from 1 s, capped at 10 minutes.
    fn default() -> Self {
        Backoff::Exponential {
            base: Duration::from_secs(1),
            max: Duration::from_secs(600),
        }
    }
}

impl Backoff {
    /// Exponential from `base`, capped at 10 minutes.
    pub const fn exponential(base: Duration) -> Backoff {
        Backoff::Exponential {
            base,
            max: Duration::from_secs(600),
        }
    }

    /// The delay after failed attempt number `attempt` (from 1), with +/-20 % jitter.
    pub fn delay(&self, attempt: u32) -> Duration {
        self.delay_at(attempt, unit_random())
    }

    /// [`delay`](Backoff::delay) with the jitter drawn by the caller: `unit` in [0, 1) scales
    /// the plain delay by 0.8 to 1.2 (0.5: the plain delay). Pure, so that what becomes of a
    /// failed job can be decided (and tested) without randomness.
    pub(crate) fn delay_at(&self, attempt: u32, unit: f64) -> Duration {
        let plain = match *self {
            Backoff::Fixed(d) => d,
            Backoff::Exponential { base, max } => {
                let factor = 2u32.saturating_pow(attempt.saturating_sub(1).min(31));
                base.saturating_mul(factor).min(max)
            }
        };
        plain.mul_f64(0.8 + 0.4 * unit)
    }
}

/// A number in [0, 1): std's randomly keyed hasher over a counter, good enough for jitter.
pub(crate) fn unit_random() -> f64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(SEQ.fetch_add(1, Ordering::Relaxed));
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exponential_backoff_doubles_within_jitter_and_caps() {
        let b = Backoff::Exponential {
            base: Duration::from_secs(1),
            max: Duration::from_secs(5),
        };
        for (attempt, plain) in [(1, 1.0), (2, 2.0), (3, 4.0), (4, 5.0), (40, 5.0)] {
            let d = b.delay(attempt).as_secs_f64();
            assert!(
                d >= plain * 0.8 && d <= plain * 1.2,
                "attempt {attempt}: {d}"
            );
        }
    }

    #[test]
    fn the_jitter_scales_the_plain_delay_by_four_fifths_to_six_fifths() {
        let b = Backoff::Fixed(Duration::from_secs(10));
        assert_eq!(b.delay_at(1, 0.5), Duration::from_secs(10));
        let low = b.delay_at(1, 0.0).as_secs_f64();
        let high = b.delay_at(1, 0.999_999).as_secs_f64();
        assert!((low - 8.0).abs() < 1e-6, "{low}");
        assert!((high - 12.0).abs() < 1e-4, "{high}");
    }
}
