//! Every store operation against a real redis-server: one behaviour per test.

#![allow(clippy::unwrap_used, unreachable_pub)] // test code: a panic is the failure report

mod support;

use std::time::{Duration, SystemTime};

use dq::{ChangeOutcome, Error, JobState, OnConflict, PushOutcome, Schedule};
use serde::{Deserialize, Serialize};
use support::{client, client_with, id, topic, RedisServer};

#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct OrderCancel {
    order_id: u64,
}

impl dq::Message for OrderCancel {
    const TOPIC: &'static str = "order-cancel";
}

const LEASE: Duration = Duration::from_secs(10);

#[tokio::test]
async fn pushed_job_is_delayed_with_its_payload_and_due_time() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    let before = SystemTime::now();
    let job = c
        .push(OrderCancel { order_id: 42 })
        .delay(Duration::from_secs(600))
        .id("42")
        .await
        .unwrap();
    assert_eq!(job.as_str(), "42");
    let info = c
        .status("order-cancel", "42")
        .await
        .unwrap()
        .expect("job exists");
    assert_eq!(info.state, JobState::Delayed);
    assert_eq!(info.attempt, 0);
    assert_eq!(info.max_attempts, 3, "two retries by default");
    assert_eq!(
        serde_json::from_slice::<OrderCancel>(&info.payload).unwrap(),
        OrderCancel { order_id: 42 }
    );
    let due_in = info.due.duration_since(before).unwrap();
    assert!(
        due_in >= Duration::from_millis(599_900) && due_in < Duration::from_secs(601),
        "{due_in:?}"
    );
}

#[tokio::test]
async fn push_without_id_generates_unique_ids() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    let a = c.push(OrderCancel { order_id: 1 }).await.unwrap();
    let b = c.push(OrderCancel { order_id: 1 }).await.unwrap();
    assert_ne!(a, b);
    assert_eq!(c.counts("order-cancel").await.unwrap().ready, 2);
}

#[tokio::test]
async fn push_of_a_pending_id_keeps_the_first_job_by_default() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    c.push(OrderCancel { order_id: 1 })
        .id("x")
        .delay(Duration::from_secs(60))
        .await
        .unwrap();
    let again = c
        .push(OrderCancel { order_id: 2 })
        .id("x")
        .delay(Duration::from_secs(5))
        .send()
        .await
        .unwrap();
    assert_eq!(again.outcome, PushOutcome::AlreadyPending);
    let info = c.status("order-cancel", "x").await.unwrap().unwrap();
    assert_eq!(
        serde_json::from_slice::<OrderCancel>(&info.payload)
            .unwrap()
            .order_id,
        1
    );
    let counts = c.counts("order-cancel").await.unwrap();
    assert_eq!((counts.delayed, counts.ready), (1, 0), "no second job");
}

#[tokio::test]
async fn push_with_replace_swaps_payload_and_due_time() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    c.push(OrderCancel { order_id: 1 })
        .id("x")
        .delay(Duration::from_secs(60))
        .await
        .unwrap();
    let again = c
        .push(OrderCancel { order_id: 2 })
        .id("x")
        .replace()
        .send()
        .await
        .unwrap();
    assert_eq!(again.outcome, PushOutcome::Replaced);
    let info = c.status("order-cancel", "x").await.unwrap().unwrap();
    assert_eq!(
        info.state,
        JobState::Ready,
        "the new due time (now) applies"
    );
    assert_eq!(
        serde_json::from_slice::<OrderCancel>(&info.payload)
            .unwrap()
            .order_id,
        2
    );
    let counts = c.counts("order-cancel").await.unwrap();
    assert_eq!((counts.delayed, counts.ready), (0, 1));
}

#[tokio::test]
async fn replace_leaves_a_running_job_alone() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    c.push(OrderCancel { order_id: 1 }).id("x").await.unwrap();
    let fetched = c
        .store()
        .fetch(0, &topic("order-cancel"), 10, LEASE)
        .await
        .unwrap();
    assert_eq!(fetched.jobs.len(), 1);
    let again = c
        .push(OrderCancel { order_id: 2 })
        .id("x")
        .replace()
        .send()
        .await
        .unwrap();
    assert_eq!(again.outcome, PushOutcome::Running);
    let info = c.status("order-cancel", "x").await.unwrap().unwrap();
    assert_eq!(info.state, JobState::Running);
    assert_eq!(
        serde_json::from_slice::<OrderCancel>(&info.payload)
            .unwrap()
            .order_id,
        1
    );
}

