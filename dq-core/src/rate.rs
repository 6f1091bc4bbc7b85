//! A topic's rate limit: how many of its jobs may start per period, across every process.
//!
//! Enforced where jobs are leased (the fetch script on Redis, with Redis' clock), by the
//! generic cell rate algorithm (GCRA): each start moves the topic's "theoretical arrival time"
//! (TAT) on by one interval (`period / count`), and a start is allowed while the TAT is at most
//! the burst tolerance ahead of now. So the starts are spread evenly over the period, and an
//! idle topic banks at most one burst. A start may come up to 5 ms after its turn without
//! pushing the later ones back ([`Rate::LATE_WAKE`]). In any window of one period at most
//! [`Rate::most_in_one_period`] jobs start (`count + burst - 1`, or `count + 1` when the burst
//! is 1), and over a long run the rate is exactly `count` per `period`.
//!
//! The burst is the jobs of 10 ms at the rate, rounded up (at least 1): it lets one fetch take
//! a batch at high rates (100,000/s takes up to 1,000 a fetch) and keeps a low rate smooth
//! (100/s starts one job every 10 ms, never ten at once). A consumer the limit holds back waits
//! at least half those 10 ms ([`Rate::BURST_WINDOW`]), then takes what came in one fetch: at
//! most 200 fetches a second per consumer, not one per job, and one before the burst is full.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::error::{Error, Result};

/// How many jobs of a topic may start per period, in all processes together:
/// `#[dq::listener(rate = "100/1s")]`, `Listener::rate`, [`Client::set_rate`](crate::Client::set_rate),
/// `dq rate TOPIC 100/1s`. See the [module](self) for how it is enforced.
///
/// ```
/// use std::time::Duration;
/// use dq_core::Rate;
///
/// let rate: Rate = "100/1s".parse()?;
/// assert_eq!(rate, Rate::new(100, Duration::from_secs(1))?);
/// assert_eq!(rate.interval(), Duration::from_millis(10));
/// assert_eq!(rate.burst(), 1);
/// assert_eq!(rate.to_string(), "100/1s");
/// assert!("0/1s".parse::<Rate>().is_err());
/// # Ok::<(), dq_core::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Rate {
    count: u64,
    period: Duration,
}

impl Rate {
    /// The window whose jobs one fetch may take at once (the burst). A consumer the limit held
    /// back waits at least half of it, then takes what came in one fetch, not one per start.
    pub const BURST_WINDOW: Duration = Duration::from_millis(10);

    /// The least tolerance of the limit: a start that comes up to 5 ms after its turn (a
    /// worker's wake-up and round trip) keeps its place, rather than pushing every later start
    /// back (with none, `100/1s` ran at 0.899 of its rate with 4 workers: each late wake-up
    /// moved the rest on). At rates whose burst is 1 it lets one more start in a period.
    pub const LATE_WAKE: Duration = Duration::from_millis(5);

    /// `count` jobs per `period`: count 1 to 1,000,000,000, period 1 ms to 1 day.
    pub fn new(count: u64, period: Duration) -> Result<Rate> {
        let rate = Rate { count, period };
        rate.to_string().parse()
    }

    /// Jobs per period.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The period.
    pub fn period(&self) -> Duration {
        self.period
    }

    /// The time between two starts at this rate, `period / count`.
    pub fn interval(&self) -> Duration {
        self.period / u32::try_from(self.count).unwrap_or(u32::MAX)
    }

    /// The most jobs that may start at once after a pause: those of 10 ms at this rate,
    /// rounded up (so at least 1).
    pub fn burst(&self) -> u64 {
        let per_window =
            (self.count as u128 * Self::BURST_WINDOW.as_nanos()).div_ceil(self.period.as_nanos());
        (per_window as u64).clamp(1, self.count)
    }

    /// The limit as the stores count it, in microseconds: the interval between starts
    /// (fractional), and the tolerance, `(burst - 1) * interval`, at least 5 ms
    /// ([`Rate::LATE_WAKE`]). On Redis one shard counts a topic's starts for every shard of
    /// the namespace.
    pub fn gcra_us(&self) -> (f64, f64) {
        let interval = self.period.as_secs_f64() * 1e6 / self.count as f64;
        let late = Self::LATE_WAKE.as_micros() as f64;
        (interval, ((self.burst() - 1) as f64 * interval).max(late))
    }

