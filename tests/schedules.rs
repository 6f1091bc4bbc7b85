//! Periodic schedules: declared through the client, fired by every runtime, one job per tick.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod support;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use dq::schedule::{Missed, Tick};
use dq::store::MemoryStore;
use dq::testing::TestRuntime;
use dq::{Client, JobContext, Listener, Runtime};
use support::RedisServer;

/// The ticks a listener saw, with when each job started by the host's clock.
type Seen = Arc<Mutex<Vec<(String, SystemTime, SystemTime)>>>;

fn recorder(topic: &str, seen: &Seen) -> Listener {
    let seen = seen.clone();
    Listener::new(topic, move |tick: Tick, ctx: JobContext| {
        let seen = seen.clone();
        async move {
            seen.lock()
                .unwrap()
                .push((ctx.id().to_string(), tick.at, SystemTime::now()));
            assert_eq!(ctx.due(), tick.at, "a tick's job is due at its tick");
            Ok::<(), String>(())
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_week_of_a_five_minute_schedule_runs_every_tick_once_in_virtual_time() {
    let seen = Seen::default();
    let rt = TestRuntime::start_with(
        Runtime::builder()
            .without_registered_listeners()
            .listener(recorder("sweep", &seen)),
    )
    .await
    .unwrap();
    rt.client()
        .schedule("sweep-every-5m")
        .every(Duration::from_secs(300))
        .topic("sweep")
        .upsert()
        .await
        .unwrap();
    let real = Instant::now();
    rt.advance(Duration::from_secs(7 * 86_400)).await;
    let elapsed = real.elapsed();
    let seen = seen.lock().unwrap().clone();
    let ticks: BTreeSet<SystemTime> = seen.iter().map(|s| s.1).collect();
    assert_eq!(seen.len(), 7 * 24 * 12, "one job per tick");
    assert_eq!(ticks.len(), seen.len(), "no tick twice");
    let gaps: BTreeSet<Duration> = ticks
        .iter()
        .zip(ticks.iter().skip(1))
        .map(|(a, b)| b.duration_since(*a).unwrap())
        .collect();
    assert_eq!(
        gaps,
        BTreeSet::from([Duration::from_secs(300)]),
        "none skipped"
    );
    eprintln!("a week of 2016 ticks took {elapsed:?} of real time");
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_runtimes_on_redis_make_one_job_per_second_tick_none_early() {
    let redis = RedisServer::start();
    let seen = Seen::default();
    let mut runtimes = Vec::new();
    for _ in 0..3 {
        let config = support::config(&redis);
        runtimes.push(
            Runtime::builder()
                .config(config)
                .without_registered_listeners()
                .listener(recorder("heartbeat", &seen))
                .start()
                .await
                .unwrap(),
        );
    }
    let client = runtimes[0].client().clone();
    client
        .schedule("every-second")
        .cron("* * * * * *")
        .topic("heartbeat")
        .upsert()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(8)).await;
    let paused_at = SystemTime::now();
    client.pause_schedule("every-second").await.unwrap();
    // The jobs created ahead for the next few ticks are cancelled: nothing more comes.
    tokio::time::sleep(Duration::from_secs(6)).await;
    for rt in runtimes {
        rt.shutdown().await.unwrap();
    }
    let seen = seen.lock().unwrap().clone();
    let ids: BTreeSet<&String> = seen.iter().map(|s| &s.0).collect();
    assert_eq!(ids.len(), seen.len(), "a tick ran twice: {seen:?}");
    let ticks: Vec<SystemTime> = {
        let set: BTreeSet<SystemTime> = seen.iter().map(|s| s.1).collect();
        set.into_iter().collect()
    };
    assert!(ticks.len() >= 6, "about one a second: {}", ticks.len());
    // (A look under way in another runtime at the instant of the pause may still make one.)
    let last = *ticks.last().unwrap();
    assert!(
        last <= paused_at + Duration::from_secs(1),
        "a tick {:?} after the pause ran",
        last.duration_since(paused_at).unwrap()
    );
    for pair in ticks.windows(2) {
        assert_eq!(
            pair[1].duration_since(pair[0]).unwrap(),
            Duration::from_secs(1),
            "no tick missing"
        );
    }
    for (id, tick, started) in &seen {
        // The host's clock is Redis' here (one machine): a job never starts before its tick.
        assert!(
            started >= tick,
            "{id} started {:?} early",
            tick.duration_since(*started)
        );
    }
}

/// A client on a memory store whose clock only the test moves.
fn manual() -> (Client, MemoryStore) {
    let store =
        MemoryStore::with_manual_clock(SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_500_000));
    let client = Client::new(
        Arc::new(store.clone()),
        dq::Config::builder().build().unwrap(),
    );
    (client, store)
}

async fn missed_after_an_hour_down(policy: Missed) -> Vec<String> {
    let (client, store) = manual();
    client
        .schedule("s")
        .every(Duration::from_secs(600))
        .topic("t")
        .missed(policy)
        .upsert()
        .await
        .unwrap();
    // Every process down for an hour: six ticks go by unfired.
    store.advance_to(store.now_us() + 3_600_000_000 + 1);
    client.fire_schedules(Duration::ZERO).await.unwrap();
    let page = client
        .jobs("t", dq::JobState::Ready, dq::admin::Cursor::START, 100)
        .await
        .unwrap();
    let delayed = client
        .jobs("t", dq::JobState::Delayed, dq::admin::Cursor::START, 100)
        .await
        .unwrap();
    page.jobs
        .iter()
        .chain(&delayed.jobs)
        .map(|j| j.id.to_string())
        .collect()
}

#[tokio::test]
async fn missed_ticks_follow_the_schedules_policy() {
    assert_eq!(
        missed_after_an_hour_down(Missed::Skip).await.len(),
        1,
        "only the current tick"
    );
    assert_eq!(
        missed_after_an_hour_down(Missed::RunOnce).await.len(),
        2,
        "one catch-up and the current tick"
    );
    assert_eq!(
        missed_after_an_hour_down(Missed::All { max: 3 })
            .await
            .len(),
        4,
        "three catch-ups and the current tick"
    );
    assert_eq!(
        missed_after_an_hour_down(Missed::All { max: 100 })
            .await
            .len(),
        6,
        "every tick of the hour"
    );
}

#[tokio::test]
async fn declaring_again_keeps_the_place_and_a_change_or_pause_is_seen_everywhere() {
    let (client, store) = manual();
    let declare = |expr: &'static str| {
        client
            .schedule("report")
            .cron(expr)
            .tz("Europe/Paris")
            .topic("report")
            .upsert()
    };
    let first = declare("0 9 * * MON-FRI").await.unwrap();
    store.advance_to(store.now_us() + 1_000_000);
    let again = declare("0 9 * * MON-FRI").await.unwrap();
    assert_eq!(
        again.next, first.next,
        "an unchanged schedule keeps its next tick"
    );
    let changed = declare("0 18 * * MON-FRI").await.unwrap();
    assert_ne!(changed.next, first.next);
    assert!(client.pause_schedule("report").await.unwrap());
    assert_eq!(
        declare("0 18 * * MON-FRI").await.unwrap().next,
        None,
        "a paused one stays paused"
    );
    assert!(client.resume_schedule("report").await.unwrap());
    let listed = client.schedules().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].next, changed.next);
    let now = client.run_schedule_now("report").await.unwrap().unwrap();
    assert!(now.id.as_str().starts_with("report@now-"), "{}", now.id);
    assert!(client.unschedule("report").await.unwrap());
    assert!(client.schedules().await.unwrap().is_empty());
}

