//! What only the Redis store has: the key layout and hashtags, the wake channel, scripts
//! reloaded after SCRIPT FLUSH, malformed data planted in Redis, an unreachable server.
//! The behaviours both stores share are in `store_behaviour.rs`.

#![allow(clippy::unwrap_used, unreachable_pub)] // test code: a panic is the failure report

mod support;

use std::time::Duration;

use dq::admin::Cursor;
use dq::Error;
use support::{
    client, client_with, push_order, replica_of, topic, OrderCancel, RedisServer, LEASE,
};

#[tokio::test]
async fn push_announces_a_new_earliest_due_time_on_the_wake_channel() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    let rc = redis::Client::open(redis.url()).unwrap();
    let mut pubsub = rc.get_async_pubsub().await.unwrap();
    pubsub.subscribe("dq:{test:0}:wake").await.unwrap();
    let mut messages = pubsub.into_on_message();
    push_order(&c, 1, "late", Duration::from_secs(60)).await;
    push_order(&c, 2, "later", Duration::from_secs(120)).await;
    push_order(&c, 3, "early", Duration::from_secs(30)).await;
    use futures_util::StreamExt;
    let mut dues = Vec::new();
    for _ in 0..2 {
        let msg = tokio::time::timeout(Duration::from_secs(2), messages.next())
            .await
            .unwrap()
            .unwrap();
        dues.push(msg.get_payload::<u64>().unwrap());
    }
    let early = dq::store::to_us(
        c.status_in("order-cancel", "early")
            .await
            .unwrap()
            .unwrap()
            .due,
    );
    assert_eq!(
        dues[1], early,
        "only pushes that became the earliest were announced"
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(100), messages.next())
            .await
            .is_err()
    );
}

/// push.lua writes a lone new job in a few commands (its first section), and jobs pushed together
/// in its general path: a job leaves the same data either way, delayed or ready.
#[tokio::test]
async fn the_short_section_of_push_leaves_the_data_the_general_path_leaves() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    // A job made ready is announced on the shard's `ready` channel, by either path.
    let mut ready = subscribed(&redis, "dq:{test:0}:ready")
        .await
        .into_on_message();
    // (Two minutes ahead: a job due further ahead is written compact by the general path
    // alone, see the test after this one.)
    let at = std::time::SystemTime::now() + Duration::from_secs(120);
    for (topic, due) in [("later", Some(at)), ("now", None)] {
        let push = |id: &str| {
            let p = c.push_to(topic, &7u32).id(id);
            match due {
                Some(at) => p.at(at),
                None => p,
            }
        };
        push("alone").send().await.unwrap();
        if due.is_none() {
            use futures_util::StreamExt;
            let rung = tokio::time::timeout(Duration::from_secs(2), ready.next())
                .await
                .expect("the lone push of a ready job rings the topic")
                .unwrap();
            assert_eq!(rung.get_payload::<String>().unwrap(), topic);
        }
        c.push_batch([push("b1"), push("b2")]).await.unwrap();
        // An id twice in one call takes the general path (the second is kept, not created).
        c.push_batch([push("c1"), push("c2"), push("c1")])
            .await
            .unwrap();
    }
    let rc = redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let query = |args: Vec<String>| {
        let mut rc = rc.clone();
        let mut cmd = redis::cmd(&args[0]);
        for a in &args[1..] {
            cmd.arg(a);
        }
        async move { cmd.query_async::<redis::Value>(&mut rc).await.unwrap() }
    };
    let key = |k: &str| format!("dq:{{test:0}}:{k}");
    let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    // An envelope without its creation time (field 4), which differs between the calls, and
    // for a job to run now without its due time (field 5), the time of its push.
    let envelope = |v: redis::Value, now: bool| {
        let redis::Value::BulkString(b) = v else {
            panic!("no envelope: {v:?}")
        };
        let text = String::from_utf8(b).unwrap();
        let mut fields: Vec<&str> = text.splitn(6, ':').collect();
        if now {
            fields.remove(4);
        }
        fields.remove(3);
        fields.join(":")
    };
    for topic in ["later", "now"] {
        let (alone, b1, c1) = (
            format!("{topic}:alone"),
            format!("{topic}:b1"),
            format!("{topic}:c1"),
        );
        let jobs = key("jobs");
        let now = topic == "now";
        let a = envelope(query(args(&["HGET", &jobs, &alone])).await, now);
        let b = envelope(query(args(&["HGET", &jobs, &b1])).await, now);
        let general = envelope(query(args(&["HGET", &jobs, &c1])).await, now);
        assert_eq!(a, general, "{topic}: the envelopes differ");
        assert_eq!(b, general, "{topic}: the envelopes differ");
        let delayed = key("delayed");
        for short in [&alone, &b1] {
            assert_eq!(
                query(args(&["ZSCORE", &delayed, short])).await,
                query(args(&["ZSCORE", &delayed, &c1])).await,
                "{topic}: the due times differ"
            );
        }
    }
    let counts = key("counts");
    assert_eq!(
        query(args(&["HGET", &counts, "later:delayed"])).await,
        redis::Value::BulkString(b"5".to_vec())
    );
    assert_eq!(
        query(args(&["LRANGE", &key("ready:now"), "0", "-1"])).await,
        redis::Value::Array(
            ["alone", "b1", "b2", "c1", "c2"]
                .iter()
                .map(|s| redis::Value::BulkString(s.as_bytes().to_vec()))
                .collect()
        )
    );
    for topic in ["later", "now"] {
        assert_eq!(
            query(args(&["SISMEMBER", &key("topics"), topic])).await,
            redis::Value::Int(1)
        );
    }
    // Only the two calls with an id twice took the general path: it alone counts the delayed
    // set (ZCARD), once a call.
    let stats = redis.command(&["INFO", "commandstats"]);
    assert!(stats.contains("cmdstat_zcard:calls=2,"), "{stats}");
}

#[tokio::test]
async fn a_job_due_hours_ahead_is_stored_compact_and_moved_into_place_at_its_exact_due_time() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    let mut rc = redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let key = |k: &str| format!("dq:{{test:0}}:{k}");
    let member = "order-cancel:far";
    push_order(&c, 9, "far", Duration::from_secs(2 * 3600)).await;
    let before = c.status_in("order-cancel", "far").await.unwrap().unwrap();
    let due_us = u64::try_from(
        before
            .due
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_micros(),
    )
    .unwrap();

    // Compact: neither in `jobs` nor in `delayed`, but in a part scored by its due time.
    let in_jobs: bool = redis::cmd("HEXISTS")
        .arg(key("jobs"))
        .arg(member)
        .query_async(&mut rc)
        .await
        .unwrap();
    let in_delayed: Option<f64> = redis::cmd("ZSCORE")
        .arg(key("delayed"))
        .arg(member)
        .query_async(&mut rc)
        .await
        .unwrap();
    assert!(!in_jobs && in_delayed.is_none(), "stored compact");
    let parts: Vec<(String, u64)> = redis::cmd("ZRANGE")
        .arg(key("far"))
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query_async(&mut rc)
        .await
        .unwrap();
    assert_eq!(parts.len(), 1);
    assert_eq!(
        parts[0].1, due_us,
        "the part is scored by its earliest due time"
    );
    assert!(parts[0].0.ends_with(":0:order-cancel"), "{parts:?}");
    let moves_at = c.store().promote(0, 1000).await.unwrap().next_due_us;
    assert_eq!(
        moves_at,
        Some(due_us - 300_000_000),
        "the mover comes back 5 minutes before the job is due"
    );

    // A member of `far` that names no part (never written by dq) is dropped, and holds
    // nothing up.
    let _: () = redis::cmd("ZADD")
        .arg(key("far"))
        .arg(0)
        .arg("not a part")
        .query_async(&mut rc)
        .await
        .unwrap();
    c.store().promote(0, 1000).await.unwrap();
    // Its part made due to move (as if the time had come): the job goes into `jobs` and
    // `delayed` with its exact due time, the same job as before, and nothing is left behind.
    let _: () = redis::cmd("ZADD")
        .arg(key("far"))
        .arg("XX")
        .arg(0)
        .arg(&parts[0].0)
        .query_async(&mut rc)
        .await
        .unwrap();
    let moved = c.store().promote(0, 1000).await.unwrap();
    assert_eq!(moved.moved, 0, "not due yet");
    assert_eq!(moved.next_due_us, Some(due_us));
    let score: Option<u64> = redis::cmd("ZSCORE")
        .arg(key("delayed"))
        .arg(member)
        .query_async(&mut rc)
        .await
        .unwrap();
    assert_eq!(score, Some(due_us));
    let after = c.status_in("order-cancel", "far").await.unwrap().unwrap();
    assert_eq!(
        (after.state, after.due, after.created, after.payload.clone()),
        (
            before.state,
            before.due,
            before.created,
            before.payload.clone()
        )
    );
    assert_eq!((after.attempt, after.max_attempts), (0, 3));
    let left: Vec<String> = redis::cmd("KEYS")
        .arg("dq:{test:0}:f*")
        .query_async(&mut rc)
        .await
        .unwrap();
    assert!(
        left.is_empty(),
        "the part, its index entry and `far` are gone: {left:?}"
    );
    assert_eq!(c.counts("order-cancel").await.unwrap().delayed, 1);
}

/// A push of ids dq drew (no `.id`) looks for none among the jobs stored compact, where each
/// look costs an index read; a push of ids of the caller's looks each one up (Redis counts the
/// script's `HEXISTS` and `HGET` calls).
#[tokio::test]
async fn a_push_of_ids_dq_drew_looks_for_none_among_far_jobs() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    push_order(&c, 1, "far", Duration::from_secs(2 * 3600)).await;
    let lookups = || {
        let stats = redis.command(&["INFO", "commandstats"]);
        ["cmdstat_hexists:calls=", "cmdstat_hget:calls="]
            .iter()
            .map(|k| {
                stats.split(k).nth(1).map_or(0, |rest| {
                    rest.split(',').next().unwrap().parse::<u64>().unwrap()
                })
            })
            .sum::<u64>()
    };
    let minute = Duration::from_secs(60);
    redis.command(&["CONFIG", "RESETSTAT"]);
    for i in 0..10 {
        c.push(OrderCancel { order_id: i })
            .delay(minute)
            .await
            .unwrap();
    }
    let batch = (0..10).map(|i| c.push(OrderCancel { order_id: i }).delay(minute));
    c.push_batch(batch).await.unwrap();
    // Jobs that go far: there too.
    let hours = Duration::from_secs(2 * 3600);
    let batch = (0..10).map(|i| c.push(OrderCancel { order_id: i }).delay(hours));
    c.push_batch(batch).await.unwrap();
    assert_eq!(lookups(), 0, "no id dq drew was looked for");
    for i in 0..10 {
        let push = c.push(OrderCancel { order_id: i }).id(format!("o{i}"));
        push.delay(minute).await.unwrap();
    }
    assert_eq!(lookups(), 10, "each id of the caller's was looked for");
    assert_eq!(c.counts("order-cancel").await.unwrap().delayed, 41);
}

/// A lone push of a job due hours ahead (one awaited push, as a web request makes) is stored
/// far by push.lua's short section, as one due in a minute is stored: the general path, which
/// alone counts the delayed set (`ZCARD`), is not taken, and the job is where the general path
/// would put it.
#[tokio::test]
async fn a_lone_push_due_hours_ahead_is_stored_far_by_the_short_section() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    push_order(&c, 1, "soon", Duration::from_secs(60)).await;
    redis.command(&["CONFIG", "RESETSTAT"]);
    push_order(&c, 2, "far", Duration::from_secs(2 * 3600)).await;
    let stats = redis.command(&["INFO", "commandstats"]);
    assert!(
        !stats.contains("cmdstat_zcard"),
        "the general path was taken: {stats}"
    );
    assert!(
        stats.contains("cmdstat_rpush:calls=1,"),
        "one part written: {stats}"
    );
    let key = |k: &str| format!("dq:{{test:0}}:{k}");
    assert_eq!(
        redis
            .command(&["HEXISTS", &key("jobs"), "order-cancel:far"])
            .trim(),
        ":0",
        "not in `jobs`"
    );
    let info = c.status_in("order-cancel", "far").await.unwrap().unwrap();
    let ahead = info
        .due
        .duration_since(std::time::SystemTime::now())
        .unwrap();
    assert!(ahead > Duration::from_secs(2 * 3600 - 5), "{ahead:?}");
    let counts = c.counts("order-cancel").await.unwrap();
    assert_eq!(counts.delayed, 2);
    // A move into place finds it whole (the mover, as if its time had come).
    let parts = redis.command(&["ZRANGE", &key("far"), "0", "-1"]);
    let part = parts
        .lines()
        .find(|l| l.ends_with(":order-cancel"))
        .unwrap();
    redis.command(&["ZADD", &key("far"), "XX", "0", part]);
    c.store().promote(0, 1000).await.unwrap();
    let moved = c.status_in("order-cancel", "far").await.unwrap().unwrap();
    assert_eq!(
        (moved.due, moved.created, moved.payload),
        (info.due, info.created, info.payload)
    );
}

