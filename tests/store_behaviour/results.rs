//! Results: what a topic with a retention keeps of its succeeded jobs (their values, the
//! newest within its count and age, listed newest first), what a push or a cancel of such a
//! record's id does, and the wait for a job's end, answered at once when there is nothing to
//! wait for and woken by the store (not at its timeout) when the job ends.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use dq::admin::{ChangeOutcome, Cursor};
use dq::push::PushOutcome;
use dq::store::{LeasedJob, Retention, Succeeded, Waited};
use dq::{JobInfo, JobState};
// The decoded answers of `Client::result` and `Client::wait` (not re-exported by `dq` yet).
use dq_core::JobResult;
use serde_json::{json, Value};

use super::{existing, outcome, push_and_lease, Harness, Kind};
use crate::support::{id, lease_one, push_order, topic, OrderCancel, TestClient};

/// The value the handlers of these tests returned, as JSON.
const VALUE: &[u8] = br#"{"n":1}"#;

/// A timeout no wait here reaches unless the store fails to answer or to wake it.
const LONG: Duration = Duration::from_secs(10);

/// Well under [`LONG`], and under half of a wait's 5-s look again on Redis: a wait that took
/// less was answered, not timed out, and not by a late look.
const AT_ONCE: Duration = Duration::from_millis(2500);

/// Gives `order-cancel` a retention of an hour and at most `count` records.
async fn retain(c: &TestClient, count: u64) {
    let retention = Retention {
        age: Duration::from_secs(3600),
        count,
    };
    let t = topic("order-cancel");
    c.store().set_retention(&t, Some(retention)).await.unwrap();
}

/// The ack of `job`, whose handler returned [`VALUE`].
fn with_value(job: &LeasedJob) -> Succeeded {
    Succeeded {
        lease: job.lease.clone(),
        result: Some(VALUE.to_vec()),
        run: 1,
    }
}

/// Pushes the order-cancel job `id` (order 1), leases it and acks it with [`VALUE`].
async fn succeed(c: &TestClient, id: &str) {
    let job = push_and_lease(c, id).await;
    let acked = c.store().ack_succeeded(&[with_value(&job)]).await.unwrap();
    assert_eq!(acked.acked, 1);
}

/// What a wait found, which must be the job's end.
fn finished(waited: Waited) -> JobInfo {
    match waited {
        Waited::Finished(info) => *info,
        other => panic!("the wait found no end: {other:?}"),
    }
}

/// The ids of `jobs`, in order.
fn ids_of(jobs: &[JobInfo]) -> Vec<String> {
    jobs.iter().map(|j| j.id.to_string()).collect()
}

/// Acks `job` with its value 200 ms from now, as a worker elsewhere would; how many it acked.
fn ack_later(c: &TestClient, job: LeasedJob) -> tokio::task::JoinHandle<usize> {
    let store = Arc::clone(c.store());
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        store
            .ack_succeeded(&[with_value(&job)])
            .await
            .unwrap()
            .acked
    })
}

/// What the store keeps of order-cancel's job `id`, decoded as JSON.
async fn result(c: &TestClient, id: &str) -> JobResult<Value> {
    c.result_in::<Value>("order-cancel", id).await.unwrap()
}

pub(crate) async fn a_topic_without_retention_keeps_nothing_of_a_succeeded_job(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    succeed(c, "a").await;
    let status = c.status_in("order-cancel", "a").await.unwrap();
    assert!(status.is_none(), "nothing is kept: {status:?}");
    let done = c.jobs("order-cancel", JobState::Done, Cursor::START, 10);
    assert!(done.await.unwrap().jobs.is_empty());
    assert_eq!(result(c, "a").await, JobResult::NotKept);
}

