//! The store's behaviour, one test per behaviour, run against every store: Redis (a real
//! redis-server per test), a Redis Cluster (3 masters and 3 replicas per test) and the
//! in-memory store, so they cannot drift apart. The behaviours address shard 0, so the
//! cluster runs them with one shard; `tests/cluster.rs` spreads 16 shards over the masters.

#![allow(clippy::unwrap_used, unreachable_pub)] // test code: a panic is the failure report

mod support;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use dq::admin::{ChangeOutcome, Cursor};
use dq::push::{OnConflict, PushOutcome};
use dq::store::{DeadLetters, FiredTick, MemoryStore, NewJob};
use dq::{Error, JobState, Schedule};
use support::{
    id, lease_one, push_order, state_of, topic, OrderCancel, RedisCluster, RedisServer, TestClient,
    LEASE,
};

#[derive(Clone, Copy, Debug)]
enum Kind {
    Redis,
    Cluster,
    Memory,
}

/// A client on a fresh store of the given kind (and its redis-server, killed on drop).
struct Harness {
    client: TestClient,
    _redis: Option<RedisServer>,
    _cluster: Option<RedisCluster>,
}

impl Harness {
    async fn new(
        kind: Kind,
        tweak: impl FnOnce(dq::config::ConfigBuilder) -> dq::config::ConfigBuilder,
    ) -> Harness {
        match kind {
            Kind::Redis => {
                let redis = RedisServer::start();
                let client = support::client_with(&redis, tweak).await;
                Harness {
                    client,
                    _redis: Some(redis),
                    _cluster: None,
                }
            }
            Kind::Cluster => {
                let cluster = RedisCluster::start(3, 1);
                let config = tweak(
                    dq::Config::builder()
                        .redis_cluster(cluster.urls())
                        .shards(1)
                        .namespace("test"),
                )
                .build()
                .unwrap();
                Harness {
                    client: TestClient::connect(config).await.unwrap(),
                    _redis: None,
                    _cluster: Some(cluster),
                }
            }
            Kind::Memory => {
                let config = tweak(dq::Config::builder()).build().unwrap();
                Harness {
                    client: TestClient::new(Arc::new(MemoryStore::new()), config),
                    _redis: None,
                    _cluster: None,
                }
            }
        }
    }
}