/// Before a rollback (OPERATIONS.md): `dq expand` leaves no key of compact storage, and each
/// job is where a release before it looks: its envelope (format 2) in `jobs`, scored by its
/// exact due time in `delayed`.
#[tokio::test]
async fn expanded_far_jobs_are_in_the_layout_the_release_before_reads() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    let mut due_us = Vec::new();
    // Up to 150 years ahead (dq::limits::MAX_DELAY is 200).
    for (i, hours) in [2u64, 30, 24 * 40, 24 * 365 * 150].into_iter().enumerate() {
        let id = format!("far{i}");
        push_order(&c, i as u64, &id, Duration::from_secs(hours * 3600)).await;
        let info = c.status_in("order-cancel", &id).await.unwrap().unwrap();
        let due = info.due.duration_since(std::time::UNIX_EPOCH).unwrap();
        due_us.push(due.as_micros().to_string());
    }
    assert!(redis.command(&["EXISTS", "dq:{test:0}:far"]).contains(":1"));
    assert_eq!(c.expand().await.unwrap().jobs, 4);
    let left = redis.command(&["KEYS", "dq:{test:0}:f*"]);
    assert_eq!(
        left.trim(),
        "*0",
        "no key of compact storage is left: {left}"
    );
    for (i, due) in due_us.iter().enumerate() {
        let member = format!("order-cancel:far{i}");
        let envelope = redis.command(&["HGET", "dq:{test:0}:jobs", &member]);
        assert!(envelope.contains("\r\n2:0:3:"), "format 2: {envelope}");
        let score = redis.command(&["ZSCORE", "dq:{test:0}:delayed", &member]);
        assert!(
            score.contains(&format!("\r\n{due}\r\n")),
            "{score} vs {due}"
        );
    }
}

/// The part of the far job `id` of order-cancel (its name in `far`) and its key.
fn far_part(redis: &RedisServer) -> (String, String) {
    let parts = redis.command(&["ZRANGE", "dq:{test:0}:far", "0", "-1"]);
    let part = parts
        .lines()
        .find(|l| l.ends_with(":0:order-cancel"))
        .unwrap_or_else(|| panic!("one part: {parts}"))
        .to_owned();
    let key = format!("dq:{{test:0}}:far:{part}");
    (part, key)
}

/// Rule 3 for far jobs: an element of a part that cannot be read (dq never writes one: here
/// four jobs' elements changed in Redis) is not dropped when its part moves, nor does it stop
/// the mover: it becomes a dead letter with the element as its payload, leaving the delayed
/// count, and the readable job beside it moves as it would have.
#[tokio::test]
async fn an_unreadable_far_element_is_dead_lettered_with_its_text_when_its_part_moves() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    let s = c.store();
    for (i, id) in ["far", "x1", "x2", "x3", "x4", "gone"]
        .into_iter()
        .enumerate()
    {
        push_order(&c, i as u64, id, Duration::from_secs(2 * 3600)).await;
    }
    c.cancel_in("order-cancel", "gone").await.unwrap(); // a blank element: skipped
    let (part, key) = far_part(&redis);
    let bucket = part.split(':').next().unwrap();
    // Not an element; a number that is not hexadecimal; an id longer than the element; a job
    // created before 1970.
    let changed = [
        "planted, not an element",
        "1:zz:0:1:x",
        "3:1:1:99:ab",
        "1:0:fffffffffffff:2:x4",
    ];
    for (k, element) in changed.into_iter().enumerate() {
        redis.command(&["LSET", &key, &(k + 1).to_string(), element]);
    }
    // The part made due to move (as if the time had come).
    redis.command(&["ZADD", "dq:{test:0}:far", "XX", "0", &part]);

    let moved = s.promote(0, 1000).await.unwrap();
    assert_eq!(moved.moved, 0, "the readable job is not due yet");
    let dead = s
        .dead_jobs(&topic("order-cancel"), Cursor::START, 10)
        .await
        .unwrap()
        .jobs;
    let found: Vec<(String, Vec<u8>)> = dead
        .iter()
        .map(|d| (d.id.to_string(), d.payload.clone()))
        .collect();
    assert_eq!(found.len(), 4, "{found:?}");
    for (k, element) in changed.into_iter().enumerate() {
        let (id, payload) = found
            .iter()
            .find(|(id, _)| id.starts_with(&format!("far-unreadable-{bucket}-0-{}-", k + 1)))
            .unwrap_or_else(|| panic!("position {}: {found:?}", k + 1));
        assert_eq!(payload, element.as_bytes(), "{id}: the element is kept");
    }
    let error = dead[0].last_error.as_deref().unwrap_or_default();
    assert!(
        error.contains("could not be read") && error.contains(&format!("far:{part}")),
        "{error}"
    );
    let job = c.status_in("order-cancel", "far").await.unwrap().unwrap();
    assert_eq!(
        job.state,
        dq::JobState::Delayed,
        "the readable one moved as it was"
    );
    let counts = c.counts("order-cancel").await.unwrap();
    assert_eq!((counts.delayed, counts.dead), (1, 4));
}

/// A far job whose id a process that did not see it (an older release, during an upgrade or a
/// rollback) pushed again: the second job keeps the id when the far one moves, and the far
/// one is dead-lettered with its payload and the reason, neither overwritten nor dropped.
#[tokio::test]
async fn a_far_job_whose_id_an_older_release_pushed_again_is_dead_lettered_not_overwritten() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    push_order(&c, 1, "o-7", Duration::from_secs(3 * 3600)).await;
    // What a release before compact storage writes for a push of o-7 due in an hour.
    let due = dq::store::to_us(std::time::SystemTime::now()) + 3_600_000_000;
    let envelope = format!("2:0:3:{}:{due}:0:{{\"order_id\":2}}", due - 3_600_000_000);
    redis.command(&["HSET", "dq:{test:0}:jobs", "order-cancel:o-7", &envelope]);
    redis.command(&[
        "ZADD",
        "dq:{test:0}:delayed",
        &due.to_string(),
        "order-cancel:o-7",
    ]);
    redis.command(&["HINCRBY", "dq:{test:0}:counts", "order-cancel:delayed", "1"]);

    let done = c.expand().await.unwrap();
    assert_eq!((done.jobs, done.parts_left), (0, 0));
    let kept = c.status_in("order-cancel", "o-7").await.unwrap().unwrap();
    let order: OrderCancel = serde_json::from_slice(&kept.payload).unwrap();
    assert_eq!(order.order_id, 2, "the second push keeps the id");
    let dead = c
        .store()
        .dead_jobs(&topic("order-cancel"), Cursor::START, 10)
        .await
        .unwrap()
        .jobs;
    assert_eq!(dead.len(), 1);
    assert!(
        dead[0].id.as_str().starts_with("far-clash-"),
        "{}",
        dead[0].id
    );
    let first: OrderCancel = serde_json::from_slice(&dead[0].payload).unwrap();
    assert_eq!(first.order_id, 1, "the far job's payload is kept");
    let error = dead[0].last_error.as_deref().unwrap_or_default();
    assert!(
        error.contains("job o-7") && error.contains("pushed the same id again"),
        "{error}"
    );
    let counts = c.counts("order-cancel").await.unwrap();
    assert_eq!((counts.delayed, counts.dead), (1, 1));
}

/// An index entry that points at another job's element (left by an element that could not be
/// read, or by a part whose name came back after `dq expand`) is not believed: the id is not
/// pending, and nothing is done to the job it points at.
#[tokio::test]
async fn a_far_index_entry_pointing_at_another_job_is_not_believed() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    push_order(&c, 1, "real", Duration::from_secs(2 * 3600)).await;
    push_order(&c, 9, "ghost", Duration::from_secs(2 * 3600)).await;
    let (part, key) = far_part(&redis);
    let (bucket, rest) = part.split_once(':').unwrap();
    let n = rest.split(':').next().unwrap();
    // The ghost's element goes (as one that could not be read would have), and its index entry
    // is made to point at the real job's element.
    redis.command(&["LSET", &key, "1", ""]);
    let keys = redis.command(&["KEYS", "dq:{test:0}:fx:*"]);
    let index = keys
        .lines()
        .filter(|l| l.starts_with("dq:"))
        .find(|k| {
            redis
                .command(&["HEXISTS", k, "order-cancel:ghost"])
                .contains(":1")
        })
        .unwrap_or_else(|| panic!("the ghost's index entry: {keys}"))
        .to_owned();
    redis.command(&[
        "HSET",
        &index,
        "order-cancel:ghost",
        &format!("{bucket}:{n}:0"),
    ]);

    assert!(c
        .status_in("order-cancel", "ghost")
        .await
        .unwrap()
        .is_none());
    let cancelled = c.cancel_in("order-cancel", "ghost").await.unwrap();
    assert_eq!(cancelled, dq::admin::ChangeOutcome::NotFound);
    let pushed = c
        .push(OrderCancel { order_id: 2 })
        .id("ghost")
        .delay(Duration::from_secs(7200));
    assert_eq!(
        pushed.send().await.unwrap().outcome,
        dq::push::PushOutcome::Created
    );
    let real = c.status_in("order-cancel", "real").await.unwrap().unwrap();
    let order: OrderCancel = serde_json::from_slice(&real.payload).unwrap();
    assert_eq!(
        order.order_id, 1,
        "the job the entry pointed at is untouched"
    );
    assert_eq!(c.counts("order-cancel").await.unwrap().delayed, 3);
}

/// `Config::compact` off (`DQ_COMPACT=off`, before a rollback): a push stores a job due far
/// ahead as the releases before do, and the far jobs already stored are still found.
#[tokio::test]
async fn with_compact_storage_off_a_push_stores_nothing_compact_and_still_finds_far_jobs() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    push_order(&c, 1, "before", Duration::from_secs(2 * 3600)).await;
    let off = client_with(&redis, |b| b.compact(false)).await;
    push_order(&off, 2, "after", Duration::from_secs(2 * 3600)).await;
    let in_jobs = |id: &str| {
        redis
            .command(&["HEXISTS", "dq:{test:0}:jobs", &format!("order-cancel:{id}")])
            .contains(":1")
    };
    assert!(!in_jobs("before") && in_jobs("after"));
    let again = off
        .push(OrderCancel { order_id: 3 })
        .id("before")
        .delay(Duration::from_secs(7200));
    assert_eq!(
        again.send().await.unwrap().outcome,
        dq::push::PushOutcome::AlreadyPending
    );
    assert_eq!(off.counts("order-cancel").await.unwrap().delayed, 2);
}

