//! Periodic jobs: what a schedule is (a cron expression in a time zone, or a fixed interval),
//! when it ticks, and what each tick's job carries.
//!
//! Ticks are instants computed from the schedule alone (never from a host's clock): a cron
//! expression's next match after the previous tick, or the next multiple of an interval since
//! the epoch. Every process therefore computes the same ticks, and the job of a tick has an id
//! made of the schedule's id and the tick, so that however many processes fire a tick it is
//! one job.
//!
//! Daylight saving time follows Vixie cron, as croner implements it: in a skipped hour (spring
//! forward), a fixed time (`30 2 * * *`) fires once at the first valid time after the gap and
//! an interval (`*/15 * * * *`) skips the ticks that do not exist; in a repeated hour (fall
//! back), a fixed time fires once, at its first occurrence, and an interval fires in both.

use std::str::FromStr;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::job::{from_us, to_us};

/// How a schedule repeats.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Repeat {
    /// A cron expression (five fields, or six with seconds first) in an IANA time zone.
    Cron {
        /// The expression, as given.
        expr: String,
        /// The time zone its fields are read in (`UTC`, `Europe/Paris`, ...).
        tz: String,
    },
    /// Every `every_ms` milliseconds, at the multiples of it since 1970-01-01 UTC (so
    /// `every(5 min)` ticks at :00, :05, :10, ...).
    Every {
        /// The interval in milliseconds (at least 1,000).
        every_ms: u64,
    },
}

/// What happens to the ticks that no process fired in time (every process was down).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Missed {
    /// They are skipped; the schedule carries on from the next tick to come (the default, as
    /// cron does).
    #[default]
    Skip,
    /// One catch-up job, for the latest missed tick, due at once.
    RunOnce,
    /// A job for each missed tick, oldest first, at most `max` of them (the latest ones).
    All {
        /// Most catch-up jobs.
        max: u32,
    },
}

/// The payload of a tick's job when the schedule gives no message of its own: which schedule
/// fired, and for which tick.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Tick {
    /// The schedule's id.
    pub schedule: String,
    /// The tick: when the job was meant to run (its due time).
    #[serde(with = "epoch_ms")]
    pub at: SystemTime,
}

impl Tick {
    /// The tick of schedule `schedule` at `at` (to call a handler in a unit test).
    pub fn new(schedule: impl Into<String>, at: SystemTime) -> Tick {
        Tick {
            schedule: schedule.into(),
            at,
        }
    }
}

/// What each tick's job carries when `#[dq::listener(cron = ..)]` declares the schedule: a
/// [`Tick`] for a listener taking one, `M::default()` for a listener taking a message `M`.
/// (Used by the macro; you do not implement it.)
#[doc(hidden)]
#[diagnostic::on_unimplemented(
    message = "a listener with `cron` or `every` takes `dq::schedule::Tick` or a message that implements `Default` and `Serialize`, not `{Self}`",
    label = "each tick's job carries a `Tick`, or this type's `Default` value"
)]
pub trait TickPayload {
    /// `None` for a [`Tick`] (the ticker writes it), else the JSON of the message.
    fn tick_payload() -> std::result::Result<Option<serde_json::Value>, String>;
}

impl TickPayload for Tick {
    fn tick_payload() -> std::result::Result<Option<serde_json::Value>, String> {
        Ok(None)
    }
}

impl<M: Default + Serialize> TickPayload for M {
    fn tick_payload() -> std::result::Result<Option<serde_json::Value>, String> {
        serde_json::to_value(M::default())
            .map(Some)
            .map_err(|e| format!("its Default value cannot be serialized: {e}"))
    }
}

mod epoch_ms {
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
        let ms = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis());
        s.serialize_u64(u64::try_from(ms).unwrap_or(u64::MAX))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<SystemTime, D::Error> {
        Ok(UNIX_EPOCH + Duration::from_millis(u64::deserialize(d)?))
    }
}

