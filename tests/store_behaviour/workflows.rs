//! Workflows (README "Workflows"): a step's job is pushed only once every step it comes after
//! has ended, by the store step that ends the last of them (ack, dead letter, reclaim,
//! cancel), so a fan-in is released exactly once; a failure or cancel follows each
//! dependency's policy.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use dq::store::{LeaseRef, LeasedJob, Succeeded};
use dq::workflow::{OnFailure, StepState, WorkflowOutcome, WorkflowState};
use dq::{ErrorKind, JobState};

use super::{Harness, Kind};
use crate::support::{topic, TestClient, LEASE};

/// Leases every ready job of `topic_name` (after a promotion), by id.
async fn fetch_all(c: &TestClient, topic_name: &str) -> Vec<LeasedJob> {
    c.store().promote(0, 1000).await.unwrap();
    let fetched = c
        .store()
        .fetch(0, &topic(topic_name), 100, LEASE)
        .await
        .unwrap();
    fetched.jobs
}

fn ids(jobs: &[LeasedJob]) -> Vec<String> {
    jobs.iter().map(|j| j.lease.id.to_string()).collect()
}

async fn succeed(c: &TestClient, lease: &LeaseRef, value: Option<&str>) {
    let ok = Succeeded {
        lease: lease.clone(),
        result: value.map(|v| v.as_bytes().to_vec()),
        run: 1,
    };
    assert_eq!(c.store().ack_succeeded(&[ok]).await.unwrap().acked, 1);
}

async fn fail(c: &TestClient, lease: &LeaseRef, error: &str) {
    assert!(c.store().dead_letter(lease, error).await.unwrap());
}

async fn state(c: &TestClient, flow: &str, step: &str) -> StepState {
    let info = c.workflow_status(flow).await.unwrap().unwrap();
    info.step(step).unwrap().state
}

/// A -> B, C -> D: the diamond of the issue.
async fn push_diamond(c: &TestClient, id: &str, d_after_b: OnFailure) -> WorkflowOutcome {
    let mut flow = c.workflow(id);
    flow.step_to("a", "wf-a", &serde_json::json!({ "n": 1 }));
    flow.step_to("b", "wf-b", &serde_json::json!({ "n": 2 }))
        .after("a");
    flow.step_to("c", "wf-c", &serde_json::json!({ "n": 3 }))
        .after("a");
    flow.step_to("d", "wf-d", &serde_json::json!({ "n": 4 }))
        .after_with("b", d_after_b)
        .after("c");
    flow.push().await.unwrap()
}