/// `dq expand` announces the earliest job it moves on `wake` when it comes before the earliest
/// delayed one, as a push does, so that the mover of any release comes for it in time.
#[tokio::test]
async fn expand_announces_a_moved_job_due_before_the_earliest_delayed_one() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    push_order(&c, 1, "far", Duration::from_secs(2 * 3600)).await;
    push_order(&c, 2, "later", Duration::from_secs(3 * 3600)).await;
    let far = dq::store::to_us(
        c.status_in("order-cancel", "far")
            .await
            .unwrap()
            .unwrap()
            .due,
    );
    let rc = redis::Client::open(redis.url()).unwrap();
    let mut pubsub = rc.get_async_pubsub().await.unwrap();
    pubsub.subscribe("dq:{test:0}:wake").await.unwrap();
    let mut messages = pubsub.into_on_message();
    assert_eq!(c.expand().await.unwrap().jobs, 2);
    use futures_util::StreamExt;
    let msg = tokio::time::timeout(Duration::from_secs(2), messages.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(msg.get_payload::<u64>().unwrap(), far);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_on_a_namespace_of_four_shards_run_in_order_one_at_a_time() {
    let redis = RedisServer::start();
    let config = dq::Config::builder()
        .redis_url(redis.url())
        .namespace("test")
        .shards(4)
        .build()
        .unwrap();
    support::groups::groups_of_one_slot_run_in_order_one_at_a_time_over_several_shards(config)
        .await;
}

/// On several shards a job of a group lives in its group's shard: an id of the caller's that
/// leads elsewhere is refused, saying what to do, with none of its call's jobs taken; one that
/// leads there is taken.
#[tokio::test]
async fn a_grouped_push_whose_id_leads_out_of_its_groups_shard_is_refused_saying_why() {
    let redis = RedisServer::start();
    let c = client_with(&redis, |b| b.shards(4)).await;
    let topic = dq::Topic::new("g").unwrap();
    let home = dq::store::shard_of_group(&topic, "acct", 4);
    let leads_home =
        |i: &u32| dq::store::shard_of(&topic, &dq::JobId::new(format!("x{i}")).unwrap(), 4) == home;
    let away = (0..).find(|i| !leads_home(i)).unwrap();
    let err = c
        .push_to("g", &1u32)
        .id(format!("x{away}"))
        .group("acct")
        .send()
        .await
        .unwrap_err();
    let Error::InvalidPush { reason, .. } = &err else {
        panic!("{err:?}")
    };
    assert!(reason.contains("group's shard"), "{reason}");
    assert!(reason.contains("Leave the id out"), "{reason}");
    assert_eq!(err.kind(), dq::ErrorKind::InvalidInput, "{err}");
    let there = (0..).find(leads_home).unwrap();
    let both = [there, away].map(|i| c.push_to("g", &1u32).id(format!("x{i}")).group("acct"));
    assert!(c.push_batch(both).await.is_err());
    assert_eq!(c.counts("g").await.unwrap().ready, 0);
    c.push_to("g", &1u32)
        .id(format!("x{there}"))
        .group("acct")
        .send()
        .await
        .unwrap();
}

#[tokio::test]
async fn every_key_of_a_shard_shares_one_hashtag() {
    let redis = RedisServer::start();
    let c = client_with(&redis, |b| b.shards(4)).await;
    let s = c.store();
    c.push_batch((0..64).map(|i| {
        c.push_to("t", &i)
            .id(i.to_string())
            .delay(Duration::from_millis(if i % 2 == 0 { 0 } else { 60_000 }))
    }))
    .await
    .unwrap();
    for shard in 0..4 {
        let f = s.fetch(shard, &topic("t"), 2, LEASE).await.unwrap();
        if let Some(j) = f.jobs.first() {
            s.dead_letter(&j.lease, "x").await.unwrap();
        }
    }
    let keys = redis.command(&["KEYS", "*"]);
    let names: Vec<&str> = keys
        .lines()
        .filter(|l| !l.starts_with('*') && !l.starts_with('$'))
        .collect();
    let mut shards_seen = std::collections::BTreeSet::new();
    for name in &names {
        let tag = name
            .strip_prefix("dq:{test:")
            .and_then(|r| r.split_once("}:"))
            .map(|(s, _)| s);
        let shard = tag.unwrap_or_else(|| panic!("{name} lacks the shard hashtag"));
        shards_seen.insert(shard.to_owned());
    }
    assert_eq!(
        shards_seen.len(),
        4,
        "jobs spread over every shard: {names:?}"
    );
    assert_eq!(
        c.counts("t").await.unwrap().delayed
            + c.counts("t").await.unwrap().ready
            + c.counts("t").await.unwrap().running
            + c.counts("t").await.unwrap().dead,
        64
    );
}

#[tokio::test]
async fn malformed_envelope_is_reported_and_dead_lettered_without_touching_other_jobs() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    let s = c.store();
    c.push_to("t", &1).id("good-1").await.unwrap();
    redis.command(&["HSET", "dq:{test:0}:jobs", "t:evil", "not an envelope"]);
    redis.command(&["RPUSH", "dq:{test:0}:ready:t", "evil"]);
    c.push_to("t", &2).id("good-2").await.unwrap();

    let err = c.status_in("t", "evil").await.unwrap_err();
    assert!(matches!(err, Error::Malformed { .. }), "{err}");
    assert!(
        err.to_string().contains("dq:{test:0}:jobs field t:evil"),
        "{err}"
    );

    let f = s.fetch(0, &topic("t"), 10, LEASE).await.unwrap();
    let ids: Vec<_> = f.jobs.iter().map(|j| j.lease.id.as_str()).collect();
    assert_eq!(ids, ["good-1", "good-2"]);
    assert_eq!(f.malformed.len(), 1);
    assert_eq!(f.malformed[0].0.as_str(), "evil");
    let dead = s
        .dead_jobs(&topic("t"), Cursor::START, 10)
        .await
        .unwrap()
        .jobs;
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].payload, b"not an envelope", "the raw value is kept");
    let error = dead[0].last_error.as_deref().unwrap_or_default();
    assert!(error.contains("malformed envelope"), "{error}");
}

#[tokio::test]
async fn an_envelope_of_an_unknown_format_version_is_dead_lettered_with_the_version_named() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    let s = c.store();
    // Format 1, written by development builds before 0.1.0 (it had a lease field).
    let old = "1:0:3:0:1700000000000000:1700000000000000:0:{}";
    redis.command(&["HSET", "dq:{test:0}:jobs", "t:old", old]);
    redis.command(&["RPUSH", "dq:{test:0}:ready:t", "old"]);

    let f = s.fetch(0, &topic("t"), 10, LEASE).await.unwrap();
    assert!(f.jobs.is_empty(), "never handed to a handler");
    assert_eq!(f.malformed.len(), 1);
    let dead = s
        .dead_jobs(&topic("t"), Cursor::START, 10)
        .await
        .unwrap()
        .jobs;
    assert_eq!(
        dead[0].payload,
        old.as_bytes(),
        "the stored value is kept whole"
    );
    let error = dead[0].last_error.as_deref().unwrap();
    assert!(error.contains("envelope version 1"), "{error}");
    let counts = c.counts("t").await.unwrap();
    assert_eq!((counts.running, counts.dead), (0, 1));
}

/// Asserts that `connecting` failed with a connection error within 2 s: a refused connection
/// is reported at once, not retried for a reconnect round (it took 7.5 s).
async fn refused_at_once<T: std::fmt::Debug>(
    connecting: impl std::future::Future<Output = dq::Result<T>>,
) -> Error {
    let started = std::time::Instant::now();
    let err = connecting.await.unwrap_err();
    assert!(err.is_connection(), "{err:?}");
    let took = started.elapsed();
    assert!(took < Duration::from_secs(2), "took {took:?}");
    err
}

#[tokio::test]
async fn unreachable_redis_is_a_clear_connection_error() {
    let url = format!("redis://127.0.0.1:{}/", dq_testkit::unused_port());
    let config = dq::Config::builder().redis_url(url).build().unwrap();
    let err = refused_at_once(dq::Client::connect(config.clone())).await;
    assert!(err.to_string().contains("is Redis reachable"), "{err}");
    let runtime = dq::Runtime::builder()
        .config(config)
        .without_registered_listeners()
        .start();
    refused_at_once(runtime).await;
}

#[tokio::test]
async fn a_cluster_whose_seeds_refuse_is_reported_at_once() {
    let seed = format!("redis://127.0.0.1:{}/", dq_testkit::unused_port());
    let config = dq::Config::builder()
        .redis_cluster(vec![seed])
        .build()
        .unwrap();
    refused_at_once(dq::Client::connect(config)).await;
}

#[tokio::test]
async fn scripts_are_reloaded_after_script_flush() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    c.push_to("t", &1).await.unwrap();
    redis.command(&["SCRIPT", "FLUSH"]);
    c.push_to("t", &2).await.unwrap();
    assert_eq!(c.counts("t").await.unwrap().ready, 2);
}

#[tokio::test]
async fn an_evicting_redis_is_reported_and_noeviction_is_not() {
    let evicting = RedisServer::start_with(&["--save", "", "--maxmemory-policy", "allkeys-lru"]);
    let config = dq::Config::builder()
        .redis_url(evicting.url())
        .build()
        .unwrap();
    let store = dq::store::RedisStore::connect(&config).await.unwrap();
    let warnings = store.server_warnings().await.unwrap();
    assert_eq!(warnings.len(), 1);
    assert!(
        warnings[0].contains("allkeys-lru") && warnings[0].contains("noeviction"),
        "{warnings:?}"
    );
    let safe = RedisServer::start();
    let config = dq::Config::builder().redis_url(safe.url()).build().unwrap();
    let store = dq::store::RedisStore::connect(&config).await.unwrap();
    assert!(store.server_warnings().await.unwrap().is_empty());
}

#[tokio::test]
async fn a_full_redis_refuses_pushes_loudly_and_keeps_what_it_acknowledged() {
    let redis = RedisServer::start_with(&[
        "--save",
        "",
        "--maxmemory",
        "4mb",
        "--maxmemory-policy",
        "noeviction",
    ]);
    let c = client(&redis).await;
    let pad = "x".repeat(1000);
    let mut acknowledged = 0u64;
    let error = loop {
        let batch = (0..100).map(|i| {
            c.push_to("t", &pad)
                .id(format!("{acknowledged}-{i}"))
                .delay(Duration::from_secs(600))
        });
        match c.push_batch(batch).await {
            Ok(p) => acknowledged += p.len() as u64,
            Err(e) => break e,
        }
        assert!(acknowledged < 100_000, "4 MB never filled up");
    };
    assert!(
        error.to_string().contains("OOM") || error.to_string().contains("maxmemory"),
        "{error}"
    );
    assert!(acknowledged > 0);
    assert_eq!(
        c.counts("t").await.unwrap().delayed,
        acknowledged,
        "every acknowledged push kept, nothing half-written"
    );
}

#[tokio::test]
async fn push_with_wait_replicas_returns_once_a_replica_has_the_job() {
    let master = RedisServer::start();
    let replica = replica_of(&master);
    let c = client_with(&master, |b| b.wait_replicas(1, Duration::from_secs(2))).await;
    push_order(&c, 1, "1", Duration::from_secs(60)).await;
    // WAIT returned, so the replica has applied the push already.
    let on_replica = replica.command(&["HEXISTS", "dq:{test:0}:jobs", "order-cancel:1"]);
    assert_eq!(on_replica.trim(), ":1");
}

#[tokio::test]
async fn push_that_no_replica_confirms_fails_with_not_replicated_but_is_kept() {
    let master = RedisServer::start();
    let c = client_with(&master, |b| b.wait_replicas(1, Duration::from_millis(200))).await;
    let err = c
        .push(OrderCancel { order_id: 2 })
        .id("2")
        .delay(Duration::from_secs(60))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::NotReplicated {
                wanted: 1,
                acked: 0,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("same id is safe"), "{err}");
    let info = c.status_in("order-cancel", "2").await.unwrap();
    assert!(info.is_some(), "the master kept the job");
}

/// A worker whose last heartbeat (by Redis' clock) is over a minute old is no longer listed,
/// and its record is deleted.
#[tokio::test]
async fn a_worker_silent_for_a_minute_by_redis_clock_is_dropped() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    let mut w = dq::admin::WorkerInfo::for_this_process(vec!["t".into()]);
    w.id = "silent".into();
    w.last_seen_ms = c.store().time_us().await.unwrap() / 1000 - 61_000;
    let json = serde_json::to_string(&w).unwrap();
    redis.command(&["HSET", "dq:{test:0}:workers", "silent", &json]);
    assert!(c.workers().await.unwrap().is_empty());
    let exists = redis.command(&["HEXISTS", "dq:{test:0}:workers", "silent"]);
    assert_eq!(exists.trim(), ":0", "the silent worker's record is dropped");
}

/// A job in `jobs` but in no queue (as a script aborted midway by an older build could leave
/// one): rescheduling it or pushing it again with replace gives it a ready entry, instead of
/// removing the one just added.
#[tokio::test]
async fn a_job_in_no_queue_is_queued_again_by_reschedule_and_by_replace() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    let s = c.store();
    redis.command(&["HSET", "dq:{test:0}:jobs", "t:stranded", "2:0:3:1:1:0:1"]);
    assert_eq!(
        c.reschedule_in("t", "stranded", dq::Due::After(Duration::ZERO))
            .await
            .unwrap(),
        dq::admin::ChangeOutcome::Done
    );
    let f = s.fetch(0, &topic("t"), 10, LEASE).await.unwrap();
    assert_eq!(f.jobs.len(), 1, "reschedule queued it");

    redis.command(&["HSET", "dq:{test:0}:jobs", "t:again", "2:0:3:1:1:0:1"]);
    c.push_to("t", &2).id("again").replace().await.unwrap();
    let f = s.fetch(0, &topic("t"), 10, LEASE).await.unwrap();
    assert_eq!(f.jobs.len(), 1, "a replacing push queued it");
}

