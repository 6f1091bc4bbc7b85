//! Priorities within a topic: higher first, first in first out within one priority, kept
//! through every way a job goes back to ready (README "Priorities").

use std::time::Duration;

use dq::admin::Cursor;
use dq::store::{DeadLetters, LeasedJob};
use dq::{ErrorKind, JobState};

use super::{existing, Harness, Kind};
use crate::support::{lease_one, topic, OrderCancel, TestClient, LEASE};

const TOPIC: &str = "order-cancel";

/// Pushes ready jobs `(id, priority)` in order.
async fn push_ranked(c: &TestClient, jobs: &[(&str, i8)]) {
    for (n, (id, priority)) in (0u64..).zip(jobs) {
        c.push(OrderCancel { order_id: n })
            .id(*id)
            .priority(*priority)
            .await
            .unwrap();
    }
}

/// The ids of up to `max` jobs one fetch leases, in the order it hands them over.
async fn fetch_ids(c: &TestClient, max: usize) -> Vec<String> {
    let fetched = c.store().fetch(0, &topic(TOPIC), max, LEASE).await.unwrap();
    fetched
        .jobs
        .iter()
        .map(|j| j.lease.id.to_string())
        .collect()
}

/// Leases the next job and checks it is `id`.
async fn next_is(c: &TestClient, id: &str) -> LeasedJob {
    let job = lease_one(c.store(), TOPIC).await;
    assert_eq!(job.lease.id.as_str(), id);
    job
}

pub(crate) async fn higher_priorities_run_first_and_one_priority_in_push_order(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    push_ranked(
        c,
        &[
            ("a", 0),
            ("low-1", -5),
            ("high-1", 5),
            ("b", 0),
            ("high-2", 5),
            ("top", 10),
            ("low-2", -5),
            ("lowest", -10),
        ],
    )
    .await;
    assert_eq!(c.counts(TOPIC).await.unwrap().ready, 8);
    assert_eq!(
        fetch_ids(c, 3).await,
        ["top", "high-1", "high-2"],
        "one fetch takes the highest first"
    );
    assert_eq!(
        fetch_ids(c, 10).await,
        ["a", "b", "low-1", "low-2", "lowest"],
        "then priority 0 in push order, then below it"
    );
    assert_eq!(c.counts(TOPIC).await.unwrap().ready, 0);
}

/// Found by a cluster test: a fetch that took a job from the list counted it as taken from
/// the ranked set too, and removed a lower-priority job from the set, unrun.
pub(crate) async fn a_fetch_from_the_list_leaves_the_lower_priorities_waiting(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    push_ranked(c, &[("a", 0), ("b", 0), ("low", -1), ("lower", -2)]).await;
    assert_eq!(fetch_ids(c, 1).await, ["a"]);
    assert_eq!(c.counts(TOPIC).await.unwrap().ready, 3);
    assert_eq!(fetch_ids(c, 2).await, ["b", "low"]);
    assert_eq!(fetch_ids(c, 2).await, ["lower"]);
}

/// Issue 33 review (helper-30, finding 1): a replace that raised a ready job's priority put its
/// new entry in a lane fetched before its old, stale one; the fetch of the new entry forgot the
/// job's generation, and the old entry came back to life: the job was leased a second time
/// while it ran.
pub(crate) async fn a_replace_that_raises_a_priority_runs_the_job_once(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    push_ranked(c, &[("a", 0), ("j", 0)]).await;
    c.push(OrderCancel { order_id: 5 })
        .id("j")
        .priority(5)
        .replace()
        .await
        .unwrap();
    assert_eq!(fetch_ids(c, 1).await, ["j"]);
    assert_eq!(fetch_ids(c, 1).await, ["a"]);
    assert!(fetch_ids(c, 1).await.is_empty(), "j runs once");
    let counts = c.counts(TOPIC).await.unwrap();
    assert_eq!((counts.ready, counts.running), (0, 2), "{counts:?}");
    // Cancelled while ready and pushed again higher: the same.
    push_ranked(c, &[("b", 0), ("k", 0)]).await;
    c.cancel_in(TOPIC, "k").await.unwrap();
    push_ranked(c, &[("k", 3)]).await;
    assert_eq!(fetch_ids(c, 1).await, ["k"]);
    assert_eq!(fetch_ids(c, 1).await, ["b"]);
    assert!(fetch_ids(c, 1).await.is_empty(), "k runs once");
    assert_eq!(c.counts(TOPIC).await.unwrap().ready, 0);
}

/// Issue 33 review (helper-30, finding 3): the lag of a topic is its oldest ready job's, found
/// behind younger jobs of a higher priority, so that a starving low priority shows.
pub(crate) async fn the_oldest_ready_job_is_found_behind_younger_ones_of_higher_priority(
    kind: Kind,
) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    push_ranked(c, &[("low", -5)]).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    push_ranked(c, &[("plain", 0), ("high", 5)]).await;
    let low = existing(c, TOPIC, "low").await;
    let stats = c.stats(TOPIC).await.unwrap();
    assert_eq!(stats.oldest_ready_due, Some(low.due));
}

