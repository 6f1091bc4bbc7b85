//! A cancel of a running job: the store does not delete it but records the request against its
//! lease and announces it on the wake channel, for its worker (in whatever process) to stop it;
//! the worker then deletes it (`cancel_running`), which ends the waits for it. The request goes
//! with the lease, whatever ends it, and never binds a later run.

use std::sync::Arc;
use std::time::{Duration, Instant};

use dq::admin::ChangeOutcome;
use dq::push::PushOutcome;
use dq::store::{LeaseRef, Retention, RunEnd, RunEnded, Succeeded, Waited, Wake, WakeListener};
use dq::JobState;

use super::{outcome, push_and_lease, Harness, Kind};
use crate::support::{id, topic, OrderCancel, TestClient, LEASE};

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
    assert_eq!(info.state, JobState::Running);
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

/// `status` says which running jobs' workers were asked to stop them, for the run asked only: a
/// handler that ignored the cancel and succeeded leaves a done record that says nothing of it.
pub(crate) async fn status_says_a_running_jobs_cancel_was_requested_until_its_run_ends(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let s = c.store();
    let retention = Retention {
        age: Duration::from_secs(3600),
        count: 100,
    };
    s.set_retention(&topic("order-cancel"), Some(retention))
        .await
        .unwrap();
    let a = push_and_lease(c, "a").await;
    let _b = push_and_lease(c, "b").await;
    let asked = |id: &'static str| async move {
        let info = c.status_in("order-cancel", id).await.unwrap().unwrap();
        (info.state, info.cancel_requested)
    };
    assert_eq!(asked("a").await, (JobState::Running, false));
    assert_eq!(cancel(c, "a").await, ChangeOutcome::CancelRequested);
    assert_eq!(asked("a").await, (JobState::Running, true));
    assert_eq!(
        asked("b").await,
        (JobState::Running, false),
        "b was not asked"
    );
    let done = Succeeded {
        lease: a.lease,
        result: None,
        run: 1,
    };
    assert_eq!(s.ack_succeeded(&[done]).await.unwrap().acked, 1);
    assert_eq!(asked("a").await, (JobState::Done, false), "its run ended");
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

    // A handler that ignored the request and succeeded is acked as any, and nothing is left.
    let first = push_and_lease(c, "a").await;
    assert_eq!(cancel(c, "a").await, ChangeOutcome::CancelRequested);
    let acked = s.ack(std::slice::from_ref(&first.lease)).await.unwrap();
    assert_eq!(acked.acked, 1);
    assert!(c.status_in("order-cancel", "a").await.unwrap().is_none());
    let found = s.cancel_requests(std::slice::from_ref(&first.lease));
    assert!(found.await.unwrap().is_empty());

    // The id pushed again makes a new job, whose run is not asked to stop.
    let second = push_and_lease(c, "a").await;
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
    let failed = s
        .retry(&second.lease, Duration::ZERO, "boom")
        .await
        .unwrap();
    assert!(failed, "the second run's failure is written");
    let status = c.status_in("order-cancel", "a").await.unwrap().unwrap();
    assert_eq!(status.attempt, 1, "retried: {status:?}");
}