/// promote and reclaim declare the ready (and dead) lists they write, for the topics the store
/// has met; a store that never met a topic finds its jobs in a first call and moves them in a
/// second one, within the same `promote` or `reclaim`.
#[tokio::test]
async fn a_store_that_never_met_a_topic_still_promotes_and_reclaims_its_jobs() {
    let redis = RedisServer::start();
    let producer = client(&redis).await;
    for t in ["a", "b", "c"] {
        producer
            .push_to(t, &1)
            .id("due")
            .delay(Duration::from_millis(50))
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mover = client(&redis).await;
    let promoted = mover.store().promote(0, 1000).await.unwrap();
    assert_eq!(promoted.moved, 3, "{promoted:?}");
    for t in ["a", "b", "c"] {
        let fetched = producer
            .store()
            .fetch(0, &topic(t), 10, Duration::from_millis(1))
            .await
            .unwrap();
        assert_eq!(fetched.jobs.len(), 1, "topic {t} has its job ready");
    }
    tokio::time::sleep(Duration::from_millis(20)).await; // the leases expire
    let reclaimer = client(&redis).await;
    let reclaimed = reclaimer.store().reclaim(0, 1000).await.unwrap();
    assert_eq!((reclaimed.requeued, reclaimed.dead), (3, 0));
    for t in ["a", "b", "c"] {
        assert_eq!(producer.counts(t).await.unwrap().ready, 1, "topic {t}");
    }
}

/// The old entries of replaced or cancelled ready jobs stay in the list, made stale, until a
/// fetch reaches them; then nothing of them is left (no generation, no stale count).
#[tokio::test]
async fn stale_ready_entries_leave_nothing_behind_once_fetched() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    let mut conn = raw_conn(&redis).await;
    for id in ["a", "b", "c"] {
        c.push_to("t", &1).id(id).await.unwrap();
    }
    c.cancel_in("t", "a").await.unwrap();
    c.push_to("t", &2).id("b").replace().await.unwrap();
    assert_eq!(stale_entries(&mut conn).await, 2, "two entries went stale");
    assert_eq!(c.counts("t").await.unwrap().ready, 2);
    let fetched = c
        .store()
        .fetch(0, &topic("t"), 10, LEASE)
        .await
        .unwrap()
        .jobs;
    let ids: Vec<String> = fetched.iter().map(|j| j.lease.id.to_string()).collect();
    assert_eq!(ids, ["c", "b"]);
    assert_eq!(stale_entries(&mut conn).await, 0);
    let (gens, ready): (u64, u64) = redis::pipe()
        .cmd("EXISTS")
        .arg("dq:{test:0}:gen:t")
        .cmd("LLEN")
        .arg("dq:{test:0}:ready:t")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!((gens, ready), (0, 0), "no generation and no entry left");
}

/// Issue 33 review (helper-30, finding 1): a replace that raises a ready job's priority leaves
/// its old entry in the list behind its new one; once the job ran and the old entry was
/// fetched past, nothing of either is left (no generation, no stale count, no entry).
#[tokio::test]
async fn a_raised_priority_leaves_nothing_behind_once_its_old_entry_is_fetched_past() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    let mut conn = raw_conn(&redis).await;
    c.push_to("t", &1).id("a").await.unwrap();
    c.push_to("t", &1).id("j").await.unwrap();
    c.push_to("t", &2)
        .id("j")
        .priority(5)
        .replace()
        .await
        .unwrap();
    let store = c.store();
    let t = topic("t");
    let one = |n| store.fetch(0, &t, n, LEASE);
    let first = one(1).await.unwrap().jobs;
    assert_eq!(first[0].lease.id.as_str(), "j");
    assert_eq!(one(1).await.unwrap().jobs[0].lease.id.as_str(), "a");
    assert!(
        one(1).await.unwrap().jobs.is_empty(),
        "j's old entry is stale"
    );
    assert_eq!(stale_entries(&mut conn).await, 0);
    let (gens, ready, ranked): (u64, u64, u64) = redis::pipe()
        .cmd("EXISTS")
        .arg("dq:{test:0}:gen:t")
        .cmd("EXISTS")
        .arg("dq:{test:0}:ready:t")
        .cmd("EXISTS")
        .arg("dq:{test:0}:ranked:t")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!((gens, ready, ranked), (0, 0, 0), "nothing left");
}

/// Issue 33 review (helper-31, finding 1): the same when the job ended as a kept success or a
/// dead letter before its old entry was reached: its generation went with the entry.
#[tokio::test]
async fn a_raised_priority_of_a_job_kept_or_dead_leaves_no_generation_behind() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    let store = c.store();
    let t = topic("t");
    let retention = dq::store::Retention {
        age: Duration::from_secs(3600),
        count: 10,
    };
    store.set_retention(&t, Some(retention)).await.unwrap();
    let mut conn = raw_conn(&redis).await;
    for id in ["kept", "dead"] {
        c.push_to("t", &1).id(id).await.unwrap();
    }
    for id in ["kept", "dead"] {
        c.push_to("t", &2)
            .id(id)
            .priority(5)
            .replace()
            .await
            .unwrap();
    }
    let run = store.fetch(0, &t, 2, LEASE).await.unwrap().jobs;
    let ok = dq::store::Succeeded {
        lease: run[0].lease.clone(),
        result: None,
        run: 1,
    };
    store.ack_succeeded(&[ok]).await.unwrap();
    assert!(store.dead_letter(&run[1].lease, "boom").await.unwrap());
    assert!(store.fetch(0, &t, 10, LEASE).await.unwrap().jobs.is_empty());
    assert_eq!(stale_entries(&mut conn).await, 0);
    let gens: u64 = redis::cmd("EXISTS")
        .arg("dq:{test:0}:gen:t")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(gens, 0, "no generation left");
}

/// Finding 10 of issue 15: a failover loses the writes the replica had not received yet, the
/// lease counter among them; the promoted replica then gave a second worker the same token as
/// the first, and the first worker's ack (or retry) passed for the second's. A token is now
/// never below the shard's clock, so a rolled-back counter cannot hand it out again.
#[tokio::test]
async fn a_lease_token_lost_in_a_failover_is_not_handed_out_again() {
    let master = RedisServer::start();
    let replica = replica_of(&master);
    let c = client_with(&master, |b| b.wait_replicas(1, Duration::from_secs(2))).await;
    c.push(OrderCancel { order_id: 1 }).id("1").await.unwrap();
    // The replica is cut off before it sees the fetch: the fetch will be lost in the failover.
    replica.command(&["REPLICAOF", "NO", "ONE"]);
    let t = topic("order-cancel");
    let first = c.store().fetch(0, &t, 1, LEASE).await.unwrap();
    let promoted = client(&replica).await;
    let second = promoted.store().fetch(0, &t, 1, LEASE).await.unwrap();
    let (old, new) = (&first.jobs[0].lease, &second.jobs[0].lease);
    assert_ne!(old.token, new.token, "the same token twice");
    let acked = promoted
        .store()
        .ack(std::slice::from_ref(old))
        .await
        .unwrap();
    assert_eq!(
        acked.acked, 0,
        "the lost lease's ack passed for the new one"
    );
    let acked = promoted
        .store()
        .ack(std::slice::from_ref(new))
        .await
        .unwrap();
    assert_eq!(acked.acked, 1);
}

/// A listener's attempt limit found in Redis that is not a whole number from 1 (written by
/// hand, or by a tool) is ignored: the job is judged by the limit given at push, and its
/// envelope stays readable.
#[tokio::test]
async fn a_malformed_attempt_limit_in_redis_is_ignored() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    let s = c.store();
    let t = topic("order-cancel");
    for (i, bad) in ["0", "-1", "1e20", "nan", "2.5"].into_iter().enumerate() {
        redis.command(&["HSET", "dq:{test:0}:attempts", "order-cancel", bad]);
        let id = format!("j{i}");
        c.push(OrderCancel { order_id: 1 })
            .id(id.as_str())
            .await
            .unwrap();
        s.fetch(0, &t, 1, Duration::from_millis(50)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert_eq!(s.reclaim(0, 10).await.unwrap().requeued, 1, "limit {bad:?}");
        let info = c.status_in("order-cancel", &id).await.unwrap().unwrap();
        assert_eq!(info.max_attempts, 3, "limit {bad:?}");
        let f = s.fetch(0, &t, 1, LEASE).await.unwrap();
        s.ack(&[f.jobs[0].lease.clone()]).await.unwrap();
    }
}

/// A connection of the test's own to `redis`, to look at dq's keys.
/// A subscription to `channel` of `redis` (a shard's `ready` channel, say).
async fn subscribed(redis: &RedisServer, channel: &str) -> redis::aio::PubSub {
    let mut pubsub = redis::Client::open(redis.url())
        .unwrap()
        .get_async_pubsub()
        .await
        .unwrap();
    pubsub.subscribe(channel).await.unwrap();
    pubsub
}

/// How many jobs a raw fetch.lua reply leased (its header has seven items, then `id, envelope`
/// pairs).
fn leased_in(reply: &[redis::Value]) -> usize {
    reply.len().saturating_sub(7) / 2
}

async fn raw_conn(redis: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// Topic `t`'s count of stale ready entries.
async fn stale_entries(conn: &mut redis::aio::MultiplexedConnection) -> i64 {
    let stale: Option<i64> = redis::cmd("HGET")
        .arg("dq:{test:0}:counts")
        .arg("t:stale")
        .query_async(conn)
        .await
        .unwrap();
    stale.unwrap_or(0)
}

/// Issue 29, finding 8: a Redis at `maxmemory` refuses a script whose first write may grow
/// memory. What keeps running jobs safe (renewals, acks, also of `unique_for` jobs, retries,
/// dead letters, reclaims, promotions, releases) must go through while it is full; only new
/// jobs are refused.
#[tokio::test]
async fn a_full_redis_still_renews_settles_and_moves_the_jobs_it_holds() {
    let redis = RedisServer::start_with(&["--save", "", "--maxmemory-policy", "noeviction"]);
    let c = client(&redis).await;
    let store = c.store().clone();
    for i in 0..6 {
        c.push(OrderCancel { order_id: i })
            .id(format!("job-{i}"))
            .unique_for(Duration::from_secs(600))
            .await
            .unwrap();
    }
    push_order(&c, 9, "later", Duration::from_millis(300)).await;
    let held = store
        .fetch(0, &topic("order-cancel"), 6, Duration::from_millis(400))
        .await
        .unwrap()
        .jobs;
    assert_eq!(held.len(), 6);
    // Full from here on: every write that may grow memory is refused.
    redis.command(&["CONFIG", "SET", "maxmemory", "1"]);
    let refused = c.push(OrderCancel { order_id: 7 }).id("new").await;
    assert_eq!(refused.unwrap_err().kind(), dq::ErrorKind::Full);

    let leases: Vec<_> = held.iter().map(|j| j.lease.clone()).collect();
    let lost = store
        .extend(&leases, LEASE)
        .await
        .expect("renewal when full");
    assert!(lost.is_empty(), "{lost:?}");
    let acked = store
        .ack(&leases[..2])
        .await
        .expect("ack of unique jobs when full");
    assert_eq!(acked.acked, 2);
    assert!(store
        .retry(&leases[2], Duration::from_millis(100), "boom")
        .await
        .expect("retry when full"));
    assert!(store
        .dead_letter(&leases[3], "gave up")
        .await
        .expect("dead letter when full"));
    assert_eq!(
        store
            .release(&leases[4..5])
            .await
            .expect("release when full"),
        1
    );
    // The last lease runs out; the reclaimer takes it back.
    store
        .extend(&leases[5..], Duration::from_millis(1))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    let reclaimed = store.reclaim(0, 100).await.expect("reclaim when full");
    assert_eq!(reclaimed.requeued, 1);
    let promoted = store.promote(0, 100).await.expect("promote when full");
    assert_eq!(promoted.moved, 2, "the retried job and `later` came due");

    redis.command(&["CONFIG", "SET", "maxmemory", "0"]);
    let counts = c.counts("order-cancel").await.unwrap();
    assert_eq!((counts.ready, counts.running, counts.dead), (4, 0, 1));
    // The acked unique jobs keep their ids reserved.
    let again = c
        .push(OrderCancel { order_id: 0 })
        .id("job-0")
        .unique_for(Duration::from_secs(600))
        .send()
        .await
        .unwrap()
        .outcome;
    assert!(
        matches!(again, dq::push::PushOutcome::Unique { .. }),
        "{again:?}"
    );
}

/// Issue 30, finding 1: the shard count lived in no key, so a producer with 4 shards and
/// workers with 1 stranded 30 of 40 jobs, and a CLI without `DQ_SHARDS` counted only shard 0.
/// Now the first process records it; one left at the default uses it, one configured
/// otherwise is refused with what to set.
#[tokio::test]
async fn every_process_of_a_namespace_hashes_with_the_shard_count_recorded_in_redis() {
    let redis = RedisServer::start();
    let four = client_with(&redis, |b| b.shards(4)).await;
    assert_eq!(four.store().shards(), 4);
    // A process left at the default (a CLI, a dashboard) uses the namespace's four shards.
    let plain = client(&redis).await;
    assert_eq!(plain.store().shards(), 4);
    for i in 0..40 {
        push_order(&plain, i, &format!("o{i}"), Duration::from_secs(60)).await;
    }
    assert_eq!(four.counts("order-cancel").await.unwrap().delayed, 40);
    // One configured with another count is refused, saying what to set.
    let config = dq::Config::builder()
        .redis_url(redis.url())
        .namespace("test")
        .shards(2)
        .build()
        .unwrap();
    let refused = support::TestClient::connect(config)
        .await
        .err()
        .expect("refused");
    assert_eq!(refused.kind(), dq::ErrorKind::Config, "{refused}");
    let text = refused.to_string();
    assert!(
        text.contains("DQ_SHARDS=4") && text.contains("4 shards"),
        "{text}"
    );
}

/// Review of the take-back (issue 29, finding 7): a fetch resent with the same nonce (a cluster
/// client's retry after a dropped connection: the first copy ran, its reply was lost) takes back
/// what the first copy leased; and the jobs of a lost fetch go back to the front of the ready
/// list, no run counted, when the topic was paused before the next fetch (the consumer could
/// not ask for them until the resume, and their lease would run out).
#[tokio::test]
async fn a_lost_fetchs_jobs_come_back_when_it_is_resent_or_the_topic_is_paused() {
    use dq::store::Fetcher;
    let redis = RedisServer::start();
    let c = client(&redis).await;
    let s = c.store().clone();
    push_order(&c, 1, "a", Duration::ZERO).await;
    let t = topic("order-cancel");
    let me = "w:order-cancel:1";
    let first = s
        .fetch_for(0, &t, 10, LEASE, &Fetcher::new(me, 1, vec![]))
        .await
        .unwrap();
    assert_eq!(first.jobs.len(), 1, "leased, and its reply lost");
    let resent = s
        .fetch_for(0, &t, 10, LEASE, &Fetcher::new(me, 1, vec![]))
        .await
        .unwrap();
    assert_eq!((resent.jobs.len(), resent.taken_back), (1, 1));
    assert_eq!(resent.jobs[0].envelope.attempt, 1);
    // That reply is lost too, and the topic is paused before the next fetch.
    c.pause("order-cancel").await.unwrap();
    let paused = s
        .fetch_for(0, &t, 10, LEASE, &Fetcher::new(me, 2, vec![1]))
        .await
        .unwrap();
    assert!(paused.paused);
    let counts = c.counts("order-cancel").await.unwrap();
    assert_eq!((counts.ready, counts.running), (1, 0), "back in ready");
    c.resume("order-cancel").await.unwrap();
    let after = s.fetch(0, &t, 10, LEASE).await.unwrap();
    assert_eq!(after.jobs.len(), 1);
    assert_eq!(after.jobs[0].envelope.attempt, 1, "no run counted");
}

/// The envelope as Redis holds it for job `topic:id` of shard 0 (`HGET` of the `jobs` hash).
fn stored_envelope(redis: &RedisServer, member: &str) -> String {
    let reply = redis.command(&["HGET", "dq:{test:0}:jobs", member]);
    // A bulk reply: `$<len>`, then the value.
    let (_len, value) = reply.split_once("\r\n").unwrap();
    value.trim_end_matches("\r\n").to_owned()
}

/// A job without a trace context is stored in envelope format 2, which the release before
/// format 3 reads (a rollback finds its jobs); one with a trace context in format 3, which its
/// retry keeps.
#[tokio::test]
async fn only_a_job_with_a_trace_context_is_stored_in_envelope_format_3() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    let s = c.store();
    push_order(&c, 1, "plain", Duration::ZERO).await;
    let plain = stored_envelope(&redis, "order-cancel:plain");
    assert!(plain.starts_with("2:0:3:"), "{plain}");
    let trace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let job = dq::store::NewJob {
        topic: topic("traced"),
        id: dq::JobId::new("t").unwrap(),
        due: dq::Due::After(Duration::ZERO),
        max_attempts: 3,
        unique_for: None,
        fence: None,
        trace: Some(trace.to_owned()),
        priority: 0,
        group: None,
        id_drawn: false,
        payload: b"{}".to_vec(),
    };
    s.push(vec![job], dq::push::OnConflict::Keep).await.unwrap();
    let traced = stored_envelope(&redis, "traced:t");
    let tail = format!(":0:{}:{trace}{{}}", trace.len());
    assert!(
        traced.starts_with("3:0:3:") && traced.ends_with(&tail),
        "{traced}"
    );
    let leased = s.fetch(0, &topic("traced"), 1, LEASE).await.unwrap();
    let lease = &leased.jobs[0].lease;
    assert!(s.retry(lease, Duration::ZERO, "boom").await.unwrap());
    let retried = stored_envelope(&redis, "traced:t");
    // The error field: the last error, then after a NUL byte run 1's entry (`<run>:<us>:<len>:`).
    let (head, rest) = retried
        .split_once('\0')
        .expect("the failed runs after a NUL byte");
    let entry = rest
        .strip_suffix(&format!("{trace}{{}}"))
        .unwrap_or_else(|| panic!("{retried}"));
    let field = format!("boom\0{entry}");
    let head_tail = format!(":{}:{}:boom", field.len(), trace.len());
    assert!(
        retried.starts_with("3:1:3:") && head.ends_with(&head_tail),
        "{retried}"
    );
    assert!(
        entry.starts_with("1:") && entry.ends_with(":4:boom"),
        "{retried}"
    );
}