pub(crate) async fn a_fan_in_step_runs_once_after_both_its_dependencies_succeeded(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    assert_eq!(
        push_diamond(c, "order-1", OnFailure::Cancel).await,
        WorkflowOutcome::Created
    );
    assert!(fetch_all(c, "wf-b").await.is_empty(), "b waits for a");
    let a = fetch_all(c, "wf-a").await;
    assert_eq!(ids(&a), ["order-1.a"]);
    succeed(c, &a[0].lease, Some(r#"{"paid":true}"#)).await;
    let (b, cc) = (fetch_all(c, "wf-b").await, fetch_all(c, "wf-c").await);
    assert_eq!(
        (ids(&b), ids(&cc)),
        (vec!["order-1.b".to_owned()], vec!["order-1.c".to_owned()])
    );
    succeed(c, &b[0].lease, Some("2")).await;
    assert!(fetch_all(c, "wf-d").await.is_empty(), "d waits for c too");
    assert_eq!(state(c, "order-1", "d").await, StepState::Blocked);
    succeed(c, &cc[0].lease, Some("3")).await;
    let d = fetch_all(c, "wf-d").await;
    assert_eq!(ids(&d), ["order-1.d"], "released once");
    assert_eq!(d[0].envelope.payload, br#"{"n":4}"#);
    assert!(fetch_all(c, "wf-d").await.is_empty());
    succeed(c, &d[0].lease, None).await;
    let info = c.workflow_status("order-1").await.unwrap().unwrap();
    assert_eq!(info.state, WorkflowState::Succeeded);
    assert!(info.ended_us.is_some());
    assert_eq!(
        info.step("a").unwrap().value.as_deref(),
        Some(&br#"{"paid":true}"#[..])
    );
    assert_eq!(info.step("c").unwrap().value.as_deref(), Some(&b"3"[..]));
}

pub(crate) async fn a_failed_dependency_cancels_the_steps_after_it_by_default(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    push_diamond(c, "order-2", OnFailure::Cancel).await;
    let a = fetch_all(c, "wf-a").await;
    succeed(c, &a[0].lease, None).await;
    let b = fetch_all(c, "wf-b").await;
    fail(c, &b[0].lease, "card declined").await;
    assert_eq!(state(c, "order-2", "d").await, StepState::Cancelled);
    let cc = fetch_all(c, "wf-c").await;
    succeed(c, &cc[0].lease, None).await;
    assert!(fetch_all(c, "wf-d").await.is_empty(), "d never runs");
    let info = c.workflow_status("order-2").await.unwrap().unwrap();
    assert_eq!(info.state, WorkflowState::Failed);
    assert_eq!(
        info.step("b").unwrap().error.as_deref(),
        Some("card declined")
    );
    assert!(c.status_in("wf-d", "order-2.d").await.unwrap().is_none());
}

pub(crate) async fn a_step_that_runs_after_a_failure_is_released_once_the_others_ended(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    push_diamond(c, "order-3", OnFailure::Run).await;
    let a = fetch_all(c, "wf-a").await;
    succeed(c, &a[0].lease, None).await;
    let b = fetch_all(c, "wf-b").await;
    fail(c, &b[0].lease, "card declined").await;
    assert_eq!(
        state(c, "order-3", "d").await,
        StepState::Blocked,
        "c has not ended"
    );
    let cc = fetch_all(c, "wf-c").await;
    succeed(c, &cc[0].lease, None).await;
    let d = fetch_all(c, "wf-d").await;
    assert_eq!(ids(&d), ["order-3.d"]);
    let info = c.workflow_status("order-3").await.unwrap().unwrap();
    assert_eq!(info.step("b").unwrap().state, StepState::Failed);
}

pub(crate) async fn a_failure_under_cancel_workflow_cancels_every_step_that_has_not_run(
    kind: Kind,
) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let mut flow = c.workflow("order-4");
    flow.step_to("charge", "wf-a", &1);
    flow.step_to("stock", "wf-b", &2);
    flow.step_to("mail", "wf-c", &3)
        .delay(Duration::from_secs(3600));
    flow.step_to("ship", "wf-d", &4)
        .after_with("charge", OnFailure::CancelWorkflow)
        .after("stock");
    flow.push().await.unwrap();
    let stock = fetch_all(c, "wf-b").await;
    let charge = fetch_all(c, "wf-a").await;
    fail(c, &charge[0].lease, "card declined").await;
    let info = c.workflow_status("order-4").await.unwrap().unwrap();
    assert!(info.cancelled);
    assert_eq!(info.step("ship").unwrap().state, StepState::Cancelled);
    assert_eq!(
        info.step("mail").unwrap().state,
        StepState::Cancelled,
        "a waiting step is deleted"
    );
    assert!(c.status_in("wf-c", "order-4.mail").await.unwrap().is_none());
    assert_eq!(
        info.step("stock").unwrap().state,
        StepState::Pending,
        "running: asked to stop"
    );
    let asked = c
        .store()
        .cancel_requests(std::slice::from_ref(&stock[0].lease))
        .await
        .unwrap();
    assert_eq!(
        asked.len(),
        1,
        "the running step's worker is asked to stop it"
    );
    assert!(c.store().cancel_running(&stock[0].lease).await.unwrap());
    let info = c.workflow_status("order-4").await.unwrap().unwrap();
    assert_eq!(info.state, WorkflowState::Failed);
    assert!(info.ended_us.is_some());
}

pub(crate) async fn cancelling_a_workflow_cancels_what_has_not_run_and_releases_nothing_after(
    kind: Kind,
) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    push_diamond(c, "order-5", OnFailure::Cancel).await;
    let a = fetch_all(c, "wf-a").await;
    assert_eq!(c.cancel_workflow("order-5").await.unwrap(), Some(4));
    assert_eq!(c.cancel_workflow("nothing").await.unwrap(), None);
    succeed(c, &a[0].lease, None).await;
    assert!(fetch_all(c, "wf-b").await.is_empty(), "nothing is released");
    let info = c.workflow_status("order-5").await.unwrap().unwrap();
    assert_eq!(info.state, WorkflowState::Cancelled);
    assert_eq!(
        info.step("a").unwrap().state,
        StepState::Succeeded,
        "it ran to its end"
    );
    for s in ["b", "c", "d"] {
        assert_eq!(info.step(s).unwrap().state, StepState::Cancelled);
    }
}

pub(crate) async fn a_steps_delay_counts_from_its_release(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let mut flow = c.workflow("order-6");
    flow.step_to("charge", "wf-a", &1);
    flow.step_to("ship", "wf-b", &2)
        .after("charge")
        .delay(Duration::from_secs(600));
    flow.push().await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let charge = fetch_all(c, "wf-a").await;
    let before = SystemTime::now();
    succeed(c, &charge[0].lease, None).await;
    let ship = c.status_in("wf-b", "order-6.ship").await.unwrap().unwrap();
    assert_eq!(ship.state, JobState::Delayed);
    let due = ship.due.duration_since(before).unwrap_or_default();
    assert!(
        due >= Duration::from_millis(599_900) && due < Duration::from_secs(602),
        "due 600 s after the release, not after the push: {due:?}"
    );
}

pub(crate) async fn a_blocked_step_is_shown_keeps_its_id_and_can_be_cancelled(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    push_diamond(c, "order-7", OnFailure::Cancel).await;
    let b = c.status_in("wf-b", "order-7.b").await.unwrap().unwrap();
    assert_eq!(b.state, JobState::Blocked);
    assert_eq!(b.payload, br#"{"n":2}"#);
    let again = c
        .push_to("wf-b", &serde_json::json!({ "n": 9 }))
        .id("order-7.b")
        .send()
        .await
        .unwrap();
    assert_eq!(again.outcome, dq::push::PushOutcome::AlreadyPending);
    assert_eq!(
        c.cancel_in("wf-b", "order-7.b").await.unwrap(),
        dq::admin::ChangeOutcome::Done
    );
    let info = c.workflow_status("order-7").await.unwrap().unwrap();
    assert_eq!(info.step("b").unwrap().state, StepState::Cancelled);
    assert_eq!(
        info.step("d").unwrap().state,
        StepState::Cancelled,
        "d came after b"
    );
    assert_eq!(info.step("c").unwrap().state, StepState::Blocked);
    let a = fetch_all(c, "wf-a").await;
    succeed(c, &a[0].lease, None).await;
    assert_eq!(ids(&fetch_all(c, "wf-c").await), ["order-7.c"]);
    assert!(fetch_all(c, "wf-b").await.is_empty());
}

pub(crate) async fn a_workflow_is_stored_once_and_a_taken_job_id_refuses_all_of_it(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    assert_eq!(
        push_diamond(c, "order-8", OnFailure::Cancel).await,
        WorkflowOutcome::Created
    );
    assert_eq!(
        push_diamond(c, "order-8", OnFailure::Cancel).await,
        WorkflowOutcome::AlreadyExists
    );
    assert_eq!(fetch_all(c, "wf-a").await.len(), 1, "one a");
    c.push_to("wf-c", &0).id("order-9.c").await.unwrap();
    let mut flow = c.workflow("order-9");
    flow.step_to("a", "wf-a", &1);
    flow.step_to("c", "wf-c", &3).after("a");
    let e = flow.push().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(e.to_string().contains("order-9.c"), "{e}");
    assert!(c.workflow_status("order-9").await.unwrap().is_none());
    assert!(fetch_all(c, "wf-a").await.is_empty(), "nothing stored");
}

pub(crate) async fn a_step_whose_worker_died_on_its_last_attempt_fails_its_dependents(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let mut flow = c.workflow("order-10");
    flow.step_to("a", "wf-a", &1).max_retries(0);
    flow.step_to("b", "wf-b", &2).after("a");
    flow.push().await.unwrap();
    c.store().promote(0, 10).await.unwrap();
    let a = c
        .store()
        .fetch(0, &topic("wf-a"), 1, Duration::from_millis(100))
        .await
        .unwrap();
    assert_eq!(a.jobs.len(), 1);
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(c.store().reclaim(0, 10).await.unwrap().dead, 1);
    let info = c.workflow_status("order-10").await.unwrap().unwrap();
    assert_eq!(info.step("a").unwrap().state, StepState::Failed);
    assert!(info
        .step("a")
        .unwrap()
        .error
        .as_deref()
        .unwrap()
        .contains("lease expired"));
    assert_eq!(info.step("b").unwrap().state, StepState::Cancelled);
    assert_eq!(info.state, WorkflowState::Failed);
}

pub(crate) async fn a_workflow_with_a_cycle_is_refused_before_anything_is_stored(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let mut flow = c.workflow("order-11");
    flow.step_to("a", "wf-a", &1).after("b");
    flow.step_to("b", "wf-b", &2).after("a");
    let e = flow.push().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(e.to_string().contains("cycle"), "{e}");
    assert!(c.workflow_status("order-11").await.unwrap().is_none());
}

/// The names of a job's events still kept, oldest first.
async fn history(c: &TestClient, topic_name: &str, id: &str) -> Vec<String> {
    let events = c.job_history(topic_name, id).await.unwrap();
    events
        .iter()
        .map(|e| match &e.kind {
            dq::events::EventKind::WorkflowEnded { workflow, state } => {
                format!("workflow_ended {workflow} {}", state.as_str())
            }
            k => k.name().to_owned(),
        })
        .collect()
}

pub(crate) async fn released_and_cancelled_steps_and_the_workflows_end_are_job_events(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    for t in ["wf-a", "wf-b", "wf-c", "wf-d"] {
        c.store().set_events(&topic(t), Some(100)).await.unwrap();
    }
    push_diamond(c, "order-12", OnFailure::Cancel).await;
    assert_eq!(
        history(c, "wf-b", "order-12.b").await,
        Vec::<String>::new(),
        "blocked"
    );
    let a = fetch_all(c, "wf-a").await;
    succeed(c, &a[0].lease, None).await;
    assert_eq!(
        history(c, "wf-b", "order-12.b").await,
        ["pushed"],
        "released"
    );
    let b = fetch_all(c, "wf-b").await;
    fail(c, &b[0].lease, "card declined").await;
    let cc = fetch_all(c, "wf-c").await;
    succeed(c, &cc[0].lease, None).await;
    assert_eq!(
        history(c, "wf-a", "order-12.a").await,
        ["pushed", "started", "succeeded"]
    );
    assert_eq!(
        history(c, "wf-c", "order-12.c").await,
        [
            "pushed",
            "started",
            "succeeded",
            "workflow_ended order-12 failed"
        ],
        "c ended the workflow (d was cancelled when b failed)"
    );

    // A workflow cancelled as a whole: its waiting job is announced cancelled.
    let mut flow = c.workflow("order-13");
    flow.step_to("a", "wf-a", &1).delay(Duration::from_secs(60));
    flow.push().await.unwrap();
    assert_eq!(c.cancel_workflow("order-13").await.unwrap(), Some(1));
    assert_eq!(
        history(c, "wf-a", "order-13.a").await,
        ["pushed", "cancelled", "workflow_ended order-13 cancelled"]
    );
}

// The findings of the first review (helper-42), one behaviour each.

pub(crate) async fn a_waiting_job_a_workflow_cancel_deleted_leaves_its_id_free(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let mut flow = c.workflow("w1");
    flow.step_to("a", "wf-a", &1)
        .delay(Duration::from_secs(3600));
    flow.push().await.unwrap();
    assert_eq!(c.cancel_workflow("w1").await.unwrap(), Some(1));
    assert!(c.workflow_step("wf-a", "w1.a").await.unwrap().is_none());
    assert_eq!(
        c.cancel_in("wf-a", "w1.a").await.unwrap(),
        dq::admin::ChangeOutcome::NotFound
    );
    let again = c.push_to("wf-a", &2).id("w1.a").send().await.unwrap();
    assert_eq!(again.outcome, dq::push::PushOutcome::Created);
}

pub(crate) async fn a_job_taken_back_from_a_dead_worker_in_a_cancelled_workflow_is_deleted(
    kind: Kind,
) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let s = c.store();
    // b dies on its last attempt and cancels the workflow; a, taken back in the same reclaim,
    // must not go back in line.
    let mut flow = c.workflow("w2");
    flow.step_to("a", "wf-a", &1).max_retries(2);
    flow.step_to("b", "wf-b", &2).max_retries(0);
    flow.step_to("c", "wf-c", &3)
        .after("a")
        .after_with("b", OnFailure::CancelWorkflow);
    flow.push().await.unwrap();
    let short = Duration::from_millis(100);
    assert_eq!(
        s.fetch(0, &topic("wf-a"), 1, short)
            .await
            .unwrap()
            .jobs
            .len(),
        1
    );
    assert_eq!(
        s.fetch(0, &topic("wf-b"), 1, short)
            .await
            .unwrap()
            .jobs
            .len(),
        1
    );
    tokio::time::sleep(Duration::from_millis(150)).await;
    let reclaimed = s.reclaim(0, 10).await.unwrap();
    assert_eq!((reclaimed.dead, reclaimed.requeued), (1, 0));
    let info = c.workflow_status("w2").await.unwrap().unwrap();
    assert_eq!(info.step("a").unwrap().state, StepState::Cancelled);
    assert_eq!(info.state, WorkflowState::Failed);
    assert!(c.status_in("wf-a", "w2.a").await.unwrap().is_none());
    assert!(fetch_all(c, "wf-a").await.is_empty());

    // A workflow cancelled while its step ran: the step's job, taken back, is deleted too.
    let mut flow = c.workflow("w3");
    flow.step_to("a", "wf-a", &1);
    flow.push().await.unwrap();
    assert_eq!(
        s.fetch(0, &topic("wf-a"), 1, short)
            .await
            .unwrap()
            .jobs
            .len(),
        1
    );
    assert_eq!(
        c.cancel_workflow("w3").await.unwrap(),
        Some(1),
        "asked to stop"
    );
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(s.reclaim(0, 10).await.unwrap().requeued, 0);
    let info = c.workflow_status("w3").await.unwrap().unwrap();
    assert_eq!(info.state, WorkflowState::Cancelled);
    assert!(c.status_in("wf-a", "w3.a").await.unwrap().is_none());
}

pub(crate) async fn a_step_id_taken_by_a_dead_letter_refuses_the_workflow(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    c.push_to("wf-b", &0).id("w4.b").await.unwrap();
    let b = fetch_all(c, "wf-b").await;
    fail(c, &b[0].lease, "boom").await;
    let mut flow = c.workflow("w4");
    flow.step_to("a", "wf-a", &1);
    flow.step_to("b", "wf-b", &2).after("a");
    let e = flow.push().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(c.workflow_status("w4").await.unwrap().is_none());
    assert!(fetch_all(c, "wf-a").await.is_empty(), "nothing stored");
}

pub(crate) async fn a_waiting_job_cancelled_with_its_workflow_answers_its_waits_cancelled(
    kind: Kind,
) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let keep = dq::store::Retention::for_age(Duration::from_secs(3600));
    c.store()
        .set_retention(&topic("wf-a"), Some(keep))
        .await
        .unwrap();
    let mut flow = c.workflow("w5");
    flow.step_to("a", "wf-a", &1)
        .delay(Duration::from_secs(3600));
    flow.push().await.unwrap();
    c.cancel_workflow("w5").await.unwrap();
    let waited = c
        .store()
        .wait_finished(
            &topic("wf-a"),
            &dq::JobId::new("w5.a").unwrap(),
            Duration::ZERO,
        )
        .await
        .unwrap();
    assert!(matches!(waited, dq::store::Waited::Cancelled), "{waited:?}");
}

/// A blocked step is pending (it will run): a wait for it waits, whatever its topic's
/// retention, and its cancel (or the cancel it brings to the steps after it) answers the wait at
/// once: `Cancelled` in a topic that keeps its ends, `NotKept` in one that keeps nothing.
pub(crate) async fn a_wait_for_a_blocked_step_waits_and_its_cancel_answers_it(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let keep = dq::store::Retention::for_age(Duration::from_secs(3600));
    c.store()
        .set_retention(&topic("wf-b"), Some(keep))
        .await
        .unwrap();
    push_diamond(c, "order-8", OnFailure::Cancel).await;
    let store = Arc::clone(c.store());
    let cancel = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let b = dq::JobId::new("order-8.b").unwrap();
        store.cancel(&topic("wf-b"), &b).await.unwrap()
    });
    let long = Duration::from_secs(10);
    let (tb, td) = (topic("wf-b"), topic("wf-d"));
    let (b, d) = (
        dq::JobId::new("order-8.b").unwrap(),
        dq::JobId::new("order-8.d").unwrap(),
    );
    let start = Instant::now();
    let (b, d) = tokio::join!(
        c.store().wait_finished(&tb, &b, long),
        c.store().wait_finished(&td, &d, long),
    );
    let took = start.elapsed();
    let (b, d) = (b.unwrap(), d.unwrap());
    assert!(matches!(b, dq::store::Waited::Cancelled), "b: {b:?}");
    assert!(matches!(d, dq::store::Waited::NotKept), "d, after b: {d:?}");
    assert!(
        took >= Duration::from_millis(150) && took < Duration::from_secs(5),
        "woken by the cancel, not before it nor at a look: {took:?}"
    );
    assert_eq!(cancel.await.unwrap(), dq::admin::ChangeOutcome::Done);
}

