//! Changes to a pending job: a cancel or a reschedule, and a replace, cancel or reschedule of
//! a ready job, whose old entry is left stale in the ready list and must never count or run.

use std::time::{Duration, SystemTime};

use dq::admin::{ChangeOutcome, Cursor};
use dq::{Client, Due, JobState};

use super::{existing, Harness, Kind};
use crate::support::{lease_one, push_order, state_of, topic, OrderCancel, LEASE};

/// Moves job `id` of `order-cancel` to `when`.
async fn reschedule(c: &Client, id: &str, when: Duration) -> ChangeOutcome {
    let moved = c.reschedule_in("order-cancel", id, Due::After(when));
    moved.await.unwrap()
}

pub(crate) async fn cancel_deletes_delayed_and_ready_jobs_but_not_running_ones(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    push_order(c, 1, "delayed", Duration::from_secs(60)).await;
    c.push(OrderCancel { order_id: 2 })
        .id("running")
        .await
        .unwrap();
    lease_one(c.store(), "order-cancel").await;
    c.push(OrderCancel { order_id: 3 })
        .id("ready")
        .await
        .unwrap();

    for (id, cancelled) in [
        ("delayed", ChangeOutcome::Done),
        ("ready", ChangeOutcome::Done),
        // Not deleted: its worker is asked to stop it (see `cancel_running`).
        ("running", ChangeOutcome::CancelRequested),
        ("nope", ChangeOutcome::NotFound),
    ] {
        let outcome = c.cancel_in("order-cancel", id).await.unwrap();
        assert_eq!(outcome, cancelled, "cancel of {id}");
    }
    for id in ["delayed", "ready"] {
        let status = c.status_in("order-cancel", id).await.unwrap();
        assert!(status.is_none(), "{id} is gone");
    }
    let counts = c.counts("order-cancel").await.unwrap();
    assert_eq!((counts.delayed, counts.ready, counts.running), (0, 0, 1));
}

pub(crate) async fn reschedule_moves_a_pending_job_and_refuses_a_running_one(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    push_order(c, 1, "a", Duration::from_secs(60)).await;
    let (now, hour) = (Duration::ZERO, Duration::from_secs(3600));
    assert_eq!(reschedule(c, "a", now).await, ChangeOutcome::Done);
    let state = state_of(c, "order-cancel", "a").await;
    assert_eq!(state, Some(JobState::Ready));
    assert_eq!(reschedule(c, "a", hour).await, ChangeOutcome::Done);
    let info = existing(c, "order-cancel", "a").await;
    assert_eq!(info.state, JobState::Delayed);
    assert!(info.due > SystemTime::now() + Duration::from_secs(3500));
    reschedule(c, "a", now).await;
    lease_one(c.store(), "order-cancel").await;
    let running = reschedule(c, "a", Duration::from_secs(5)).await;
    assert_eq!(running, ChangeOutcome::Running);
    let missing = reschedule(c, "missing", now).await;
    assert_eq!(missing, ChangeOutcome::NotFound);
}

/// A replace, cancel or reschedule of a ready job leaves its old entry in the Redis list, made
/// stale (O(1), no scan of the list): every count, listing and fetch must see each job once,
/// as it is now.
pub(crate) async fn ready_jobs_replaced_cancelled_or_rescheduled_are_counted_listed_and_run_once(
    kind: Kind,
) {
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
    c.reschedule_in("t", "d", Due::After(Duration::ZERO))
        .await
        .unwrap();
    c.reschedule_in("t", "e", Due::After(Duration::from_secs(600)))
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
pub(crate) async fn a_reused_id_after_a_cancel_of_a_ready_job_runs_once(kind: Kind) {
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
pub(crate) async fn stats_answer_when_only_stale_entries_were_left(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    c.push_to("t", &1u32).id("x").await.unwrap();
    c.reschedule_in("t", "x", Due::After(Duration::from_secs(600)))
        .await
        .unwrap();
    let fetched = c.store().fetch(0, &topic("t"), 10, LEASE).await.unwrap();
    assert!(fetched.jobs.is_empty());
    let stats = c.stats("t").await.unwrap();
    assert_eq!((stats.counts.ready, stats.counts.delayed), (0, 1));
    c.push_to("t", &2u32).id("y").await.unwrap();
    c.reschedule_in("t", "y", Due::After(Duration::from_secs(600)))
        .await
        .unwrap();
    let stats = c.stats("t").await.unwrap();
    assert_eq!((stats.counts.ready, stats.counts.delayed), (0, 2));
}