/// Gives order-cancel a retention of an hour and at most `count` records.
async fn retain_order_cancel(c: &support::TestClient, count: u64) {
    let retention = dq::store::Retention {
        age: Duration::from_secs(3600),
        count,
    };
    let t = topic("order-cancel");
    c.store().set_retention(&t, Some(retention)).await.unwrap();
}

/// The integer Redis answers to `args`.
fn integer_reply(redis: &RedisServer, args: &[&str]) -> i64 {
    let reply = redis.command(args);
    reply.trim().trim_start_matches(':').parse().unwrap()
}

/// Acks `ids` of order-cancel (pushed, leased, acked in one call each), as one ack call.
async fn ack_in_one_call(c: &support::TestClient, ids: &[String]) {
    let s = c.store();
    let jobs = ids
        .iter()
        .map(|id| c.push(OrderCancel { order_id: 1 }).id(id.as_str()));
    c.push_batch(jobs).await.unwrap();
    let t = topic("order-cancel");
    let f = s.fetch(0, &t, ids.len(), LEASE).await.unwrap();
    let leases: Vec<_> = f.jobs.iter().map(|j| j.lease.clone()).collect();
    assert_eq!(s.ack(&leases).await.unwrap().acked, ids.len());
}

/// Review of issue 32, kept records: the count is forgotten an ack call at a time, and calls of
/// unequal sizes must not let it run to twice the count.
#[tokio::test]
async fn kept_records_stay_within_a_calls_worth_of_the_count_whatever_the_calls_sizes() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    retain_order_cancel(&c, 2000).await;
    let mut next = 0u32;
    for size in [999usize, 2, 1000, 2, 999, 1000, 3, 1000, 998, 1000] {
        let ids: Vec<String> = (0..size)
            .map(|_| {
                next += 1;
                format!("k{next}")
            })
            .collect();
        ack_in_one_call(&c, &ids).await;
    }
    let kept = integer_reply(&redis, &["HLEN", "dq:{test:0}:done:order-cancel"]);
    assert!(
        (2000..=3000).contains(&kept),
        "the count and at most a call's worth more: {kept}"
    );
}

/// Review of issue 32, kept records: an id kept, pushed again and kept again, over and over,
/// must not grow the list of ack calls without bound.
#[tokio::test]
async fn an_id_kept_again_and_again_does_not_grow_the_order_of_kept_records() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    retain_order_cancel(&c, 5).await;
    for _ in 0..60 {
        ack_in_one_call(&c, &["same".to_owned()]).await;
    }
    // A call of one job is listed as three elements: its head, its member, its head again.
    let listed = integer_reply(&redis, &["LLEN", "dq:{test:0}:done:order-cancel:order"]);
    let calls = listed / 3;
    assert!(calls <= 20, "one record, {calls} calls listed");
}

/// Redis keeps a hash of up to 512 short fields (its default) as one packed list scanned at
/// every lookup: the leases hash, with a field per running job (hundreds), must be a hash table
/// from the first fetch, or each lease taken, checked and ended scans them all.
#[tokio::test]
async fn the_leases_hash_is_a_hash_table_from_the_first_fetch() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    c.push(OrderCancel { order_id: 1 }).id("a").await.unwrap();
    let t = topic("order-cancel");
    let f = c.store().fetch(0, &t, 1, LEASE).await.unwrap();
    assert_eq!(f.jobs.len(), 1);
    let encoding = redis.command(&["OBJECT", "ENCODING", "dq:{test:0}:leases"]);
    assert!(encoding.contains("hashtable"), "{encoding}");
}

/// Redis keeps a sorted set of up to 128 short members (its default) as one packed list, and
/// inserts each member of a ZADD by scanning it: a fetch of 120 jobs into the inflight set cost
/// 5.0 us of Redis time per job that way against 0.63 in a skip list (BENCHMARKS.md). The set
/// must be a skip list from the first fetch, whatever the number of running jobs, and its
/// keeper must not show as a running job nor be taken as an expired lease.
#[tokio::test]
async fn the_inflight_set_is_a_skip_list_from_the_first_fetch_and_lists_only_jobs() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    c.push(OrderCancel { order_id: 1 }).id("a").await.unwrap();
    let t = topic("order-cancel");
    let f = c.store().fetch(0, &t, 1, LEASE).await.unwrap();
    assert_eq!(f.jobs.len(), 1);
    let encoding = redis.command(&["OBJECT", "ENCODING", "dq:{test:0}:inflight"]);
    assert!(encoding.contains("skiplist"), "{encoding}");
    let running = c
        .jobs("order-cancel", dq::JobState::Running, Cursor::START, 10)
        .await
        .unwrap();
    let ids: Vec<String> = running.jobs.iter().map(|j| j.id.to_string()).collect();
    assert_eq!(ids, ["a"]);
    assert_eq!(c.counts("order-cancel").await.unwrap().running, 1);
}

/// Review of issue 32 (sixth session), finding 1: while a long list of calls whose records were
/// taken out is forgotten, a call that still holds a record must not count down the ids it
/// lists whose records were taken out, or a later call's record of such an id is forgotten with
/// the first call, before its age.
#[tokio::test]
async fn a_call_not_forgotten_keeps_the_count_of_its_ids_taken_out() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    let t = topic("order-cancel");
    let retain = |age: Duration| dq::store::Retention { age, count: 1000 };
    c.store()
        .set_retention(&t, Some(retain(Duration::from_secs(3600))))
        .await
        .unwrap();
    let zs: Vec<String> = (1..=50).map(|i| format!("z{i}")).collect();
    ack_in_one_call(&c, &zs).await;
    ack_in_one_call(&c, &["x".to_owned(), "y".to_owned()]).await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    ack_in_one_call(&c, &["y".to_owned()]).await; // y pushed again and kept again, a second later
    for z in &zs {
        c.cancel_in("order-cancel", z).await.unwrap();
    }
    // The list now holds many more elements than records: the calls of z go, x's stays.
    ack_in_one_call(&c, &["w".to_owned()]).await;
    // x's call is past the age, y's second record is not.
    c.store()
        .set_retention(&t, Some(retain(Duration::from_millis(500))))
        .await
        .unwrap();
    ack_in_one_call(&c, &["v".to_owned()]).await;
    let y = c.status_in("order-cancel", "y").await.unwrap();
    assert_eq!(
        y.map(|info| info.state),
        Some(dq::JobState::Done),
        "y's second record"
    );
    let x = c.status_in("order-cancel", "x").await.unwrap();
    assert!(x.is_none(), "x's call is past the age: {x:?}");
}

/// A hold (what a handler's `Outcome::RateLimited` asks the store for, `Leases::hold`) pauses
/// its topic in every shard of the namespace, and its lift resumes every shard (issue 33
/// review, helper-69: no test held more than one shard).
#[tokio::test]
async fn a_hold_pauses_the_topic_in_every_shard_and_its_lift_resumes_them() {
    let redis = RedisServer::start();
    let c = client_with(&redis, |b| b.shards(4)).await;
    let jobs = (0..40).map(|i| c.push(OrderCancel { order_id: i }).id(format!("o{i}")));
    c.push_batch(jobs).await.unwrap();
    let s = c.store();
    let t = topic("order-cancel");
    s.hold(&t, Duration::from_secs(60)).await.unwrap();
    for shard in 0..4 {
        s.promote(shard, 1000).await.unwrap();
        let got = s.fetch(shard, &t, 100, LEASE).await.unwrap();
        assert!(
            got.jobs.is_empty(),
            "shard {shard} is held: {}",
            got.jobs.len()
        );
    }
    assert!(s.hold_ends_us(&t).await.unwrap().is_some());
    assert!(s.lift_hold(&t).await.unwrap());
    let mut fetched = Vec::new();
    for shard in 0..4 {
        s.promote(shard, 1000).await.unwrap();
        fetched.push(s.fetch(shard, &t, 100, LEASE).await.unwrap().jobs.len());
    }
    assert!(
        fetched.iter().all(|&n| n > 0),
        "every shard held some jobs, and resumed: {fetched:?}"
    );
    assert_eq!(fetched.iter().sum::<usize>(), 40, "{fetched:?}");
}