#[tokio::test]
async fn push_at_a_past_time_is_ready_at_once() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    c.push(OrderCancel { order_id: 1 })
        .id("a")
        .at(SystemTime::now() - Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(
        c.status("order-cancel", "a").await.unwrap().unwrap().state,
        JobState::Ready
    );
}

#[tokio::test]
async fn cancel_deletes_delayed_and_ready_jobs_but_not_running_ones() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    c.push(OrderCancel { order_id: 1 })
        .id("delayed")
        .delay(Duration::from_secs(60))
        .await
        .unwrap();
    c.push(OrderCancel { order_id: 2 })
        .id("running")
        .await
        .unwrap();
    c.store()
        .fetch(0, &topic("order-cancel"), 10, LEASE)
        .await
        .unwrap();
    c.push(OrderCancel { order_id: 3 })
        .id("ready")
        .await
        .unwrap();

    assert_eq!(
        c.cancel("order-cancel", "delayed").await.unwrap(),
        ChangeOutcome::Done
    );
    assert_eq!(
        c.cancel("order-cancel", "ready").await.unwrap(),
        ChangeOutcome::Done
    );
    assert_eq!(
        c.cancel("order-cancel", "running").await.unwrap(),
        ChangeOutcome::Running
    );
    assert_eq!(
        c.cancel("order-cancel", "nope").await.unwrap(),
        ChangeOutcome::NotFound
    );
    assert!(c.status("order-cancel", "delayed").await.unwrap().is_none());
    assert!(c.status("order-cancel", "ready").await.unwrap().is_none());
    let counts = c.counts("order-cancel").await.unwrap();
    assert_eq!((counts.delayed, counts.ready, counts.running), (0, 0, 1));
}

#[tokio::test]
async fn reschedule_moves_a_pending_job_and_refuses_a_running_one() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    c.push(OrderCancel { order_id: 1 })
        .id("a")
        .delay(Duration::from_secs(60))
        .await
        .unwrap();
    let out = c
        .reschedule("order-cancel", "a", Schedule::After(Duration::ZERO))
        .await
        .unwrap();
    assert_eq!(out, ChangeOutcome::Done);
    assert_eq!(
        c.status("order-cancel", "a").await.unwrap().unwrap().state,
        JobState::Ready
    );
    let out = c
        .reschedule(
            "order-cancel",
            "a",
            Schedule::After(Duration::from_secs(3600)),
        )
        .await
        .unwrap();
    assert_eq!(out, ChangeOutcome::Done);
    let info = c.status("order-cancel", "a").await.unwrap().unwrap();
    assert_eq!(info.state, JobState::Delayed);
    assert!(info.due > SystemTime::now() + Duration::from_secs(3500));
    c.reschedule("order-cancel", "a", Schedule::After(Duration::ZERO))
        .await
        .unwrap();
    c.store()
        .fetch(0, &topic("order-cancel"), 1, LEASE)
        .await
        .unwrap();
    let out = c
        .reschedule("order-cancel", "a", Schedule::After(Duration::from_secs(5)))
        .await
        .unwrap();
    assert_eq!(out, ChangeOutcome::Running);
    assert_eq!(
        c.reschedule("order-cancel", "missing", Schedule::After(Duration::ZERO))
            .await
            .unwrap(),
        ChangeOutcome::NotFound
    );
}

#[tokio::test]
async fn promote_moves_only_due_jobs_and_reports_the_next_due_time() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    let s = c.store();
    c.push(OrderCancel { order_id: 1 })
        .id("soon")
        .delay(Duration::from_millis(30))
        .await
        .unwrap();
    c.push(OrderCancel { order_id: 2 })
        .id("later")
        .delay(Duration::from_secs(60))
        .await
        .unwrap();
    let early = s.promote(0, 1000).await.unwrap();
    assert_eq!(early.moved, 0, "nothing is due yet");
    tokio::time::sleep(Duration::from_millis(40)).await;
    let p = s.promote(0, 1000).await.unwrap();
    assert_eq!(p.moved, 1);
    assert_eq!(p.topics, vec![(topic("order-cancel"), 1)]);
    let later = c.status("order-cancel", "later").await.unwrap().unwrap();
    assert_eq!(p.next_due_us, Some(dq::to_us(later.due)));
    assert!(p.next_due_us.unwrap() > p.now_us);
    assert_eq!(
        c.status("order-cancel", "soon")
            .await
            .unwrap()
            .unwrap()
            .state,
        JobState::Ready
    );
}

