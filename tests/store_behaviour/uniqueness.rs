//! One job per key: an id reserved for a while after its job succeeds (`unique_for`), the
//! payload as the id (`unique_by_payload`), and a debounce that keeps the last push.

use std::time::{Duration, SystemTime};

use dq::admin::ChangeOutcome;
use dq::push::{PushBuilder, PushOutcome};
use dq::{Client, Due, Error};

use super::{assert_nothing_written, outcome, Harness, Kind};
use crate::support::{lease_one, state_of, topic, OrderCancel, TestClient, LEASE};

/// Leases and acks every ready job of the topic (as a worker's successful runs would).
async fn run_ready(c: &TestClient, topic_name: &str) {
    let s = c.store();
    s.promote(0, 1000).await.unwrap();
    let f = s.fetch(0, &topic(topic_name), 1000, LEASE).await.unwrap();
    let leases: Vec<_> = f.jobs.iter().map(|j| j.lease.clone()).collect();
    assert_eq!(s.ack(&leases).await.unwrap().acked, leases.len());
}

/// A report for account 42: one at a time, and none again for `window` after one succeeds.
fn report(c: &Client, window: Duration) -> PushBuilder {
    let report = c.push_to("report", &1).unique_key("account-42");
    report.unique_for(window)
}

pub(crate) async fn unique_for_reserves_the_id_after_the_job_succeeds_until_the_window_ends(
    kind: Kind,
) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let window = Duration::from_millis(600);
    assert_eq!(outcome(report(c, window)).await, PushOutcome::Created);
    assert_eq!(
        outcome(report(c, window)).await,
        PushOutcome::AlreadyPending,
        "pending as always"
    );
    run_ready(c, "report").await;
    let again = outcome(report(c, window)).await;
    let PushOutcome::Unique { left } = again else {
        panic!("the id is reserved after success: {again:?}");
    };
    assert!(left <= window && left > window / 2, "time left {left:?}");
    let state = state_of(c, "report", "account-42").await;
    assert_eq!(state, None, "nothing stored");
    // Another id, or another topic, is not affected.
    for (topic_name, key) in [("report", "account-7"), ("other", "account-42")] {
        let other = c.push_to(topic_name, &1).unique_key(key);
        assert_eq!(outcome(other).await, PushOutcome::Created, "{topic_name}");
    }
    tokio::time::sleep(left + Duration::from_millis(50)).await;
    assert_eq!(
        outcome(report(c, window)).await,
        PushOutcome::Created,
        "free once the window ended"
    );
}

/// Issue 29 finding 9: `unique_for(Duration::MAX)` turned uniqueness off on Redis (Lua's
/// `string.format('%d', 1.8e25)` gives -2^63: the id was free again) while the memory store
/// kept it for ever. A window is bounded as a delay is, in every store.
pub(crate) async fn a_uniqueness_window_over_the_limit_is_refused_and_one_at_the_limit_holds(
    kind: Kind,
) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let limit = dq::limits::MAX_DELAY;
    for window in [Duration::MAX, limit + Duration::from_secs(1)] {
        let err = report(c, window).await.unwrap_err();
        assert!(matches!(err, Error::InvalidPush { .. }), "{err}");
        assert_eq!(err.kind(), dq::ErrorKind::InvalidInput);
        assert!(
            err.to_string().contains("200 years") && err.to_string().contains("MAX_DELAY"),
            "{err}"
        );
    }
    assert_nothing_written(c).await;
    assert_eq!(outcome(report(c, limit)).await, PushOutcome::Created);
    run_ready(c, "report").await;
    let again = outcome(report(c, limit)).await;
    let PushOutcome::Unique { left } = again else {
        panic!("the id is reserved for 200 years after success: {again:?}");
    };
    assert!(
        left > limit - Duration::from_secs(3600) && left <= limit,
        "time left {left:?}"
    );
}

pub(crate) async fn unique_for_reserves_nothing_when_the_job_dies_or_is_cancelled(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let s = c.store();
    let hour = Duration::from_secs(3600);
    c.push_to("report", &1)
        .id("dies")
        .unique_for(hour)
        .await
        .unwrap();
    let job = lease_one(s, "report").await;
    assert!(s.dead_letter(&job.lease, "boom").await.unwrap());
    // A push of a dead letter's id revives it, as without uniqueness.
    let revived = c.push_to("report", &2).id("dies").unique_for(hour);
    assert_eq!(outcome(revived).await, PushOutcome::Created);
    let pending = c.push_to("report", &1).id("cancelled").unique_for(hour);
    pending.delay(hour).await.unwrap();
    assert_eq!(
        c.cancel_in("report", "cancelled").await.unwrap(),
        ChangeOutcome::Done
    );
    let after = c.push_to("report", &1).id("cancelled").unique_for(hour);
    assert_eq!(outcome(after).await, PushOutcome::Created);
}

pub(crate) async fn a_replace_without_unique_for_drops_the_reservation_asked_before(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let hour = Duration::from_secs(3600);
    let reserved = c.push_to("report", &1).id("a").delay(hour);
    reserved.unique_for(hour).await.unwrap();
    let replaced = c.push_to("report", &2).id("a").replace();
    assert_eq!(outcome(replaced).await, PushOutcome::Replaced);
    c.reschedule_in("report", "a", Due::After(Duration::ZERO))
        .await
        .unwrap();
    run_ready(c, "report").await;
    let again = c.push_to("report", &3).id("a");
    assert_eq!(
        outcome(again).await,
        PushOutcome::Created,
        "the last push asked for no reservation"
    );
}

pub(crate) async fn unique_by_payload_makes_the_same_message_one_job(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let push = |order_id| c.push(OrderCancel { order_id }).unique_by_payload().send();
    let first = push(42).await.unwrap();
    let second = push(42).await.unwrap();
    let other = push(43).await.unwrap();
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

pub(crate) async fn debounce_keeps_the_last_payload_and_moves_the_due_time(kind: Kind) {
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