/// Backpressure on a namespace of four shards: each shard holds its share of the bound (8 / 4),
/// so the topic takes about its bound, never more.
#[tokio::test]
async fn max_pending_is_held_by_each_shard_as_its_share() {
    let redis = RedisServer::start();
    let c = client_with(&redis, |b| b.shards(4)).await;
    c.set_max_pending("order-cancel", Some(8)).await.unwrap();
    let jobs = (0..40).map(|i| c.push(OrderCancel { order_id: i }).id(format!("o{i}")));
    let pushed = c.push_batch(jobs).await.unwrap();
    let created = pushed
        .iter()
        .filter(|p| p.outcome == dq::push::PushOutcome::Created)
        .count();
    assert_eq!(created, 8, "two in each of the four shards");
    let refused = pushed
        .iter()
        .filter(|p| p.outcome == dq::push::PushOutcome::Full { max_pending: 8 })
        .count();
    assert_eq!(refused, 32);
    let shard_0 = integer_reply(&redis, &["ZCARD", "dq:{test:0}:delayed"])
        + integer_reply(&redis, &["LLEN", "dq:{test:0}:ready:order-cancel"]);
    assert_eq!(shard_0, 2, "the share of shard 0");
}

/// Issue 33 review (helper-62, finding 1): each shard's share of `max_pending` was the bound
/// divided by the shard count rounded up, so a bound the shards do not divide was exceeded (10
/// over 4 shards held 12; 1 over 16 shards, 16). The shares now add up to the bound, and a bound
/// under the shard count (a share of 0 would refuse every push to its shard) is refused.
#[tokio::test]
async fn a_max_pending_the_shards_do_not_divide_is_never_exceeded() {
    let redis = RedisServer::start();
    let c = client_with(&redis, |b| b.shards(4)).await;
    let refused = c
        .set_max_pending("order-cancel", Some(3))
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("4 shards"), "{refused}");
    assert_eq!(c.max_pending("order-cancel").await.unwrap(), None);
    c.set_max_pending("order-cancel", Some(10)).await.unwrap();
    let jobs = (0..40).map(|i| c.push(OrderCancel { order_id: i }).id(format!("o{i}")));
    let pushed = c.push_batch(jobs).await.unwrap();
    let created = pushed
        .iter()
        .filter(|p| p.outcome == dq::push::PushOutcome::Created)
        .count();
    assert_eq!(created, 10, "the bound, no more: {pushed:?}");
    let counts = c.counts("order-cancel").await.unwrap();
    assert_eq!(counts.delayed + counts.ready, 10);
}

/// Fetches `t` once in each shard of `shards`, in that order, up to `max` each: the jobs
/// leased, and how many fetches leased none and were told the topic is at its global
/// concurrency.
async fn fetch_each_shard(
    c: &support::TestClient,
    t: &str,
    shards: &[u16],
    max: usize,
) -> (Vec<dq::store::LeasedJob>, usize) {
    let (mut leased, mut full) = (Vec::new(), 0);
    for &shard in shards {
        let f = c.store().fetch(shard, &topic(t), max, LEASE).await.unwrap();
        if f.jobs.is_empty() && f.at_capacity {
            full += 1;
        }
        leased.extend(f.jobs);
    }
    (leased, full)
}

/// How many slots of `t`'s global concurrency the first shard counts as held (slots.lua).
fn held_slots(redis: &RedisServer, t: &str) -> i64 {
    let reply = redis.command(&["HGET", &format!("dq:{{test:0}}:gslots:{t}"), ":held"]);
    match reply.lines().nth(1) {
        Some(n) => n.trim().parse().unwrap(),
        None => panic!("no count of held slots: {reply:?}"),
    }
}

/// Issue 33 (review of helper-29, finding 1, and the split it led to): over several shards each
/// shard held a share of a global concurrency, at least 1, so a limit under the shard count was
/// refused, and a shard whose jobs ran out left its share unused. The first shard now counts the
/// slots of all (slots.lua): a limit of 2 over 4 shards runs 2 at once, wherever the jobs are.
#[tokio::test]
async fn a_global_concurrency_under_the_shard_count_holds_exactly_over_all_shards() {
    let redis = RedisServer::start();
    let c = client_with(&redis, |b| b.shards(4)).await;
    c.set_global_concurrency("t", Some(2)).await.unwrap();
    assert_eq!(c.global_concurrency("t").await.unwrap(), Some(2));
    c.push_batch((0..80).map(|i| c.push_to("t", &i).id(i.to_string())))
        .await
        .unwrap();
    let (leased, full) = fetch_each_shard(&c, "t", &[1, 2, 3, 0, 1, 2, 3, 0], 10).await;
    assert_eq!(leased.len(), 2, "the limit, for the namespace");
    assert_eq!(full, 7, "every other fetch was told the topic is full");
}

/// The slots are the namespace's, not a shard's: the one shard with ready jobs runs the whole
/// limit, and fetches of shards with none hold no slot.
#[tokio::test]
async fn a_global_concurrency_over_several_shards_is_used_whole_by_the_shard_with_jobs() {
    let redis = RedisServer::start();
    let c = client_with(&redis, |b| b.shards(4)).await;
    c.set_global_concurrency("t", Some(6)).await.unwrap();
    let t = topic("t");
    let in_shard_2 = (0..400)
        .map(|i| format!("j{i}"))
        .filter(|id| dq::store::shard_of(&t, &dq::JobId::new(id.as_str()).unwrap(), 4) == 2)
        .take(20);
    c.push_batch(in_shard_2.map(|id| c.push_to("t", &1).id(id)))
        .await
        .unwrap();
    let (none, _) = fetch_each_shard(&c, "t", &[0, 1, 3, 0, 1, 3], 10).await;
    assert!(none.is_empty());
    let (leased, _) = fetch_each_shard(&c, "t", &[2], 10).await;
    assert_eq!(
        leased.len(),
        6,
        "the whole limit, in the one shard with jobs"
    );
    assert_eq!(
        held_slots(&redis, "t"),
        6,
        "the slots of the fetches that leased nothing went back"
    );
}