#[tokio::test]
async fn a_bad_expression_zone_or_missing_topic_is_refused_with_the_reason() {
    let (client, _) = manual();
    let e = client
        .schedule("x")
        .cron("0 25 * * *")
        .topic("t")
        .upsert()
        .await
        .unwrap_err();
    assert!(e.to_string().contains("0 25 * * *"), "{e}");
    let e = client
        .schedule("x")
        .cron("0 9 * * *")
        .tz("Paris")
        .topic("t")
        .upsert()
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("\"Paris\"") && e.to_string().contains("IANA"),
        "{e}"
    );
    let e = client
        .schedule("x")
        .cron("0 9 * * *")
        .upsert()
        .await
        .unwrap_err();
    assert!(e.to_string().contains(".topic("), "{e}");
    let e = client
        .schedule("a@b")
        .every(Duration::from_secs(60))
        .topic("t")
        .upsert()
        .await
        .unwrap_err();
    assert!(e.to_string().contains("no '@'"), "{e}");
    assert_eq!(e.kind(), dq::ErrorKind::InvalidInput);
}

#[tokio::test]
async fn one_look_creates_every_tick_inside_the_lookahead_each_due_at_its_tick() {
    let (client, store) = manual();
    client
        .schedule("every-second")
        .cron("* * * * * *")
        .topic("heartbeat")
        .upsert()
        .await
        .unwrap();
    let now = store.now_us();
    // One look, five seconds ahead: the five ticks in that window are jobs already, so a
    // process that stalls for a few seconds after this look leaves none of them late.
    let created = client.fire_schedules(Duration::from_secs(5)).await.unwrap();
    assert_eq!(created, 5);
    let delayed = client
        .jobs(
            "heartbeat",
            dq::JobState::Delayed,
            dq::admin::Cursor::START,
            100,
        )
        .await
        .unwrap();
    let mut due: Vec<u64> = delayed.jobs.iter().map(|j| to_us(j.due) - now).collect();
    due.sort_unstable();
    assert_eq!(
        due,
        [1, 2, 3, 4, 5].map(|s| s * 1_000_000 - now % 1_000_000)
    );
    // A second look in the same instant creates nothing more.
    assert_eq!(
        client.fire_schedules(Duration::from_secs(5)).await.unwrap(),
        0
    );
}

