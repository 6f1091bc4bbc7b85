//! A job's runs: promoted when due, leased (at most as many as asked), acked, retried,
//! postponed, renewed, released, and taken back when its lease expires.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use dq::store::{LeasedJob, Reclaimed, Store};
use dq::{Client, Error, JobState};

use super::{existing, push_and_lease, Harness, Kind};
use crate::support::{lease_one, push_order, state_of, topic, OrderCancel, LEASE};

/// Pushes the order-cancel jobs `a` (order 1), then `b` (order 2).
async fn push_a_then_b(c: &Client) {
    c.push(OrderCancel { order_id: 1 }).id("a").await.unwrap();
    c.push(OrderCancel { order_id: 2 }).id("b").await.unwrap();
}

/// Waits out a 50 ms delay, promotes the job and leases it again: its next run.
async fn next_run(s: &Arc<dyn Store>) -> LeasedJob {
    tokio::time::sleep(Duration::from_millis(60)).await;
    assert_eq!(s.promote(0, 10).await.unwrap().moved, 1);
    lease_one(s, "order-cancel").await
}

pub(crate) async fn promote_moves_only_due_jobs_and_reports_the_next_due_time(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let s = c.store();
    // (half a second: a loaded machine's two pushes and a call fit in it)
    push_order(c, 1, "soon", Duration::from_millis(500)).await;
    push_order(c, 2, "later", Duration::from_secs(60)).await;
    let early = s.promote(0, 1000).await.unwrap();
    assert_eq!(early.moved, 0, "nothing is due yet");
    tokio::time::sleep(Duration::from_millis(510)).await;
    let p = s.promote(0, 1000).await.unwrap();
    assert_eq!(p.moved, 1);
    assert_eq!(p.topics, vec![(topic("order-cancel"), 1)]);
    let later = existing(c, "order-cancel", "later").await;
    assert_eq!(p.next_due_us, Some(dq::store::to_us(later.due)));
    assert!(p.next_due_us.unwrap() > p.now_us);
    let soon = state_of(c, "order-cancel", "soon").await;
    assert_eq!(soon, Some(JobState::Ready));
}

pub(crate) async fn promote_moves_a_bounded_batch_per_call(kind: Kind) {
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

pub(crate) async fn fetch_leases_at_most_the_asked_number_and_counts_the_attempt(kind: Kind) {
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
    let info = existing(c, "order-cancel", "0").await;
    assert_eq!((info.state, info.attempt), (JobState::Running, 1));
    let deadline = info.state_since_or_until.unwrap();
    assert!(deadline > SystemTime::now() + Duration::from_secs(9));
}

pub(crate) async fn ack_completes_jobs_and_refuses_a_lease_that_was_taken_over(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let s = c.store();
    push_a_then_b(c).await;
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
    let second = lease_one(s, "order-cancel").await;
    assert_eq!(second.lease.id.as_str(), "a");

    let leases: Vec<_> = first.jobs.iter().map(|j| j.lease.clone()).collect();
    let acked = s.ack(&leases).await.unwrap();
    assert_eq!(acked.acked, 0, "the old worker's acks are stale");
    assert_eq!(acked.stale.len(), 2);
    let acked = s.ack(std::slice::from_ref(&second.lease)).await.unwrap();
    assert_eq!(acked.acked, 1);
    assert!(
        c.status_in("order-cancel", "a").await.unwrap().is_none(),
        "acked jobs are gone"
    );
    assert_eq!(c.counts("order-cancel").await.unwrap().running, 0);
}

pub(crate) async fn retry_records_the_error_and_runs_again_after_the_delay(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let s = c.store();
    let job = push_and_lease(c, "a").await;
    let later = Duration::from_millis(50);
    assert!(s
        .retry(&job.lease, later, "payment service down")
        .await
        .unwrap());
    let info = existing(c, "order-cancel", "a").await;
    assert_eq!(info.state, JobState::Delayed);
    assert_eq!(info.last_error.as_deref(), Some("payment service down"));
    assert!(
        !s.retry(&job.lease, Duration::ZERO, "again").await.unwrap(),
        "the lease is gone"
    );
    assert_eq!(next_run(s).await.envelope.attempt, 2);
}

pub(crate) async fn a_retry_delay_over_the_limit_is_refused_and_the_job_stays_leased(kind: Kind) {
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
    let info = existing(c, "t", "1").await;
    assert_eq!(info.state, JobState::Running, "nothing was written");
    assert!(s
        .retry(&job.lease, dq::limits::MAX_DELAY, "boom")
        .await
        .unwrap());
    let info = existing(c, "t", "1").await;
    assert_eq!(info.state, JobState::Delayed, "readable, and far away");
    assert!(info.due > SystemTime::now() + Duration::from_secs(100 * 365 * 86_400));
}

pub(crate) async fn a_postponed_job_runs_again_without_spending_an_attempt_or_its_last_error(
    kind: Kind,
) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let s = c.store();
    let first = push_and_lease(c, "a").await;
    assert!(s
        .retry(&first.lease, Duration::ZERO, "payment service down")
        .await
        .unwrap());
    let second = lease_one(s, "order-cancel").await;
    assert_eq!(second.envelope.attempt, 2);
    assert!(s
        .postpone(&second.lease, Duration::from_millis(50))
        .await
        .unwrap());
    let info = existing(c, "order-cancel", "a").await;
    assert_eq!(
        (info.state, info.attempt, info.last_error.as_deref()),
        (JobState::Delayed, 1, Some("payment service down"))
    );
    assert!(
        !s.postpone(&second.lease, Duration::ZERO).await.unwrap(),
        "the lease is gone"
    );
    let third = next_run(s).await;
    assert_eq!(third.envelope.attempt, 2, "still the second attempt");
}

