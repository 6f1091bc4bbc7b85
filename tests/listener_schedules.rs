//! Schedules declared on listeners: `#[dq::listener(cron = "..", tz = "..")]` and
//! `#[dq::listener(every = "..")]`, or `Listener::new(..).cron(..).tz(..)` and `.every(..)`,
//! stored at start and fired with the virtual clock.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use dq::schedule::Tick;
use dq::testing::{TestRuntime, TestRuntimeBuilder};
use dq::{JobContext, Listener};
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

/// Monday 2026-03-23 06:00 UTC; Paris moves from UTC+1 to UTC+2 on Sunday the 29th.
const MONDAY: u64 = 1_774_245_600;

/// Ten weekdays at 9:00 Paris from `MONDAY`: 08:00 UTC the first week, 07:00 UTC the second.
fn weekdays_at_nine_in_paris() -> Vec<SystemTime> {
    [
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
    .to_vec()
}

/// One job an hour for two weeks, each carrying `Sweep::default()`, none skipped.
fn assert_hourly_defaults(sweeps: &[(u32, SystemTime)]) {
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
}

async fn schedule_ids(rt: &TestRuntime) -> Vec<String> {
    let mut ids: Vec<String> = rt
        .client()
        .schedules()
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    ids.sort();
    ids
}

/// Starts `runtime` on `MONDAY`, which must store the schedules `ids`, and runs it two weeks:
/// the digest's ticks (seen in `digests`) fall at 9:00 Paris on weekdays, the sweep's (in
/// `sweeps`) every hour.
async fn assert_two_weeks_of_ticks(
    runtime: TestRuntimeBuilder,
    ids: [&str; 2],
    digests: &Mutex<Vec<SystemTime>>,
    sweeps: &Mutex<Vec<(u32, SystemTime)>>,
) {
    let rt = runtime.starting_at(at(MONDAY)).start().await.unwrap();
    assert_eq!(schedule_ids(&rt).await, ids);

    rt.advance(Duration::from_secs(14 * 86_400)).await;

    assert_eq!(*digests.lock().unwrap(), weekdays_at_nine_in_paris());
    assert_hourly_defaults(&sweeps.lock().unwrap().clone());
    rt.shutdown().await;
}

/// Why a runtime of `listener` alone refuses to start.
async fn refusal(listener: Listener) -> String {
    let err = TestRuntime::builder()
        .without_registered_listeners()
        .listener(listener)
        .start()
        .await
        .unwrap_err();
    err.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listener_schedules_are_stored_at_start_and_fire_on_their_ticks_across_a_dst_change() {
    assert_two_weeks_of_ticks(
        TestRuntime::builder(),
        ["digest", "sweep"],
        &DIGESTS,
        &SWEEPS,
    )
    .await;
}

/// The same two schedules as the macro's above, declared with the builder: the same ticks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_built_by_hand_declares_its_schedule_as_the_macro_does() {
    let digests = Arc::new(Mutex::new(Vec::new()));
    let sweeps = Arc::new(Mutex::new(Vec::new()));
    let seen = digests.clone();
    let hand_digest = Listener::new("hand-digest", move |tick: Tick| {
        let seen = seen.clone();
        async move {
            assert_eq!(tick.schedule, "hand-digest");
            seen.lock().unwrap().push(tick.at);
        }
    })
    .cron("0 9 * * MON-FRI")
    .tz("Europe/Paris");
    let seen = sweeps.clone();
    let hand_sweep = Listener::new("hand-sweep", move |msg: Sweep, ctx: JobContext| {
        let seen = seen.clone();
        async move { seen.lock().unwrap().push((msg.older_than_days, ctx.due())) }
    })
    .every(Duration::from_secs(3600))
    .ticks_carry_default::<Sweep>();
    let runtime = TestRuntime::builder()
        .without_registered_listeners()
        .listener(hand_digest)
        .listener(hand_sweep);
    let ids = ["hand-digest", "hand-sweep"];
    assert_two_weeks_of_ticks(runtime, ids, &digests, &sweeps).await;
}

/// What each tick carries must be said for a message: otherwise every tick would be a poison
/// message, so the start fails, naming what to call.
#[tokio::test]
async fn a_scheduled_listener_built_by_hand_on_a_message_says_what_its_ticks_carry() {
    let untold = Listener::new("hand-sweep", |_msg: Sweep| async {}).every(Duration::from_secs(60));
    let text = refusal(untold).await;
    assert!(text.contains(".ticks_carry_default::<"), "{text}");
    assert!(text.contains("Sweep"), "{text}");

    let wrong = Listener::new("hand-sweep", |_msg: Sweep| async {})
        .every(Duration::from_secs(60))
        .ticks_carry_default::<u32>();
    let text = refusal(wrong).await;
    assert!(text.contains("another type"), "{text}");
}

/// A schedule's ticks on a topic at its `max_pending` wait (nothing is fired past the bound,
/// nothing is lost for good): once there is room, the schedule fires again.
#[tokio::test]
async fn a_schedules_ticks_wait_while_its_topic_is_full() {
    let ticks = Arc::new(Mutex::new(Vec::new()));
    let seen = ticks.clone();
    let cleanup = Listener::new("cleanup", move |tick: Tick| {
        let seen = seen.clone();
        async move { seen.lock().unwrap().push(tick.at) }
    })
    .every(Duration::from_secs(60))
    .max_pending(1);
    let rt = TestRuntime::builder()
        .without_registered_listeners()
        .listener(cleanup)
        .start()
        .await
        .unwrap();
    // The topic's one place is taken by a job due in ten hours.
    let far = Duration::from_secs(36_000);
    rt.client()
        .push_json("cleanup", "{}")
        .id("blocker")
        .delay(far)
        .await
        .unwrap();
    rt.advance(Duration::from_secs(300)).await;
    assert!(ticks.lock().unwrap().is_empty(), "fired past the bound");
    rt.client().cancel_in("cleanup", "blocker").await.unwrap();
    rt.advance(Duration::from_secs(180)).await;
    assert!(
        !ticks.lock().unwrap().is_empty(),
        "never fired once there was room"
    );
    let pending = rt.client().counts("cleanup").await.unwrap();
    assert!(
        pending.delayed + pending.ready + pending.running <= 1,
        "{pending:?}"
    );
}