/// Issue 32 review (helper-73): one ack call with jobs of two topics, one keeping its
/// succeeded jobs and the other not, both with events on (a worker acks a shard's jobs of all
/// its topics at once). The first topic's jobs are kept with their values, the second's go,
/// and each `succeeded` event carries a value only where the topic keeps it.
pub(crate) async fn an_ack_of_two_topics_keeps_only_the_jobs_of_the_one_with_retention(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let s = c.store();
    retain(c, 100).await;
    for name in ["order-cancel", "receipts"] {
        s.set_events(&topic(name), Some(100)).await.unwrap();
    }
    for i in 0..2u64 {
        let kept = c.push(OrderCancel { order_id: i }).id(format!("k{i}"));
        kept.await.unwrap();
        c.push_to("receipts", &i).id(format!("r{i}")).await.unwrap();
    }
    let mut acks = Vec::new();
    for name in ["order-cancel", "receipts"] {
        let leased = s.fetch(0, &topic(name), 10, Duration::from_secs(60)).await;
        let jobs = leased.unwrap().jobs;
        assert_eq!(jobs.len(), 2, "{name}");
        acks.extend(jobs.iter().map(with_value));
    }
    acks.swap(1, 2); // the topics interleaved in the call
    assert_eq!(s.ack_succeeded(&acks).await.unwrap().acked, 4);
    for i in 0..2 {
        let (k, r) = (format!("k{i}"), format!("r{i}"));
        let kept = existing(c, "order-cancel", &k).await;
        assert_eq!(kept.state, JobState::Done, "{k}");
        assert_eq!(kept.result.as_deref(), Some(VALUE), "{k}");
        let gone = c.status_in("receipts", &r).await.unwrap();
        assert!(gone.is_none(), "{r}: {gone:?}");
        let value = Some(VALUE.to_vec());
        assert_eq!(succeeded_value(c, "order-cancel", &k).await, value, "{k}");
        assert_eq!(succeeded_value(c, "receipts", &r).await, None, "{r}");
    }
    assert_eq!(c.counts("order-cancel").await.unwrap().done, 2);
    assert_eq!(c.counts("receipts").await.unwrap().done, 0);
}

/// The value of job `id`'s `succeeded` event, which it must have.
async fn succeeded_value(c: &TestClient, topic_name: &str, id: &str) -> Option<Vec<u8>> {
    let events = c.job_history(topic_name, id).await.unwrap();
    let succeeded = events.into_iter().find_map(|e| match e.kind {
        dq::events::EventKind::Succeeded { value } => Some(value),
        _ => None,
    });
    succeeded.unwrap_or_else(|| panic!("{topic_name}:{id} has no succeeded event"))
}

pub(crate) async fn a_topic_whose_retention_is_removed_forgets_its_succeeded_jobs(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    retain(c, 100).await;
    succeed(c, "a").await;
    assert_eq!(existing(c, "order-cancel", "a").await.state, JobState::Done);
    let t = topic("order-cancel");
    c.store().set_retention(&t, None).await.unwrap();
    let status = c.status_in("order-cancel", "a").await.unwrap();
    assert!(status.is_none(), "forgotten: {status:?}");
    assert_eq!(c.counts("order-cancel").await.unwrap().done, 0);
    assert_eq!(result(c, "a").await, JobResult::NotKept);
}