#[tokio::test]
async fn promote_moves_a_bounded_batch_per_call() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    let jobs = (0..250).map(|i| {
        c.push(OrderCancel { order_id: i })
            .id(i.to_string())
            .delay(Duration::from_millis(5))
    });
    c.push_batch(jobs).await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let first = c.store().promote(0, 100).await.unwrap();
    assert_eq!(first.moved, 100);
    assert!(
        first.next_due_us.unwrap() <= first.now_us,
        "the rest is already due"
    );
    assert_eq!(c.store().promote(0, 100).await.unwrap().moved, 100);
    assert_eq!(c.store().promote(0, 100).await.unwrap().moved, 50);
    assert_eq!(c.counts("order-cancel").await.unwrap().ready, 250);
}

#[tokio::test]
async fn fetch_leases_at_most_the_asked_number_and_counts_the_attempt() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    c.push_batch((0..5).map(|i| c.push(OrderCancel { order_id: i }).id(i.to_string())))
        .await
        .unwrap();
    let f = c
        .store()
        .fetch(0, &topic("order-cancel"), 3, LEASE)
        .await
        .unwrap();
    let ids: Vec<_> = f
        .jobs
        .iter()
        .map(|j| j.lease.id.as_str().to_owned())
        .collect();
    assert_eq!(ids, ["0", "1", "2"], "oldest first");
    assert!(f.jobs.iter().all(|j| j.envelope.attempt == 1));
    let counts = c.counts("order-cancel").await.unwrap();
    assert_eq!((counts.ready, counts.running), (2, 3));
    let info = c.status("order-cancel", "0").await.unwrap().unwrap();
    assert_eq!(info.state, JobState::Running);
    let deadline = info.state_since_or_until.unwrap();
    assert!(deadline > SystemTime::now() + Duration::from_secs(9));
}

#[tokio::test]
async fn ack_completes_jobs_and_refuses_a_lease_that_was_taken_over() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    let s = c.store();
    c.push(OrderCancel { order_id: 1 }).id("a").await.unwrap();
    c.push(OrderCancel { order_id: 2 }).id("b").await.unwrap();
    let first = s
        .fetch(0, &topic("order-cancel"), 2, Duration::from_millis(100))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(120)).await;
    assert_eq!(
        s.reclaim(0, 100).await.unwrap().requeued,
        2,
        "both leases expired"
    );
    let second = s.fetch(0, &topic("order-cancel"), 1, LEASE).await.unwrap();
    assert_eq!(second.jobs[0].lease.id.as_str(), "a");

    let leases: Vec<_> = first.jobs.iter().map(|j| j.lease.clone()).collect();
    let acked = s.ack(&leases).await.unwrap();
    assert_eq!(acked.acked, 0, "the old worker's acks are stale");
    assert_eq!(acked.stale.len(), 2);
    let acked = s.ack(&[second.jobs[0].lease.clone()]).await.unwrap();
    assert_eq!(acked.acked, 1);
    assert!(
        c.status("order-cancel", "a").await.unwrap().is_none(),
        "acked jobs are gone"
    );
    assert_eq!(c.counts("order-cancel").await.unwrap().running, 0);
}