fn to_us(t: SystemTime) -> u64 {
    u64::try_from(
        t.duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_micros(),
    )
    .unwrap()
}

#[tokio::test]
async fn pausing_or_removing_a_schedule_cancels_the_jobs_it_created_ahead() {
    let (client, _store) = manual();
    let delayed = |client: Client| async move {
        client
            .jobs(
                "heartbeat",
                dq::JobState::Delayed,
                dq::admin::Cursor::START,
                100,
            )
            .await
            .unwrap()
            .jobs
            .len()
    };
    client
        .schedule("every-second")
        .cron("* * * * * *")
        .topic("heartbeat")
        .upsert()
        .await
        .unwrap();
    client.fire_schedules(Duration::from_secs(5)).await.unwrap();
    assert_eq!(delayed(client.clone()).await, 5);
    assert!(client.pause_schedule("every-second").await.unwrap());
    assert_eq!(
        delayed(client.clone()).await,
        0,
        "paused: none of its ticks runs"
    );
    assert_eq!(
        client.fire_schedules(Duration::from_secs(5)).await.unwrap(),
        0
    );

    assert!(client.resume_schedule("every-second").await.unwrap());
    assert_eq!(
        client.fire_schedules(Duration::from_secs(5)).await.unwrap(),
        5,
        "the same ticks again"
    );
    assert!(client.unschedule("every-second").await.unwrap());
    assert_eq!(
        delayed(client.clone()).await,
        0,
        "removed: none of its ticks runs"
    );
}

async fn delayed_in(client: &Client, topic: &str) -> usize {
    client
        .jobs(topic, dq::JobState::Delayed, dq::admin::Cursor::START, 1000)
        .await
        .unwrap()
        .jobs
        .len()
}

#[tokio::test]
async fn a_schedule_that_cannot_fire_does_not_hold_up_the_others() {
    let (client, store) = manual();
    // Declared by a process that allows 10 KB payloads...
    client
        .schedule("big")
        .every(Duration::from_secs(1))
        .message_to("reports", &"x".repeat(10_000))
        .upsert()
        .await
        .unwrap();
    client
        .schedule("small")
        .every(Duration::from_secs(1))
        .topic("heartbeat")
        .upsert()
        .await
        .unwrap();
    // ...fired by one that allows 1 KB: "big" fails (its place is kept), "small" fires.
    let strict = Client::new(
        Arc::new(store.clone()),
        dq::Config::builder()
            .max_payload_bytes(1024)
            .build()
            .unwrap(),
    );
    assert_eq!(
        strict.fire_schedules(Duration::from_secs(5)).await.unwrap(),
        5
    );
    assert_eq!(delayed_in(&client, "heartbeat").await, 5);
    assert_eq!(delayed_in(&client, "reports").await, 0);
    // A message over the limit of the process declaring it is refused there.
    let refused = strict
        .schedule("big2")
        .every(Duration::from_secs(1))
        .message_to("reports", &"x".repeat(10_000))
        .upsert()
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("payload limit"), "{refused}");
}

