//! Jobs due hours ahead. On Redis and on a cluster they are stored compact, out of the `jobs`
//! hash and the `delayed` set (lib.lua's far jobs), until the mover moves them into place 5
//! minutes before they are due; whatever a user can do with a delayed job works the same with
//! them, on every store.

use std::time::{Duration, SystemTime};

use dq::admin::{ChangeOutcome, Cursor};
use dq::push::PushOutcome;
use dq::{Client, Due, JobInfo, JobState};

use super::{existing, outcome, Harness, Kind};
use crate::support::{lease_one, push_order, OrderCancel};

const HOURS: Duration = Duration::from_secs(2 * 3600);

fn order_id(info: &JobInfo) -> u64 {
    serde_json::from_slice::<OrderCancel>(&info.payload)
        .unwrap()
        .order_id
}

async fn delayed_count(c: &Client) -> u64 {
    c.counts("order-cancel").await.unwrap().delayed
}

pub(crate) async fn a_job_due_hours_ahead_shows_its_payload_due_time_and_attempts(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let before = SystemTime::now();
    push_order(c, 7, "far", HOURS).await;
    let info = existing(c, "order-cancel", "far").await;
    assert_eq!(info.state, JobState::Delayed);
    assert_eq!(
        (order_id(&info), info.attempt, info.max_attempts),
        (7, 0, 3)
    );
    let due_in = info.due.duration_since(before).unwrap();
    assert!(
        due_in >= HOURS && due_in < HOURS + Duration::from_secs(1),
        "{due_in:?}"
    );
    let created = info.created.duration_since(before).unwrap();
    assert!(created < Duration::from_secs(1), "{created:?}");
    assert_eq!(delayed_count(c).await, 1);
    let stats = c.stats("order-cancel").await.unwrap();
    assert_eq!(
        stats.next_due,
        Some(info.due),
        "the next due time is the job's"
    );
}

pub(crate) async fn a_job_due_hours_ahead_is_kept_or_replaced_by_a_push_of_its_id(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    push_order(c, 1, "far", HOURS).await;
    let again = c.push(OrderCancel { order_id: 2 }).id("far").delay(HOURS);
    assert_eq!(outcome(again).await, PushOutcome::AlreadyPending);
    assert_eq!(order_id(&existing(c, "order-cancel", "far").await), 1);

    let later = HOURS + Duration::from_secs(3600);
    let replace = c.push(OrderCancel { order_id: 3 }).id("far").delay(later);
    assert_eq!(outcome(replace.replace()).await, PushOutcome::Replaced);
    let info = existing(c, "order-cancel", "far").await;
    assert_eq!(order_id(&info), 3);
    let due_in = info.due.duration_since(SystemTime::now()).unwrap();
    assert!(due_in > HOURS + Duration::from_secs(3590), "{due_in:?}");
    assert_eq!(delayed_count(c).await, 1, "still one job");

    let now = c.push(OrderCancel { order_id: 4 }).id("far");
    assert_eq!(outcome(now.replace()).await, PushOutcome::Replaced);
    let job = lease_one(c.store(), "order-cancel").await;
    assert_eq!(job.lease.id.as_str(), "far");
    let counts = c.counts("order-cancel").await.unwrap();
    assert_eq!((counts.delayed, counts.ready, counts.running), (0, 0, 1));
}

pub(crate) async fn a_job_due_hours_ahead_can_be_cancelled_and_its_id_used_again(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    push_order(c, 1, "far", HOURS).await;
    let cancelled = c.cancel_in("order-cancel", "far").await.unwrap();
    assert_eq!(cancelled, ChangeOutcome::Done);
    assert!(c.status_in("order-cancel", "far").await.unwrap().is_none());
    assert_eq!(delayed_count(c).await, 0);
    let again = c.cancel_in("order-cancel", "far").await.unwrap();
    assert_eq!(again, ChangeOutcome::NotFound);
    let push = c.push(OrderCancel { order_id: 2 }).id("far").delay(HOURS);
    assert_eq!(outcome(push).await, PushOutcome::Created);
    assert_eq!(order_id(&existing(c, "order-cancel", "far").await), 2);
    assert_eq!(delayed_count(c).await, 1);
}

