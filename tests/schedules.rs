//! Periodic schedules: declared through the client, fired by every runtime, one job per tick,
//! whatever the interleaving of the processes that fire them (issue 19's review).

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod support;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use dq::admin::Cursor;
use dq::schedule::{fire_due, Missed, ScheduleBuilder, Tick};
use dq::store::MemoryStore;
use dq::testing::TestRuntime;
use dq::{Client, Config, JobContext, JobInfo, JobState, Listener, Runtime};
use support::faulty::Faulty;
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

/// Schedule `id`: every `secs` seconds, a job on `topic` (to upsert, or to change first).
fn every(client: &Client, id: &str, secs: u64, topic: &str) -> ScheduleBuilder {
    client
        .schedule(id)
        .every(Duration::from_secs(secs))
        .topic(topic)
}

/// Schedule `every-second`: a cron expression firing every second, a job on `heartbeat`.
async fn heartbeat_every_second(client: &Client) {
    let cron = client.schedule("every-second").cron("* * * * * *");
    cron.topic("heartbeat").upsert().await.unwrap();
}

/// The jobs of `topic` in `state` (the first 1,000).
async fn jobs_in(client: &Client, topic: &str, state: JobState) -> Vec<JobInfo> {
    let page = client.jobs(topic, state, Cursor::START, 1000).await;
    page.unwrap().jobs
}

async fn delayed_in(client: &Client, topic: &str) -> usize {
    jobs_in(client, topic, JobState::Delayed).await.len()
}

async fn ready_in(client: &Client, topic: &str) -> usize {
    jobs_in(client, topic, JobState::Ready).await.len()
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
    let sweep = every(rt.client(), "sweep-every-5m", 300, "sweep");
    sweep.upsert().await.unwrap();
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
    heartbeat_every_second(&client).await;
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
    let every_ten_minutes = every(&client, "s", 600, "t").missed(policy);
    every_ten_minutes.upsert().await.unwrap();
    // Every process down for an hour: six ticks go by unfired.
    store.advance_to(store.now_us() + 3_600_000_000 + 1);
    fire_due(&client, Duration::ZERO).await.unwrap();
    let ready = jobs_in(&client, "t", JobState::Ready).await;
    let delayed = jobs_in(&client, "t", JobState::Delayed).await;
    ready
        .iter()
        .chain(&delayed)
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
    let refused = |schedule: ScheduleBuilder| async move { schedule.upsert().await.unwrap_err() };
    let e = refused(client.schedule("x").cron("0 25 * * *").topic("t")).await;
    assert!(e.to_string().contains("0 25 * * *"), "{e}");
    let e = refused(
        client
            .schedule("x")
            .cron("0 9 * * *")
            .tz("Paris")
            .topic("t"),
    )
    .await;
    assert!(
        e.to_string().contains("\"Paris\"") && e.to_string().contains("IANA"),
        "{e}"
    );
    let e = refused(client.schedule("x").cron("0 9 * * *")).await;
    assert!(e.to_string().contains(".topic("), "{e}");
    let e = refused(every(&client, "a@b", 60, "t")).await;
    assert!(e.to_string().contains("no '@'"), "{e}");
    assert_eq!(e.kind(), dq::ErrorKind::InvalidInput);
}