#[tokio::test]
async fn one_look_fires_every_due_schedule_however_many() {
    let (client, _store) = manual();
    for i in 0..150 {
        client
            .schedule(&format!("s{i}"))
            .every(Duration::from_secs(1))
            .topic("heartbeat")
            .upsert()
            .await
            .unwrap();
    }
    assert_eq!(
        client.fire_schedules(Duration::from_secs(5)).await.unwrap(),
        150 * 5
    );
}

#[tokio::test]
async fn resuming_a_running_schedule_changes_nothing() {
    let (client, _store) = manual();
    client
        .schedule("s")
        .every(Duration::from_secs(1))
        .topic("heartbeat")
        .upsert()
        .await
        .unwrap();
    client.fire_schedules(Duration::from_secs(5)).await.unwrap();
    let before = client.schedules().await.unwrap()[0].next;
    assert!(client.resume_schedule("s").await.unwrap());
    assert_eq!(client.schedules().await.unwrap()[0].next, before);
    assert_eq!(
        client.fire_schedules(Duration::from_secs(5)).await.unwrap(),
        0,
        "no tick made again"
    );
}

#[tokio::test]
async fn changing_a_schedule_cancels_the_jobs_made_ahead_under_the_old_one() {
    let (client, _store) = manual();
    let declare = |topic: &'static str| {
        client
            .schedule("s")
            .every(Duration::from_secs(1))
            .topic(topic)
            .upsert()
    };
    declare("old-topic").await.unwrap();
    client.fire_schedules(Duration::from_secs(5)).await.unwrap();
    assert_eq!(delayed_in(&client, "old-topic").await, 5);
    declare("new-topic").await.unwrap();
    assert_eq!(delayed_in(&client, "old-topic").await, 0);
    client.fire_schedules(Duration::from_secs(5)).await.unwrap();
    assert_eq!(delayed_in(&client, "new-topic").await, 5);
}

#[tokio::test]
async fn a_catch_up_over_a_thousand_jobs_is_refused() {
    let (client, _store) = manual();
    let refused = client
        .schedule("s")
        .every(Duration::from_secs(1))
        .topic("t")
        .missed(Missed::All { max: 1_001 })
        .upsert()
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("1000"), "{refused}");
}

/// A resume racing a removal leaves no next tick behind without its schedule (the resume was
/// a check then a write, two commands, and a removal between them left an orphan tick that
/// every look met again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_racing_a_removal_leaves_no_tick_without_its_schedule() {
    let redis = RedisServer::start();
    let (a, b) = (support::client(&redis).await, support::client(&redis).await);
    for i in 0..300 {
        let id = format!("s{i}");
        a.schedule(&id)
            .every(Duration::from_secs(60))
            .topic("t")
            .upsert()
            .await
            .unwrap();
        a.pause_schedule(&id).await.unwrap();
        let (resumed, removed) = tokio::join!(a.resume_schedule(&id), b.unschedule(&id));
        assert!(removed.unwrap(), "{id} was removed");
        resumed.unwrap();
    }
    let left = redis.command(&["ZCARD", "dq:{test:0}:schedule_next"]);
    assert_eq!(left.trim(), ":0", "next ticks left without a schedule");
}