/// A wait for job `id` of `topic_name` (10 s at most), made in a task of its own, as a
/// producer elsewhere waits while the test ends the job.
fn wait_in_background(
    c: &TestClient,
    topic_name: &str,
    id: &str,
) -> tokio::task::JoinHandle<dq::Result<dq::store::Waited>> {
    let (store, t) = (Arc::clone(c.store()), topic(topic_name));
    let id = dq::JobId::new(id).unwrap();
    tokio::spawn(async move { store.wait_finished(&t, &id, Duration::from_secs(10)).await })
}

/// Issue 32 (helper-71, finding 7): one reclaim kills two steps. One lets its dependent run
/// all the same, the other cancels the workflow. The dependent is cancelled, never run, and a
/// wait for it hears `Cancelled`, whichever of the two dies first: the first released, then
/// cancelled in the same call (the order of the first round), or blocked when cancelled (the
/// second).
pub(crate) async fn a_step_released_and_cancelled_with_its_workflow_in_one_call_never_runs(
    kind: Kind,
) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let s = c.store();
    let keep = dq::store::Retention::for_age(Duration::from_secs(3600));
    s.set_retention(&topic("wf-c"), Some(keep)).await.unwrap();
    for (wf, leased_first) in [("w9", ["wf-a", "wf-b"]), ("w10", ["wf-b", "wf-a"])] {
        let mut flow = c.workflow(wf);
        flow.step_to("x", "wf-a", &1).max_retries(0);
        flow.step_to("y", "wf-b", &2).max_retries(0);
        flow.step_to("r", "wf-c", &3)
            .after_with("x", OnFailure::Run);
        flow.step_to("z", "wf-d", &4)
            .after_with("y", OnFailure::CancelWorkflow);
        flow.push().await.unwrap();
        // The lease taken first ends first, and the reclaimer takes the jobs in that order.
        let short = Duration::from_millis(100);
        for name in leased_first {
            let leased = s.fetch(0, &topic(name), 1, short).await.unwrap();
            assert_eq!(leased.jobs.len(), 1, "{wf}: {name}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let wait = wait_in_background(c, "wf-c", &format!("{wf}.r"));
        tokio::time::sleep(Duration::from_millis(150)).await;
        let reclaimed = s.reclaim(0, 10).await.unwrap();
        assert_eq!((reclaimed.dead, reclaimed.requeued), (2, 0), "{wf}");
        let info = c.workflow_status(wf).await.unwrap().unwrap();
        assert_eq!(info.step("r").unwrap().state, StepState::Cancelled, "{wf}");
        assert_eq!(info.step("z").unwrap().state, StepState::Cancelled, "{wf}");
        assert_eq!(info.state, WorkflowState::Failed, "{wf}");
        assert!(fetch_all(c, "wf-c").await.is_empty(), "{wf}: r never runs");
        let waited = tokio::time::timeout(Duration::from_secs(5), wait).await;
        let waited = waited.expect("the wait answered by the reclaim").unwrap();
        assert!(
            matches!(waited, Ok(dq::store::Waited::Cancelled)),
            "{wf}: {waited:?}"
        );
        let read = c
            .result_in::<u32>("wf-c", &format!("{wf}.r"))
            .await
            .unwrap();
        assert!(matches!(read, dq::JobResult::Cancelled), "{wf}: {read:?}");
    }
}

/// A wait for a released step's job hears its cancel: the memory store woke its waits before
/// the step ended, while it still counted the job as a blocked step's, and the wait hung until
/// its timeout.
pub(crate) async fn a_wait_for_a_released_steps_job_hears_its_cancel(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let mut flow = c.workflow("w11");
    flow.step_to("a", "wf-a", &1);
    flow.push().await.unwrap();
    let wait = wait_in_background(c, "wf-a", "w11.a");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        c.cancel_in("wf-a", "w11.a").await.unwrap(),
        dq::admin::ChangeOutcome::Done
    );
    let waited = tokio::time::timeout(Duration::from_secs(5), wait).await;
    let waited = waited.expect("the wait answered by the cancel").unwrap();
    // No retention: the job's end is not kept.
    assert!(
        matches!(waited, Ok(dq::store::Waited::NotKept)),
        "{waited:?}"
    );
}