#[tokio::test]
async fn one_look_creates_every_tick_inside_the_lookahead_each_due_at_its_tick() {
    let (client, store) = manual();
    heartbeat_every_second(&client).await;
    let now = store.now_us();
    // One look, five seconds ahead: the five ticks in that window are jobs already, so a
    // process that stalls for a few seconds after this look leaves none of them late.
    let created = fire_due(&client, Duration::from_secs(5)).await.unwrap();
    assert_eq!(created, 5);
    let delayed = jobs_in(&client, "heartbeat", JobState::Delayed).await;
    let mut due: Vec<u64> = delayed.iter().map(|j| to_us(j.due) - now).collect();
    due.sort_unstable();
    assert_eq!(
        due,
        [1, 2, 3, 4, 5].map(|s| s * 1_000_000 - now % 1_000_000)
    );
    // A second look in the same instant creates nothing more.
    assert_eq!(fire_due(&client, Duration::from_secs(5)).await.unwrap(), 0);
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
    heartbeat_every_second(&client).await;
    fire_due(&client, Duration::from_secs(5)).await.unwrap();
    assert_eq!(delayed_in(&client, "heartbeat").await, 5);
    assert!(client.pause_schedule("every-second").await.unwrap());
    assert_eq!(
        delayed_in(&client, "heartbeat").await,
        0,
        "paused: none of its ticks runs"
    );
    assert_eq!(fire_due(&client, Duration::from_secs(5)).await.unwrap(), 0);

    assert!(client.resume_schedule("every-second").await.unwrap());
    assert_eq!(
        fire_due(&client, Duration::from_secs(5)).await.unwrap(),
        5,
        "the same ticks again"
    );
    assert!(client.unschedule("every-second").await.unwrap());
    assert_eq!(
        delayed_in(&client, "heartbeat").await,
        0,
        "removed: none of its ticks runs"
    );
}

#[tokio::test]
async fn a_schedule_that_cannot_fire_does_not_hold_up_the_others() {
    let (client, store) = manual();
    let big = |client: &Client, id: &str| {
        let message = "x".repeat(10_000);
        let schedule = client.schedule(id).every(Duration::from_secs(1));
        schedule.message_to("reports", &message).upsert()
    };
    // Declared by a process that allows 10 KB payloads...
    big(&client, "big").await.unwrap();
    every(&client, "small", 1, "heartbeat")
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
    assert_eq!(fire_due(&strict, Duration::from_secs(5)).await.unwrap(), 5);
    assert_eq!(delayed_in(&client, "heartbeat").await, 5);
    assert_eq!(delayed_in(&client, "reports").await, 0);
    // A message over the limit of the process declaring it is refused there.
    let refused = big(&strict, "big2").await.unwrap_err();
    assert!(refused.to_string().contains("payload limit"), "{refused}");
}

#[tokio::test]
async fn one_look_fires_every_due_schedule_however_many() {
    let (client, _store) = manual();
    for i in 0..150 {
        let id = format!("s{i}");
        every(&client, &id, 1, "heartbeat").upsert().await.unwrap();
    }
    assert_eq!(
        fire_due(&client, Duration::from_secs(5)).await.unwrap(),
        150 * 5
    );
}

#[tokio::test]
async fn resuming_a_running_schedule_changes_nothing() {
    let (client, _store) = manual();
    every(&client, "s", 1, "heartbeat").upsert().await.unwrap();
    fire_due(&client, Duration::from_secs(5)).await.unwrap();
    let before = client.schedules().await.unwrap()[0].next;
    assert!(client.resume_schedule("s").await.unwrap());
    assert_eq!(client.schedules().await.unwrap()[0].next, before);
    assert_eq!(
        fire_due(&client, Duration::from_secs(5)).await.unwrap(),
        0,
        "no tick made again"
    );
}

#[tokio::test]
async fn changing_a_schedule_cancels_the_jobs_made_ahead_under_the_old_one() {
    let (client, _store) = manual();
    every(&client, "s", 1, "old-topic").upsert().await.unwrap();
    fire_due(&client, Duration::from_secs(5)).await.unwrap();
    assert_eq!(delayed_in(&client, "old-topic").await, 5);
    every(&client, "s", 1, "new-topic").upsert().await.unwrap();
    assert_eq!(delayed_in(&client, "old-topic").await, 0);
    fire_due(&client, Duration::from_secs(5)).await.unwrap();
    assert_eq!(delayed_in(&client, "new-topic").await, 5);
}