#[tokio::test]
async fn retry_records_the_error_and_runs_again_after_the_delay() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    let s = c.store();
    c.push(OrderCancel { order_id: 1 }).id("a").await.unwrap();
    let f = s.fetch(0, &topic("order-cancel"), 1, LEASE).await.unwrap();
    assert!(s
        .retry(
            &f.jobs[0].lease,
            Duration::from_millis(50),
            "payment service down"
        )
        .await
        .unwrap());
    let info = c.status("order-cancel", "a").await.unwrap().unwrap();
    assert_eq!(info.state, JobState::Delayed);
    assert_eq!(info.last_error.as_deref(), Some("payment service down"));
    assert!(
        !s.retry(&f.jobs[0].lease, Duration::ZERO, "again")
            .await
            .unwrap(),
        "the lease is gone"
    );
    tokio::time::sleep(Duration::from_millis(60)).await;
    assert_eq!(s.promote(0, 10).await.unwrap().moved, 1);
    let again = s.fetch(0, &topic("order-cancel"), 1, LEASE).await.unwrap();
    assert_eq!(again.jobs[0].envelope.attempt, 2);
}

#[tokio::test]
async fn dead_letters_keep_the_error_and_can_be_listed_requeued_and_purged() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    let s = c.store();
    let t = topic("order-cancel");
    c.push_batch((0..3).map(|i| c.push(OrderCancel { order_id: i }).id(i.to_string())))
        .await
        .unwrap();
    let f = s.fetch(0, &t, 3, LEASE).await.unwrap();
    for j in &f.jobs {
        assert!(s
            .dead_letter(&j.lease, &format!("order {} not found", j.lease.id))
            .await
            .unwrap());
    }
    assert_eq!(c.counts("order-cancel").await.unwrap().dead, 3);
    let dead = s.dead_jobs(&t, 0, 2).await.unwrap();
    assert_eq!(dead.len(), 2, "paged");
    assert_eq!(dead[0].state, JobState::Dead);
    assert!(dead[0].last_error.as_deref().unwrap().contains("not found"));

    assert_eq!(s.requeue_dead(&t, &[id("1")], 3, 100).await.unwrap(), 1);
    let info = c.status("order-cancel", "1").await.unwrap().unwrap();
    assert_eq!((info.state, info.attempt), (JobState::Ready, 0));

    assert_eq!(
        s.purge_dead(&t, SystemTime::now() - Duration::from_secs(60), 100)
            .await
            .unwrap(),
        0,
        "too young"
    );
    assert_eq!(
        s.purge_dead(&t, SystemTime::now() + Duration::from_secs(1), 100)
            .await
            .unwrap(),
        2
    );
    assert!(c.status("order-cancel", "0").await.unwrap().is_none());
    assert_eq!(c.counts("order-cancel").await.unwrap().dead, 0);
}

#[tokio::test]
async fn requeue_without_ids_takes_the_oldest_dead_letters_up_to_the_limit() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    let s = c.store();
    let t = topic("order-cancel");
    c.push_batch((0..5).map(|i| c.push(OrderCancel { order_id: i }).id(i.to_string())))
        .await
        .unwrap();
    for j in s.fetch(0, &t, 5, LEASE).await.unwrap().jobs {
        s.dead_letter(&j.lease, "boom").await.unwrap();
    }
    assert_eq!(s.requeue_dead(&t, &[], 3, 4).await.unwrap(), 4);
    let counts = c.counts("order-cancel").await.unwrap();
    assert_eq!((counts.ready, counts.dead), (4, 1));
}

#[tokio::test]
async fn a_dead_job_does_not_block_its_id() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    let s = c.store();
    c.push(OrderCancel { order_id: 1 }).id("a").await.unwrap();
    let f = s.fetch(0, &topic("order-cancel"), 1, LEASE).await.unwrap();
    s.dead_letter(&f.jobs[0].lease, "boom").await.unwrap();
    let again = c
        .push(OrderCancel { order_id: 2 })
        .id("a")
        .send()
        .await
        .unwrap();
    assert_eq!(again.outcome, PushOutcome::Created);
    let info = c.status("order-cancel", "a").await.unwrap().unwrap();
    assert_eq!((info.state, info.last_error), (JobState::Ready, None));
    assert_eq!(c.counts("order-cancel").await.unwrap().dead, 0);
}