pub(crate) async fn a_job_due_hours_ahead_rescheduled_to_now_runs_with_its_payload(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    push_order(c, 5, "far", HOURS).await;
    let sooner = c.reschedule_in("order-cancel", "far", Due::After(Duration::from_secs(60)));
    assert_eq!(sooner.await.unwrap(), ChangeOutcome::Done);
    let info = existing(c, "order-cancel", "far").await;
    let due_in = info.due.duration_since(SystemTime::now()).unwrap();
    assert!(due_in <= Duration::from_secs(60), "{due_in:?}");
    assert_eq!(delayed_count(c).await, 1);
    let now = c.reschedule_in("order-cancel", "far", Due::After(Duration::ZERO));
    assert_eq!(now.await.unwrap(), ChangeOutcome::Done);
    assert_eq!(delayed_count(c).await, 0);
    let job = lease_one(c.store(), "order-cancel").await;
    let payload: OrderCancel = serde_json::from_slice(&job.envelope.payload).unwrap();
    assert_eq!((job.lease.id.as_str(), payload.order_id), ("far", 5));
}

pub(crate) async fn jobs_due_hours_ahead_are_listed_after_the_sooner_ones(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    push_order(c, 1, "soon", Duration::from_secs(60)).await;
    c.push_batch((0..5).map(|i| {
        c.push(OrderCancel { order_id: i })
            .id(format!("far{i}"))
            .delay(HOURS + Duration::from_secs(i))
    }))
    .await
    .unwrap();
    c.push_to("other", &1).id("x").delay(HOURS).await.unwrap();
    c.cancel_in("order-cancel", "far2").await.unwrap();
    let mut seen = Vec::new();
    let mut cursor = Cursor::START;
    loop {
        let page = c.jobs("order-cancel", JobState::Delayed, cursor, 2).await;
        let page = page.unwrap();
        assert!(page.jobs.len() <= 2);
        for job in &page.jobs {
            assert_eq!(job.state, JobState::Delayed);
            seen.push(job.id.to_string());
        }
        match page.next {
            Some(next) => cursor = next,
            None => break,
        }
    }
    assert_eq!(seen, ["soon", "far0", "far1", "far3", "far4"]);
}

pub(crate) async fn thousands_of_jobs_due_hours_ahead_are_each_found_by_id(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    // More than two parts of 1,000 (lib.lua), in one call and then in another.
    for round in 0..3u64 {
        c.push_batch((0..1000).map(|i| {
            let n = round * 1000 + i;
            c.push(OrderCancel { order_id: n })
                .id(format!("j{n}"))
                .delay(HOURS)
        }))
        .await
        .unwrap();
    }
    for n in (0..3000).step_by(7) {
        let id = format!("j{n}");
        let info = existing(c, "order-cancel", &id).await;
        assert_eq!(order_id(&info), n, "{id}");
    }
    for n in (0..3000).step_by(3) {
        let cancelled = c.cancel_in("order-cancel", &format!("j{n}")).await.unwrap();
        assert_eq!(cancelled, ChangeOutcome::Done);
    }
    assert_eq!(delayed_count(c).await, 2000);
    let kept = c.push(OrderCancel { order_id: 0 }).id("j1").delay(HOURS);
    assert_eq!(outcome(kept).await, PushOutcome::AlreadyPending);
    assert!(c
        .status_in("order-cancel", "j2999")
        .await
        .unwrap()
        .is_some());
    assert!(c
        .status_in("order-cancel", "j2997")
        .await
        .unwrap()
        .is_none());
}