    /// The most jobs that start in any window of one period:
    /// `ceil((period + tolerance) / interval)`, which is `count + burst - 1`, or `count + 1`
    /// when the burst is so small that the 5 ms tolerance is the larger.
    pub fn most_in_one_period(&self) -> u64 {
        let (interval, tolerance) = self.gcra_us();
        let period = self.period.as_secs_f64() * 1e6;
        ((period + tolerance) / interval - 1e-9).ceil() as u64
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let count = self.count;
        let secs = self.period.as_secs();
        let whole = self.period.subsec_nanos() == 0;
        match secs {
            _ if whole && secs.is_multiple_of(86_400) => write!(f, "{count}/{}d", secs / 86_400),
            _ if whole && secs.is_multiple_of(3600) => write!(f, "{count}/{}h", secs / 3600),
            _ if whole && secs.is_multiple_of(60) => write!(f, "{count}/{}m", secs / 60),
            _ if whole => write!(f, "{count}/{secs}s"),
            _ if self.period.subsec_nanos().is_multiple_of(1_000_000) => {
                write!(f, "{count}/{}ms", self.period.as_millis())
            }
            _ => write!(f, "{count}/{}s", self.period.as_secs_f64()),
        }
    }
}

/// As written: `"100/1s"`.
impl serde::Serialize for Rate {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl FromStr for Rate {
    type Err = Error;

    fn from_str(text: &str) -> Result<Rate> {
        let (count, period) = dq_syntax::parse_rate(text).map_err(|reason| Error::InvalidRate {
            rate: text.to_owned(),
            reason,
        })?;
        Ok(Rate { count, period })
    }
}

/// One topic's GCRA state in one place (the memory store; the Redis fetch script does the same
/// arithmetic in Lua): the theoretical arrival time, and a hold's end.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Throttle {
    /// The theoretical arrival time, in microseconds of the store's clock (0: none yet).
    pub tat_us: f64,
    /// When the last hold ends, in microseconds of the store's clock (0: none).
    pub hold_us: u64,
}

impl Throttle {
    /// How many of `wanted` jobs may start at `now_us` under `rate` (`None`: only a hold
    /// limits), and, when that is fewer than wanted, how long until the next may. Takes
    /// nothing: [`Throttle::took`] records the starts.
    pub fn allows(
        &self,
        rate: Option<(f64, f64)>,
        now_us: u64,
        wanted: usize,
    ) -> (usize, Option<Duration>) {
        if self.hold_us > now_us {
            return (0, Some(micros((self.hold_us - now_us) as f64)));
        }
        let now = now_us as f64;
        let base = self.tat_us.max(now);
        match rate {
            None => (wanted, None),
            Some((interval, tolerance)) => {
                let room = now + tolerance - base;
                if room < 0.0 {
                    return (0, Some(micros(-room)));
                }
                let k = ((room / interval).floor() as usize).saturating_add(1);
                if k >= wanted {
                    (wanted, None)
                } else {
                    (
                        k,
                        Some(micros(base + k as f64 * interval - tolerance - now)),
                    )
                }
            }
        }
    }

    /// Records `n` starts at `now_us` under `rate`.
    pub fn took(&mut self, rate: Option<(f64, f64)>, now_us: u64, n: usize) {
        if let (Some((interval, _)), true) = (rate, n > 0) {
            self.tat_us = self.tat_us.max(now_us as f64) + n as f64 * interval;
        }
    }

    /// Holds every start back until `for_` from `now_us` (a handler's
    /// `Outcome::RateLimited`), unless a hold ends later already.
    pub fn hold(&mut self, now_us: u64, for_: Duration) {
        let until = now_us.saturating_add(u64::try_from(for_.as_micros()).unwrap_or(u64::MAX));
        self.hold_us = self.hold_us.max(until);
    }
}

impl Throttle {
    /// Ends a hold now; true when one was in force at `now_us`.
    pub fn lift_hold(&mut self, now_us: u64) -> bool {
        let held = self.hold_us > now_us;
        self.hold_us = 0;
        held
    }
}