/// The same for an ack (helper-72): a wait for a released step's job, acked in a topic that
/// keeps nothing, hears `NotKept` when the ack ends the job, not at its timeout.
pub(crate) async fn a_wait_for_a_released_steps_job_hears_its_ack(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let mut flow = c.workflow("w12");
    flow.step_to("a", "wf-a", &1);
    flow.push().await.unwrap();
    let wait = wait_in_background(c, "wf-a", "w12.a");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let a = fetch_all(c, "wf-a").await;
    let done = Succeeded {
        lease: a[0].lease.clone(),
        result: None,
        run: 1,
    };
    assert_eq!(c.store().ack_succeeded(&[done]).await.unwrap().acked, 1);
    let waited = tokio::time::timeout(Duration::from_secs(5), wait).await;
    let waited = waited.expect("the wait answered by the ack").unwrap();
    assert!(
        matches!(waited, Ok(dq::store::Waited::NotKept)),
        "{waited:?}"
    );
}

pub(crate) async fn a_dead_steps_own_event_comes_before_its_workflows_end(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    c.store()
        .set_events(&topic("wf-a"), Some(100))
        .await
        .unwrap();
    let mut flow = c.workflow("w6");
    flow.step_to("a", "wf-a", &1).max_retries(0);
    flow.push().await.unwrap();
    let a = fetch_all(c, "wf-a").await;
    fail(c, &a[0].lease, "boom").await;
    assert_eq!(
        history(c, "wf-a", "w6.a").await,
        ["pushed", "started", "dead", "workflow_ended w6 failed"]
    );
}