/// The runtime counts a run's end by what the store did: `end_run` says a job was deleted as
/// cancelled (its cancel asked while it ran, its worker not told), written, or not held.
pub(crate) async fn end_run_says_which_runs_were_deleted_as_cancelled(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let s = c.store();
    let r = push_and_lease(c, "r").await;
    let p = push_and_lease(c, "p").await;
    let d = push_and_lease(c, "d").await;
    let l = push_and_lease(c, "l").await;
    let written = push_and_lease(c, "w").await;
    let released = push_and_lease(c, "x").await;
    for name in ["r", "p", "d", "l"] {
        assert_eq!(cancel(c, name).await, ChangeOutcome::CancelRequested);
    }
    let retry = RunEnd::Retry {
        delay: Duration::ZERO,
        error: "boom",
    };
    let postpone = RunEnd::Postpone {
        delay: Duration::ZERO,
    };
    let dead = RunEnd::DeadLetter { error: "gone" };
    assert_eq!(
        s.end_run(&r.lease, retry).await.unwrap(),
        RunEnded::Cancelled
    );
    assert_eq!(
        s.end_run(&p.lease, postpone).await.unwrap(),
        RunEnded::Cancelled
    );
    assert_eq!(
        s.end_run(&d.lease, dead).await.unwrap(),
        RunEnded::Cancelled
    );
    assert_eq!(
        s.end_run(&l.lease, RunEnd::Release).await.unwrap(),
        RunEnded::Cancelled
    );
    assert_eq!(
        s.end_run(&written.lease, retry).await.unwrap(),
        RunEnded::Written
    );
    assert_eq!(
        s.end_run(&released.lease, RunEnd::Release).await.unwrap(),
        RunEnded::Written
    );
    // The same lease again: the job is no longer held by it.
    assert_eq!(s.end_run(&r.lease, retry).await.unwrap(), RunEnded::NotHeld);
    assert_eq!(
        s.end_run(&written.lease, dead).await.unwrap(),
        RunEnded::NotHeld
    );
    assert_eq!(
        s.end_run(&released.lease, RunEnd::Release).await.unwrap(),
        RunEnded::NotHeld
    );
    let back = c.status_in("order-cancel", "x").await.unwrap().unwrap();
    assert_eq!(back.state, JobState::Ready, "released to ready: {back:?}");
    for name in ["r", "p", "d", "l"] {
        let status = c.status_in("order-cancel", name).await.unwrap();
        assert!(status.is_none(), "{name} was deleted: {status:?}");
    }
}

/// Issue 32 review (helper-61, finding 1): a run that ended without success after its cancel
/// was requested, but before its worker heard of it (the `wake` message on its way, the next
/// lease renewal not come), was retried, dead-lettered or put back in line, though the caller
/// was told `CancelRequested` and README says such a job is deleted. Whatever ends the run
/// without success (a retry, a postpone, a dead letter, a release, its lease expiring), the job
/// is now deleted as cancelled and a wait for it answers `Cancelled`.
pub(crate) async fn a_run_that_fails_after_its_cancel_was_requested_is_deleted_not_retried(
    kind: Kind,
) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let s = c.store();
    let t = topic("order-cancel");
    let retention = Retention {
        age: Duration::from_secs(3600),
        count: 100,
    };
    s.set_retention(&t, Some(retention)).await.unwrap();
    let retried = push_and_lease(c, "retried").await;
    let postponed = push_and_lease(c, "postponed").await;
    let dead = push_and_lease(c, "dead").await;
    let released = push_and_lease(c, "released").await;
    for name in ["retried", "postponed", "dead", "released"] {
        assert_eq!(cancel(c, name).await, ChangeOutcome::CancelRequested);
    }
    assert!(s
        .retry(&retried.lease, Duration::ZERO, "boom")
        .await
        .unwrap());
    assert!(s.postpone(&postponed.lease, Duration::ZERO).await.unwrap());
    assert!(s.dead_letter(&dead.lease, "gone").await.unwrap());
    let one = std::slice::from_ref(&released.lease);
    assert_eq!(s.release(one).await.unwrap(), 1);

    // A worker that died holding its job: the lease expires and the reclaimer finds it.
    let p = c.push(OrderCancel { order_id: 1 }).id("stalled");
    assert_eq!(outcome(p).await, PushOutcome::Created);
    let stalled = s.fetch(0, &t, 1, Duration::from_millis(100)).await.unwrap();
    assert_eq!(stalled.jobs.len(), 1);
    assert_eq!(cancel(c, "stalled").await, ChangeOutcome::CancelRequested);
    tokio::time::sleep(Duration::from_millis(120)).await;
    let reclaimed = s.reclaim(0, 100).await.unwrap();
    assert_eq!(
        (reclaimed.requeued, reclaimed.dead),
        (0, 0),
        "{reclaimed:?}"
    );

    for name in ["retried", "postponed", "dead", "released", "stalled"] {
        let status = c.status_in("order-cancel", name).await.unwrap();
        assert!(status.is_none(), "{name} was deleted: {status:?}");
        let waited = s.wait_finished(&t, &id(name), LONG).await.unwrap();
        assert!(matches!(waited, Waited::Cancelled), "{name}: {waited:?}");
    }
    let counts = c.counts("order-cancel").await.unwrap();
    assert_eq!(
        (counts.delayed, counts.ready, counts.running, counts.dead),
        (0, 0, 0, 0)
    );
    assert!(s.fetch(0, &t, 10, LEASE).await.unwrap().jobs.is_empty());
}