#[tokio::test]
async fn a_catch_up_over_a_thousand_jobs_is_refused() {
    let (client, _store) = manual();
    let too_many = every(&client, "s", 1, "t").missed(Missed::All { max: 1_001 });
    let refused = too_many.upsert().await.unwrap_err();
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
        every(&a, &id, 60, "t").upsert().await.unwrap();
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
    let catching_up = every(&client, "s", 1, "t").missed(Missed::RunOnce);
    catching_up.upsert().await.unwrap();
    store.advance_to(store.now_us() + 28 * 3_600_000_000 + 500_000);
    let now_ms = store.now_us() / 1000;
    fire_due(&client, Duration::ZERO).await.unwrap();
    let ready = jobs_in(&client, "t", JobState::Ready).await;
    let mut ticks: Vec<u64> = ready
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
    every(&client, "small", 1, "heartbeat")
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
    fire_due(&client, Duration::ZERO).await.unwrap();
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

/// Issue 29, finding 4: a schedule's generation went back in shard 0 (a failover lost the
/// write of its latest resume or change, or Redis' clock stepped back). The fence its ticks
/// left in the jobs' shards then refused every tick as "already there", and the schedule moved
/// on without a job: silently, for good. Now the look raises the generation and the next one
/// makes the ticks.
#[tokio::test]
async fn a_schedule_whose_generation_went_back_ticks_again() {
    let redis = RedisServer::start();
    let client = support::client(&redis).await;
    every(&client, "s", 1, "t").upsert().await.unwrap();
    assert_eq!(fire_due(&client, Duration::from_secs(5)).await.unwrap(), 5);
    let generation = redis.command(&["HGET", "dq:{test:0}:schedule_gen", "s"]);
    let generation: u64 = generation.lines().nth(1).unwrap().parse().unwrap();
    let older = (generation - 60_000_000).to_string();
    redis.command(&["HSET", "dq:{test:0}:schedule_gen", "s", &older]);
    fire_due(&client, Duration::from_secs(10)).await.unwrap();
    fire_due(&client, Duration::from_secs(10)).await.unwrap();
    let made = delayed_in(&client, "t").await + ready_in(&client, "t").await;
    assert!(
        made >= 9,
        "the ticks after the fence have no job: {made} jobs"
    );
    client.unschedule("s").await.unwrap();
}

// Issue 19's review: a schedule's tick is made into one job, whatever the interleaving of the
// processes that fire it.

/// A redis-server, and the config of the tests below ([`support::no_safety_tick`]).
fn quiet_redis() -> (RedisServer, Config) {
    let redis = RedisServer::start();
    let config = support::no_safety_tick(&redis).build().unwrap();
    (redis, config)
}

/// A client whose pushes of jobs with ids starting `prefix` hold until the test lets them go
/// (`push_gate`), and the store that holds them.
async fn holding_pushes(config: &Config, prefix: &str) -> (Arc<Faulty>, Client) {
    let mut faulty = Faulty::new(config).await;
    faulty.hold_push = Some(prefix.into());
    let faulty = Arc::new(faulty);
    let client = Client::new(faulty.clone(), config.clone());
    (faulty, client)
}

/// Sleeps until `tick` is due by Redis' clock.
async fn until_due(client: &Client, tick: SystemTime) {
    loop {
        let now = client.store_time().await.unwrap();
        match tick.duration_since(now) {
            Ok(left) if !left.is_zero() => tokio::time::sleep(left).await,
            _ => return,
        }
    }
}

/// The job of `schedule`'s `tick` on `topic`, if there is one.
async fn job_of_tick(
    client: &Client,
    schedule: &str,
    topic: &str,
    tick: SystemTime,
) -> Option<JobInfo> {
    let id = dq::schedule::tick_job_id(schedule, tick);
    client.status_in(topic, &id).await.unwrap()
}

/// Schedule `greet`: every second, `word` to `greetings`.
fn greet(client: &Client, word: &'static str) -> ScheduleBuilder {
    let schedule = client.schedule("greet").every(Duration::from_secs(1));
    schedule.message_to("greetings", &word)
}

/// Sleeps until 20 ms past the next whole second of the clock.
async fn start_of_a_second() {
    let since = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap();
    let past = Duration::from_nanos(u64::from(since.subsec_nanos()));
    tokio::time::sleep(Duration::from_millis(1020) - past).await;
}

/// The message the job of `greet`'s `tick` carries, if there is such a job.
async fn greeting_at(client: &Client, tick: SystemTime) -> Option<String> {
    let job = job_of_tick(client, "greet", "greetings", tick).await;
    job.map(|j| String::from_utf8_lossy(&j.payload).into_owned())
}

/// A process that read a tick as due, then stalled (a paused VM, a stopped container) until
/// the tick's job had run elsewhere and its reservation had run out, must not create that job
/// again when it wakes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_stalled_past_a_ticks_reservation_does_not_make_its_job_again() {
    let (redis, config) = quiet_redis();
    let (faulty, stalled) = holding_pushes(&config, "beat@").await;
    let client = Client::connect(config.clone()).await.unwrap();
    let tick = every(&client, "beat", 1, "beats")
        .upsert()
        .await
        .unwrap()
        .next
        .unwrap();
    until_due(&client, tick).await;
    // The stalled process looks at the schedule and holds before its push. No runtime runs yet:
    // its ticker fires ticks ahead of time, and one that fired this tick before the look left
    // it nothing to push (the test then waited for good).
    let look = tokio::spawn(async move { fire_due(&stalled, Duration::ZERO).await });
    faulty.pushing.notified().await;
    let runs = Arc::new(Mutex::new(Vec::new()));
    let r = runs.clone();
    let listener = Listener::new("beats", move |tick: Tick, _: JobContext| {
        r.lock().unwrap().push(tick.at);
        async {}
    });
    let rt = support::runtime_with(&redis, listener).await;
    // Another process fires the tick; its job runs.
    let id = dq::schedule::tick_job_id("beat", tick);
    fire_due(&client, Duration::ZERO).await.unwrap();
    support::wait_until_done(&client, "beats", &id).await;
    assert_eq!(runs.lock().unwrap().len(), 1);
    // Ten minutes later its reservation has run out (the test removes it), and the stalled
    // process wakes up and pushes.
    for key in redis.command(&["KEYS", "*unique"]).lines() {
        redis.command(&["DEL", key]);
    }
    faulty.push_gate.add_permits(1);
    let created = look.await.unwrap().unwrap();
    assert_eq!(created, 0, "the stalled process made the tick's job again");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let status = client.status_in("beats", &id).await.unwrap();
    let ran = runs.lock().unwrap().len();
    assert_eq!(ran, 1, "tick {id} ran twice ({status:?})");
    rt.shutdown().await.unwrap();
}