#[tokio::test]
async fn reclaim_requeues_expired_leases_and_dead_letters_the_last_attempt() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    let s = c.store();
    let t = topic("order-cancel");
    c.push(OrderCancel { order_id: 1 })
        .id("retries-left")
        .await
        .unwrap();
    c.push(OrderCancel { order_id: 2 })
        .id("last-try")
        .max_retries(0)
        .await
        .unwrap();
    s.fetch(0, &t, 2, Duration::from_millis(50)).await.unwrap();
    assert_eq!(
        s.reclaim(0, 100).await.unwrap(),
        dq::Reclaimed::default(),
        "leases still valid"
    );
    tokio::time::sleep(Duration::from_millis(60)).await;
    let r = s.reclaim(0, 100).await.unwrap();
    assert_eq!((r.requeued, r.dead), (1, 1));
    let left = c
        .status("order-cancel", "retries-left")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(left.state, JobState::Ready);
    assert!(left.last_error.unwrap().contains("lease expired"));
    let last = c.status("order-cancel", "last-try").await.unwrap().unwrap();
    assert_eq!(last.state, JobState::Dead);
}

#[tokio::test]
async fn extend_keeps_a_running_job_leased() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    let s = c.store();
    c.push(OrderCancel { order_id: 1 }).id("a").await.unwrap();
    let f = s
        .fetch(0, &topic("order-cancel"), 1, Duration::from_millis(100))
        .await
        .unwrap();
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let lost = s
            .extend(&[f.jobs[0].lease.clone()], Duration::from_millis(100))
            .await
            .unwrap();
        assert!(lost.is_empty());
    }
    assert_eq!(
        s.reclaim(0, 10).await.unwrap().requeued,
        0,
        "renewed past its first deadline"
    );
    assert_eq!(s.ack(&[f.jobs[0].lease.clone()]).await.unwrap().acked, 1);
}

#[tokio::test]
async fn release_puts_jobs_back_first_in_line_without_spending_an_attempt() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    let s = c.store();
    let t = topic("order-cancel");
    c.push(OrderCancel { order_id: 1 }).id("a").await.unwrap();
    c.push(OrderCancel { order_id: 2 }).id("b").await.unwrap();
    let f = s.fetch(0, &t, 1, LEASE).await.unwrap();
    assert_eq!(s.release(&[f.jobs[0].lease.clone()]).await.unwrap(), 1);
    let again = s.fetch(0, &t, 1, LEASE).await.unwrap();
    assert_eq!(
        again.jobs[0].lease.id.as_str(),
        "a",
        "released jobs go first"
    );
    assert_eq!(
        again.jobs[0].envelope.attempt, 1,
        "the interrupted run did not count"
    );
}

#[tokio::test]
async fn push_announces_a_new_earliest_due_time_on_the_wake_channel() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    let rc = redis::Client::open(redis.url()).unwrap();
    let mut pubsub = rc.get_async_pubsub().await.unwrap();
    pubsub.subscribe("dq:{test:0}:wake").await.unwrap();
    let mut messages = pubsub.into_on_message();
    c.push(OrderCancel { order_id: 1 })
        .id("late")
        .delay(Duration::from_secs(60))
        .await
        .unwrap();
    c.push(OrderCancel { order_id: 2 })
        .id("later")
        .delay(Duration::from_secs(120))
        .await
        .unwrap();
    c.push(OrderCancel { order_id: 3 })
        .id("early")
        .delay(Duration::from_secs(30))
        .await
        .unwrap();
    use futures_util::StreamExt;
    let mut dues = Vec::new();
    for _ in 0..2 {
        let msg = tokio::time::timeout(Duration::from_secs(2), messages.next())
            .await
            .unwrap()
            .unwrap();
        dues.push(msg.get_payload::<u64>().unwrap());
    }
    let early = dq::to_us(
        c.status("order-cancel", "early")
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

#[tokio::test]
async fn counts_are_kept_per_topic() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    c.push_to("a", &1)
        .delay(Duration::from_secs(60))
        .await
        .unwrap();
    c.push_to("a", &2).await.unwrap();
    c.push_to("b", &3).await.unwrap();
    let a = c.counts("a").await.unwrap();
    assert_eq!((a.delayed, a.ready, a.running, a.dead), (1, 1, 0, 0));
    let b = c.counts("b").await.unwrap();
    assert_eq!((b.delayed, b.ready), (0, 1));
    assert_eq!(
        c.store().topics().await.unwrap(),
        vec![topic("a"), topic("b")]
    );
}