pub(crate) async fn a_succeeded_job_of_a_topic_with_retention_is_done_with_its_value(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    retain(c, 100).await;
    let before = SystemTime::now() - Duration::from_secs(1);
    succeed(c, "a").await;
    let info = existing(c, "order-cancel", "a").await;
    assert_eq!(info.state, JobState::Done);
    assert_eq!(info.result.as_deref(), Some(VALUE));
    assert_eq!(info.payload, br#"{"order_id":1}"#);
    assert_eq!((info.attempt, info.last_error), (0, None), "no run failed");
    let at = info.state_since_or_until.expect("when it succeeded");
    let after = SystemTime::now() + Duration::from_secs(1);
    assert!(before < at && at < after, "succeeded at {at:?}");
    assert_eq!(result(c, "a").await, JobResult::Succeeded(json!({"n": 1})));
    // A handler that returned no value: done all the same, without one.
    let job = push_and_lease(c, "b").await;
    let acked = c.store().ack(std::slice::from_ref(&job.lease)).await;
    assert_eq!(acked.unwrap().acked, 1);
    let info = existing(c, "order-cancel", "b").await;
    assert_eq!((info.state, info.result), (JobState::Done, None));
    assert_eq!(result(c, "b").await, JobResult::SucceededEmpty);
    let counts = c.counts("order-cancel").await.unwrap();
    let pending_or_dead = (counts.delayed, counts.ready, counts.running, counts.dead);
    assert_eq!(pending_or_dead, (0, 0, 0, 0), "a done job is none of these");
}

pub(crate) async fn done_records_past_the_count_go_oldest_first(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    retain(c, 2).await;
    for id in ["0", "1", "2"] {
        succeed(c, id).await;
        tokio::time::sleep(Duration::from_millis(2)).await; // each at a time of its own
    }
    let oldest = c.status_in("order-cancel", "0").await.unwrap();
    assert!(oldest.is_none(), "the oldest went: {oldest:?}");
    for id in ["1", "2"] {
        let info = existing(c, "order-cancel", id).await;
        assert_eq!(info.state, JobState::Done, "{id}");
    }
    let done = c.jobs("order-cancel", JobState::Done, Cursor::START, 10);
    assert_eq!(
        ids_of(&done.await.unwrap().jobs),
        ["2", "1"],
        "newest first"
    );
    assert_eq!(
        result(c, "0").await,
        JobResult::NotFound,
        "its record outlived the retention"
    );
}

pub(crate) async fn done_records_older_than_the_age_go_at_a_later_ack(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let retention = Retention {
        age: Duration::from_millis(300),
        count: 100,
    };
    let t = topic("order-cancel");
    c.store().set_retention(&t, Some(retention)).await.unwrap();
    succeed(c, "old").await;
    let young = existing(c, "order-cancel", "old").await;
    assert_eq!(
        young.state,
        JobState::Done,
        "kept while younger than the age"
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    succeed(c, "new").await;
    let old = c.status_in("order-cancel", "old").await.unwrap();
    assert!(old.is_none(), "older than the age: {old:?}");
    let new = existing(c, "order-cancel", "new").await;
    assert_eq!(new.state, JobState::Done);
}

pub(crate) async fn done_records_are_listed_newest_first_page_by_page(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    retain(c, 100).await;
    for i in 0..5 {
        succeed(c, &i.to_string()).await;
        tokio::time::sleep(Duration::from_millis(2)).await; // each at a time of its own
    }
    let mut seen = Vec::new();
    let mut cursor = Some(Cursor::START);
    let mut pages = 0;
    while let Some(at) = cursor {
        let page = c.jobs("order-cancel", JobState::Done, at, 2).await.unwrap();
        assert!(page.jobs.len() <= 2, "a page holds at most the limit");
        for j in &page.jobs {
            assert_eq!(
                (j.state, j.result.as_deref()),
                (JobState::Done, Some(VALUE))
            );
        }
        seen.extend(ids_of(&page.jobs));
        cursor = page.next;
        pages += 1;
        assert!(pages < 10, "the cursor ends");
    }
    assert_eq!(seen, ["4", "3", "2", "1", "0"], "each once, newest first");
}

pub(crate) async fn a_push_of_a_done_id_makes_a_new_job(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    retain(c, 100).await;
    succeed(c, "a").await;
    let again = c.push(OrderCancel { order_id: 2 }).id("a");
    assert_eq!(outcome(again).await, PushOutcome::Created);
    let info = existing(c, "order-cancel", "a").await;
    let fresh = (info.state, info.attempt, info.result, info.last_error);
    assert_eq!(fresh, (JobState::Ready, 0, None, None));
    assert_eq!(info.payload, br#"{"order_id":2}"#);
    let done = c.jobs("order-cancel", JobState::Done, Cursor::START, 10);
    assert!(done.await.unwrap().jobs.is_empty(), "its record went");
    assert_eq!(result(c, "a").await, JobResult::Pending);
    // The new job runs, and is done with its own value.
    let job = lease_one(c.store(), "order-cancel").await;
    assert_eq!(job.envelope.attempt, 1, "the new job's first run");
    let succeeded = Succeeded {
        lease: job.lease.clone(),
        result: Some(br#"{"n":2}"#.to_vec()),
        run: 1,
    };
    let acked = c.store().ack_succeeded(&[succeeded]).await.unwrap();
    assert_eq!(acked.acked, 1);
    assert_eq!(result(c, "a").await, JobResult::Succeeded(json!({"n": 2})));
}

/// A kept record's envelope stays where the job's was: the id it holds must still be reserved
/// by `unique_for`, and the record is not a pending job a reschedule could move.
pub(crate) async fn a_done_record_keeps_its_unique_for_reservation_and_is_not_rescheduled(
    kind: Kind,
) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    retain(c, 100).await;
    let hour = Duration::from_secs(3600);
    let first = c.push(OrderCancel { order_id: 1 }).id("a").unique_for(hour);
    assert_eq!(outcome(first).await, PushOutcome::Created);
    let job = lease_one(c.store(), "order-cancel").await;
    let acked = c.store().ack_succeeded(&[with_value(&job)]).await.unwrap();
    assert_eq!(acked.acked, 1);
    let again = outcome(c.push(OrderCancel { order_id: 2 }).id("a").unique_for(hour)).await;
    assert!(
        matches!(again, PushOutcome::Unique { .. }),
        "reserved for an hour after it succeeded: {again:?}"
    );
    let moved = c.reschedule_in("order-cancel", "a", dq::Due::After(Duration::ZERO));
    assert_eq!(moved.await.unwrap(), ChangeOutcome::NotFound);
    let info = existing(c, "order-cancel", "a").await;
    assert_eq!(
        (info.state, info.payload),
        (JobState::Done, br#"{"order_id":1}"#.to_vec())
    );
    assert_eq!(result(c, "a").await, JobResult::Succeeded(json!({"n": 1})));
}

pub(crate) async fn a_cancel_deletes_a_done_record(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    retain(c, 100).await;
    succeed(c, "a").await;
    let cancel = c.cancel_in("order-cancel", "a").await.unwrap();
    assert_eq!(cancel, ChangeOutcome::Done);
    assert!(c.status_in("order-cancel", "a").await.unwrap().is_none());
    let again = c.cancel_in("order-cancel", "a").await.unwrap();
    assert_eq!(again, ChangeOutcome::NotFound);
    assert_eq!(result(c, "a").await, JobResult::NotFound);
}

/// How many records order-cancel keeps, as `counts` and `stats` say it (they must agree).
async fn done_count(c: &TestClient) -> u64 {
    let counted = c.counts("order-cancel").await.unwrap().done;
    let stats = c.stats("order-cancel").await.unwrap().counts.done;
    assert_eq!(counted, stats, "counts and stats disagree");
    counted
}

pub(crate) async fn the_done_count_follows_acks_pushes_and_trims(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    retain(c, 2).await;
    assert_eq!(done_count(c).await, 0);
    for (id, kept) in [("a", 1), ("b", 2)] {
        succeed(c, id).await;
        tokio::time::sleep(Duration::from_millis(2)).await; // each at a time of its own
        assert_eq!(done_count(c).await, kept, "acked {id}");
    }
    // A push of a kept id makes a new job: its record goes.
    let again = c.push(OrderCancel { order_id: 2 }).id("a");
    assert_eq!(outcome(again).await, PushOutcome::Created);
    assert_eq!(done_count(c).await, 1, "a is pending again");
    let job = lease_one(c.store(), "order-cancel").await;
    assert_eq!(job.lease.id.as_str(), "a");
    let acked = c.store().ack_succeeded(&[with_value(&job)]).await.unwrap();
    assert_eq!(acked.acked, 1);
    tokio::time::sleep(Duration::from_millis(2)).await;
    assert_eq!(done_count(c).await, 2, "b and a");
    // Past the retention's count of 2, the oldest record (b) is trimmed at the ack.
    succeed(c, "c").await;
    assert_eq!(done_count(c).await, 2, "a and c: b was trimmed");
    assert!(c.status_in("order-cancel", "b").await.unwrap().is_none());
    // A cancel of a kept id deletes its record.
    let cancel = c.cancel_in("order-cancel", "c").await.unwrap();
    assert_eq!(cancel, ChangeOutcome::Done);
    assert_eq!(done_count(c).await, 1, "a");
    let counts = c.counts("order-cancel").await.unwrap();
    let others = (counts.delayed, counts.ready, counts.running, counts.dead);
    assert_eq!(others, (0, 0, 0, 0), "a done job is counted as done only");
}

/// A kept id cancelled, pushed again and kept again: when the call that first kept it is
/// forgotten, its new record (and its new job's envelope) must stay.
pub(crate) async fn an_id_cancelled_and_kept_again_outlives_the_call_that_first_kept_it(
    kind: Kind,
) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    retain(c, 2).await;
    for id in ["a", "b"] {
        succeed(c, id).await;
        tokio::time::sleep(Duration::from_millis(2)).await; // each at a time of its own
    }
    let cancel = c.cancel_in("order-cancel", "a").await.unwrap();
    assert_eq!(cancel, ChangeOutcome::Done, "a's record went");
    succeed(c, "a").await;
    tokio::time::sleep(Duration::from_millis(2)).await;
    // Past the count of 2: the oldest record, b's, goes; a's is newer.
    succeed(c, "c").await;
    assert!(c.status_in("order-cancel", "b").await.unwrap().is_none());
    for id in ["a", "c"] {
        let info = existing(c, "order-cancel", id).await;
        assert_eq!(info.state, JobState::Done, "{id}");
    }
    assert_eq!(result(c, "a").await, JobResult::Succeeded(json!({"n": 1})));
}

pub(crate) async fn wait_answers_at_once_for_a_done_a_dead_and_an_unknown_job(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let s = c.store();
    let t = topic("order-cancel");
    retain(c, 100).await;
    succeed(c, "done").await;
    let job = push_and_lease(c, "dead").await;
    assert!(s.dead_letter(&job.lease, "boom").await.unwrap());
    let start = Instant::now();
    let done = finished(s.wait_finished(&t, &id("done"), LONG).await.unwrap());
    let value = (done.state, done.result.as_deref());
    assert_eq!(value, (JobState::Done, Some(VALUE)));
    let dead = finished(s.wait_finished(&t, &id("dead"), LONG).await.unwrap());
    let error = (dead.state, dead.last_error.as_deref());
    assert_eq!(error, (JobState::Dead, Some("boom")));
    let unknown = s.wait_finished(&t, &id("never"), LONG).await.unwrap();
    assert!(matches!(unknown, Waited::NotFound), "{unknown:?}");
    // The same through the client, decoded.
    let done = c
        .wait_in::<Value>("order-cancel", "done", LONG)
        .await
        .unwrap();
    assert_eq!(done, JobResult::Succeeded(json!({"n": 1})));
    let dead = c
        .wait_in::<Value>("order-cancel", "dead", LONG)
        .await
        .unwrap();
    assert!(
        matches!(&dead, JobResult::Dead { error, .. } if error == "boom"),
        "{dead:?}"
    );
    let unknown = c.wait_in::<Value>("order-cancel", "never", LONG).await;
    assert_eq!(unknown.unwrap(), JobResult::NotFound);
    let waited = start.elapsed();
    assert!(
        waited < AT_ONCE,
        "answered at once, not at the timeout: {waited:?}"
    );
}

pub(crate) async fn wait_answers_not_kept_for_a_topic_without_retention(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let s = c.store();
    let t = topic("order-cancel");
    let job = push_and_lease(c, "dead").await;
    assert!(s.dead_letter(&job.lease, "boom").await.unwrap());
    succeed(c, "gone").await;
    c.push(OrderCancel { order_id: 2 })
        .id("pending")
        .await
        .unwrap();
    let start = Instant::now();
    for name in ["gone", "never"] {
        let waited = s.wait_finished(&t, &id(name), LONG).await.unwrap();
        assert!(matches!(waited, Waited::NotKept), "{name}: {waited:?}");
        let read = c.wait_in::<Value>("order-cancel", name, LONG).await;
        assert_eq!(read.unwrap(), JobResult::NotKept, "{name}");
    }
    // A dead letter is kept whatever the retention: its end is told.
    let dead = finished(s.wait_finished(&t, &id("dead"), LONG).await.unwrap());
    assert_eq!(dead.state, JobState::Dead);
    let waited = start.elapsed();
    assert!(
        waited < AT_ONCE,
        "answered at once, not at the timeout: {waited:?}"
    );
    assert_eq!(result(c, "pending").await, JobResult::Pending);
    let short = Duration::from_millis(300);
    let waited = s.wait_finished(&t, &id("pending"), short).await.unwrap();
    assert!(
        matches!(waited, Waited::TimedOut),
        "a pending job is waited for: {waited:?}"
    );
}

/// A wait for a pending job of a topic that keeps nothing waits for its end, woken by the ack
/// (not at its timeout), and then says nothing of it was kept.
pub(crate) async fn a_wait_for_a_pending_job_of_a_topic_without_retention_answers_not_kept_when_it_succeeds(
    kind: Kind,
) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let job = push_and_lease(c, "a").await;
    let ack = ack_later(c, job);
    let start = Instant::now();
    let read = c.wait_in::<Value>("order-cancel", "a", LONG).await.unwrap();
    let waited = start.elapsed();
    assert_eq!(read, JobResult::NotKept);
    assert!(
        waited >= Duration::from_millis(150),
        "it waited for the ack: {waited:?}"
    );
    assert!(
        waited < AT_ONCE,
        "woken by the ack, not at a look or the timeout: {waited:?}"
    );
    assert_eq!(ack.await.unwrap(), 1);
}

/// A dead letter is kept whatever the retention: a wait for a pending job of a topic that keeps
/// nothing is woken by its death and told its error.
pub(crate) async fn a_wait_for_a_pending_job_of_a_topic_without_retention_answers_dead_when_it_dies(
    kind: Kind,
) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let job = push_and_lease(c, "a").await;
    let store = Arc::clone(c.store());
    let dies = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        store.dead_letter(&job.lease, "boom").await.unwrap()
    });
    let start = Instant::now();
    let read = c.wait_in::<Value>("order-cancel", "a", LONG).await.unwrap();
    let waited = start.elapsed();
    match read {
        JobResult::Dead { error, .. } => assert_eq!(error, "boom"),
        other => panic!("told {other:?}"),
    }
    assert!(
        waited >= Duration::from_millis(150) && waited < AT_ONCE,
        "woken by the death, not at a look or the timeout: {waited:?}"
    );
    assert!(dies.await.unwrap());
}

