//! Progress: what a running job reports of itself, read back by status while it runs, replaced
//! by the next report, refused for a lease no longer held or a value over the bound, and gone
//! when the job leaves running, however it leaves, so that its next run starts without one.

use std::time::Duration;

use dq::limits::MAX_PROGRESS_BYTES;
use dq::store::{LeaseRef, LeasedJob, Retention};
use dq::{ErrorKind, JobState};

use super::{existing, push_and_lease, Harness, Kind};
use crate::support::{lease_one, topic, OrderCancel, TestClient, LEASE};

/// The state of order-cancel's job `id` and the progress status shows of it.
async fn progress_of(c: &TestClient, id: &str) -> (JobState, Option<Vec<u8>>) {
    let info = existing(c, "order-cancel", id).await;
    (info.state, info.progress)
}

/// Reports `value` as the progress of `job`'s run, whose lease must be held.
async fn report(c: &TestClient, job: &LeasedJob, value: &[u8]) {
    let written = c.store().progress(&job.lease, value).await.unwrap();
    assert!(written, "the lease of {} is held", job.lease.id);
}

/// A JSON string of `len` bytes, quotes included.
fn json_of_len(len: usize) -> Vec<u8> {
    format!("\"{}\"", "x".repeat(len - 2)).into_bytes()
}

pub(crate) async fn a_running_jobs_progress_is_read_back_and_replaced_by_the_next(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let job = push_and_lease(c, "a").await;
    let none = progress_of(c, "a").await;
    assert_eq!(none, (JobState::Running, None), "none reported yet");
    report(c, &job, b"0.25").await;
    let first = progress_of(c, "a").await;
    assert_eq!(first, (JobState::Running, Some(b"0.25".to_vec())));
    report(c, &job, br#"{"done":3,"of":4}"#).await;
    let (_, latest) = progress_of(c, "a").await;
    assert_eq!(
        latest.as_deref(),
        Some(&br#"{"done":3,"of":4}"#[..]),
        "the latest only"
    );
    let info = existing(c, "order-cancel", "a").await;
    assert_eq!(info.attempt, 1, "the run is as it was");
    assert_eq!(info.payload, br#"{"order_id":1}"#);
    assert_eq!(info.result, None);
}

pub(crate) async fn progress_is_refused_for_a_lease_no_longer_held_and_over_the_bound(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let s = c.store();
    c.push(OrderCancel { order_id: 1 }).id("a").await.unwrap();
    let t = topic("order-cancel");
    let mut first = s.fetch(0, &t, 1, Duration::from_millis(50)).await.unwrap();
    let old = first.jobs.remove(0);
    tokio::time::sleep(Duration::from_millis(60)).await;
    assert_eq!(s.reclaim(0, 10).await.unwrap().requeued, 1);
    let new = lease_one(s, "order-cancel").await;
    let refused = s.progress(&old.lease, b"0.9").await.unwrap();
    assert!(!refused, "the old run's lease was taken over");
    let nothing = progress_of(c, "a").await;
    assert_eq!(nothing, (JobState::Running, None), "nothing was written");
    report(c, &new, b"0.1").await;
    let forged = LeaseRef {
        token: new.lease.token + 1,
        ..new.lease.clone()
    };
    assert!(!s.progress(&forged, b"0.9").await.unwrap(), "another token");
    // Over the bound: refused before anything is sent, naming the job; at it: kept.
    let over = json_of_len(MAX_PROGRESS_BYTES + 1);
    let err = s.progress(&new.lease, &over).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    assert!(err.to_string().contains("order-cancel:a"), "{err}");
    let kept = progress_of(c, "a").await.1;
    assert_eq!(kept.as_deref(), Some(&b"0.1"[..]), "the one before stays");
    report(c, &new, &json_of_len(MAX_PROGRESS_BYTES)).await;
    let at_bound = progress_of(c, "a").await.1.map(|p| p.len());
    assert_eq!(at_bound, Some(MAX_PROGRESS_BYTES));
    // An ended run reports nothing more.
    let acked = s.ack(std::slice::from_ref(&new.lease)).await.unwrap();
    assert_eq!(acked.acked, 1);
    assert!(
        !s.progress(&new.lease, b"1").await.unwrap(),
        "the job ended"
    );
    assert!(c.status_in("order-cancel", "a").await.unwrap().is_none());
}

pub(crate) async fn progress_goes_when_the_job_is_acked(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let s = c.store();
    // No retention: nothing is kept, and a new job under the id starts without it.
    let job = push_and_lease(c, "a").await;
    report(c, &job, b"0.5").await;
    assert_eq!(
        s.ack(std::slice::from_ref(&job.lease)).await.unwrap().acked,
        1
    );
    assert!(c.status_in("order-cancel", "a").await.unwrap().is_none());
    let again = push_and_lease(c, "a").await;
    let fresh = progress_of(c, "a").await;
    assert_eq!(fresh, (JobState::Running, None), "a new job, no progress");
    // With a retention: the done record shows the result, not the run's progress.
    let keep = Retention::for_age(Duration::from_secs(3600));
    let t = topic("order-cancel");
    s.set_retention(&t, Some(keep)).await.unwrap();
    report(c, &again, b"0.5").await;
    assert_eq!(
        s.ack(std::slice::from_ref(&again.lease))
            .await
            .unwrap()
            .acked,
        1
    );
    let done = progress_of(c, "a").await;
    assert_eq!(done, (JobState::Done, None));
    // The id pushed again over its done record: a new run, without the old progress.
    push_and_lease(c, "a").await;
    let fresh = progress_of(c, "a").await;
    assert_eq!(fresh, (JobState::Running, None));
}

pub(crate) async fn progress_goes_whenever_the_job_leaves_running(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let s = c.store();
    let t = topic("order-cancel");
    for how in ["retry", "postpone", "release", "dead", "reclaim"] {
        let lease = if how == "reclaim" {
            Duration::from_millis(50)
        } else {
            LEASE
        };
        c.push(OrderCancel { order_id: 1 }).id(how).await.unwrap();
        let job = s.fetch(0, &t, 1, lease).await.unwrap().jobs.remove(0);
        assert_eq!(job.lease.id.as_str(), how);
        report(c, &job, b"0.5").await;
        let one = std::slice::from_ref(&job.lease);
        match how {
            "retry" => assert!(s.retry(&job.lease, Duration::ZERO, "boom").await.unwrap()),
            "postpone" => assert!(s.postpone(&job.lease, Duration::ZERO).await.unwrap()),
            "release" => assert_eq!(s.release(one).await.unwrap(), 1),
            "dead" => assert!(s.dead_letter(&job.lease, "boom").await.unwrap()),
            _ => {
                tokio::time::sleep(Duration::from_millis(60)).await;
                assert_eq!(s.reclaim(0, 10).await.unwrap().requeued, 1);
            }
        }
        let (state, progress) = progress_of(c, how).await;
        assert_ne!(state, JobState::Running, "{how}");
        assert_eq!(progress, None, "{how}: not running, no progress");
        if how == "dead" {
            // A dead job does not block its id: its next run is a new job's.
            c.push(OrderCancel { order_id: 1 }).id(how).await.unwrap();
        }
        let next = lease_one(s, "order-cancel").await;
        assert_eq!(next.lease.id.as_str(), how);
        let fresh = progress_of(c, how).await;
        assert_eq!(
            fresh,
            (JobState::Running, None),
            "{how}: the next run starts without one"
        );
        assert_eq!(
            s.ack(std::slice::from_ref(&next.lease))
                .await
                .unwrap()
                .acked,
            1
        );
    }
}