/// Polls the first shard's count of `t`'s held slots until it is `want`, for up to a second:
/// the slots of ended runs are kept a moment for their process's next fetch, then go back.
async fn held_slots_come_to(redis: &RedisServer, t: &str, want: i64) -> i64 {
    let until = std::time::Instant::now() + Duration::from_secs(1);
    loop {
        let held = held_slots(redis, t);
        if held == want || std::time::Instant::now() > until {
            return held;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// A run's end gives its slot back, whichever way it ends (an ack, a retry, a dead letter, a
/// release): another process's fetch finds it free within a few milliseconds.
#[tokio::test]
async fn each_end_of_a_run_gives_its_slot_over_several_shards_back() {
    let redis = RedisServer::start();
    let c = client_with(&redis, |b| b.shards(4)).await;
    let other = client_with(&redis, |b| b.shards(4)).await;
    c.set_global_concurrency("t", Some(1)).await.unwrap();
    c.push_batch((0..40).map(|i| c.push_to("t", &i).id(i.to_string())))
        .await
        .unwrap();
    let every = [0, 1, 2, 3];
    let store = c.store();
    for end in ["ack", "retry", "dead letter", "release"] {
        let (leased, _) = fetch_each_shard(&c, "t", &every, 10).await;
        assert_eq!(leased.len(), 1, "before the {end}");
        let (again, full) = fetch_each_shard(&c, "t", &every, 10).await;
        assert!(again.is_empty() && full == 4, "the one slot is held");
        let lease = leased[0].lease.clone();
        match end {
            "ack" => {
                let ok = dq::store::Succeeded {
                    lease,
                    result: None,
                    run: 1,
                };
                store.ack_succeeded(&[ok]).await.unwrap();
            }
            "retry" => assert!(store
                .retry(&lease, Duration::from_secs(60), "no")
                .await
                .unwrap()),
            "dead letter" => assert!(store.dead_letter(&lease, "no").await.unwrap()),
            _ => assert_eq!(store.release(&[lease]).await.unwrap(), 1),
        }
        assert_eq!(
            held_slots_come_to(&redis, "t", 0).await,
            0,
            "the slot came back after the {end}"
        );
    }
    let (leased, _) = fetch_each_shard(&other, "t", &every, 10).await;
    assert_eq!(leased.len(), 1, "and another process's next job started");
}

/// The slot of a run that ended serves its process's next fetch of the topic, from any
/// shard, without a new grant from the first shard (the fetches of a busy worker ask the
/// first shard nothing while its slots go round); the limit holds meanwhile.
#[tokio::test]
async fn the_slot_of_an_ended_run_serves_its_process_next_fetch_without_a_new_grant() {
    let redis = RedisServer::start();
    let c = client_with(&redis, |b| b.shards(4)).await;
    c.set_global_concurrency("t", Some(2)).await.unwrap();
    c.push_batch((0..80).map(|i| c.push_to("t", &i).id(i.to_string())))
        .await
        .unwrap();
    let every = [0, 1, 2, 3];
    let (mut running, _) = fetch_each_shard(&c, "t", &every, 10).await;
    assert_eq!(running.len(), 2);
    let grants = || {
        let key = "dq:{test:0}:gslots:t";
        redis.command(&["HLEN", key]).trim().to_owned()
    };
    let first = grants();
    for round in 0..10 {
        let done = running.remove(0);
        let ok = dq::store::Succeeded {
            lease: done.lease,
            result: None,
            run: 1,
        };
        c.store().ack_succeeded(&[ok]).await.unwrap();
        let (next, _) = fetch_each_shard(&c, "t", &[(round % 4) as u16, 0, 1, 2, 3], 10).await;
        assert_eq!(next.len(), 1, "round {round}: the one slot freed, no more");
        running.extend(next);
        assert_eq!(grants(), first, "round {round}: no new grant");
    }
    assert_eq!(held_slots(&redis, "t"), 2);
}

/// A run whose handler returned frees its slot for its process's next fetch before its end
/// is written (the runtime tells the store before it gives the permit back, and the fetch
/// that permit wakes comes before the ack): the end, written after, frees nothing more.
#[tokio::test]
async fn a_run_whose_handler_returned_frees_its_slot_before_its_end_is_written() {
    let redis = RedisServer::start();
    let c = client_with(&redis, |b| b.shards(4)).await;
    c.set_global_concurrency("t", Some(1)).await.unwrap();
    c.push_batch((0..40).map(|i| c.push_to("t", &i).id(i.to_string())))
        .await
        .unwrap();
    let every = [0, 1, 2, 3];
    let store = c.store();
    let (first, _) = fetch_each_shard(&c, "t", &every, 10).await;
    assert_eq!(first.len(), 1);
    store.run_returned(&first[0].lease);
    let (second, _) = fetch_each_shard(&c, "t", &every, 10).await;
    assert_eq!(second.len(), 1, "the returned run's slot, before its ack");
    let ok = dq::store::Succeeded {
        lease: first[0].lease.clone(),
        result: None,
        run: 1,
    };
    store.ack_succeeded(&[ok]).await.unwrap();
    let (third, full) = fetch_each_shard(&c, "t", &every, 10).await;
    assert!(
        third.is_empty() && full == 4,
        "the ack freed no second slot"
    );
    assert_eq!(held_slots(&redis, "t"), 1);
}

/// Issue 33 review (helper-79, finding 2): the task that gives kept slots back marked itself
/// running before it was spawned, and cleared the mark only once polled; one spawned on a
/// runtime that ended before polling it (a `block_on` that returned) left the mark for good,
/// and the store never gave kept slots back again (other processes saw the topic full until
/// the grants ran out).
#[test]
fn a_give_back_task_dropped_before_it_ran_lets_the_next_one_start() {
    let redis = RedisServer::start();
    let main = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (c, leased) = main.block_on(async {
        let c = client_with(&redis, |b| b.shards(4)).await;
        c.set_global_concurrency("t", Some(2)).await.unwrap();
        c.push_batch((0..40).map(|i| c.push_to("t", &i).id(i.to_string())))
            .await
            .unwrap();
        let (leased, _) = fetch_each_shard(&c, "t", &[0, 1, 2, 3], 10).await;
        (c, leased)
    });
    assert_eq!(leased.len(), 2);
    // The first run returns inside a runtime that ends at once.
    let brief = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    brief.block_on(async { c.store().run_returned(&leased[0].lease) });
    drop(brief);
    main.block_on(async {
        c.store().run_returned(&leased[1].lease);
        assert_eq!(
            held_slots_come_to(&redis, "t", 0).await,
            0,
            "both slots went back"
        );
    });
}

/// Issue 33 review (helper-79, finding 3): jobs a lost fetch leased, put back in line beyond
/// the slots of the next fetch while the topic is paused, rang the topic's consumers, who
/// fetched only to be told it is paused: they wait for the resume, as the paused branch's.
#[tokio::test]
async fn jobs_put_back_in_line_while_the_topic_is_paused_ring_nobody() {
    let redis = RedisServer::start();
    let c = client_with(&redis, |b| b.shards(4)).await;
    c.set_global_concurrency("t", Some(4)).await.unwrap();
    c.push_batch((0..40).map(|i| c.push_to("t", &i).id(i.to_string())))
        .await
        .unwrap();
    c.store().fetch(1, &topic("other"), 1, LEASE).await.unwrap();
    let k = dq::store::ShardKeys::new("test", 2);
    let mut conn = raw_conn(&redis).await;
    let first: Vec<redis::Value> = fetch_script(&k, "t", "7", ("", "3"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(leased_in(&first), 3, "{first:?}");
    c.pause("t").await.unwrap();
    let mut rung = subscribed(&redis, &format!("{}ready", k.prefix()))
        .await
        .into_on_message();
    let again: Vec<redis::Value> = fetch_script(&k, "t", "7", ("", "1"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        again,
        vec![redis::Value::BulkString(b"paused".to_vec())],
        "{again:?}"
    );
    assert_eq!(c.counts("t").await.unwrap().running, 0, "all back in line");
    use futures_util::StreamExt;
    let message = tokio::time::timeout(Duration::from_millis(300), rung.next()).await;
    assert!(message.is_err(), "nobody rung: {message:?}");
}

/// An end written twice (a retried ack whose first reply was lost) gives its run's slot back
/// once: the other run of its fetch keeps its own.
#[tokio::test]
async fn a_run_ended_twice_gives_its_slot_back_once() {
    let redis = RedisServer::start();
    let c = client_with(&redis, |b| b.shards(4)).await;
    c.set_global_concurrency("t", Some(2)).await.unwrap();
    c.push_batch((0..40).map(|i| c.push_to("t", &i).id(i.to_string())))
        .await
        .unwrap();
    let (leased, _) = fetch_each_shard(&c, "t", &[0, 1, 2, 3], 10).await;
    assert_eq!(leased.len(), 2);
    let ok = dq::store::Succeeded {
        lease: leased[0].lease.clone(),
        result: None,
        run: 1,
    };
    for _ in 0..2 {
        c.store()
            .ack_succeeded(std::slice::from_ref(&ok))
            .await
            .unwrap();
    }
    assert_eq!(
        held_slots_come_to(&redis, "t", 1).await,
        1,
        "the other run still holds its slot"
    );
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(held_slots(&redis, "t"), 1, "and one went back, not two");
    let (next, _) = fetch_each_shard(&c, "t", &[0, 1, 2, 3], 10).await;
    assert_eq!(next.len(), 1, "one slot came back, not two");
}

/// Issue 33 review (helper-77, findings 1 and 2): a cluster client sends a request again after
/// a dropped connection, so the first shard's count of slots may see a grant or a give-back
/// twice. A grant asked again answered anew and added its slots to the total a second time
/// (leaked for good), and a give-back sent twice gave back twice (one more could run). The
/// same grant asked again now answers what it holds, and a give-back says how many the grant
/// still needs, so sending it twice changes nothing.
#[tokio::test]
async fn a_grant_or_give_back_of_slots_sent_twice_counts_once() {
    let redis = RedisServer::start();
    let c = client_with(&redis, |b| b.shards(4)).await;
    c.set_global_concurrency("t", Some(8)).await.unwrap();
    // The script loaded, as a fetch of a limited topic does.
    c.push_batch((0..40).map(|i| c.push_to("t", &i).id(i.to_string())))
        .await
        .unwrap();
    let (leased, _) = fetch_each_shard(&c, "t", &[0, 1, 2, 3], 1).await;
    assert_eq!(held_slots(&redis, "t"), leased.len() as i64);
    let before = held_slots(&redis, "t");
    let t = topic("t");
    let k = dq::store::ShardKeys::new("test", 0);
    let (_, sha) = dq::store::script_hashes()
        .into_iter()
        .find(|(name, _)| *name == "slots")
        .unwrap();
    let slots = |args: &[&str]| {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(&sha)
            .arg(3)
            .arg(k.limits())
            .arg(k.global_slots(&t))
            .arg(k.global_slot_times(&t))
            .arg("t");
        for a in args {
            cmd.arg(*a);
        }
        cmd
    };
    let mut conn = raw_conn(&redis).await;
    let lease = LEASE.as_micros().to_string();
    for _ in 0..2 {
        let (granted, _): (i64, i64) = slots(&["grant", "2", &lease, "resent"])
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(granted, 2, "the same grant, answered again");
    }
    assert_eq!(held_slots(&redis, "t"), before + 2, "counted once");
    for _ in 0..2 {
        let _: i64 = slots(&["free", "resent", "1"])
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    assert_eq!(
        held_slots(&redis, "t"),
        before + 1,
        "one slot given back, once"
    );
}

/// A raw fetch.lua call (EVALSHA, the script loaded by a fetch before) of topic `t` in the
/// shard of `k`, up to 10 jobs, as consumer `resending`'s fetch `nonce`, with `starts` of its
/// rate and `slots` of its global concurrency granted (`""`: none asked): what the store
/// sends, for the tests of lost replies.
fn fetch_script(
    k: &dq::store::ShardKeys,
    t: &str,
    nonce: &str,
    (starts, slots): (&str, &str),
) -> redis::Cmd {
    let (_, sha) = dq::store::script_hashes()
        .into_iter()
        .find(|(name, _)| *name == "fetch")
        .unwrap();
    let t = topic(t);
    let mut fetch = redis::cmd("EVALSHA");
    fetch.arg(&sha).arg(17);
    for key in [
        k.jobs(),
        k.inflight(),
        k.ready(&t),
        k.counts(),
        k.paused(),
        k.leases(),
        k.ready_gen(&t),
        k.delayed(),
        k.fetched("resending"),
        k.cancels(),
        k.events(),
        k.events_stream(&t),
        k.limits(),
        k.ranked(&t),
        k.dead(&t),
        k.done(&t),
        k.group_tat(&t),
    ] {
        fetch.arg(key);
    }
    fetch
        .arg(t.as_str())
        .arg(10)
        .arg(LEASE.as_micros() as u64)
        .arg(nonce)
        .arg("")
        .arg(starts)
        .arg(0)
        .arg(slots);
    fetch
}

/// Issue 33 review (helper-77, finding 3): the jobs of a fetch whose reply was lost are taken
/// back by the consumer's next fetch, whatever slots that fetch was granted; by then the lost
/// fetch's grant may have run out and its slots gone to other jobs, so they ran past the limit.
/// Those beyond the new grant now go back to the front of the ready list, no run counted.
#[tokio::test]
async fn jobs_taken_back_beyond_the_slots_granted_go_back_to_ready() {
    let redis = RedisServer::start();
    let c = client_with(&redis, |b| b.shards(4)).await;
    c.set_global_concurrency("t", Some(4)).await.unwrap();
    c.push_batch((0..40).map(|i| c.push_to("t", &i).id(i.to_string())))
        .await
        .unwrap();
    // The script loaded, as any fetch does (of a topic with nothing ready).
    c.store().fetch(1, &topic("other"), 1, LEASE).await.unwrap();
    let k = dq::store::ShardKeys::new("test", 2);
    // This consumer's fetch 7, with `slots` granted.
    let fetch = |slots: &str| fetch_script(&k, "t", "7", ("", slots));
    let mut conn = raw_conn(&redis).await;
    let first: Vec<redis::Value> = fetch("3").query_async(&mut conn).await.unwrap();
    assert_eq!(leased_in(&first), 3, "{first:?}");
    let ready = c.counts("t").await.unwrap().ready;
    let mut rung = subscribed(&redis, &format!("{}ready", k.prefix()))
        .await
        .into_on_message();
    // Its reply lost; sent again (or named lost by the next fetch) with one slot granted.
    let again: Vec<redis::Value> = fetch("1").query_async(&mut conn).await.unwrap();
    assert_eq!(leased_in(&again), 1, "as many as granted: {again:?}");
    let counts = c.counts("t").await.unwrap();
    assert_eq!(counts.running, 1, "the others are not leased");
    assert_eq!(counts.ready, ready + 2, "they went back to ready");
    // And the topic's consumers are told, as at a release (helper-78's review).
    use futures_util::StreamExt;
    let message = tokio::time::timeout(Duration::from_secs(2), rung.next())
        .await
        .expect("the jobs put back in line ring the topic")
        .unwrap();
    assert_eq!(message.get_payload::<String>().unwrap(), "t");
}

/// A worker killed with its job holds the slot no longer than the lease it was given; a
/// worker that extends its lease keeps its slot for as long.
#[tokio::test]
async fn a_slot_over_several_shards_lasts_as_long_as_its_lease() {
    let redis = RedisServer::start();
    let c = client_with(&redis, |b| b.shards(4)).await;
    c.set_global_concurrency("t", Some(1)).await.unwrap();
    c.push_batch((0..40).map(|i| c.push_to("t", &i).id(i.to_string())))
        .await
        .unwrap();
    let store = c.store();
    let short = Duration::from_millis(600);
    let fetch = |shard| {
        let store = store.clone();
        async move { store.fetch(shard, &topic("t"), 10, short).await.unwrap() }
    };
    let mut first = Vec::new();
    for shard in 0..4 {
        first.extend(fetch(shard).await.jobs);
    }
    assert_eq!(first.len(), 1);
    // Extended: held past its first lease.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let lost = store
        .extend(&[first[0].lease.clone()], Duration::from_secs(2))
        .await
        .unwrap();
    assert!(lost.is_empty());
    tokio::time::sleep(Duration::from_millis(500)).await;
    for shard in 0..4 {
        assert!(
            fetch(shard).await.jobs.is_empty(),
            "the extended run holds the slot"
        );
    }
    // Not extended again (its worker was killed): the slot comes back when the lease runs out.
    tokio::time::sleep(Duration::from_millis(1700)).await;
    let mut next = Vec::new();
    for shard in 0..4 {
        next.extend(fetch(shard).await.jobs);
    }
    assert_eq!(next.len(), 1, "the slot came back with the lease");
}

/// Lifting the limit lets every shard lease all it asks for again.
#[tokio::test]
async fn a_lifted_global_concurrency_over_several_shards_limits_nothing() {
    let redis = RedisServer::start();
    let c = client_with(&redis, |b| b.shards(4)).await;
    c.set_global_concurrency("t", Some(1)).await.unwrap();
    c.push_batch((0..80).map(|i| c.push_to("t", &i).id(i.to_string())))
        .await
        .unwrap();
    let (leased, _) = fetch_each_shard(&c, "t", &[0, 1, 2, 3], 100).await;
    assert_eq!(leased.len(), 1);
    c.set_global_concurrency("t", None).await.unwrap();
    assert_eq!(c.global_concurrency("t").await.unwrap(), None);
    let (leased, _) = fetch_each_shard(&c, "t", &[0, 1, 2, 3], 100).await;
    assert_eq!(leased.len(), 79);
}

/// Issue 33: a rate over several shards was split into shares, each with a burst of its own,
/// so the shards together started a burst each at once: a `2/1m` topic over 4 shards started 4
/// jobs in its first instant, twice its rate for the minute. The first shard now counts the
/// starts of every shard: one burst at once, whichever shards hold the jobs, and each shard
/// that could not start its jobs is told when the next may.
#[tokio::test]
async fn a_rate_over_several_shards_starts_one_burst_at_once_in_all_of_them() {
    let redis = RedisServer::start();
    let c = client_with(&redis, |b| b.shards(4)).await;
    c.set_rate("t", Some("2/1m".parse().unwrap()))
        .await
        .unwrap();
    assert_eq!(c.rate("t").await.unwrap(), Some("2/1m".parse().unwrap()));
    c.push_batch((0..40).map(|i| c.push_to("t", &i).id(i.to_string())))
        .await
        .unwrap();
    let (mut leased, mut told) = (0, 0);
    for shard in [1, 2, 3, 0, 1, 2, 3, 0] {
        let f = c
            .store()
            .fetch(shard, &topic("t"), 10, LEASE)
            .await
            .unwrap();
        leased += f.jobs.len();
        if f.jobs.is_empty() && f.throttled.is_some_and(|w| w > Duration::from_secs(20)) {
            told += 1;
        }
    }
    assert_eq!(leased, 1, "the burst of 2/1m, once for the namespace");
    assert_eq!(
        told, 7,
        "every other fetch was told to wait for the next start"
    );
}

/// A shard with nothing to start gives its starts back: fetches of empty shards do not use
/// up the rate of the shards that have jobs.
#[tokio::test]
async fn fetches_that_start_nothing_leave_the_rate_to_the_shards_with_jobs() {
    let redis = RedisServer::start();
    let c = client_with(&redis, |b| b.shards(4)).await;
    c.set_rate("t", Some("1/1m".parse().unwrap()))
        .await
        .unwrap();
    for shard in [1, 2, 3, 1, 2, 3] {
        let f = c
            .store()
            .fetch(shard, &topic("t"), 10, LEASE)
            .await
            .unwrap();
        assert!(f.jobs.is_empty() && f.throttled.is_none(), "{f:?}");
    }
    c.push_batch((0..40).map(|i| c.push_to("t", &i).id(i.to_string())))
        .await
        .unwrap();
    let (leased, _) = fetch_each_shard(&c, "t", &[1, 2, 3, 0], 10).await;
    assert_eq!(
        leased.len(),
        1,
        "the one start of the minute was left for a job"
    );
}

/// Review of the rate counted in the first shard (helper-76, finding 1): a cluster client
/// resends a fetch whose connection dropped, and the second copy takes back what the first
/// leased, with the same arguments, the grant among them. It leased its grant again on top:
/// twice the starts granted. The jobs taken back now use the grant too.
#[tokio::test]
async fn a_resent_fetch_starts_no_more_than_its_grant() {
    let redis = RedisServer::start();
    let c = client_with(&redis, |b| b.shards(4)).await;
    c.set_rate("t", Some("1/1m".parse().unwrap()))
        .await
        .unwrap();
    c.push_batch((0..40).map(|i| c.push_to("t", &i).id(i.to_string())))
        .await
        .unwrap();
    // The script loaded, as any fetch does (of a topic with nothing ready).
    c.store().fetch(1, &topic("other"), 1, LEASE).await.unwrap();
    let k = dq::store::ShardKeys::new("test", 2);
    // A grant of one start, this fetch's nonce 7, no lost fetch named.
    let fetch = fetch_script(&k, "t", "7", ("1", ""));
    let mut conn = raw_conn(&redis).await;
    let first: Vec<redis::Value> = fetch.query_async(&mut conn).await.unwrap();
    assert_eq!(leased_in(&first), 1, "{first:?}");
    let resent: Vec<redis::Value> = fetch.query_async(&mut conn).await.unwrap();
    assert_eq!(
        leased_in(&resent),
        1,
        "the first copy's job again, and no other: {resent:?}"
    );
    assert_eq!(
        c.counts("t").await.unwrap().running,
        1,
        "one start of the grant of one"
    );
}

/// Over a second, a topic of 20 a second whose jobs are spread over 4 shards starts its rate,
/// no more than one period allows, and from every shard.
#[tokio::test]
async fn a_rate_over_several_shards_is_met_from_all_of_them() {
    let redis = RedisServer::start();
    let c = client_with(&redis, |b| b.shards(4)).await;
    let rate: dq::Rate = "20/1s".parse().unwrap();
    c.set_rate("t", Some(rate)).await.unwrap();
    c.push_batch((0..200).map(|i| c.push_to("t", &i).id(i.to_string())))
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let mut by_shard = [0usize; 4];
    let mut round = 0;
    while started.elapsed() < Duration::from_secs(1) {
        // Each round starts at the next shard: the first to ask after a start is due gets it.
        for k in 0..4 {
            let shard = (round + k) % 4;
            let f = c
                .store()
                .fetch(shard as u16, &topic("t"), 10, LEASE)
                .await
                .unwrap();
            by_shard[shard] += f.jobs.len();
        }
        round += 1;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let window = started.elapsed();
    let leased: usize = by_shard.iter().sum();
    // At most what GCRA allows in the loop's window (a start every interval, the first at
    // once, each up to the tolerance early), and the rate less a start or two of its lag.
    let (interval, tolerance) = rate.gcra_us();
    let most = ((window.as_micros() as f64 + tolerance) / interval).floor() as usize + 1;
    assert!(
        leased <= most && leased >= 18,
        "{leased} in {window:?}, at most {most} ({by_shard:?})"
    );
    assert!(by_shard.iter().all(|n| *n > 0), "{by_shard:?}");
}

/// Groups (README "Groups") keep their slots, lines and counts in keys of their own; once every
/// job of every group has ended, whichever way (succeeded, dead-lettered, cancelled while
/// waiting or in line, replaced while waiting), none of those keys is left.
#[tokio::test]
async fn groups_leave_no_key_behind_once_their_jobs_ended() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    let store = c.store();
    let t = topic("t");
    for i in 0..30 {
        let group = format!("g{}", i % 3);
        c.push_to("t", &i)
            .id(format!("j{i}"))
            .group(group)
            .await
            .unwrap();
    }
    c.push_to("t", &99)
        .id("j10")
        .group("g1")
        .replace()
        .await
        .unwrap();
    for id in ["j4", "j0", "j29"] {
        c.cancel_in("t", id).await.unwrap();
    }
    let mut ran = 0;
    loop {
        let jobs = store.fetch(0, &t, 10, LEASE).await.unwrap().jobs;
        if jobs.is_empty() {
            break;
        }
        for (k, job) in jobs.iter().enumerate() {
            if k == 0 {
                assert!(store.dead_letter(&job.lease, "boom").await.unwrap());
            } else {
                store.ack(std::slice::from_ref(&job.lease)).await.unwrap();
            }
            ran += 1;
        }
    }
    assert_eq!(ran, 27, "every job not cancelled ran once");
    let left: Vec<String> = redis::cmd("KEYS")
        .arg("dq:{test:0}:*")
        .query_async(&mut raw_conn(&redis).await)
        .await
        .unwrap();
    let groups: Vec<&String> = left
        .iter()
        .filter(|k| {
            ["gactive:", "groups:", "gwait:", "parked:", "gq:"]
                .iter()
                .any(|p| k.contains(p))
        })
        .collect();
    assert!(groups.is_empty(), "left behind: {groups:?}");
}

/// A group's list holds exactly its parked jobs, in line order: a job taken out of line (a
/// cancel, a reschedule to later) leaves it at once and a replaced one goes last (ack.lua lets
/// the next ones in with one LPOP, trusting the list: BENCHMARKS.md, "What groups cost the
/// drain").
#[tokio::test]
async fn a_groups_list_holds_exactly_its_parked_jobs_in_line_order() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    for i in 0..6 {
        c.push_to("t", &i)
            .id(format!("j{i}"))
            .group("g")
            .await
            .unwrap();
    }
    c.cancel_in("t", "j2").await.unwrap();
    c.reschedule_in("t", "j4", dq::Due::After(Duration::from_secs(3600)))
        .await
        .unwrap();
    c.push_to("t", &99)
        .id("j1")
        .group("g")
        .replace()
        .await
        .unwrap();
    let line: Vec<String> = redis::cmd("LRANGE")
        .arg("dq:{test:0}:gq:t:g")
        .arg(0)
        .arg(-1)
        .query_async(&mut raw_conn(&redis).await)
        .await
        .unwrap();
    assert_eq!(
        line,
        ["j3", "j5", "j1"],
        "j0 holds the slot; j2 and j4 left the line"
    );
}

/// Review of the groups' lists (helper-56, finding 3): a parked job whose envelope cannot be read
/// leaves a cancel's reach in its group's list (the cancel cannot tell which list), and the
/// group still lets its next job in past it: the entry is dropped, its slot never taken.
#[tokio::test]
async fn a_cancelled_waiting_job_with_an_unreadable_envelope_does_not_block_its_group() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    let store = c.store();
    let t = topic("t");
    for i in 0..3 {
        c.push_to("t", &i)
            .id(format!("j{i}"))
            .group("g")
            .await
            .unwrap();
    }
    redis.command(&["HSET", "dq:{test:0}:jobs", "t:j1", "not an envelope"]);
    c.cancel_in("t", "j1").await.unwrap();
    let first = store.fetch(0, &t, 10, LEASE).await.unwrap().jobs;
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].lease.id.as_str(), "j0");
    store
        .ack(std::slice::from_ref(&first[0].lease))
        .await
        .unwrap();
    let next = store.fetch(0, &t, 10, LEASE).await.unwrap().jobs;
    let ids: Vec<&str> = next.iter().map(|j| j.lease.id.as_str()).collect();
    assert_eq!(ids, ["j2"], "the group went on past the cancelled job");
}

/// Review of the groups' lists (helper-57, finding 2): a replace of a waiting job whose envelope
/// cannot be read (so not its group), in a call that also moves its group's slot holder away,
/// leaves the group's count of waiting jobs right: once every job ran none is counted waiting,
/// and the next job of the group goes in line.
#[tokio::test]
async fn a_replaced_waiting_job_with_an_unreadable_envelope_leaves_its_groups_count_right() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    let store = c.store();
    let t = topic("t");
    for id in ["h", "x", "y"] {
        c.push_to("t", &0).id(id).group("a").await.unwrap();
    }
    redis.command(&["HSET", "dq:{test:0}:jobs", "t:x", "not an envelope"]);
    let batch = [("x", "a"), ("h", "b")]
        .map(|(id, group)| c.push_to("t", &1).id(id).group(group).replace());
    c.push_batch(batch).await.unwrap();
    let mut ran = Vec::new();
    for _ in 0..10 {
        store.promote(0, 100).await.unwrap();
        let jobs = store.fetch(0, &t, 10, LEASE).await.unwrap().jobs;
        if jobs.is_empty() {
            break;
        }
        for job in &jobs {
            ran.push(job.lease.id.to_string());
            store.ack(std::slice::from_ref(&job.lease)).await.unwrap();
        }
    }
    ran.sort();
    assert_eq!(ran, ["h", "x", "y"]);
    let stats = c.stats("t").await.unwrap();
    assert_eq!(stats.busiest_groups, [], "no job waits");
    assert_eq!(stats.counts.ready, 0);
    c.push_to("t", &2).id("z").group("a").await.unwrap();
    let next = store.fetch(0, &t, 10, LEASE).await.unwrap().jobs;
    assert_eq!(next.len(), 1, "z goes in line at once");
}

/// Review of groups (helper-33, finding 2): a promotion of 10,000 due grouped jobs at once (the
/// largest batch) lets each into its group in one script call, however many values that makes
/// (Lua's `unpack` takes a few thousand at most).
#[tokio::test]
async fn a_promotion_of_ten_thousand_grouped_jobs_lets_each_into_its_group() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    let store = c.store();
    for chunk in 0..10 {
        let jobs = (chunk * 1000..(chunk + 1) * 1000).map(|i| {
            c.push_to("t", &i)
                .id(format!("j{i}"))
                .group(format!("g{}", i % 5000))
                .delay(Duration::from_millis(30))
        });
        c.push_batch(jobs).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(60)).await;
    assert_eq!(store.promote(0, 10_000).await.unwrap().moved, 10_000);
    let stats = c.stats("t").await.unwrap();
    assert_eq!(stats.counts.ready, 10_000);
    assert_eq!(
        stats.busiest_groups[0].waiting, 1,
        "{:?}",
        stats.busiest_groups
    );
    let fetched = store
        .fetch(0, &topic("t"), 1000, LEASE)
        .await
        .unwrap()
        .jobs
        .len();
    assert_eq!(fetched, 1000, "5,000 groups in line, one job each");
}

/// Issue 33 (helper-76, finding 5): a give-back of unused starts was applied while the rate's
/// time was the one its grant wrote; but a time is not unique: after the give-back, an equal
/// grant brings it back to that value, and the give-back delivered again (a cluster client
/// resends a request after a dropped connection) was applied again, letting out starts never
/// granted. Each grant now names itself beside the time, and an applied give-back clears the
/// name.
#[tokio::test]
async fn a_give_back_delivered_twice_is_applied_once() {
    let redis = RedisServer::start();
    let c = client_with(&redis, |b| b.shards(4)).await;
    c.set_rate("t", Some("1000000/1s".parse().unwrap()))
        .await
        .unwrap();
    // A fetch in another shard than the first loads the grant script.
    c.store().fetch(1, &topic("t"), 1, LEASE).await.unwrap();
    let (_, sha) = dq::store::script_hashes()
        .into_iter()
        .find(|(name, _)| *name == "rate_grant")
        .unwrap();
    let limits = dq::store::ShardKeys::new("test", 0).limits();
    let mut conn = raw_conn(&redis).await;
    let call = |args: &[&str]| {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(&sha).arg(1).arg(&limits).arg("t").arg(args);
        cmd
    };
    // The rate busy: its time 5 s ahead, under a tolerance of 10 s written for the test (a
    // real rate's is about 10 ms), so that each grant counts from that time, not from the
    // clock, however slow the machine.
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(&mut conn).await.unwrap();
    let ahead = format!("{}.000", secs * 1_000_000 + micros + 5_000_000);
    let _: () = redis::cmd("HSET")
        .arg(&limits)
        .arg("t:rate")
        .arg("1:10000000:1000000/1s")
        .arg("t:tat")
        .arg(&ahead)
        .query_async(&mut conn)
        .await
        .unwrap();
    let (granted, tat, _): (i64, String, u64) =
        call(&["2", "0", "a"]).query_async(&mut conn).await.unwrap();
    assert_eq!(granted, 2);
    let give_back = call(&["-", "2", &tat, "a"]);
    let (applied, _, _): (i64, String, u64) = give_back.query_async(&mut conn).await.unwrap();
    assert_eq!(applied, 1, "the time back where it was");
    let (again, tat_again, _): (i64, String, u64) =
        call(&["2", "0", "b"]).query_async(&mut conn).await.unwrap();
    assert_eq!(
        (again, &tat_again),
        (2, &tat),
        "an equal grant: the same time"
    );
    let (twice, _, _): (i64, String, u64) = give_back.query_async(&mut conn).await.unwrap();
    assert_eq!(
        twice, 0,
        "the first grant's give-back, delivered again, is dropped"
    );
    let now: String = redis::cmd("HGET")
        .arg(&limits)
        .arg("t:tat")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(now, tat, "the second grant's starts still counted");
}