/// A wait made before any runtime recorded the topic's retention (a producer that pushes and
/// waits while its workers are still starting) gets the value once the retention is recorded
/// and the job runs: it is not told `NotKept` for a job whose end will be kept.
pub(crate) async fn a_wait_made_before_the_retention_is_recorded_gets_the_value(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    c.push(OrderCancel { order_id: 1 }).id("a").await.unwrap();
    let store = Arc::clone(c.store());
    let worker = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let t = topic("order-cancel");
        let retention = Retention {
            age: Duration::from_secs(3600),
            count: 100,
        };
        store.set_retention(&t, Some(retention)).await.unwrap();
        let job = lease_one(&store, "order-cancel").await;
        store
            .ack_succeeded(&[with_value(&job)])
            .await
            .unwrap()
            .acked
    });
    let start = Instant::now();
    let read = c.wait_in::<Value>("order-cancel", "a", LONG).await.unwrap();
    assert_eq!(read, JobResult::Succeeded(json!({"n": 1})));
    assert!(
        start.elapsed() < AT_ONCE,
        "woken by the ack: {:?}",
        start.elapsed()
    );
    assert_eq!(worker.await.unwrap(), 1);
}

pub(crate) async fn wait_is_woken_when_the_job_is_acked(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let t = topic("order-cancel");
    retain(c, 100).await;
    let job = push_and_lease(c, "a").await;
    let ack = ack_later(c, job);
    let start = Instant::now();
    let info = finished(c.store().wait_finished(&t, &id("a"), LONG).await.unwrap());
    let waited = start.elapsed();
    assert_eq!(
        (info.state, info.result.as_deref()),
        (JobState::Done, Some(VALUE))
    );
    assert!(
        waited >= Duration::from_millis(150),
        "it waited for the ack: {waited:?}"
    );
    assert!(
        waited < AT_ONCE,
        "woken by the ack, not at the timeout: {waited:?}"
    );
    assert_eq!(ack.await.unwrap(), 1);
    // Through the client: the value, decoded.
    let job = push_and_lease(c, "b").await;
    let ack = ack_later(c, job);
    let start = Instant::now();
    let read = c.wait_in::<Value>("order-cancel", "b", LONG).await.unwrap();
    assert_eq!(read, JobResult::Succeeded(json!({"n": 1})));
    let waited = start.elapsed();
    assert!(
        waited < AT_ONCE,
        "woken by the ack, not at the timeout: {waited:?}"
    );
    assert_eq!(ack.await.unwrap(), 1);
}

