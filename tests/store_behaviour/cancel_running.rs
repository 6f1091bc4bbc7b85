//! A cancel of a running job: the store does not delete it but records the request against its
//! lease and announces it on the wake channel, for its worker (in whatever process) to stop it;
//! the worker then deletes it (`cancel_running`), which ends the waits for it. The request goes
//! with the lease, whatever ends it, and never binds a later run.

use std::sync::Arc;
use std::time::{Duration, Instant};

use dq::admin::ChangeOutcome;
use dq::push::PushOutcome;
use dq::store::{LeaseRef, Retention, Waited, Wake, WakeListener};

use super::{outcome, push_and_lease, Harness, Kind};
use crate::support::{id, lease_one, topic, OrderCancel, TestClient};

/// A timeout no wait here reaches unless the store fails to answer or to wake it.
const LONG: Duration = Duration::from_secs(10);

/// Well under [`LONG`]: a wait that took less was answered, not timed out.
const AT_ONCE: Duration = Duration::from_secs(5);

/// Cancels job `name` of `order-cancel`.
async fn cancel(c: &TestClient, name: &str) -> ChangeOutcome {
    c.cancel_in("order-cancel", name).await.unwrap()
}

/// The next cancel `listener` hears (other announcements are skipped), within [`AT_ONCE`].
async fn next_cancel(listener: &mut Box<dyn WakeListener>) -> (String, String) {
    let deadline = Instant::now() + AT_ONCE;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let heard = tokio::time::timeout(left, listener.next()).await;
        match heard.expect("no cancel announced").unwrap() {
            Wake::Cancel { topic, id } => return (topic.to_string(), id.to_string()),
            _ => continue,
        }
    }
}

pub(crate) async fn a_cancel_of_a_running_job_is_announced_and_recorded_against_its_lease(
    kind: Kind,
) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let s = c.store();
    let mut listener = s.wake_listener().await.unwrap();
    let a = push_and_lease(c, "a").await;
    let b = push_and_lease(c, "b").await;

    assert_eq!(cancel(c, "a").await, ChangeOutcome::CancelRequested);
    let heard = next_cancel(&mut listener).await;
    assert_eq!(heard, ("order-cancel".to_owned(), "a".to_owned()));

    // Still running: nothing is deleted until its worker stops it.
    let info = c.status_in("order-cancel", "a").await.unwrap().unwrap();
    assert_eq!(info.state, dq::JobState::Running);
    assert_eq!(c.counts("order-cancel").await.unwrap().running, 2);
    // The heartbeat's fallback finds the request, for that lease only.
    let both = [a.lease.clone(), b.lease.clone()];
    assert_eq!(
        s.cancel_requests(&both).await.unwrap(),
        vec![a.lease.clone()]
    );
    let other_run = LeaseRef {
        token: a.lease.token + 1,
        ..a.lease.clone()
    };
    let found = s.cancel_requests(&[other_run]).await.unwrap();
    assert!(found.is_empty(), "another lease of the job: {found:?}");
    // Asked again, the same answer.
    assert_eq!(cancel(c, "a").await, ChangeOutcome::CancelRequested);
    assert_eq!(s.cancel_requests(&both).await.unwrap(), [a.lease]);
}

pub(crate) async fn cancel_running_deletes_the_job_and_ends_the_waits_for_it(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let s = c.store();
    let t = topic("order-cancel");
    let retention = Retention {
        age: Duration::from_secs(3600),
        count: 100,
    };
    s.set_retention(&t, Some(retention)).await.unwrap();
    let job = push_and_lease(c, "a").await;
    assert_eq!(cancel(c, "a").await, ChangeOutcome::CancelRequested);

    let store = Arc::clone(s);
    let lease = job.lease.clone();
    let stop = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        store.cancel_running(&lease).await.unwrap()
    });
    let start = Instant::now();
    let waited = s.wait_finished(&t, &id("a"), LONG).await.unwrap();
    let took = start.elapsed();
    assert!(matches!(waited, Waited::Cancelled), "{waited:?}");
    assert!(took < AT_ONCE, "woken by the deletion: {took:?}");
    assert!(stop.await.unwrap(), "the worker held the lease");

    assert!(c.status_in("order-cancel", "a").await.unwrap().is_none());
    let counts = c.counts("order-cancel").await.unwrap();
    assert_eq!((counts.ready, counts.running, counts.dead), (0, 0, 0));
    let left = s.cancel_requests(std::slice::from_ref(&job.lease));
    assert!(
        left.await.unwrap().is_empty(),
        "the request went with the job"
    );
    assert!(
        !s.cancel_running(&job.lease).await.unwrap(),
        "once: the lease is no longer held"
    );
    // Nothing is kept of it, and its id is free.
    let again = c.push(OrderCancel { order_id: 2 }).id("a");
    assert_eq!(outcome(again).await, PushOutcome::Created);
}

pub(crate) async fn a_cancel_request_goes_with_the_lease_and_binds_no_later_run(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let s = c.store();

    // The run failed before its worker heard the cancel: its fate stands (a retry here), and
    // the next run is not asked to stop.
    let first = push_and_lease(c, "a").await;
    assert_eq!(cancel(c, "a").await, ChangeOutcome::CancelRequested);
    assert!(s.retry(&first.lease, Duration::ZERO, "boom").await.unwrap());
    let second = lease_one(s, "order-cancel").await;
    assert_eq!(second.lease.id.as_str(), "a");
    let both = [first.lease.clone(), second.lease.clone()];
    let found = s.cancel_requests(&both).await.unwrap();
    assert!(
        found.is_empty(),
        "the request went with the first lease: {found:?}"
    );
    assert!(
        !s.cancel_running(&first.lease).await.unwrap(),
        "the first run's lease is not held"
    );

    // A handler that ignored the request and succeeded is acked as any, and nothing is left.
    assert_eq!(cancel(c, "a").await, ChangeOutcome::CancelRequested);
    let acked = s.ack(std::slice::from_ref(&second.lease)).await.unwrap();
    assert_eq!(acked.acked, 1);
    assert!(c.status_in("order-cancel", "a").await.unwrap().is_none());
    let found = s.cancel_requests(std::slice::from_ref(&second.lease));
    assert!(found.await.unwrap().is_empty());

    // A dead letter and a release end the request too.
    let dead = push_and_lease(c, "d").await;
    assert_eq!(cancel(c, "d").await, ChangeOutcome::CancelRequested);
    assert!(s.dead_letter(&dead.lease, "gone").await.unwrap());
    let released = push_and_lease(c, "r").await;
    assert_eq!(cancel(c, "r").await, ChangeOutcome::CancelRequested);
    assert_eq!(
        s.release(std::slice::from_ref(&released.lease))
            .await
            .unwrap(),
        1
    );
    let again = lease_one(s, "order-cancel").await;
    assert_eq!(again.lease.id.as_str(), "r");
    let ended = [dead.lease, released.lease, again.lease];
    let found = s.cancel_requests(&ended).await.unwrap();
    assert!(found.is_empty(), "{found:?}");
}