pub(crate) async fn a_cancel_of_an_ended_workflow_leaves_it_as_it_ended(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let mut flow = c.workflow("w7");
    flow.step_to("a", "wf-a", &1);
    flow.push().await.unwrap();
    let a = fetch_all(c, "wf-a").await;
    succeed(c, &a[0].lease, None).await;
    let ended = c.workflow_status("w7").await.unwrap().unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert_eq!(c.cancel_workflow("w7").await.unwrap(), Some(0));
    let after = c.workflow_status("w7").await.unwrap().unwrap();
    assert_eq!(after.state, WorkflowState::Succeeded);
    assert!(!after.cancelled);
    assert_eq!(after.ended_us, ended.ended_us);
}

pub(crate) async fn a_released_step_keeps_the_time_its_workflow_was_pushed(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let mut flow = c.workflow("w8");
    flow.step_to("a", "wf-a", &1);
    flow.step_to("b", "wf-b", &2).after("a");
    flow.push().await.unwrap();
    let blocked = c.status_in("wf-b", "w8.b").await.unwrap().unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let a = fetch_all(c, "wf-a").await;
    succeed(c, &a[0].lease, None).await;
    let released = c.status_in("wf-b", "w8.b").await.unwrap().unwrap();
    assert_eq!(released.state, JobState::Ready);
    assert_eq!(released.created, blocked.created);
}

/// One ack of the first steps of many workflows releases each one's next step, on a topic of
/// its own. (On a cluster the call names every workflow it meets in one stop, lib.lua's `need`.)
pub(crate) async fn one_ack_of_the_steps_of_many_workflows_releases_each_ones_next(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    for n in 0..10 {
        let mut flow = c.workflow(format!("batch-{n}"));
        flow.step_to("a", "wf-a", &serde_json::json!({ "n": n }));
        flow.step_to("b", &format!("wf-b{n}"), &serde_json::json!({ "n": n }))
            .after("a");
        assert_eq!(flow.push().await.unwrap(), WorkflowOutcome::Created);
    }
    let first = fetch_all(c, "wf-a").await;
    assert_eq!(first.len(), 10);
    let done = crate::support::succeeded(first.iter().map(|j| &j.lease));
    assert_eq!(c.store().ack_succeeded(&done).await.unwrap().acked, 10);
    for n in 0..10 {
        let next = fetch_all(c, &format!("wf-b{n}")).await;
        assert_eq!(ids(&next), [format!("batch-{n}.b")]);
    }
}