pub(crate) async fn a_wait_without_a_bound_gets_the_value(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    retain(c, 100).await;
    let job = push_and_lease(c, "a").await;
    let ack = ack_later(c, job);
    // `Duration::MAX`: wait for as long as it takes.
    let read = c
        .wait_in::<Value>("order-cancel", "a", Duration::MAX)
        .await
        .unwrap();
    assert_eq!(read, JobResult::Succeeded(json!({"n": 1})));
    assert_eq!(ack.await.unwrap(), 1);
}

/// Issue 32 review (helper-61, finding 11): a wait for a pending job whose topic's retention is
/// then taken away is not left to its timeout: it is answered `NotKept` when the job ends,
/// woken by the ack as any wait.
pub(crate) async fn a_wait_whose_topic_stops_keeping_ends_is_answered_not_kept(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let t = topic("order-cancel");
    retain(c, 100).await;
    let job = push_and_lease(c, "a").await;
    let store = Arc::clone(c.store());
    let off = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        store.set_retention(&t, None).await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        store
            .ack_succeeded(&[with_value(&job)])
            .await
            .unwrap()
            .acked
    });
    let start = Instant::now();
    let t = topic("order-cancel");
    let waited = c.store().wait_finished(&t, &id("a"), LONG).await.unwrap();
    let took = start.elapsed();
    assert!(matches!(waited, Waited::NotKept), "{waited:?}");
    assert!(
        took >= Duration::from_millis(350) && took < AT_ONCE,
        "at the ack, not before it nor at a look or the timeout: {took:?}"
    );
    assert_eq!(off.await.unwrap(), 1);
}