pub(crate) async fn jobs_due_days_and_weeks_ahead_keep_their_exact_due_times(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let day = Duration::from_secs(86_400);
    let start = SystemTime::now();
    let wanted = [
        ("hours", HOURS),
        ("days", 2 * day + Duration::from_secs(17)),
        ("weeks", 40 * day + Duration::from_secs(5)),
    ];
    for (i, (id, delay)) in wanted.iter().enumerate() {
        push_order(c, i as u64, id, *delay).await;
    }
    for (id, delay) in wanted {
        let due_in = existing(c, "order-cancel", id)
            .await
            .due
            .duration_since(start)
            .unwrap();
        assert!(
            due_in >= delay && due_in < delay + Duration::from_secs(1),
            "{id}: {due_in:?}"
        );
    }
    let page = c.jobs("order-cancel", JobState::Delayed, Cursor::START, 10);
    let listed: Vec<String> = page
        .await
        .unwrap()
        .jobs
        .iter()
        .map(|j| j.id.to_string())
        .collect();
    assert_eq!(listed, ["hours", "days", "weeks"]);
    let cancelled = c.cancel_in("order-cancel", "days").await.unwrap();
    assert_eq!(cancelled, ChangeOutcome::Done);
    assert_eq!(delayed_count(c).await, 2);
    let now = c.reschedule_in("order-cancel", "weeks", Due::After(Duration::ZERO));
    assert_eq!(now.await.unwrap(), ChangeOutcome::Done);
    let job = lease_one(c.store(), "order-cancel").await;
    assert_eq!(job.lease.id.as_str(), "weeks");
}

/// `Client::expand` (`dq expand`, before a rollback) moves every job stored compact into the
/// plain layout and changes none of them: each keeps its payload, due and created times and
/// attempts, the counts and the listing stay, and a second call finds nothing. The in-memory
/// store, which stores nothing compact, answers 0.
pub(crate) async fn expanding_jobs_due_far_ahead_changes_none_of_them(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let day = Duration::from_secs(86_400);
    // Three parts of one bucket (lib.lua: at most 1,000 a part), and jobs days and weeks ahead.
    c.push_batch((0..2500).map(|i| {
        c.push(OrderCancel { order_id: i })
            .id(format!("j{i}"))
            .delay(HOURS)
    }))
    .await
    .unwrap();
    push_order(c, 1, "days", 2 * day).await;
    push_order(c, 2, "weeks", 40 * day).await;
    for i in (0..2500).step_by(10) {
        c.cancel_in("order-cancel", &format!("j{i}")).await.unwrap();
    }
    let ids: Vec<String> = (0..2500)
        .filter(|i| i % 10 != 0)
        .map(|i| format!("j{i}"))
        .chain(["days".into(), "weeks".into()])
        .collect();
    let mut before = Vec::new();
    for id in &ids {
        before.push(existing(c, "order-cancel", id).await);
    }
    let counts = c.counts("order-cancel").await.unwrap();
    assert_eq!(counts.delayed, 2252);

    let moved = c.expand().await.unwrap();
    let stored_compact = if matches!(kind, Kind::Memory) {
        0
    } else {
        2252
    };
    assert_eq!(
        (moved.jobs, moved.parts_left),
        (stored_compact, 0),
        "every job stored compact moved"
    );
    for (id, was) in ids.iter().zip(&before) {
        let now = existing(c, "order-cancel", id).await;
        assert_eq!(
            (
                now.state,
                now.due,
                now.created,
                now.attempt,
                now.max_attempts
            ),
            (
                was.state,
                was.due,
                was.created,
                was.attempt,
                was.max_attempts
            ),
            "{id}"
        );
        assert_eq!(now.payload, was.payload, "{id}");
    }
    assert_eq!(c.counts("order-cancel").await.unwrap(), counts);
    assert!(c.status_in("order-cancel", "j10").await.unwrap().is_none());
    let mut listed = Vec::new();
    let mut cursor = Cursor::START;
    loop {
        let page = c.jobs("order-cancel", JobState::Delayed, cursor, 500);
        let page = page.await.unwrap();
        listed.extend(page.jobs.iter().map(|j| j.id.to_string()));
        match page.next {
            Some(next) => cursor = next,
            None => break,
        }
    }
    listed.sort();
    let mut wanted = ids.clone();
    wanted.sort();
    assert_eq!(listed, wanted, "each listed once");
    assert_eq!(c.expand().await.unwrap().jobs, 0, "nothing left to move");
    // A push of a moved id finds it, and jobs due far ahead are stored as before afterwards.
    let again = c.push(OrderCancel { order_id: 0 }).id("j1").delay(HOURS);
    assert_eq!(outcome(again).await, PushOutcome::AlreadyPending);
    push_order(c, 3, "later", HOURS).await;
    assert_eq!(delayed_count(c).await, 2253);
}