/// A schedule as stored in Redis: how it repeats, where its jobs go and what they carry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ScheduleSpec {
    /// How it repeats.
    pub repeat: Repeat,
    /// The topic its jobs go to.
    pub topic: String,
    /// The JSON payload of every tick's job; `None`: a [`Tick`].
    pub payload: Option<String>,
    /// What happens to missed ticks.
    pub missed: Missed,
    /// Retries of each tick's job.
    pub max_retries: u32,
    /// The group each tick's job goes in (README "Groups"): the message's own group
    /// ([`Message::group`](crate::Message::group)) or [`ScheduleBuilder::group`](crate::schedule::ScheduleBuilder::group);
    /// `None` for none. Absent from a stored schedule without one, as before groups.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
}

/// The shortest interval a schedule may have: one second, as cron's seconds field.
pub const MIN_INTERVAL: Duration = Duration::from_secs(1);

impl Repeat {
    /// A cron expression in a time zone, checked: five fields (minute first) or six (second
    /// first), names for months and days (`MON-FRI`), `L`, `#` and `W` as croner reads them.
    pub fn cron(expr: &str, tz: &str) -> Result<Repeat> {
        parse_cron(expr).map_err(|reason| invalid(format!("cron {expr:?}: {reason}")))?;
        zone(tz)?;
        Ok(Repeat::Cron {
            expr: expr.trim().to_owned(),
            tz: tz.to_owned(),
        })
    }

    /// A fixed interval, at least one second.
    pub fn every(every: Duration) -> Result<Repeat> {
        if every < MIN_INTERVAL {
            return Err(invalid(format!(
                "an interval of {every:?}: schedules tick at most once a second"
            )));
        }
        Ok(Repeat::Every {
            every_ms: u64::try_from(every.as_millis()).unwrap_or(u64::MAX),
        })
    }

    /// The first tick strictly after `after`, `None` when there is none (a cron expression that
    /// never matches again, or a time past the year 9999).
    pub fn next_after(&self, after: SystemTime) -> Option<SystemTime> {
        match self {
            Repeat::Every { every_ms } => {
                let every_us = every_ms.checked_mul(1000)?.max(1);
                let n = to_us(after) / every_us + 1;
                Some(from_us(n.checked_mul(every_us)?))
            }
            Repeat::Cron { expr, tz } => {
                let cron = parse_cron(expr).ok()?;
                let zone = zone(tz).ok()?;
                let after_us = i64::try_from(to_us(after)).ok()?;
                let at = jiff::Timestamp::from_microsecond(after_us)
                    .ok()?
                    .to_zoned(zone);
                let next = cron.find_next_occurrence(&at, false).ok()?;
                let us = u64::try_from(next.timestamp().as_microsecond()).ok()?;
                Some(from_us(us))
            }
        }
    }

    /// The interval around `tick`: from it to the next tick (for a cron expression, the gap
    /// that follows this tick; at least one second).
    pub fn period_after(&self, tick: SystemTime) -> Duration {
        self.next_after(tick)
            .and_then(|next| next.duration_since(tick).ok())
            .unwrap_or(Duration::from_secs(86_400))
            .max(MIN_INTERVAL)
    }

    /// As written for a person: `cron "0 9 * * MON-FRI" in Europe/Paris`, `every 5m`.
    pub fn describe(&self) -> String {
        match self {
            Repeat::Cron { expr, tz } => format!("cron {expr:?} in {tz}"),
            Repeat::Every { every_ms } => format!("every {:?}", Duration::from_millis(*every_ms)),
        }
    }
}

fn parse_cron(expr: &str) -> std::result::Result<croner::Cron, String> {
    croner::parser::CronParser::builder()
        .build()
        .parse(expr.trim())
        .map_err(|e| e.to_string())
}

fn zone(tz: &str) -> Result<jiff::tz::TimeZone> {
    jiff::tz::TimeZone::get(tz).map_err(|e| {
        invalid(format!(
            "time zone {tz:?}: {e} (use an IANA name such as UTC, Europe/Paris or America/New_York)"
        ))
    })
}

fn invalid(reason: String) -> Error {
    Error::InvalidPeriodic { reason }
}

impl FromStr for Missed {
    type Err = String;