pub(crate) async fn wait_times_out_on_a_job_still_pending(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let s = c.store();
    let t = topic("order-cancel");
    retain(c, 100).await;
    let running = push_and_lease(c, "running").await;
    c.push(OrderCancel { order_id: 2 })
        .id("ready")
        .await
        .unwrap();
    push_order(c, 3, "delayed", Duration::from_secs(60)).await;
    for name in ["running", "ready", "delayed"] {
        let start = Instant::now();
        let short = Duration::from_millis(200);
        let waited = s.wait_finished(&t, &id(name), short).await.unwrap();
        let took = start.elapsed();
        assert!(matches!(waited, Waited::TimedOut), "{name}: {waited:?}");
        assert!(
            took >= Duration::from_millis(100),
            "{name} waited: {took:?}"
        );
        assert!(took < AT_ONCE, "{name} waited about its timeout: {took:?}");
    }
    let read = c.wait_in::<Value>("order-cancel", "ready", Duration::from_millis(100));
    assert_eq!(read.await.unwrap(), JobResult::Pending);
    assert_eq!(result(c, "running").await, JobResult::Pending);
    // The waits left the jobs alone: the running one is still leased, and acked as usual.
    let acked = s.ack(std::slice::from_ref(&running.lease)).await.unwrap();
    assert_eq!(acked.acked, 1);
    let counts = c.counts("order-cancel").await.unwrap();
    assert_eq!((counts.delayed, counts.ready), (1, 1));
}