/// Issue 29, finding 5: every process down for 28 hours, a 1-second schedule with
/// `Missed::RunOnce`: the catch-up is the latest missed tick (a second ago), not a tick about
/// 100,000 periods into the outage.
#[tokio::test]
async fn a_catch_up_after_a_day_down_runs_the_latest_missed_tick() {
    let (client, store) = manual();
    client
        .schedule("s")
        .every(Duration::from_secs(1))
        .topic("t")
        .missed(Missed::RunOnce)
        .upsert()
        .await
        .unwrap();
    store.advance_to(store.now_us() + 28 * 3_600_000_000 + 500_000);
    let now_ms = store.now_us() / 1000;
    client.fire_schedules(Duration::ZERO).await.unwrap();
    let ready = client
        .jobs("t", dq::JobState::Ready, dq::admin::Cursor::START, 100)
        .await
        .unwrap();
    let mut ticks: Vec<u64> = ready
        .jobs
        .iter()
        .map(|j| j.id.as_str().trim_start_matches("s@").parse().unwrap())
        .collect();
    ticks.sort();
    let ages: Vec<u64> = ticks.iter().map(|t| now_ms - t).collect();
    assert_eq!(
        ages,
        [1500, 500],
        "the latest missed tick, then the current one"
    );
}

/// Issue 29, finding 3: a spec written by a newer version (a variant this one does not know)
/// is left to the processes that can read it: not paused, not in the way of the others, and
/// listing, pausing and removing still work.
#[tokio::test]
async fn a_schedule_this_version_cannot_read_is_left_to_the_processes_that_can() {
    use dq::store::Schedules;
    let (client, store) = manual();
    client
        .schedule("small")
        .every(Duration::from_secs(1))
        .topic("heartbeat")
        .upsert()
        .await
        .unwrap();
    let next = store.now_us() + 1_000_000;
    let newer = r#"{"repeat":{"lunar":{"phase":"full"}},"topic":"t","payload":null,"missed":"skip","max_retries":2}"#;
    store
        .put_schedule("future", newer, Some(next))
        .await
        .unwrap();
    store.advance_to(next + 1);
    client.fire_schedules(Duration::ZERO).await.unwrap();
    let kept = store.schedule("future").await.unwrap().unwrap();
    assert_eq!(kept.next_us, Some(next), "not paused, not moved");
    assert_eq!(
        delayed_in(&client, "heartbeat").await + ready_in(&client, "heartbeat").await,
        1
    );
    let listed = client.schedules().await.unwrap();
    assert_eq!(
        listed.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(),
        ["small"]
    );
    assert!(client.pause_schedule("future").await.unwrap());
    assert!(client.unschedule("future").await.unwrap());
    assert!(store.schedule("future").await.unwrap().is_none());
}

async fn ready_in(client: &Client, topic: &str) -> usize {
    client
        .jobs(topic, dq::JobState::Ready, dq::admin::Cursor::START, 100)
        .await
        .unwrap()
        .jobs
        .len()
}

/// Issue 29, finding 4: a schedule's generation went back in shard 0 (a failover lost the
/// write of its latest resume or change, or Redis' clock stepped back). The fence its ticks
/// left in the jobs' shards then refused every tick as "already there", and the schedule moved
/// on without a job: silently, for good. Now the look raises the generation and the next one
/// makes the ticks.
#[tokio::test]
async fn a_schedule_whose_generation_went_back_ticks_again() {
    let redis = RedisServer::start();
    let client = support::client(&redis).await;
    client
        .schedule("s")
        .every(Duration::from_secs(1))
        .topic("t")
        .upsert()
        .await
        .unwrap();
    assert_eq!(
        client.fire_schedules(Duration::from_secs(5)).await.unwrap(),
        5
    );
    let generation = redis.command(&["HGET", "dq:{test:0}:schedule_gen", "s"]);
    let generation: u64 = generation.lines().nth(1).unwrap().parse().unwrap();
    let older = (generation - 60_000_000).to_string();
    redis.command(&["HSET", "dq:{test:0}:schedule_gen", "s", &older]);
    client
        .fire_schedules(Duration::from_secs(10))
        .await
        .unwrap();
    client
        .fire_schedules(Duration::from_secs(10))
        .await
        .unwrap();
    let made = delayed_in(&client, "t").await + ready_in(&client, "t").await;
    assert!(
        made >= 9,
        "the ticks after the fence have no job: {made} jobs"
    );
    client.unschedule("s").await.unwrap();
}