    /// `skip`, `run_once` (or `run-once`), `all` (at most 100) or `all:<max>`.
    fn from_str(s: &str) -> std::result::Result<Missed, String> {
        match s {
            "skip" => Ok(Missed::Skip),
            "run_once" | "run-once" => Ok(Missed::RunOnce),
            "all" => Ok(Missed::All { max: 100 }),
            _ => s
                .strip_prefix("all:")
                .and_then(|n| n.parse().ok())
                .map(|max| Missed::All { max })
                .ok_or_else(|| format!("{s:?}: skip, run_once, all or all:<max>")),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn utc(text: &str) -> SystemTime {
        let ts: jiff::Timestamp = text.parse().unwrap();
        from_us(u64::try_from(ts.as_microsecond()).unwrap())
    }

    fn ticks(repeat: &Repeat, from: &str, n: usize) -> Vec<String> {
        let mut at = utc(from);
        (0..n)
            .map(|_| {
                at = repeat.next_after(at).unwrap();
                let us = i64::try_from(to_us(at)).unwrap();
                jiff::Timestamp::from_microsecond(us).unwrap().to_string()
            })
            .collect()
    }

    #[test]
    fn a_weekday_cron_in_paris_skips_the_weekend() {
        let r = Repeat::cron("0 9 * * MON-FRI", "Europe/Paris").unwrap();
        // Friday 2026-11-27 08:00 UTC is 09:00 in Paris (UTC+1 in winter).
        assert_eq!(
            ticks(&r, "2026-11-27T07:00:00Z", 2),
            ["2026-11-27T08:00:00Z", "2026-11-30T08:00:00Z"]
        );
    }

    #[test]
    fn a_fixed_time_in_the_skipped_hour_fires_once_after_the_gap() {
        // Paris skips 02:00-03:00 on 2026-03-29 (02:00 CET becomes 03:00 CEST = 01:00 UTC).
        let r = Repeat::cron("30 2 * * *", "Europe/Paris").unwrap();
        let got = ticks(&r, "2026-03-28T12:00:00Z", 2);
        assert_eq!(
            got,
            ["2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"],
            "once on the day of the gap"
        );
    }

    #[test]
    fn a_fixed_time_in_the_repeated_hour_fires_once() {
        // Paris repeats 02:00-03:00 on 2026-10-25 (03:00 CEST becomes 02:00 CET).
        let r = Repeat::cron("30 2 * * *", "Europe/Paris").unwrap();
        let got = ticks(&r, "2026-10-24T12:00:00Z", 2);
        assert_eq!(got, ["2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"]);
    }

    #[test]
    fn seconds_are_optional_and_intervals_align_to_the_epoch() {
        let r = Repeat::cron("*/20 * * * * *", "UTC").unwrap();
        assert_eq!(
            ticks(&r, "2026-11-24T10:00:05Z", 3),
            [
                "2026-11-24T10:00:20Z",
                "2026-11-24T10:00:40Z",
                "2026-11-24T10:01:00Z"
            ]
        );
        let every = Repeat::every(Duration::from_secs(300)).unwrap();
        assert_eq!(
            ticks(&every, "2026-11-24T10:03:00Z", 2),
            ["2026-11-24T10:05:00Z", "2026-11-24T10:10:00Z"]
        );
        assert_eq!(
            every.period_after(utc("2026-11-24T10:05:00Z")),
            Duration::from_secs(300)
        );
    }

    #[test]
    fn bad_expressions_zones_and_intervals_are_refused_with_the_reason() {
        let e = Repeat::cron("61 * * * *", "UTC").unwrap_err().to_string();
        assert!(e.contains("61 * * * *"), "{e}");
        let e = Repeat::cron("0 9 * * *", "Mars/Olympus")
            .unwrap_err()
            .to_string();
        assert!(e.contains("Mars/Olympus") && e.contains("IANA"), "{e}");
        assert!(Repeat::every(Duration::from_millis(500)).is_err());
        assert_eq!("all:5".parse(), Ok(Missed::All { max: 5 }));
        assert!("sometimes".parse::<Missed>().is_err());
    }
}
