//! Schedules declared on listeners: `#[dq::listener(cron = "..", tz = "..")]` and
//! `#[dq::listener(every = "..")]`, stored at start and fired with the virtual clock.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use dq::schedule::Tick;
use dq::testing::TestRuntime;
use serde::{Deserialize, Serialize};

static DIGESTS: Mutex<Vec<SystemTime>> = Mutex::new(Vec::new());
static SWEEPS: Mutex<Vec<(u32, SystemTime)>> = Mutex::new(Vec::new());

/// 9:00 in Paris on weekdays, whatever the offset from UTC that day.
#[dq::listener(topic = "digest", cron = "0 9 * * MON-FRI", tz = "Europe/Paris")]
async fn digest(tick: Tick) {
    assert_eq!(
        tick.schedule, "digest",
        "the schedule is named after the topic"
    );
    DIGESTS.lock().unwrap().push(tick.at);
}

#[derive(Serialize, Deserialize, dq::Message)]
#[message(topic = "sweep")]
struct Sweep {
    older_than_days: u32,
}

impl Default for Sweep {
    fn default() -> Self {
        Sweep {
            older_than_days: 30,
        }
    }
}

/// Every hour, each job carrying `Sweep::default()`.
#[dq::listener(every = "1h")]
async fn sweep(msg: Sweep, ctx: dq::JobContext) {
    SWEEPS
        .lock()
        .unwrap()
        .push((msg.older_than_days, ctx.due()));
}

fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listener_schedules_are_stored_at_start_and_fire_on_their_ticks_across_a_dst_change() {
    // Monday 2026-03-23 06:00 UTC; Paris moves from UTC+1 to UTC+2 on Sunday the 29th.
    let rt = TestRuntime::builder()
        .starting_at(at(1_774_245_600))
        .start()
        .await
        .unwrap();
    let ids: Vec<String> = rt
        .client()
        .schedules()
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(ids, ["digest", "sweep"]);

    rt.advance(Duration::from_secs(14 * 86_400)).await;

    // Ten weekdays at 9:00 Paris: 08:00 UTC the first week, 07:00 UTC the second.
    let expected: Vec<SystemTime> = [
        1_774_252_800,
        1_774_339_200,
        1_774_425_600,
        1_774_512_000,
        1_774_598_400,
        1_774_854_000,
        1_774_940_400,
        1_775_026_800,
        1_775_113_200,
        1_775_199_600,
    ]
    .map(at)
    .to_vec();
    assert_eq!(*DIGESTS.lock().unwrap(), expected);

    let sweeps = SWEEPS.lock().unwrap().clone();
    assert_eq!(sweeps.len(), 14 * 24, "one job an hour");
    assert!(
        sweeps.iter().all(|(days, _)| *days == 30),
        "each carries the default"
    );
    assert!(
        sweeps
            .windows(2)
            .all(|w| w[1].1.duration_since(w[0].1).unwrap() == Duration::from_secs(3600)),
        "on the hour, none skipped"
    );
    rt.shutdown().await;
}