/// A wait of `us` microseconds (rounded up, at least 1 us).
fn micros(us: f64) -> Duration {
    Duration::from_micros((us.ceil() as u64).max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000;

    #[test]
    fn a_rate_prints_as_it_is_written() {
        for text in ["100/1s", "5/250ms", "6000/1m", "10/2h", "1/1d"] {
            assert_eq!(text.parse::<Rate>().unwrap().to_string(), text);
        }
        assert_eq!("100/s".parse::<Rate>().unwrap().to_string(), "100/1s");
    }

    #[test]
    fn the_burst_is_ten_milliseconds_of_jobs_at_least_one() {
        assert_eq!("100/1s".parse::<Rate>().unwrap().burst(), 1);
        assert_eq!("100000/1s".parse::<Rate>().unwrap().burst(), 1000);
        assert_eq!("5/1ms".parse::<Rate>().unwrap().burst(), 5);
        assert_eq!(
            "150/1s".parse::<Rate>().unwrap().burst(),
            2,
            "1.5 rounded up"
        );
        assert_eq!("1/1h".parse::<Rate>().unwrap().burst(), 1);
    }

    #[test]
    fn starts_are_spread_one_interval_apart_and_never_more_than_the_rate() {
        let rate = Some("100/1s".parse::<Rate>().unwrap().gcra_us());
        let mut t = Throttle::default();
        let mut started = 0;
        // A consumer that asks for 50 every millisecond for ten seconds.
        for ms in 0..10_000u64 {
            let now = 5 * SEC + ms * 1000;
            let (k, _) = t.allows(rate, now, 50);
            t.took(rate, now, k);
            started += k;
        }
        // Ten seconds' worth, and the one the 5 ms tolerance lets in at the start.
        assert_eq!(started, 1001);
    }

    #[test]
    fn a_period_holds_count_plus_burst_minus_one_or_one_more_when_the_burst_is_one() {
        assert_eq!(
            "1000/1s".parse::<Rate>().unwrap().most_in_one_period(),
            1009
        );
        assert_eq!("100/1s".parse::<Rate>().unwrap().most_in_one_period(), 101);
        assert_eq!("1/1m".parse::<Rate>().unwrap().most_in_one_period(), 2);
    }

    #[test]
    fn starts_late_by_less_than_five_milliseconds_keep_the_rate() {
        let rate = Some("100/1s".parse::<Rate>().unwrap().gcra_us());
        let mut t = Throttle::default();
        let mut started = 0;
        // A consumer that always comes 3 ms after the start it was told to wait for.
        let mut now = SEC;
        for _ in 0..100 {
            let (k, wait) = t.allows(rate, now, 5);
            t.took(rate, now, k);
            started += k;
            now += wait.map_or(10_000, |w| w.as_micros() as u64) + 3_000;
        }
        let per_s = started as f64 / ((now - SEC) as f64 / 1e6);
        assert!(per_s > 97.0, "{per_s} a second");
    }

    #[test]
    fn a_refused_start_says_when_the_next_is_allowed() {
        let rate = Some("100/1s".parse::<Rate>().unwrap().gcra_us());
        let mut t = Throttle::default();
        // One start every 10 ms; the next may come 5 ms early (the tolerance for late
        // wake-ups lets the one after it keep its place).
        let (k, wait) = t.allows(rate, SEC, 5);
        assert_eq!((k, wait), (1, Some(Duration::from_millis(5))));
        t.took(rate, SEC, k);
        assert_eq!(
            t.allows(rate, SEC + 4000, 5),
            (0, Some(Duration::from_millis(1)))
        );
        assert_eq!(t.allows(rate, SEC + 5000, 5).0, 1);
    }

    #[test]
    fn a_hold_stops_every_start_until_it_ends_with_or_without_a_rate() {
        let rate = Some("100000/1s".parse::<Rate>().unwrap().gcra_us());
        for r in [None, rate] {
            let mut t = Throttle::default();
            t.hold(SEC, Duration::from_secs(2));
            assert_eq!(
                t.allows(r, SEC, 5),
                (0, Some(Duration::from_secs(2))),
                "{r:?}"
            );
            assert_eq!(t.allows(r, 3 * SEC - 1, 5).0, 0, "{r:?}");
            assert_eq!(t.allows(r, 3 * SEC, 5).0, 5, "{r:?}");
        }
    }
}