pub(crate) async fn a_dead_letter_ends_the_wait_with_its_error(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let s = c.store();
    let t = topic("order-cancel");
    retain(c, 100).await;
    let job = push_and_lease(c, "a").await;
    let store = Arc::clone(s);
    let kill = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        store
            .dead_letter(&job.lease, "order 1 not found")
            .await
            .unwrap()
    });
    let start = Instant::now();
    let read = c.wait_in::<Value>("order-cancel", "a", LONG).await.unwrap();
    assert!(
        matches!(&read, JobResult::Dead { error, .. } if error == "order 1 not found"),
        "{read:?}"
    );
    let waited = start.elapsed();
    assert!(waited < AT_ONCE, "woken by the dead letter: {waited:?}");
    assert!(kill.await.unwrap());
    // A lease that runs out on the last attempt ends the wait too, when the reclaimer
    // dead-letters the job; two at once, each wait woken (Redis announces the call's dead
    // letters in one message, a member a line).
    for (n, name) in [(2, "b"), (3, "c")] {
        c.push(OrderCancel { order_id: n })
            .id(name)
            .max_retries(0)
            .await
            .unwrap();
    }
    let leased = s.fetch(0, &t, 2, Duration::from_millis(100)).await.unwrap();
    assert_eq!(ids_of_leased(&leased.jobs), ["b", "c"]);
    let store = Arc::clone(s);
    let reclaim = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        store.reclaim(0, 100).await.unwrap().dead
    });
    let start = Instant::now();
    let (b, c_) = (id("b"), id("c"));
    let (b, c_) = tokio::join!(
        s.wait_finished(&t, &b, LONG),
        s.wait_finished(&t, &c_, LONG)
    );
    for dead in [finished(b.unwrap()), finished(c_.unwrap())] {
        assert_eq!(dead.state, JobState::Dead, "{}", dead.id);
        assert!(dead.last_error.unwrap().contains("lease expired"));
    }
    let waited = start.elapsed();
    assert!(waited < AT_ONCE, "both woken by the reclaimer: {waited:?}");
    assert_eq!(reclaim.await.unwrap(), 2);
}