/// A look under way while the schedule is changed (here its message) cannot go on making the
/// jobs of the coming ticks with the old spec: at most the one it was pushing is left (its tick
/// is a tick of the new spec too), and the ticks after it carry the new message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_look_under_way_when_a_schedule_changes_makes_no_more_jobs_of_the_old_spec() {
    let (_redis, config) = quiet_redis();
    let (faulty, stalled) = holding_pushes(&config, "greet@").await;
    let client = Client::connect(config.clone()).await.unwrap();
    // Early in a second, so that the next whole-second tick is still to come at the change
    // below (a tick passed meanwhile would move the schedule's next one on).
    start_of_a_second().await;
    let tick = greet(&client, "old").upsert().await.unwrap().next.unwrap();
    // The look fires the coming ticks ahead of time and holds before its first push.
    let look = tokio::spawn(async move { fire_due(&stalled, Duration::from_secs(5)).await });
    faulty.pushing.notified().await;
    // The schedule changes meanwhile; its next tick stays the same.
    let changed = greet(&client, "new").upsert().await.unwrap();
    assert_eq!(changed.next, Some(tick));
    faulty.push_gate.add_permits(100);
    look.await.unwrap().unwrap();
    // The next look (any process) makes the jobs of the ticks after it with the new message.
    fire_due(&client, Duration::from_secs(5)).await.unwrap();
    assert!(
        greeting_at(&client, tick).await.is_some(),
        "the tick has a job"
    );
    for later in 1..=3 {
        let t = tick + Duration::from_secs(later);
        assert_eq!(
            greeting_at(&client, t).await.as_deref(),
            Some("\"new\""),
            "tick {t:?}"
        );
    }
    client.unschedule("greet").await.unwrap();
}