/// Issue 33 review (helper-30, finding 8): a job made by hand, not by the push builder, with a
/// priority outside the range is refused by the store itself, with nothing stored.
pub(crate) async fn a_store_refuses_a_priority_outside_the_range(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let job = dq::store::NewJob {
        topic: topic(TOPIC),
        id: dq::JobId::new("hand-made").unwrap(),
        due: dq::Due::default(),
        max_attempts: 3,
        unique_for: None,
        fence: None,
        trace: None,
        priority: 50,
        group: None,
        id_drawn: false,
        payload: b"{}".to_vec(),
    };
    let err = c
        .store()
        .push(vec![job], dq::push::OnConflict::Keep)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    assert!(c.status_in(TOPIC, "hand-made").await.unwrap().is_none());
}

pub(crate) async fn a_job_that_waited_keeps_its_priority_when_it_becomes_due(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    push_ranked(c, &[("a", 0), ("b", 0)]).await;
    c.push(OrderCancel { order_id: 9 })
        .id("urgent")
        .priority(3)
        .delay(Duration::from_millis(50))
        .await
        .unwrap();
    assert_eq!(existing(c, TOPIC, "urgent").await.priority, 3);
    tokio::time::sleep(Duration::from_millis(70)).await;
    assert_eq!(c.store().promote(0, 10).await.unwrap().moved, 1);
    let job = next_is(c, "urgent").await;
    assert_eq!(job.envelope.priority, 3, "the leased job carries it");
    assert_eq!(fetch_ids(c, 10).await, ["a", "b"]);
}

pub(crate) async fn released_and_reclaimed_jobs_go_back_first_of_their_priority(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let s = c.store();
    push_ranked(c, &[("plain", 0), ("a", 4), ("b", 4)]).await;
    let a = next_is(c, "a").await;
    assert_eq!(s.release(std::slice::from_ref(&a.lease)).await.unwrap(), 1);
    next_is(c, "a").await; // first again, before b; its worker now "dies"
    let lost = s
        .fetch(0, &topic(TOPIC), 1, Duration::from_millis(50))
        .await
        .unwrap();
    assert_eq!(lost.jobs[0].lease.id.as_str(), "b");
    tokio::time::sleep(Duration::from_millis(80)).await;
    assert_eq!(s.reclaim(0, 10).await.unwrap().requeued, 1);
    assert_eq!(fetch_ids(c, 10).await, ["b", "plain"]);
}

pub(crate) async fn retried_and_requeued_jobs_keep_their_priority(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let s = c.store();
    push_ranked(c, &[("ranked", 2)]).await;
    let run = next_is(c, "ranked").await;
    push_ranked(c, &[("plain", 0)]).await;
    assert!(s.retry(&run.lease, Duration::ZERO, "boom").await.unwrap());
    let run = next_is(c, "ranked").await;
    assert_eq!(run.envelope.last_error.as_deref(), Some("boom"));
    assert!(s.dead_letter(&run.lease, "gave up").await.unwrap());
    let t = topic(TOPIC);
    let id = dq::JobId::new("ranked").unwrap();
    let requeued = s.requeue_dead(&t, DeadLetters::Ids(&[id]), 3).await;
    assert_eq!(requeued.unwrap(), 1);
    assert_eq!(fetch_ids(c, 10).await, ["ranked", "plain"]);
}

pub(crate) async fn ranked_ready_jobs_are_listed_counted_cancelled_and_replaced_in_fetch_order(
    kind: Kind,
) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    push_ranked(
        c,
        &[
            ("a", 0),
            ("low", -1),
            ("high", 1),
            ("gone", 1),
            ("moved", 0),
        ],
    )
    .await;
    assert!(matches!(
        c.cancel_in(TOPIC, "gone").await.unwrap(),
        dq::admin::ChangeOutcome::Done
    ));
    // A replace may change the priority: the job moves to its new place.
    c.push(OrderCancel { order_id: 7 })
        .id("moved")
        .priority(9)
        .replace()
        .await
        .unwrap();
    let listed = c
        .jobs(TOPIC, JobState::Ready, Cursor::START, 100)
        .await
        .unwrap()
        .jobs;
    let order: Vec<(String, i8)> = listed
        .iter()
        .map(|j| (j.id.to_string(), j.priority))
        .collect();
    let expected =
        [("moved", 9), ("high", 1), ("a", 0), ("low", -1)].map(|(id, p)| (id.to_owned(), p));
    assert_eq!(order, expected);
    assert_eq!(c.counts(TOPIC).await.unwrap().ready, 4);
    assert_eq!(fetch_ids(c, 10).await, ["moved", "high", "a", "low"]);
}

pub(crate) async fn a_priority_outside_the_range_is_refused_and_nothing_stored(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    for p in [11, -11, i8::MAX, i8::MIN] {
        let err = c
            .push(OrderCancel { order_id: 1 })
            .id("x")
            .priority(p)
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
        assert!(err.to_string().contains("-10..=10"), "{err}");
    }
    let counts = c.counts(TOPIC).await.unwrap();
    assert_eq!((counts.ready, counts.delayed), (0, 0));
    assert!(c.status_in(TOPIC, "x").await.unwrap().is_none());
}