macro_rules! on_both_stores {
    ($($name:ident),* $(,)?) => {
        mod on_redis {
            $(#[tokio::test] async fn $name() { super::$name(super::Kind::Redis).await })*
        }
        mod on_cluster {
            $(#[tokio::test] async fn $name() { super::$name(super::Kind::Cluster).await })*
        }
        mod on_memory {
            $(#[tokio::test] async fn $name() { super::$name(super::Kind::Memory).await })*
        }
    };
}

on_both_stores!(
    a_paused_topic_is_not_fetched_until_resumed,
    listing_pages_through_each_state_of_one_topic,
    stats_show_how_far_behind_and_what_comes_next,
    workers_are_listed_while_they_beat,
    dead_letters_are_retried_and_purged_through_the_client,
    concurrent_pushes_are_each_stored_once,
    the_same_id_twice_in_one_batch_is_one_job,
    pushed_job_is_delayed_with_its_payload_and_due_time,
    push_without_id_generates_unique_ids,
    push_of_a_pending_id_keeps_the_first_job_by_default,
    push_with_replace_swaps_payload_and_due_time,
    replace_leaves_a_running_job_alone,
    push_at_a_past_time_is_ready_at_once,
    cancel_deletes_delayed_and_ready_jobs_but_not_running_ones,
    reschedule_moves_a_pending_job_and_refuses_a_running_one,
    promote_moves_only_due_jobs_and_reports_the_next_due_time,
    promote_moves_a_bounded_batch_per_call,
    fetch_leases_at_most_the_asked_number_and_counts_the_attempt,
    ack_completes_jobs_and_refuses_a_lease_that_was_taken_over,
    retry_records_the_error_and_runs_again_after_the_delay,
    dead_letters_keep_the_error_and_can_be_listed_requeued_and_purged,
    requeue_without_ids_takes_the_oldest_dead_letters_up_to_the_limit,
    a_dead_job_does_not_block_its_id,
    deleting_a_dead_letter_leaves_a_job_pushed_again_under_its_id_alone,
    reclaim_requeues_expired_leases_and_dead_letters_the_last_attempt,
    extend_keeps_a_running_job_leased,
    release_puts_jobs_back_first_in_line_without_spending_an_attempt,
    counts_are_kept_per_topic,
    batch_of_100_000_jobs_is_pushed_and_promoted_with_none_lost,
    invalid_topics_and_ids_are_rejected_before_anything_is_stored,
    oversized_payload_is_rejected_with_the_limit,
    a_bad_job_in_a_batch_fails_the_batch_and_stores_nothing,
    keep_and_replace_pushes_in_one_batch_each_get_their_mode,
    dead_letters_page_with_a_cursor_at_most_1000_per_call,
    retry_all_dead_takes_only_what_died_before_it_began,
    a_retry_delay_over_the_limit_is_refused_and_the_job_stays_leased,
    ready_jobs_replaced_cancelled_or_rescheduled_are_counted_listed_and_run_once,
    a_reused_id_after_a_cancel_of_a_ready_job_runs_once,
    stats_answer_when_only_stale_entries_were_left,
    a_postponed_job_runs_again_without_spending_an_attempt_or_its_last_error,
    reclaim_judges_a_job_by_its_listeners_attempt_limit_until_it_is_forgotten,
    throughput_counts_runs_done_and_failed_in_the_last_hour_per_topic,
    unique_for_reserves_the_id_after_the_job_succeeds_until_the_window_ends,
    unique_for_reserves_nothing_when_the_job_dies_or_is_cancelled,
    a_replace_without_unique_for_drops_the_reservation_asked_before,
    unique_by_payload_makes_the_same_message_one_job,
    debounce_keeps_the_last_payload_and_moves_the_due_time,
    a_ticks_job_is_created_once_per_generation_even_after_it_is_gone,
    a_schedule_moves_on_only_under_the_generation_its_look_read,
    a_uniqueness_window_over_the_limit_is_refused_and_one_at_the_limit_holds,
    a_topic_paused_before_its_first_push_is_listed_as_paused,
);

async fn pushed_job_is_delayed_with_its_payload_and_due_time(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let before = SystemTime::now();
    let job = c
        .push(OrderCancel { order_id: 42 })
        .delay(Duration::from_secs(600))
        .id("42")
        .await
        .unwrap();
    assert_eq!(job.as_str(), "42");
    let info = c
        .status_in("order-cancel", "42")
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

async fn push_without_id_generates_unique_ids(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let a = c.push(OrderCancel { order_id: 1 }).await.unwrap();
    let b = c.push(OrderCancel { order_id: 1 }).await.unwrap();
    assert_ne!(a, b);
    assert_eq!(c.counts("order-cancel").await.unwrap().ready, 2);
}

async fn push_of_a_pending_id_keeps_the_first_job_by_default(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    push_order(c, 1, "x", Duration::from_secs(60)).await;
    let again = c
        .push(OrderCancel { order_id: 2 })
        .id("x")
        .delay(Duration::from_secs(5))
        .send()
        .await
        .unwrap();
    assert_eq!(again.outcome, PushOutcome::AlreadyPending);
    let info = c.status_in("order-cancel", "x").await.unwrap().unwrap();
    assert_eq!(
        serde_json::from_slice::<OrderCancel>(&info.payload)
            .unwrap()
            .order_id,
        1
    );
    let counts = c.counts("order-cancel").await.unwrap();
    assert_eq!((counts.delayed, counts.ready), (1, 0), "no second job");
}

async fn push_with_replace_swaps_payload_and_due_time(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    push_order(c, 1, "x", Duration::from_secs(60)).await;
    let again = c
        .push(OrderCancel { order_id: 2 })
        .id("x")
        .replace()
        .send()
        .await
        .unwrap();
    assert_eq!(again.outcome, PushOutcome::Replaced);
    let info = c.status_in("order-cancel", "x").await.unwrap().unwrap();
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

async fn replace_leaves_a_running_job_alone(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
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
    let info = c.status_in("order-cancel", "x").await.unwrap().unwrap();
    assert_eq!(info.state, JobState::Running);
    assert_eq!(
        serde_json::from_slice::<OrderCancel>(&info.payload)
            .unwrap()
            .order_id,
        1
    );
}

async fn push_at_a_past_time_is_ready_at_once(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    c.push(OrderCancel { order_id: 1 })
        .id("a")
        .at(SystemTime::now() - Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(
        state_of(c, "order-cancel", "a").await.unwrap(),
        JobState::Ready
    );
}

async fn cancel_deletes_delayed_and_ready_jobs_but_not_running_ones(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    push_order(c, 1, "delayed", Duration::from_secs(60)).await;
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
        c.cancel_in("order-cancel", "delayed").await.unwrap(),
        ChangeOutcome::Done
    );
    assert_eq!(
        c.cancel_in("order-cancel", "ready").await.unwrap(),
        ChangeOutcome::Done
    );
    assert_eq!(
        c.cancel_in("order-cancel", "running").await.unwrap(),
        ChangeOutcome::Running
    );
    assert_eq!(
        c.cancel_in("order-cancel", "nope").await.unwrap(),
        ChangeOutcome::NotFound
    );
    assert!(c
        .status_in("order-cancel", "delayed")
        .await
        .unwrap()
        .is_none());
    assert!(c
        .status_in("order-cancel", "ready")
        .await
        .unwrap()
        .is_none());
    let counts = c.counts("order-cancel").await.unwrap();
    assert_eq!((counts.delayed, counts.ready, counts.running), (0, 0, 1));
}

async fn reschedule_moves_a_pending_job_and_refuses_a_running_one(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    push_order(c, 1, "a", Duration::from_secs(60)).await;
    let out = c
        .reschedule_in("order-cancel", "a", Schedule::After(Duration::ZERO))
        .await
        .unwrap();
    assert_eq!(out, ChangeOutcome::Done);
    assert_eq!(
        state_of(c, "order-cancel", "a").await.unwrap(),
        JobState::Ready
    );
    let out = c
        .reschedule_in(
            "order-cancel",
            "a",
            Schedule::After(Duration::from_secs(3600)),
        )
        .await
        .unwrap();
    assert_eq!(out, ChangeOutcome::Done);
    let info = c.status_in("order-cancel", "a").await.unwrap().unwrap();
    assert_eq!(info.state, JobState::Delayed);
    assert!(info.due > SystemTime::now() + Duration::from_secs(3500));
    c.reschedule_in("order-cancel", "a", Schedule::After(Duration::ZERO))
        .await
        .unwrap();
    c.store()
        .fetch(0, &topic("order-cancel"), 1, LEASE)
        .await
        .unwrap();
    let out = c
        .reschedule_in("order-cancel", "a", Schedule::After(Duration::from_secs(5)))
        .await
        .unwrap();
    assert_eq!(out, ChangeOutcome::Running);
    assert_eq!(
        c.reschedule_in("order-cancel", "missing", Schedule::After(Duration::ZERO))
            .await
            .unwrap(),
        ChangeOutcome::NotFound
    );
}

async fn promote_moves_only_due_jobs_and_reports_the_next_due_time(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let s = c.store();
    push_order(c, 1, "soon", Duration::from_millis(30)).await;
    push_order(c, 2, "later", Duration::from_secs(60)).await;
    let early = s.promote(0, 1000).await.unwrap();
    assert_eq!(early.moved, 0, "nothing is due yet");
    tokio::time::sleep(Duration::from_millis(40)).await;
    let p = s.promote(0, 1000).await.unwrap();
    assert_eq!(p.moved, 1);
    assert_eq!(p.topics, vec![(topic("order-cancel"), 1)]);
    let later = c.status_in("order-cancel", "later").await.unwrap().unwrap();
    assert_eq!(p.next_due_us, Some(dq::store::to_us(later.due)));
    assert!(p.next_due_us.unwrap() > p.now_us);
    assert_eq!(
        state_of(c, "order-cancel", "soon").await.unwrap(),
        JobState::Ready
    );
}

async fn promote_moves_a_bounded_batch_per_call(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
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

async fn fetch_leases_at_most_the_asked_number_and_counts_the_attempt(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
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
    let info = c.status_in("order-cancel", "0").await.unwrap().unwrap();
    assert_eq!((info.state, info.attempt), (JobState::Running, 1));
    let deadline = info.state_since_or_until.unwrap();
    assert!(deadline > SystemTime::now() + Duration::from_secs(9));
}

async fn ack_completes_jobs_and_refuses_a_lease_that_was_taken_over(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
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
        c.status_in("order-cancel", "a").await.unwrap().is_none(),
        "acked jobs are gone"
    );
    assert_eq!(c.counts("order-cancel").await.unwrap().running, 0);
}

async fn retry_records_the_error_and_runs_again_after_the_delay(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
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
    let info = c.status_in("order-cancel", "a").await.unwrap().unwrap();
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

async fn dead_letters_keep_the_error_and_can_be_listed_requeued_and_purged(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
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
    let dead = s.dead_jobs(&t, Cursor::START, 2).await.unwrap().jobs;
    assert_eq!(dead.len(), 2, "paged");
    assert_eq!(dead[0].state, JobState::Dead);
    assert!(dead[0].last_error.as_deref().unwrap().contains("not found"));

    assert_eq!(
        s.requeue_dead(&t, DeadLetters::Ids(&[id("1")]), 3)
            .await
            .unwrap(),
        1
    );
    let info = c.status_in("order-cancel", "1").await.unwrap().unwrap();
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
    assert!(c.status_in("order-cancel", "0").await.unwrap().is_none());
    assert_eq!(c.counts("order-cancel").await.unwrap().dead, 0);
}

async fn requeue_without_ids_takes_the_oldest_dead_letters_up_to_the_limit(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let s = c.store();
    let t = topic("order-cancel");
    c.push_batch((0..5).map(|i| c.push(OrderCancel { order_id: i }).id(i.to_string())))
        .await
        .unwrap();
    for j in s.fetch(0, &t, 5, LEASE).await.unwrap().jobs {
        s.dead_letter(&j.lease, "boom").await.unwrap();
    }
    let oldest_four = DeadLetters::DiedBy {
        before_us: u64::MAX,
        limit: 4,
    };
    assert_eq!(s.requeue_dead(&t, oldest_four, 3).await.unwrap(), 4);
    let counts = c.counts("order-cancel").await.unwrap();
    assert_eq!((counts.ready, counts.dead), (4, 1));
}

async fn a_dead_job_does_not_block_its_id(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
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
    let info = c.status_in("order-cancel", "a").await.unwrap().unwrap();
    assert_eq!((info.state, info.last_error), (JobState::Ready, None));
    assert_eq!(c.counts("order-cancel").await.unwrap().dead, 0);
}

async fn deleting_a_dead_letter_leaves_a_job_pushed_again_under_its_id_alone(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let s = c.store();
    let t = topic("order-cancel");
    c.push_batch((0..3).map(|i| c.push(OrderCancel { order_id: i }).id(i.to_string())))
        .await
        .unwrap();
    for j in s.fetch(0, &t, 3, LEASE).await.unwrap().jobs {
        assert!(s.dead_letter(&j.lease, "boom").await.unwrap());
    }
    // Meanwhile "1" is pushed again (a new job under the dead letter's id, pending now) and
    // "2" is retried: neither is a dead letter any more.
    let again = c
        .push(OrderCancel { order_id: 42 })
        .id("1")
        .send()
        .await
        .unwrap();
    assert_eq!(again.outcome, PushOutcome::Created);
    assert_eq!(
        s.requeue_dead(&t, DeadLetters::Ids(&[id("2")]), 3)
            .await
            .unwrap(),
        1
    );
    // A delete of what the dead-letter page showed (one id twice, one never pushed).
    let shown = [id("0"), id("1"), id("0"), id("2"), id("nope")];
    assert_eq!(s.delete_dead(&t, &shown).await.unwrap(), 1, "only 0");
    assert!(c.status_in("order-cancel", "0").await.unwrap().is_none());
    let new = c.status_in("order-cancel", "1").await.unwrap().unwrap();
    assert_eq!(
        (new.state, new.attempt, new.last_error),
        (JobState::Ready, 0, None)
    );
    assert_eq!(new.payload, br#"{"order_id":42}"#);
    let retried = c.status_in("order-cancel", "2").await.unwrap().unwrap();
    assert_eq!(retried.state, JobState::Ready);
    let counts = c.counts("order-cancel").await.unwrap();
    assert_eq!((counts.ready, counts.dead), (2, 0));
    // Through the client: nothing is a dead letter now, nothing is deleted.
    assert_eq!(
        c.delete_dead("order-cancel", &["0", "1", "2"])
            .await
            .unwrap(),
        0
    );
    assert_eq!(c.delete_dead("order-cancel", &[]).await.unwrap(), 0);
    // Both run, once each.
    let f = s.fetch(0, &t, 10, LEASE).await.unwrap();
    let mut ran: Vec<&str> = f.jobs.iter().map(|j| j.lease.id.as_str()).collect();
    ran.sort_unstable();
    assert_eq!(ran, ["1", "2"]);
}

async fn reclaim_requeues_expired_leases_and_dead_letters_the_last_attempt(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
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
        dq::store::Reclaimed::default(),
        "leases still valid"
    );
    tokio::time::sleep(Duration::from_millis(60)).await;
    let r = s.reclaim(0, 100).await.unwrap();
    assert_eq!((r.requeued, r.dead), (1, 1));
    let left = c
        .status_in("order-cancel", "retries-left")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (left.state, left.attempt),
        (JobState::Ready, 1),
        "the lost run counts"
    );
    assert!(left
        .last_error
        .unwrap()
        .contains("lease expired on attempt 1"));
    let last = c
        .status_in("order-cancel", "last-try")
        .await
        .unwrap()
        .unwrap();
    assert_eq!((last.state, last.attempt), (JobState::Dead, 1));
    let again = s.fetch(0, &t, 1, LEASE).await.unwrap();
    assert_eq!(again.jobs[0].envelope.attempt, 2, "the second run");
}

async fn extend_keeps_a_running_job_leased(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
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

async fn release_puts_jobs_back_first_in_line_without_spending_an_attempt(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
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

async fn counts_are_kept_per_topic(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
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

async fn batch_of_100_000_jobs_is_pushed_and_promoted_with_none_lost(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
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
}

async fn invalid_topics_and_ids_are_rejected_before_anything_is_stored(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
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
    assert!(
        c.store().topics().await.unwrap().is_empty(),
        "nothing was written"
    );
}

async fn oversized_payload_is_rejected_with_the_limit(kind: Kind) {
    let h = Harness::new(kind, |b| b.max_payload_bytes(1000)).await;
    let c = &h.client;
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
    assert!(
        c.store().topics().await.unwrap().is_empty(),
        "nothing was written"
    );
}

async fn a_bad_job_in_a_batch_fails_the_batch_and_stores_nothing(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let jobs = vec![c.push_to("t", &1).id("ok"), c.push_to("t", &2).id("not ok")];
    assert!(matches!(
        c.push_batch(jobs).await,
        Err(Error::InvalidJobId { .. })
    ));
    assert!(
        c.store().topics().await.unwrap().is_empty(),
        "nothing was written"
    );
}

async fn keep_and_replace_pushes_in_one_batch_each_get_their_mode(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    for id in ["a", "b"] {
        let delayed = c.push_to("t", &1).id(id).delay(Duration::from_secs(60));
        delayed.await.unwrap();
    }
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

async fn the_same_id_twice_in_one_batch_is_one_job(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let kept = c
        .push_batch(vec![
            c.push_to("t", &1).id("a").delay(Duration::from_secs(60)),
            c.push_to("t", &2).id("a"),
        ])
        .await
        .unwrap();
    assert_eq!(kept[1].outcome, PushOutcome::AlreadyPending);
    let replaced = c
        .push_batch(vec![
            c.push_to("t", &3).id("b"),
            c.push_to("t", &4)
                .id("b")
                .delay(Duration::from_secs(60))
                .replace(),
        ])
        .await
        .unwrap();
    assert_eq!(replaced[1].outcome, PushOutcome::Replaced);
    let counts = c.counts("t").await.unwrap();
    assert_eq!(
        (counts.delayed, counts.ready),
        (2, 0),
        "one job per id, placed once"
    );
    let a = c.status_in("t", "a").await.unwrap().unwrap();
    assert_eq!(a.payload, b"1", "keep: the first push wins");
    let b = c.status_in("t", "b").await.unwrap().unwrap();
    assert_eq!(
        (b.payload.as_slice(), b.state),
        (&b"4"[..], JobState::Delayed),
        "replace: the last push wins"
    );
}

async fn concurrent_pushes_are_each_stored_once(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let distinct = (0..500).map(|i| c.push_to("t", &i).id(format!("d{i}")).send());
    let same = (0..50).map(|i| c.push_to("t", &i).id("same").send());
    let results = futures_util::future::join_all(distinct.chain(same)).await;
    let outcomes: Vec<PushOutcome> = results.into_iter().map(|r| r.unwrap().outcome).collect();
    assert!(outcomes[..500].iter().all(|o| *o == PushOutcome::Created));
    let created = outcomes[500..]
        .iter()
        .filter(|o| **o == PushOutcome::Created)
        .count();
    assert_eq!(
        created, 1,
        "one of the racing pushes of one id creates it: {outcomes:?}"
    );
    assert_eq!(c.counts("t").await.unwrap().ready, 501);
}

async fn a_paused_topic_is_not_fetched_until_resumed(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    c.push_to("t", &1).id("a").await.unwrap();
    c.pause("t").await.unwrap();
    let f = c.store().fetch(0, &topic("t"), 10, LEASE).await.unwrap();
    assert!(f.paused && f.jobs.is_empty());
    assert!(c.stats("t").await.unwrap().paused);
    c.resume("t").await.unwrap();
    let f = c.store().fetch(0, &topic("t"), 10, LEASE).await.unwrap();
    assert_eq!((f.paused, f.jobs.len()), (false, 1));
}

async fn listing_pages_through_each_state_of_one_topic(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let later = Duration::from_secs(60);
    c.push_batch((0..5).map(|i| {
        c.push_to("a", &i)
            .id(format!("d{i}"))
            .delay(later + Duration::from_secs(i))
    }))
    .await
    .unwrap();
    c.push_batch((0..3).map(|i| c.push_to("b", &i).id(format!("other{i}")).delay(later)))
        .await
        .unwrap();
    c.push_batch((0..4).map(|i| c.push_to("a", &i).id(format!("r{i}"))))
        .await
        .unwrap();
    let mut seen = Vec::new();
    let mut cursor = Cursor::START;
    loop {
        let page = c.jobs("a", JobState::Delayed, cursor, 2).await.unwrap();
        assert!(page.jobs.len() <= 2);
        seen.extend(page.jobs.iter().map(|j| j.id.to_string()));
        match page.next {
            Some(next) => cursor = next,
            None => break,
        }
    }
    assert_eq!(
        seen,
        ["d0", "d1", "d2", "d3", "d4"],
        "in due order, other topics left out"
    );
    let ready = c
        .jobs("a", JobState::Ready, Cursor::START, 10)
        .await
        .unwrap();
    assert_eq!(
        ready.jobs.iter().map(|j| j.id.as_str()).collect::<Vec<_>>(),
        ["r0", "r1", "r2", "r3"]
    );
    c.store().fetch(0, &topic("a"), 1, LEASE).await.unwrap();
    let running = c
        .jobs("a", JobState::Running, Cursor::START, 10)
        .await
        .unwrap();
    assert_eq!(running.jobs.len(), 1);
    assert_eq!(running.jobs[0].state, JobState::Running);
}

async fn stats_show_how_far_behind_and_what_comes_next(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let past = SystemTime::now() - Duration::from_secs(30);
    c.push_to("t", &1).id("late").at(past).await.unwrap();
    c.push_to("t", &2)
        .id("soon")
        .delay(Duration::from_secs(60))
        .await
        .unwrap();
    let s = c.stats("t").await.unwrap();
    assert_eq!((s.counts.ready, s.counts.delayed), (1, 1));
    let behind = SystemTime::now()
        .duration_since(s.oldest_ready_due.unwrap())
        .unwrap();
    assert!(behind >= Duration::from_secs(29), "{behind:?}");
    let next = s
        .next_due
        .unwrap()
        .duration_since(SystemTime::now())
        .unwrap();
    assert!(next > Duration::from_secs(55), "{next:?}");
    assert!(!s.paused);
}

async fn workers_are_listed_while_they_beat(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let s = h.client.store();
    let mut w = dq::admin::WorkerInfo::for_this_process(vec!["t".into()]);
    s.register_worker(&w).await.unwrap();
    // A host whose clock is two minutes behind: its heartbeat is stamped with the store's
    // clock, so it is as alive as the others (it used to be dropped as silent).
    let mut behind = w.clone();
    behind.id = "behind".into();
    behind.last_seen_ms -= 120_000;
    s.register_worker(&behind).await.unwrap();
    let listed = h.client.workers().await.unwrap();
    let ids: Vec<&str> = listed.iter().map(|w| w.id.as_str()).collect();
    let mut want = vec!["behind", w.id.as_str()];
    want.sort();
    assert_eq!(ids, want, "both listed");
    let store_now_ms = s.time_us().await.unwrap() / 1000;
    for seen in &listed {
        assert!(
            store_now_ms.abs_diff(seen.last_seen_ms) < 5_000,
            "stamped with the store's clock: {seen:?}"
        );
    }
    s.unregister_worker("behind").await.unwrap();
    w.running = 3;
    s.register_worker(&w).await.unwrap();
    assert_eq!(h.client.workers().await.unwrap()[0].running, 3);
    s.unregister_worker(&w.id).await.unwrap();
    assert!(h.client.workers().await.unwrap().is_empty());
}

async fn dead_letters_are_retried_and_purged_through_the_client(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    c.push_batch((0..4).map(|i| c.push_to("t", &i).id(i.to_string())))
        .await
        .unwrap();
    for j in c
        .store()
        .fetch(0, &topic("t"), 4, LEASE)
        .await
        .unwrap()
        .jobs
    {
        c.store().dead_letter(&j.lease, "boom").await.unwrap();
    }
    assert_eq!(c.retry_dead("t", &["1"]).await.unwrap(), 1);
    let dead = c
        .jobs("t", JobState::Dead, Cursor::START, 10)
        .await
        .unwrap();
    assert_eq!(dead.jobs.len(), 3);
    assert_eq!(
        c.purge_dead("t", Duration::from_secs(3600)).await.unwrap(),
        0,
        "all younger than an hour"
    );
    assert_eq!(c.retry_dead("t", &[]).await.unwrap(), 3);
    assert_eq!(c.counts("t").await.unwrap().ready, 4);
}

async fn dead_letters_page_with_a_cursor_at_most_1000_per_call(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let s = c.store();
    let t = topic("t");
    c.push_batch((0..1205).map(|i| c.push_to("t", &i).id(i.to_string())))
        .await
        .unwrap();
    let mut leased = Vec::new();
    while leased.len() < 1205 {
        leased.extend(s.fetch(0, &t, 1000, LEASE).await.unwrap().jobs);
    }
    for j in &leased {
        s.dead_letter(&j.lease, "boom").await.unwrap();
    }
    let mut seen = std::collections::BTreeSet::new();
    let mut cursor = Some(Cursor::START);
    let mut pages = 0;
    while let Some(at) = cursor {
        let page = c.jobs("t", JobState::Dead, at, 5000).await.unwrap();
        assert!(page.jobs.len() <= 1000, "a page holds at most 1,000");
        for j in page.jobs {
            assert!(seen.insert(j.id.to_string()), "{} listed twice", j.id);
        }
        cursor = page.next;
        pages += 1;
        assert!(pages < 10, "the cursor ends");
    }
    assert_eq!(seen.len(), 1205, "every dead letter listed once");
}

async fn retry_all_dead_takes_only_what_died_before_it_began(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let s = c.store();
    let t = topic("t");
    c.push_batch((0..3).map(|i| c.push_to("t", &i).id(i.to_string())))
        .await
        .unwrap();
    for j in s.fetch(0, &t, 3, LEASE).await.unwrap().jobs {
        s.dead_letter(&j.lease, "boom").await.unwrap();
    }
    let cutoff = s.time_us().await.unwrap();
    tokio::time::sleep(Duration::from_millis(2)).await; // "later" is later, on any clock
    let died_by_cutoff = DeadLetters::DiedBy {
        before_us: cutoff,
        limit: 1000,
    };
    // Requeued and dead again before the caller asks for the next batch: not taken again.
    assert_eq!(s.requeue_dead(&t, died_by_cutoff, 3).await.unwrap(), 3);
    for j in s.fetch(0, &t, 3, LEASE).await.unwrap().jobs {
        s.dead_letter(&j.lease, "boom again").await.unwrap();
    }
    assert_eq!(s.requeue_dead(&t, died_by_cutoff, 3).await.unwrap(), 0);
    assert_eq!(c.counts("t").await.unwrap().dead, 3);
    // Through the client: one pass over what is dead now, and it ends.
    assert_eq!(c.retry_dead("t", &[]).await.unwrap(), 3);
    assert_eq!(c.counts("t").await.unwrap().ready, 3);
}

async fn a_retry_delay_over_the_limit_is_refused_and_the_job_stays_leased(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let s = c.store();
    c.push_to("t", &1).id("1").await.unwrap();
    let job = lease_one(s, "t").await;
    for delay in [
        Duration::MAX,
        dq::limits::MAX_DELAY + Duration::from_secs(1),
    ] {
        let err = s.retry(&job.lease, delay, "boom").await.unwrap_err();
        assert!(
            matches!(err, Error::InvalidSchedule { .. }),
            "{delay:?}: {err}"
        );
    }
    let info = c.status_in("t", "1").await.unwrap().unwrap();
    assert_eq!(info.state, JobState::Running, "nothing was written");
    assert!(s
        .retry(&job.lease, dq::limits::MAX_DELAY, "boom")
        .await
        .unwrap());
    let info = c.status_in("t", "1").await.unwrap().unwrap();
    assert_eq!(info.state, JobState::Delayed, "readable, and far away");
    assert!(info.due > SystemTime::now() + Duration::from_secs(100 * 365 * 86_400));
}

/// A replace, cancel or reschedule of a ready job leaves its old entry in the Redis list, made
/// stale (O(1), no scan of the list): every count, listing and fetch must see each job once,
/// as it is now.
async fn ready_jobs_replaced_cancelled_or_rescheduled_are_counted_listed_and_run_once(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let s = c.store().clone();
    for (i, id) in ["a", "b", "c", "d", "e"].iter().enumerate() {
        c.push_to("t", &(i as u32)).id(*id).await.unwrap();
    }
    c.push_to("t", &20u32).id("b").replace().await.unwrap(); // ready again, at the back
    c.push_to("t", &30u32)
        .id("c")
        .replace()
        .delay(Duration::from_secs(600))
        .await
        .unwrap(); // now delayed
    assert_eq!(c.cancel_in("t", "a").await.unwrap(), ChangeOutcome::Done);
    c.push_to("t", &10u32).id("a").await.unwrap(); // the same id again, a new job
    c.reschedule_in("t", "d", Schedule::After(Duration::ZERO))
        .await
        .unwrap();
    c.reschedule_in("t", "e", Schedule::After(Duration::from_secs(600)))
        .await
        .unwrap();

    let counts = c.counts("t").await.unwrap();
    assert_eq!((counts.ready, counts.delayed), (3, 2), "{counts:?}");
    let listed: Vec<String> = c
        .jobs("t", JobState::Ready, Cursor::START, 100)
        .await
        .unwrap()
        .jobs
        .iter()
        .map(|j| j.id.to_string())
        .collect();
    assert_eq!(
        listed,
        ["b", "a", "d"],
        "each ready job once, in its new place"
    );
    let stats = c.stats("t").await.unwrap();
    assert_eq!(stats.counts.ready, 3);

    let mut ran = Vec::new();
    for _ in 0..4 {
        let fetched = s.fetch(0, &topic("t"), 10, LEASE).await.unwrap();
        for job in fetched.jobs {
            let payload: u32 = serde_json::from_slice(&job.envelope.payload).unwrap();
            ran.push((job.lease.id.to_string(), payload));
        }
    }
    assert_eq!(
        ran,
        [
            ("b".to_owned(), 20),
            ("a".to_owned(), 10),
            ("d".to_owned(), 3)
        ],
        "each once, with its payload now"
    );
    let counts = c.counts("t").await.unwrap();
    assert_eq!(
        (counts.ready, counts.running, counts.delayed),
        (0, 3, 2),
        "{counts:?}"
    );
}

/// A job cancelled while ready, its id then pushed and replaced again: its old entries must
/// stay stale (an entry of an earlier generation came back to life and ran the job twice).
async fn a_reused_id_after_a_cancel_of_a_ready_job_runs_once(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let s = c.store().clone();
    c.push_to("t", &1u32).id("x").await.unwrap();
    c.push_to("t", &2u32).id("a").await.unwrap();
    c.push_to("t", &3u32).id("x").replace().await.unwrap();
    c.cancel_in("t", "x").await.unwrap();
    let first = s.fetch(0, &topic("t"), 1, LEASE).await.unwrap().jobs;
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].lease.id.to_string(), "a");
    c.push_to("t", &4u32).id("x").await.unwrap();
    c.push_to("t", &5u32).id("x").replace().await.unwrap();
    let mut leased = Vec::new();
    for _ in 0..6 {
        for job in s.fetch(0, &topic("t"), 1, LEASE).await.unwrap().jobs {
            let payload: u32 = serde_json::from_slice(&job.envelope.payload).unwrap();
            leased.push((job.lease.id.to_string(), payload));
        }
    }
    assert_eq!(leased, [("x".to_owned(), 5)], "x leased once, as replaced");
    let counts = c.counts("t").await.unwrap();
    assert_eq!((counts.ready, counts.running), (0, 2), "{counts:?}");
}

/// Stats of a topic whose ready list is empty while a job of it has a generation (it was
/// rescheduled out of the list) must answer.
async fn stats_answer_when_only_stale_entries_were_left(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    c.push_to("t", &1u32).id("x").await.unwrap();
    c.reschedule_in("t", "x", Schedule::After(Duration::from_secs(600)))
        .await
        .unwrap();
    let fetched = c.store().fetch(0, &topic("t"), 10, LEASE).await.unwrap();
    assert!(fetched.jobs.is_empty());
    let stats = c.stats("t").await.unwrap();
    assert_eq!((stats.counts.ready, stats.counts.delayed), (0, 1));
    c.push_to("t", &2u32).id("y").await.unwrap();
    c.reschedule_in("t", "y", Schedule::After(Duration::from_secs(600)))
        .await
        .unwrap();
    let stats = c.stats("t").await.unwrap();
    assert_eq!((stats.counts.ready, stats.counts.delayed), (0, 2));
}

async fn a_postponed_job_runs_again_without_spending_an_attempt_or_its_last_error(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let s = c.store();
    let t = topic("order-cancel");
    c.push(OrderCancel { order_id: 1 }).id("a").await.unwrap();
    let first = s.fetch(0, &t, 1, LEASE).await.unwrap();
    assert!(s
        .retry(&first.jobs[0].lease, Duration::ZERO, "payment service down")
        .await
        .unwrap());
    let second = s.fetch(0, &t, 1, LEASE).await.unwrap();
    assert_eq!(second.jobs[0].envelope.attempt, 2);
    assert!(s
        .postpone(&second.jobs[0].lease, Duration::from_millis(50))
        .await
        .unwrap());
    let info = c.status_in("order-cancel", "a").await.unwrap().unwrap();
    assert_eq!(
        (info.state, info.attempt, info.last_error.as_deref()),
        (JobState::Delayed, 1, Some("payment service down"))
    );
    assert!(
        !s.postpone(&second.jobs[0].lease, Duration::ZERO)
            .await
            .unwrap(),
        "the lease is gone"
    );
    tokio::time::sleep(Duration::from_millis(60)).await;
    assert_eq!(s.promote(0, 10).await.unwrap().moved, 1);
    let third = s.fetch(0, &t, 1, LEASE).await.unwrap();
    assert_eq!(
        third.jobs[0].envelope.attempt, 2,
        "still the second attempt"
    );
}

async fn reclaim_judges_a_job_by_its_listeners_attempt_limit_until_it_is_forgotten(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let s = c.store();
    let t = &topic("order-cancel");
    // Leases the job `id` (pushed with `retries` at push) for 50 ms and lets it expire: the
    // reclaim then finds it as a dead worker's job. Returns its state and last error after.
    let expire = |id: &'static str, retries: u32| async move {
        c.push(OrderCancel { order_id: 1 })
            .id(id)
            .max_retries(retries)
            .await
            .unwrap();
        let f = s.fetch(0, t, 1, Duration::from_millis(50)).await.unwrap();
        assert_eq!(f.jobs[0].lease.id.as_str(), id);
        tokio::time::sleep(Duration::from_millis(60)).await;
        s.reclaim(0, 100).await.unwrap();
        let info = c.status_in("order-cancel", id).await.unwrap().unwrap();
        assert_eq!(
            info.max_attempts,
            retries + 1,
            "the envelope keeps the push's limit"
        );
        if info.state == JobState::Ready {
            let f = s.fetch(0, t, 1, LEASE).await.unwrap();
            s.ack(&[f.jobs[0].lease.clone()]).await.unwrap();
        }
        (info.state, info.last_error.unwrap())
    };
    s.set_attempt_limit(t, Some(1)).await.unwrap();
    let (state, error) = expire("fewer", 4).await;
    assert_eq!(state, JobState::Dead, "the listener allows one run");
    assert!(error.contains("lease expired on attempt 1 of 1"), "{error}");
    s.set_attempt_limit(t, Some(5)).await.unwrap();
    let (state, _) = expire("more", 0).await;
    assert_eq!(state, JobState::Ready, "the listener allows five runs");
    s.set_attempt_limit(t, None).await.unwrap();
    let (state, error) = expire("pushed", 0).await;
    assert_eq!(state, JobState::Dead, "the push's limit again");
    assert!(error.contains("lease expired on attempt 1 of 1"), "{error}");
}

async fn throughput_counts_runs_done_and_failed_in_the_last_hour_per_topic(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let s = c.store();
    let t = topic("order-cancel");
    c.push_batch((0..7).map(|i| c.push(OrderCancel { order_id: i })))
        .await
        .unwrap();
    c.push_to("other", &1).await.unwrap();
    let f = s.fetch(0, &t, 6, LEASE).await.unwrap();
    let leases: Vec<_> = f.jobs.iter().map(|j| j.lease.clone()).collect();
    s.ack(&leases[0..3]).await.unwrap();
    assert!(s.retry(&leases[3], LEASE, "payment down").await.unwrap());
    assert!(s.dead_letter(&leases[4], "no such order").await.unwrap());
    assert!(s.postpone(&leases[5], LEASE).await.unwrap());
    // A worker that died holding a job: its run failed too.
    s.fetch(0, &t, 1, Duration::from_millis(1)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(s.reclaim(0, 10).await.unwrap().requeued, 1);

    let hour = c.throughput("order-cancel").await.unwrap();
    assert_eq!(
        (hour.done(), hour.failed()),
        (3, 3),
        "postponed runs are neither"
    );
    assert_eq!(hour.minutes.len(), 60);
    let last = hour.minutes.last().unwrap().minute;
    let age = SystemTime::now().duration_since(last).unwrap();
    assert!(
        age < Duration::from_secs(120),
        "the last minute is now: {age:?}"
    );
    assert!(hour.minutes.windows(2).all(|w| w[0].minute < w[1].minute));
    let other = c.throughput("other").await.unwrap();
    assert_eq!((other.done(), other.failed()), (0, 0));
}

/// Leases and acks every ready job of the topic (as a worker's successful runs would).
async fn run_ready(c: &TestClient, topic_name: &str) {
    let s = c.store();
    s.promote(0, 1000).await.unwrap();
    let f = s.fetch(0, &topic(topic_name), 1000, LEASE).await.unwrap();
    let leases: Vec<_> = f.jobs.iter().map(|j| j.lease.clone()).collect();
    assert_eq!(s.ack(&leases).await.unwrap().acked, leases.len());
}

async fn unique_for_reserves_the_id_after_the_job_succeeds_until_the_window_ends(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let window = Duration::from_millis(600);
    let push = || {
        c.push_to("report", &1)
            .unique_key("account-42")
            .unique_for(window)
            .send()
    };
    assert_eq!(push().await.unwrap().outcome, PushOutcome::Created);
    assert_eq!(
        push().await.unwrap().outcome,
        PushOutcome::AlreadyPending,
        "pending as always"
    );
    run_ready(c, "report").await;
    let again = push().await.unwrap();
    let PushOutcome::Unique { left } = again.outcome else {
        panic!("the id is reserved after success: {again:?}");
    };
    assert!(left <= window && left > window / 2, "time left {left:?}");
    assert_eq!(
        c.status_in("report", "account-42")
            .await
            .unwrap()
            .map(|j| j.state),
        None,
        "nothing stored"
    );
    // Another id, or another topic, is not affected.
    assert_eq!(
        c.push_to("report", &1)
            .unique_key("account-7")
            .send()
            .await
            .unwrap()
            .outcome,
        PushOutcome::Created
    );
    assert_eq!(
        c.push_to("other", &1)
            .unique_key("account-42")
            .send()
            .await
            .unwrap()
            .outcome,
        PushOutcome::Created
    );
    tokio::time::sleep(left + Duration::from_millis(50)).await;
    assert_eq!(
        push().await.unwrap().outcome,
        PushOutcome::Created,
        "free once the window ended"
    );
}

/// Issue 29 finding 9: `unique_for(Duration::MAX)` turned uniqueness off on Redis (Lua's
/// `string.format('%d', 1.8e25)` gives -2^63: the id was free again) while the memory store
/// kept it for ever. A window is bounded as a delay is, in every store.
async fn a_uniqueness_window_over_the_limit_is_refused_and_one_at_the_limit_holds(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let limit = dq::limits::MAX_DELAY;
    for window in [Duration::MAX, limit + Duration::from_secs(1)] {
        let err = c
            .push_to("report", &1)
            .unique_key("account-42")
            .unique_for(window)
            .await
            .unwrap_err();
        assert!(matches!(err, Error::InvalidPush { .. }), "{err}");
        assert_eq!(err.kind(), dq::ErrorKind::InvalidInput);
        assert!(
            err.to_string().contains("200 years") && err.to_string().contains("MAX_DELAY"),
            "{err}"
        );
    }
    assert!(
        c.store().topics().await.unwrap().is_empty(),
        "nothing was written"
    );
    let push = || {
        c.push_to("report", &1)
            .unique_key("account-42")
            .unique_for(limit)
            .send()
    };
    assert_eq!(push().await.unwrap().outcome, PushOutcome::Created);
    run_ready(c, "report").await;
    let again = push().await.unwrap();
    let PushOutcome::Unique { left } = again.outcome else {
        panic!("the id is reserved for 200 years after success: {again:?}");
    };
    assert!(
        left > limit - Duration::from_secs(3600) && left <= limit,
        "time left {left:?}"
    );
}

/// Issue 30 finding 7: a topic paused before its first push (its jobs wait from the start) is
/// listed, as paused, where it used to show nowhere; one resumed again leaves no trace.
async fn a_topic_paused_before_its_first_push_is_listed_as_paused(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    c.pause("later").await.unwrap();
    assert_eq!(c.topics().await.unwrap(), vec![topic("later")]);
    assert!(c.stats("later").await.unwrap().paused);
    c.push_to("later", &1).id("a").await.unwrap();
    let f = c
        .store()
        .fetch(0, &topic("later"), 10, LEASE)
        .await
        .unwrap();
    assert!(f.paused && f.jobs.is_empty(), "its jobs wait");
    c.resume("later").await.unwrap();
    assert_eq!(
        c.topics().await.unwrap(),
        vec![topic("later")],
        "listed once"
    );
    c.pause("never").await.unwrap();
    assert!(c.stats("never").await.unwrap().paused);
    c.resume("never").await.unwrap();
    assert_eq!(
        c.topics().await.unwrap(),
        vec![topic("later")],
        "a topic nobody pushed to leaves no trace once resumed"
    );
}

async fn unique_for_reserves_nothing_when_the_job_dies_or_is_cancelled(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let s = c.store();
    let hour = Duration::from_secs(3600);
    c.push_to("report", &1)
        .id("dies")
        .unique_for(hour)
        .await
        .unwrap();
    let f = s.fetch(0, &topic("report"), 1, LEASE).await.unwrap();
    assert!(s.dead_letter(&f.jobs[0].lease, "boom").await.unwrap());
    // A push of a dead letter's id revives it, as without uniqueness.
    let revived = c
        .push_to("report", &2)
        .id("dies")
        .unique_for(hour)
        .send()
        .await
        .unwrap();
    assert_eq!(revived.outcome, PushOutcome::Created);
    c.push_to("report", &1)
        .id("cancelled")
        .delay(hour)
        .unique_for(hour)
        .await
        .unwrap();
    assert_eq!(
        c.cancel_in("report", "cancelled").await.unwrap(),
        ChangeOutcome::Done
    );
    let after = c
        .push_to("report", &1)
        .id("cancelled")
        .unique_for(hour)
        .send()
        .await
        .unwrap();
    assert_eq!(after.outcome, PushOutcome::Created);
}

async fn a_replace_without_unique_for_drops_the_reservation_asked_before(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let hour = Duration::from_secs(3600);
    c.push_to("report", &1)
        .id("a")
        .delay(hour)
        .unique_for(hour)
        .await
        .unwrap();
    let replaced = c
        .push_to("report", &2)
        .id("a")
        .replace()
        .send()
        .await
        .unwrap();
    assert_eq!(replaced.outcome, PushOutcome::Replaced);
    c.reschedule_in("report", "a", Schedule::After(Duration::ZERO))
        .await
        .unwrap();
    run_ready(c, "report").await;
    let again = c.push_to("report", &3).id("a").send().await.unwrap();
    assert_eq!(
        again.outcome,
        PushOutcome::Created,
        "the last push asked for no reservation"
    );
}

async fn unique_by_payload_makes_the_same_message_one_job(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let first = c
        .push(OrderCancel { order_id: 42 })
        .unique_by_payload()
        .send()
        .await
        .unwrap();
    let second = c
        .push(OrderCancel { order_id: 42 })
        .unique_by_payload()
        .send()
        .await
        .unwrap();
    let other = c
        .push(OrderCancel { order_id: 43 })
        .unique_by_payload()
        .send()
        .await
        .unwrap();
    assert_eq!(first.id, second.id);
    assert_eq!(
        (first.outcome, second.outcome),
        (PushOutcome::Created, PushOutcome::AlreadyPending)
    );
    assert_ne!(other.id, first.id);
    assert!(
        first.id.as_str().starts_with("p-") && first.id.as_str().len() == 42,
        "{}",
        first.id
    );
}

async fn debounce_keeps_the_last_payload_and_moves_the_due_time(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let save = |n: u64, quiet: u64| {
        c.push(OrderCancel { order_id: n })
            .id("doc-1")
            .debounce(Duration::from_secs(quiet))
            .send()
    };
    assert_eq!(save(1, 10).await.unwrap().outcome, PushOutcome::Created);
    assert_eq!(save(2, 20).await.unwrap().outcome, PushOutcome::Replaced);
    let job = c.status::<OrderCancel>("doc-1").await.unwrap().unwrap();
    assert_eq!(
        job.payload,
        br#"{"order_id":2}"#.to_vec(),
        "the last payload"
    );
    let due_in = job.due.duration_since(SystemTime::now()).unwrap();
    assert!(
        due_in > Duration::from_secs(18),
        "due 20 s after the last push: {due_in:?}"
    );
    assert_eq!(
        c.counts("order-cancel").await.unwrap().delayed,
        1,
        "one job"
    );
}

/// The fence behind "one job per tick": a store creates a tick's job only when no later tick
/// (or later generation) of its schedule was created before it, so a process that pushes a
/// tick long after it ran (its reservation over) makes nothing.
async fn a_ticks_job_is_created_once_per_generation_even_after_it_is_gone(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let s = h.client.store();
    let tick = |n: u64, generation: u64| NewJob {
        topic: topic("beats"),
        id: id(&format!("beat@{n}")),
        schedule: Schedule::After(Duration::from_secs(3600)),
        max_attempts: 1,
        unique_for: None,
        fence: Some(FiredTick {
            schedule: "beat".into(),
            generation,
            tick_us: n,
        }),
        payload: b"{}".to_vec(),
    };
    let push = |job: NewJob| async move { s.push(vec![job], OnConflict::Keep).await.unwrap()[0] };
    assert_eq!(push(tick(2, 1)).await, PushOutcome::Created);
    // Gone (cancelled here; run and its reservation over alike): not made again,
    let cancelled = s.cancel(&topic("beats"), &id("beat@2")).await.unwrap();
    assert_eq!(cancelled, ChangeOutcome::Done);
    assert_eq!(push(tick(2, 1)).await, PushOutcome::AlreadyPending);
    // nor is an earlier tick; a later one is.
    assert_eq!(push(tick(1, 1)).await, PushOutcome::AlreadyPending);
    assert_eq!(push(tick(3, 1)).await, PushOutcome::Created);
    // A new generation (the spec changed, or the schedule was resumed) starts from any tick,
    // and the old one makes nothing more: it is told which generation superseded it.
    assert_eq!(push(tick(1, 2)).await, PushOutcome::Created);
    assert_eq!(
        push(tick(4, 1)).await,
        PushOutcome::Superseded { generation: 2 }
    );
    assert!(s
        .status(&topic("beats"), &id("beat@4"))
        .await
        .unwrap()
        .is_none());
    // Jobs without a fence are not held back by it.
    let plain = h
        .client
        .push_to("beats", &0)
        .id("beat@5")
        .send()
        .await
        .unwrap();
    assert_eq!(plain.outcome, PushOutcome::Created);
}

/// A schedule's generation grows when its spec changes or it is resumed (not when it is
/// declared again unchanged or paused), and a look that read an older one cannot move it.
async fn a_schedule_moves_on_only_under_the_generation_its_look_read(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let (c, s) = (h.client.client(), h.client.store());
    let declare = |secs: u64| {
        c.schedule("beat")
            .every(Duration::from_secs(secs))
            .topic("beats")
            .upsert()
    };
    let generation = || async { s.schedule("beat").await.unwrap().unwrap().generation };
    declare(60).await.unwrap();
    let first = generation().await;
    declare(60).await.unwrap();
    assert_eq!(generation().await, first, "declared again unchanged");
    declare(120).await.unwrap();
    let changed = generation().await;
    assert!(changed > first, "changed: {changed} after {first}");
    assert!(c.pause_schedule("beat").await.unwrap());
    assert_eq!(generation().await, changed, "paused");
    assert!(c.resume_schedule("beat").await.unwrap());
    let resumed = generation().await;
    assert!(resumed > changed, "resumed: {resumed} after {changed}");
    let next = s.schedule("beat").await.unwrap().unwrap().next_us.unwrap();
    let fired = |generation| FiredTick {
        schedule: "beat".into(),
        generation,
        tick_us: next,
    };
    let old = s.advance_schedule(&fired(changed), Some(next + 1)).await;
    assert!(
        !old.unwrap(),
        "moved under the generation before the resume"
    );
    assert!(s
        .advance_schedule(&fired(resumed), Some(next + 1))
        .await
        .unwrap());
    // Removed, it takes nothing along when declared again: a new generation, above the last.
    assert!(c.unschedule("beat").await.unwrap());
    declare(60).await.unwrap();
    assert!(generation().await > resumed);
}
