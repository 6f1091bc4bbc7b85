//! Upgrading: jobs that a release before wrote into Redis still run, with their payloads, due
//! times and attempts, after this release takes over (issue 34, item 1: the layout of jobs due
//! far ahead changed; the jobs written before it keep theirs).
//!
//! `tests/fixtures/redis-0.1.0.json` is every key that dq 0.1.0 (commit 11ad5b6, the release in
//! CHANGELOG.md) wrote for six `dq push` calls (README of `tests/fixtures`): delayed jobs of
//! two topics, one due in 30 s with 5 retries, one with 0 retries, one with an id dq drew, and a
//! ready one. The test writes them into a fresh redis-server, with their times moved as if they
//! had been pushed now.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use dq::push::PushOutcome;
use dq::{Due, JobContext, JobState, Listener, Runtime};
use support::{OrderCancel, RedisServer};

/// When the fixture's jobs were pushed (the earliest `created` of its envelopes), us.
const WRITTEN_US: u64 = 1_795_816_407_972_529;

fn now_us() -> u64 {
    u64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_micros(),
    )
    .unwrap()
}

/// A time of the fixture, moved by `shift` us.
fn moved(us: &str, shift: u64) -> String {
    (us.parse::<u64>().unwrap() + shift).to_string()
}

/// An envelope of format 2 (`2:<attempt>:<max>:<created>:<due>:<rest>`), its times moved.
fn moved_envelope(envelope: &str, shift: u64) -> String {
    let f: Vec<&str> = envelope.splitn(6, ':').collect();
    assert_eq!(
        f[0], "2",
        "the fixture holds envelopes of format 2: {envelope}"
    );
    format!(
        "2:{}:{}:{}:{}:{}",
        f[1],
        f[2],
        moved(f[3], shift),
        moved(f[4], shift),
        f[5]
    )
}

/// Writes the fixture into `redis`, its times moved by `shift` us.
fn load_fixture(redis: &RedisServer, shift: u64) {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/redis-0.1.0.json"
    ))
    .unwrap();
    let fixture: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut conn = redis::Client::open(redis.url())
        .unwrap()
        .get_connection()
        .unwrap();
    for key in fixture["keys"].as_array().unwrap() {
        let name = key["key"].as_str().unwrap();
        let items: Vec<&str> = key["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        let mut cmd = match key["type"].as_str().unwrap() {
            "hash" => redis::cmd("HSET"),
            "zset" => redis::cmd("ZADD"),
            "list" => redis::cmd("RPUSH"),
            "set" => redis::cmd("SADD"),
            other => panic!("a key of type {other} in the fixture"),
        };
        cmd.arg(name);
        match key["type"].as_str().unwrap() {
            "hash" if name.ends_with(":jobs") => {
                for pair in items.chunks(2) {
                    cmd.arg(pair[0]).arg(moved_envelope(pair[1], shift));
                }
            }
            "zset" => {
                // (stored member, score: ZADD takes score, member)
                for pair in items.chunks(2) {
                    cmd.arg(moved(pair[1], shift)).arg(pair[0]);
                }
            }
            _ => {
                cmd.arg(&items);
            }
        }
        let _: () = cmd.query(&mut conn).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_the_release_before_wrote_keep_their_due_times_and_attempts_and_run_once() {
    let redis = RedisServer::start();
    let pushed_at = now_us();
    load_fixture(&redis, pushed_at - WRITTEN_US);
    let c = support::client(&redis).await;

    // Each is where 0.1.0 put it, with its payload, due time and attempts.
    let expected = [
        ("order-cancel", "o-1", 1, 7_200, 3),
        ("order-cancel", "o-2", 2, 30, 6),
        ("order-cancel", "o-3", 3, 0, 3),
        ("order-cancel", "66149171481d0-2b6942eb-0", 4, 86_400, 3),
        ("order-cancel", "o-5", 5, 10_800, 1),
        ("reminders", "r-6", 6, 2_400, 3),
    ];
    for (topic, id, order, due_s, max_attempts) in expected {
        let info = c.status_in(topic, id).await.unwrap().unwrap();
        let payload: OrderCancel = serde_json::from_slice(&info.payload).unwrap();
        let state = if due_s == 0 {
            JobState::Ready
        } else {
            JobState::Delayed
        };
        assert_eq!(
            (
                info.state,
                payload.order_id,
                info.attempt,
                info.max_attempts
            ),
            (state, order, 0, max_attempts),
            "{id}"
        );
        let due_us = u64::try_from(info.due.duration_since(UNIX_EPOCH).unwrap().as_micros());
        let ahead = due_us.unwrap().saturating_sub(pushed_at) / 1_000_000;
        assert!(ahead.abs_diff(due_s) <= 1, "{id}: due in {ahead} s");
    }
    let counts = c.counts("order-cancel").await.unwrap();
    assert_eq!((counts.delayed, counts.ready), (4, 1));
    assert_eq!(c.counts("reminders").await.unwrap().delayed, 1);

    // A push of a pending id finds it; one due 2 hours ahead, pushed now, is stored compact
    // beside them.
    let again = c
        .push(OrderCancel { order_id: 0 })
        .id("o-1")
        .delay(Duration::from_secs(7_200));
    assert_eq!(
        again.send().await.unwrap().outcome,
        PushOutcome::AlreadyPending
    );
    c.push(OrderCancel { order_id: 7 })
        .id("o-7")
        .delay(Duration::from_secs(7_200))
        .await
        .unwrap();
    assert_eq!(
        redis.command(&["EXISTS", "dq:{test:0}:far"]).trim(),
        ":1",
        "stored compact"
    );

    // Made due now (as if their time had come), every job of the release before runs once,
    // with its payload; the new one too.
    let ran: Arc<Mutex<HashMap<String, Vec<u64>>>> = Arc::default();
    let mut b = Runtime::builder()
        .config(support::no_safety_tick(&redis).build().unwrap())
        .without_registered_listeners();
    for topic in ["order-cancel", "reminders"] {
        let ran = ran.clone();
        b = b.listener(Listener::new(
            topic,
            move |job: OrderCancel, ctx: JobContext| {
                let ran = ran.clone();
                async move {
                    let mut ran = ran.lock().unwrap();
                    ran.entry(ctx.id().to_string())
                        .or_default()
                        .push(job.order_id);
                }
            },
        ));
    }
    let rt = b.start().await.unwrap();
    for (topic, id, _, due_s, _) in expected {
        if due_s > 0 {
            let now = c.reschedule_in(topic, id, Due::After(Duration::ZERO)).await;
            assert_eq!(now.unwrap(), dq::admin::ChangeOutcome::Done, "{id}");
        }
    }
    let now = c.reschedule_in("order-cancel", "o-7", Due::After(Duration::ZERO));
    assert_eq!(now.await.unwrap(), dq::admin::ChangeOutcome::Done);
    let all = expected.len() + 1;
    support::wait_until(
        Duration::from_secs(20),
        || ran.lock().unwrap().len() == all,
        || format!("only these ran: {:?}", ran.lock().unwrap()),
    )
    .await;
    rt.shutdown().await.unwrap();
    let ran = ran.lock().unwrap().clone();
    for (_, id, order, _, _) in expected {
        assert_eq!(ran.get(id), Some(&vec![order]), "{id} ran once: {ran:?}");
    }
    assert_eq!(ran.get("o-7"), Some(&vec![7]));
}