pub(crate) async fn reclaim_requeues_expired_leases_and_dead_letters_the_last_attempt(kind: Kind) {
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
    let r = s.reclaim(0, 100).await.unwrap();
    assert_eq!(
        (r.requeued, r.dead, r.cancelled),
        (0, 0, 0),
        "leases still valid"
    );
    tokio::time::sleep(Duration::from_millis(60)).await;
    let r = s.reclaim(0, 100).await.unwrap();
    assert_eq!((r.requeued, r.dead), (1, 1));
    let left = existing(c, "order-cancel", "retries-left").await;
    assert_eq!(
        (left.state, left.attempt),
        (JobState::Ready, 1),
        "the lost run counts"
    );
    assert!(left
        .last_error
        .unwrap()
        .contains("lease expired on attempt 1"));
    let lost: Vec<(u32, bool)> = left
        .errors
        .iter()
        .map(|e| (e.run, e.error.contains("lease expired on attempt 1")))
        .collect();
    assert_eq!(lost, [(1, true)], "the lost run is in the job's errors");
    let last = existing(c, "order-cancel", "last-try").await;
    assert_eq!((last.state, last.attempt), (JobState::Dead, 1));
    assert_eq!(
        last.errors.iter().map(|e| e.run).collect::<Vec<_>>(),
        [1],
        "and in a dead letter's"
    );
    let again = lease_one(s, "order-cancel").await;
    assert_eq!(again.envelope.attempt, 2, "the second run");
}

/// The reclaimer looks again when the next lease runs out: reclaim says how long that is, and
/// `None` when no lease is held.
pub(crate) async fn reclaim_says_when_the_next_lease_still_held_runs_out(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let s = c.store();
    let t = topic("order-cancel");
    assert_eq!(s.reclaim(0, 100).await.unwrap(), Reclaimed::default());
    push_a_then_b(c).await;
    s.fetch(0, &t, 1, Duration::from_millis(100)).await.unwrap();
    let mut b = s.fetch(0, &t, 1, Duration::from_secs(30)).await.unwrap();
    let r = s.reclaim(0, 100).await.unwrap();
    let next = r.next_expiry.expect("two leases are held");
    assert!(
        next > Duration::ZERO && next <= Duration::from_millis(100),
        "the first lease runs out within 100 ms: {next:?}"
    );
    tokio::time::sleep(Duration::from_millis(120)).await;
    let r = s.reclaim(0, 100).await.unwrap();
    assert_eq!(r.requeued, 1, "the first lease ran out");
    let next = r.next_expiry.expect("the second lease is held");
    assert!(
        next > Duration::from_secs(29) && next <= Duration::from_secs(30),
        "the second lease runs out in about 30 s: {next:?}"
    );
    // Once every job that ran was acked, no lease is held, and none is said to run out.
    let a = lease_one(s, "order-cancel").await;
    let done = [a.lease, b.jobs.remove(0).lease];
    assert_eq!(s.ack(&done).await.unwrap().acked, 2);
    assert_eq!(s.reclaim(0, 100).await.unwrap().next_expiry, None);
}

pub(crate) async fn reclaim_judges_a_job_by_its_listeners_attempt_limit_until_it_is_forgotten(
    kind: Kind,
) {
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
        let info = existing(c, "order-cancel", id).await;
        assert_eq!(
            info.max_attempts,
            retries + 1,
            "the envelope keeps the push's limit"
        );
        if info.state == JobState::Ready {
            let job = lease_one(s, "order-cancel").await;
            s.ack(std::slice::from_ref(&job.lease)).await.unwrap();
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

pub(crate) async fn extend_keeps_a_running_job_leased(kind: Kind) {
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

pub(crate) async fn release_puts_jobs_back_first_in_line_without_spending_an_attempt(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let s = c.store();
    push_a_then_b(c).await;
    let first = lease_one(s, "order-cancel").await;
    assert_eq!(
        s.release(std::slice::from_ref(&first.lease)).await.unwrap(),
        1
    );
    let again = lease_one(s, "order-cancel").await;
    assert_eq!(again.lease.id.as_str(), "a", "released jobs go first");
    assert_eq!(
        again.envelope.attempt, 1,
        "the interrupted run did not count"
    );
}