/// The same, when the change moves the ticks elsewhere: the job the look was pushing, for a
/// tick the schedule no longer has, goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_look_under_way_when_a_schedule_changes_leaves_no_job_at_a_tick_it_no_longer_has() {
    let (_redis, config) = quiet_redis();
    let (faulty, stalled) = holding_pushes(&config, "greet@").await;
    let client = Client::connect(config.clone()).await.unwrap();
    let declared = every(&client, "greet", 1, "greetings").upsert().await;
    let mut tick = declared.unwrap().next.unwrap();
    while to_secs(tick).is_multiple_of(3600) {
        // A tick of the hourly schedule too: wait for the next one.
        tokio::time::sleep(Duration::from_secs(1)).await;
        tick = client.schedules().await.unwrap()[0].next.unwrap();
    }
    let look = tokio::spawn(async move { fire_due(&stalled, Duration::from_secs(5)).await });
    faulty.pushing.notified().await;
    every(&client, "greet", 3600, "greetings")
        .upsert()
        .await
        .unwrap();
    faulty.push_gate.add_permits(100);
    look.await.unwrap().unwrap();
    let job = job_of_tick(&client, "greet", "greetings", tick).await;
    assert!(job.is_none(), "a job of the old spec was left: {job:?}");
    client.unschedule("greet").await.unwrap();
}

fn to_secs(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs()
}

/// A look under way when the schedule is paused (or removed) leaves no job of it behind: the
/// pause cancels what was made ahead, and the look, whose move then fails, removes the job it
/// was pushing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_look_under_way_when_a_schedule_is_paused_or_removed_leaves_no_job_of_it() {
    let (_redis, config) = quiet_redis();
    let client = Client::connect(config.clone()).await.unwrap();
    for remove in [false, true] {
        let (faulty, stalled) = holding_pushes(&config, "nap@").await;
        let tick = every(&client, "nap", 1, "naps").upsert().await.unwrap();
        let tick = tick.next.unwrap();
        let look = tokio::spawn(async move { fire_due(&stalled, Duration::from_secs(5)).await });
        faulty.pushing.notified().await;
        if remove {
            assert!(client.unschedule("nap").await.unwrap());
        } else {
            assert!(client.pause_schedule("nap").await.unwrap());
        }
        faulty.push_gate.add_permits(100);
        look.await.unwrap().unwrap();
        let job = job_of_tick(&client, "nap", "naps", tick).await;
        assert!(job.is_none(), "removed {remove}: a job was left: {job:?}");
        client.unschedule("nap").await.unwrap();
    }
}

/// Issue 29, finding 2: a changed schedule was stored, then the jobs made ahead under the old
/// spec were cancelled; a look by another process in between made (or took over) the coming
/// ticks' jobs under the new spec, and the cancel then removed them: up to a lookahead of
/// ticks lost. Every tick after the change keeps its job, with the new message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_look_right_after_a_schedule_changes_keeps_the_ticks_it_made() {
    let (_redis, config) = quiet_redis();
    let mut faulty = Faulty::new(&config).await;
    faulty.hold_put = true;
    let faulty = Arc::new(faulty);
    let changer = Client::new(faulty.clone(), config.clone());
    let client = Client::connect(config.clone()).await.unwrap();
    greet(&client, "old").upsert().await.unwrap();
    fire_due(&client, Duration::from_secs(5)).await.unwrap();
    let change = tokio::spawn(async move { greet(&changer, "new").upsert().await });
    tokio::time::timeout(Duration::from_secs(5), faulty.put_done.notified())
        .await
        .expect("the change was stored");
    let stored = client.store_time().await.unwrap();
    // Another process looks right after the new spec is stored.
    fire_due(&client, Duration::from_secs(5)).await.unwrap();
    faulty.put_gate.add_permits(1);
    change.await.unwrap().unwrap();
    let first = dq::store::from_us((dq::store::to_us(stored) / 1_000_000 + 2) * 1_000_000);
    for later in 0..3 {
        let tick = first + Duration::from_secs(later);
        let id = dq::schedule::tick_job_id("greet", tick);
        let message = greeting_at(&client, tick).await;
        assert_eq!(message.as_deref(), Some("\"new\""), "tick {id}");
    }
    client.unschedule("greet").await.unwrap();
}

