//! Pushes: a job's payload and due time, ids given or generated, a pending id kept or
//! replaced, batches and racing pushes; what is refused before anything is stored.

use std::time::{Duration, SystemTime};

use dq::push::{OnConflict, PushOutcome};
use dq::{Error, JobInfo, JobState};

use super::{assert_nothing_written, existing, outcome, Harness, Kind};
use crate::support::{push_order, state_of, topic, OrderCancel, LEASE};

/// The order a job's payload names.
fn order_id(info: &JobInfo) -> u64 {
    serde_json::from_slice::<OrderCancel>(&info.payload)
        .unwrap()
        .order_id
}

pub(crate) async fn pushed_job_is_delayed_with_its_payload_and_due_time(kind: Kind) {
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

pub(crate) async fn push_without_id_generates_unique_ids(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let a = c.push(OrderCancel { order_id: 1 }).await.unwrap();
    let b = c.push(OrderCancel { order_id: 1 }).await.unwrap();
    assert_ne!(a, b);
    assert_eq!(c.counts("order-cancel").await.unwrap().ready, 2);
}

pub(crate) async fn push_of_a_pending_id_keeps_the_first_job_by_default(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    push_order(c, 1, "x", Duration::from_secs(60)).await;
    let again = c.push(OrderCancel { order_id: 2 }).id("x");
    assert_eq!(
        outcome(again.delay(Duration::from_secs(5))).await,
        PushOutcome::AlreadyPending
    );
    assert_eq!(order_id(&existing(c, "order-cancel", "x").await), 1);
    let counts = c.counts("order-cancel").await.unwrap();
    assert_eq!((counts.delayed, counts.ready), (1, 0), "no second job");
}

pub(crate) async fn push_with_replace_swaps_payload_and_due_time(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    push_order(c, 1, "x", Duration::from_secs(60)).await;
    let again = c.push(OrderCancel { order_id: 2 }).id("x").replace();
    assert_eq!(outcome(again).await, PushOutcome::Replaced);
    let info = existing(c, "order-cancel", "x").await;
    assert_eq!(
        info.state,
        JobState::Ready,
        "the new due time (now) applies"
    );
    assert_eq!(order_id(&info), 2);
    let counts = c.counts("order-cancel").await.unwrap();
    assert_eq!((counts.delayed, counts.ready), (0, 1));
}

pub(crate) async fn replace_leaves_a_running_job_alone(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    c.push(OrderCancel { order_id: 1 }).id("x").await.unwrap();
    let fetched = c
        .store()
        .fetch(0, &topic("order-cancel"), 10, LEASE)
        .await
        .unwrap();
    assert_eq!(fetched.jobs.len(), 1);
    let running = c.push(OrderCancel { order_id: 2 }).id("x").replace();
    assert_eq!(outcome(running).await, PushOutcome::Running);
    let info = existing(c, "order-cancel", "x").await;
    assert_eq!(info.state, JobState::Running);
    assert_eq!(order_id(&info), 1);
}

pub(crate) async fn push_at_a_past_time_is_ready_at_once(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let past = SystemTime::now() - Duration::from_secs(5);
    c.push(OrderCancel { order_id: 1 })
        .id("a")
        .at(past)
        .await
        .unwrap();
    let state = state_of(c, "order-cancel", "a").await;
    assert_eq!(state, Some(JobState::Ready));
}

pub(crate) async fn batch_of_100_000_jobs_is_pushed_and_promoted_with_none_lost(kind: Kind) {
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

pub(crate) async fn invalid_topics_and_ids_are_rejected_before_anything_is_stored(kind: Kind) {
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
    assert_nothing_written(c).await;
}

pub(crate) async fn oversized_payload_is_rejected_with_the_limit(kind: Kind) {
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
    assert_nothing_written(c).await;
}

pub(crate) async fn a_bad_job_in_a_batch_fails_the_batch_and_stores_nothing(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let jobs = vec![c.push_to("t", &1).id("ok"), c.push_to("t", &2).id("not ok")];
    assert!(matches!(
        c.push_batch(jobs).await,
        Err(Error::InvalidJobId { .. })
    ));
    assert_nothing_written(c).await;
}

pub(crate) async fn keep_and_replace_pushes_in_one_batch_each_get_their_mode(kind: Kind) {
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

pub(crate) async fn the_same_id_twice_in_one_batch_is_one_job(kind: Kind) {
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
    let a = existing(c, "t", "a").await;
    assert_eq!(a.payload, b"1", "keep: the first push wins");
    let b = existing(c, "t", "b").await;
    assert_eq!(
        (b.payload.as_slice(), b.state),
        (&b"4"[..], JobState::Delayed),
        "replace: the last push wins"
    );
}

pub(crate) async fn concurrent_pushes_are_each_stored_once(kind: Kind) {
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