pub(crate) async fn a_cancel_ends_the_wait_as_cancelled(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let s = c.store();
    let t = topic("order-cancel");
    retain(c, 100).await;
    push_order(c, 1, "a", Duration::from_secs(60)).await;
    let store = Arc::clone(s);
    let cancel = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let t = topic("order-cancel");
        store.cancel(&t, &id("a")).await.unwrap()
    });
    let start = Instant::now();
    let waited = s.wait_finished(&t, &id("a"), LONG).await.unwrap();
    let took = start.elapsed();
    assert!(matches!(waited, Waited::Cancelled), "{waited:?}");
    assert!(took < AT_ONCE, "woken by the cancel: {took:?}");
    assert_eq!(cancel.await.unwrap(), ChangeOutcome::Done);
    // A wait that begins after the cancel is told the same, at once.
    assert_eq!(result(c, "a").await, JobResult::Cancelled);
}

/// The marks of cancelled jobs are kept as the records are: within the count (and age).
pub(crate) async fn a_cancelled_job_past_the_retention_count_is_not_found(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    retain(c, 2).await;
    for name in ["a", "b", "c"] {
        push_order(c, 1, name, Duration::from_secs(60)).await;
        let cancelled = c.cancel_in("order-cancel", name).await.unwrap();
        assert_eq!(cancelled, ChangeOutcome::Done);
    }
    assert_eq!(
        result(c, "a").await,
        JobResult::NotFound,
        "the oldest mark went"
    );
    assert_eq!(result(c, "b").await, JobResult::Cancelled);
    assert_eq!(result(c, "c").await, JobResult::Cancelled);
    // Pushed again, the id is a job like any other: pending, then done with its value.
    push_order(c, 2, "c", Duration::ZERO).await;
    let job = lease_one(c.store(), "order-cancel").await;
    let acked = c.store().ack_succeeded(&[with_value(&job)]).await.unwrap();
    assert_eq!(acked.acked, 1);
    assert_eq!(result(c, "c").await, JobResult::Succeeded(json!({"n": 1})));
}

/// The ids of leased `jobs`, in order.
fn ids_of_leased(jobs: &[LeasedJob]) -> Vec<String> {
    jobs.iter().map(|j| j.lease.id.to_string()).collect()
}