// Groups: a schedule's ticks go in the group it is given (helper-62's review of issue 33: ticks
// were always ungrouped), not in its message's by themselves (helper-65: a schedule declared
// before groups would then change on upgrade).

/// A nightly sync of one account, grouped by its account (README "Groups").
#[derive(serde::Serialize, serde::Deserialize, dq::Message)]
#[message(topic = "account-sync", group = "account")]
struct AccountSync {
    account: String,
}

/// The jobs of `topic` waiting for their ticks: (id, group).
/// The ids and groups of `topic`'s jobs waiting to run: delayed, and ready (a tick due by the
/// time its job was pushed goes straight to ready: the first one, on a busy machine).
async fn waiting_groups(client: &Client, topic: &str) -> Vec<(String, Option<String>)> {
    let mut jobs = jobs_in(client, topic, JobState::Delayed).await;
    jobs.extend(jobs_in(client, topic, JobState::Ready).await);
    jobs.into_iter()
        .map(|j| (j.id.to_string(), j.group))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_tick_of_a_grouped_schedule_goes_in_its_group_whatever_the_shards() {
    let redis = RedisServer::start();
    // Four shards: every job of a group lives in its group's shard, so a tick's id leads there.
    let config = support::no_safety_tick(&redis).shards(4).build().unwrap();
    let client = Client::connect(config).await.unwrap();
    let sync = AccountSync {
        account: "acct-7".into(),
    };
    let schedule = client.schedule("sync-7").every(Duration::from_secs(1));
    let grouped = schedule.message(&sync).group(sync.account.clone());
    grouped.upsert().await.unwrap();
    let listed = client.schedules().await.unwrap();
    assert_eq!(listed[0].spec.group.as_deref(), Some("acct-7"));
    let created = fire_due(&client, Duration::from_secs(5)).await.unwrap();
    assert_eq!(created, 5, "every tick in the lookahead became a job");
    let jobs = waiting_groups(&client, "account-sync").await;
    assert_eq!(jobs.len(), 5, "{jobs:?}");
    let topic = dq::Topic::new("account-sync").unwrap();
    let home = dq::store::shard_of_group(&topic, "acct-7", 4);
    for (id, group) in &jobs {
        assert_eq!(
            group.as_deref(),
            Some("acct-7"),
            "{id} is in the account's group"
        );
        assert!(
            id.starts_with("sync-7@"),
            "{id} is named for its schedule and tick"
        );
        let job = dq::JobId::new(id.as_str()).unwrap();
        assert_eq!(
            dq::store::shard_of(&topic, &job, 4),
            home,
            "{id} is in the group's shard"
        );
    }
    // A second look makes no second job of any tick (the ids are the same in every process):
    // what it makes are the ticks the time since the first look brought into its window (the
    // suite's load may make that a second; it failed once in `scripts/test`, 1 against 0).
    let again = fire_due(&client, Duration::from_secs(5)).await.unwrap();
    let after = waiting_groups(&client, "account-sync").await;
    assert_eq!(after.len(), jobs.len() + again, "{after:?}");
    for (id, _) in &jobs {
        assert_eq!(
            after.iter().filter(|(a, _)| a == id).count(),
            1,
            "{id} once"
        );
    }
    // Run now makes one more job, in the group too.
    let now = client.run_schedule_now("sync-7").await.unwrap().unwrap();
    let info = client
        .status_in("account-sync", now.id.as_str())
        .await
        .unwrap();
    assert_eq!(info.unwrap().group.as_deref(), Some("acct-7"));
}

#[tokio::test]
async fn a_schedules_group_is_the_one_it_is_given_not_its_messages_and_a_bad_one_is_refused() {
    let (client, store) = manual();
    let sync = AccountSync {
        account: "acct-7".into(),
    };
    // Declared as before groups: the message's group field does not change the schedule.
    let before = client.schedule("old").every(Duration::from_secs(60));
    let old = before.message(&sync).upsert().await.unwrap();
    assert_eq!(old.spec.group, None);
    let every_minute = client.schedule("sync").every(Duration::from_secs(60));
    every_minute
        .message(&sync)
        .group("acct-9")
        .upsert()
        .await
        .unwrap();
    store.advance_to(store.now_us() + 60_000_000);
    assert_eq!(fire_due(&client, Duration::ZERO).await.unwrap(), 2);
    let ready = jobs_in(&client, "account-sync", JobState::Ready).await;
    let groups: BTreeSet<Option<String>> = ready.into_iter().map(|j| j.group).collect();
    assert_eq!(groups, BTreeSet::from([None, Some("acct-9".to_owned())]));
    let bad = client.schedule("sync").every(Duration::from_secs(60));
    let e = bad
        .message(&sync)
        .group("acct 9")
        .upsert()
        .await
        .unwrap_err();
    assert_eq!(e.kind(), dq::ErrorKind::InvalidInput);
    assert!(e.to_string().contains("group \"acct 9\""), "{e}");
    // A schedule without a group, and one whose message has none, stay ungrouped.
    let plain = client.schedule("plain").every(Duration::from_secs(60));
    plain
        .message_to("account-sync", &sync)
        .upsert()
        .await
        .unwrap();
    let listed = client.schedules().await.unwrap();
    let plain = listed.iter().find(|s| s.id == "plain").unwrap();
    assert_eq!(plain.spec.group, None);
}

/// A look under way when a schedule is given a group (on several shards, where the tick's job
/// id then leads elsewhere) leaves one job of the tick, in the group: the job the look was
/// pushing under the old spec is not that tick's job for the new one (helper-65's review).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_look_under_way_when_a_schedule_gets_a_group_leaves_one_job_of_each_tick_in_it() {
    let redis = RedisServer::start();
    let config = support::no_safety_tick(&redis).shards(4).build().unwrap();
    let (faulty, stalled) = holding_pushes(&config, "greet@").await;
    let client = Client::connect(config.clone()).await.unwrap();
    start_of_a_second().await;
    let tick = greet(&client, "hi").upsert().await.unwrap().next.unwrap();
    let look = tokio::spawn(async move { fire_due(&stalled, Duration::from_secs(5)).await });
    faulty.pushing.notified().await;
    let changed = greet(&client, "hi").group("g").upsert().await.unwrap();
    assert_eq!(changed.next, Some(tick));
    faulty.push_gate.add_permits(100);
    look.await.unwrap().unwrap();
    fire_due(&client, Duration::from_secs(5)).await.unwrap();
    let name = dq::schedule::tick_job_id("greet", tick);
    let mut of_tick: Vec<(String, Option<String>)> = Vec::new();
    for state in [JobState::Delayed, JobState::Ready] {
        for j in jobs_in(&client, "greetings", state).await {
            let id = j.id.to_string();
            if id == name || id.starts_with(&format!("{name}.")) {
                of_tick.push((id, j.group));
            }
        }
    }
    assert_eq!(of_tick.len(), 1, "one job of the tick: {of_tick:?}");
    assert_eq!(of_tick[0].1.as_deref(), Some("g"), "{of_tick:?}");
    client.unschedule("greet").await.unwrap();
}