#[tokio::test]
async fn batch_of_100_000_jobs_is_pushed_and_promoted_with_none_lost() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    let n = 100_000u64;
    let jobs = (0..n).map(|i| {
        c.push(OrderCancel { order_id: i })
            .id(i.to_string())
            .delay(Duration::from_millis(200))
    });
    let pushed = c.push_batch(jobs).await.unwrap();
    assert_eq!(pushed.len(), n as usize);
    assert!(pushed.iter().all(|p| p.outcome == PushOutcome::Created));
    assert_eq!(c.counts("order-cancel").await.unwrap().delayed, n);
    tokio::time::sleep(Duration::from_millis(250)).await;
    let mut moved = 0;
    loop {
        let p = c.store().promote(0, 10_000).await.unwrap();
        moved += p.moved;
        if p.moved == 0 {
            break;
        }
    }
    assert_eq!(moved, n as usize);
    let counts = c.counts("order-cancel").await.unwrap();
    assert_eq!((counts.delayed, counts.ready), (0, n));
    let llen = redis.command(&["LLEN", "dq:{test:0}:ready:order-cancel"]);
    assert_eq!(llen.trim(), format!(":{n}"));
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
async fn invalid_topics_and_ids_are_rejected_before_anything_is_stored() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    let long = "x".repeat(10 * 1024);
    for bad in ["", "a b", "a{b", "a}b", "a:b", "a*b", "a\nb", long.as_str()] {
        let err = c.push_to(bad, &1).await.unwrap_err();
        assert!(matches!(err, Error::InvalidTopic { .. }), "{bad:?}: {err}");
        let err = c.push_to("t", &1).id(bad).await.unwrap_err();
        assert!(matches!(err, Error::InvalidJobId { .. }), "{bad:?}: {err}");
    }
    let err = c.push_to("t", &1).id("a:b").await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid job id \"a:b\": a job id must not contain '{', '}', ':' or '*'"
    );
    assert_eq!(
        redis.command(&["DBSIZE"]).trim(),
        ":0",
        "nothing was written"
    );
}

#[tokio::test]
async fn oversized_payload_is_rejected_with_the_limit() {
    let redis = RedisServer::start();
    let c = client_with(&redis, |b| b.max_payload_bytes(1000)).await;
    let err = c.push_to("t", &"x".repeat(2000)).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::PayloadTooLarge {
                size: 2002,
                limit: 1000,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("exceeds the limit of 1000 bytes"));
    assert_eq!(redis.command(&["DBSIZE"]).trim(), ":0");
}

#[tokio::test]
async fn a_bad_job_in_a_batch_fails_the_batch_and_stores_nothing() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    let jobs = vec![c.push_to("t", &1).id("ok"), c.push_to("t", &2).id("not ok")];
    assert!(matches!(
        c.push_batch(jobs).await,
        Err(Error::InvalidJobId { .. })
    ));
    assert_eq!(redis.command(&["DBSIZE"]).trim(), ":0");
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

    let err = c.status("t", "evil").await.unwrap_err();
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
    let dead = s.dead_jobs(&topic("t"), 0, 10).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].payload, b"not an envelope", "the raw value is kept");
    assert!(dead[0]
        .last_error
        .as_deref()
        .unwrap()
        .contains("malformed envelope"));
}

#[tokio::test]
async fn unreachable_redis_is_a_clear_connection_error() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = dq::Config::builder()
        .redis_url(format!("redis://127.0.0.1:{port}/"))
        .build()
        .unwrap();
    let err = dq::Client::connect(config).await.unwrap_err();
    assert!(err.is_connection(), "{err:?}");
    assert!(err.to_string().contains("is Redis reachable"), "{err}");
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
async fn keep_and_replace_pushes_in_one_batch_each_get_their_mode() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    c.push_to("t", &1)
        .id("a")
        .delay(Duration::from_secs(60))
        .await
        .unwrap();
    c.push_to("t", &1)
        .id("b")
        .delay(Duration::from_secs(60))
        .await
        .unwrap();
    let out = c
        .push_batch(vec![
            c.push_to("t", &2).id("a"),
            c.push_to("t", &2).id("b").on_conflict(OnConflict::Replace),
        ])
        .await
        .unwrap();
    assert_eq!(out[0].outcome, PushOutcome::AlreadyPending);
    assert_eq!(out[1].outcome, PushOutcome::Replaced);
}
