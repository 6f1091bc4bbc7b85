//! What an operator sees and does: topics and their counts, listings page by page, stats,
//! throughput, the workers, and a pause and resume of a topic.

use std::time::{Duration, SystemTime};

use dq::admin::Cursor;
use dq::JobState;

use super::{Harness, Kind};
use crate::support::{topic, OrderCancel, LEASE};

pub(crate) async fn a_paused_topic_is_not_fetched_until_resumed(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    c.push_to("t", &1).id("a").await.unwrap();
    c.pause("t").await.unwrap();
    let f = c.store().fetch(0, &topic("t"), 10, LEASE).await.unwrap();
    assert!(f.paused && f.jobs.is_empty());
    assert!(c.stats("t").await.unwrap().paused);
    c.resume("t").await.unwrap();
    let f = c.store().fetch(0, &topic("t"), 10, LEASE).await.unwrap();
    assert_eq!((f.paused, f.jobs.len()), (false, 1));
}

/// Issue 30 finding 7: a topic paused before its first push (its jobs wait from the start) is
/// listed, as paused, where it used to show nowhere; one resumed again leaves no trace.
pub(crate) async fn a_topic_paused_before_its_first_push_is_listed_as_paused(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    c.pause("later").await.unwrap();
    assert_eq!(c.topics().await.unwrap(), vec![topic("later")]);
    assert!(c.stats("later").await.unwrap().paused);
    c.push_to("later", &1).id("a").await.unwrap();
    let f = c
        .store()
        .fetch(0, &topic("later"), 10, LEASE)
        .await
        .unwrap();
    assert!(f.paused && f.jobs.is_empty(), "its jobs wait");
    c.resume("later").await.unwrap();
    assert_eq!(
        c.topics().await.unwrap(),
        vec![topic("later")],
        "listed once"
    );
    c.pause("never").await.unwrap();
    assert!(c.stats("never").await.unwrap().paused);
    c.resume("never").await.unwrap();
    assert_eq!(
        c.topics().await.unwrap(),
        vec![topic("later")],
        "a topic nobody pushed to leaves no trace once resumed"
    );
}

pub(crate) async fn counts_are_kept_per_topic(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    c.push_to("a", &1)
        .delay(Duration::from_secs(60))
        .await
        .unwrap();
    c.push_to("a", &2).await.unwrap();
    c.push_to("b", &3).await.unwrap();
    let a = c.counts("a").await.unwrap();
    assert_eq!((a.delayed, a.ready, a.running, a.dead), (1, 1, 0, 0));
    let b = c.counts("b").await.unwrap();
    assert_eq!((b.delayed, b.ready), (0, 1));
    assert_eq!(
        c.store().topics().await.unwrap(),
        vec![topic("a"), topic("b")]
    );
}

pub(crate) async fn listing_pages_through_each_state_of_one_topic(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let later = Duration::from_secs(60);
    c.push_batch((0..5).map(|i| {
        c.push_to("a", &i)
            .id(format!("d{i}"))
            .delay(later + Duration::from_secs(i))
    }))
    .await
    .unwrap();
    c.push_batch((0..3).map(|i| c.push_to("b", &i).id(format!("other{i}")).delay(later)))
        .await
        .unwrap();
    c.push_batch((0..4).map(|i| c.push_to("a", &i).id(format!("r{i}"))))
        .await
        .unwrap();
    let mut seen = Vec::new();
    let mut cursor = Cursor::START;
    loop {
        let page = c.jobs("a", JobState::Delayed, cursor, 2).await.unwrap();
        assert!(page.jobs.len() <= 2);
        seen.extend(page.jobs.iter().map(|j| j.id.to_string()));
        match page.next {
            Some(next) => cursor = next,
            None => break,
        }
    }
    assert_eq!(
        seen,
        ["d0", "d1", "d2", "d3", "d4"],
        "in due order, other topics left out"
    );
    let ready = c
        .jobs("a", JobState::Ready, Cursor::START, 10)
        .await
        .unwrap();
    assert_eq!(
        ready.jobs.iter().map(|j| j.id.as_str()).collect::<Vec<_>>(),
        ["r0", "r1", "r2", "r3"]
    );
    c.store().fetch(0, &topic("a"), 1, LEASE).await.unwrap();
    let running = c
        .jobs("a", JobState::Running, Cursor::START, 10)
        .await
        .unwrap();
    assert_eq!(running.jobs.len(), 1);
    assert_eq!(running.jobs[0].state, JobState::Running);
}

pub(crate) async fn stats_show_how_far_behind_and_what_comes_next(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let past = SystemTime::now() - Duration::from_secs(30);
    c.push_to("t", &1).id("late").at(past).await.unwrap();
    c.push_to("t", &2)
        .id("soon")
        .delay(Duration::from_secs(60))
        .await
        .unwrap();
    let s = c.stats("t").await.unwrap();
    assert_eq!((s.counts.ready, s.counts.delayed), (1, 1));
    let behind = SystemTime::now()
        .duration_since(s.oldest_ready_due.unwrap())
        .unwrap();
    assert!(behind >= Duration::from_secs(29), "{behind:?}");
    let next = s
        .next_due
        .unwrap()
        .duration_since(SystemTime::now())
        .unwrap();
    assert!(next > Duration::from_secs(55), "{next:?}");
    assert!(!s.paused);
}

pub(crate) async fn workers_are_listed_while_they_beat(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let s = h.client.store();
    let mut w = dq::admin::WorkerInfo::for_this_process(vec!["t".into()]);
    s.register_worker(&w).await.unwrap();
    // A host whose clock is two minutes behind: its heartbeat is stamped with the store's
    // clock, so it is as alive as the others (it used to be dropped as silent).
    let mut behind = w.clone();
    behind.id = "behind".into();
    behind.last_seen_ms -= 120_000;
    s.register_worker(&behind).await.unwrap();
    let listed = h.client.workers().await.unwrap();
    let ids: Vec<&str> = listed.iter().map(|w| w.id.as_str()).collect();
    let mut want = vec!["behind", w.id.as_str()];
    want.sort();
    assert_eq!(ids, want, "both listed");
    let store_now_ms = s.time_us().await.unwrap() / 1000;
    for seen in &listed {
        assert!(
            store_now_ms.abs_diff(seen.last_seen_ms) < 5_000,
            "stamped with the store's clock: {seen:?}"
        );
    }
    s.unregister_worker("behind").await.unwrap();
    w.running = 3;
    s.register_worker(&w).await.unwrap();
    assert_eq!(h.client.workers().await.unwrap()[0].running, 3);
    s.unregister_worker(&w.id).await.unwrap();
    assert!(h.client.workers().await.unwrap().is_empty());
}

pub(crate) async fn throughput_counts_runs_done_and_failed_in_the_last_hour_per_topic(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let s = c.store();
    let t = topic("order-cancel");
    c.push_batch((0..7).map(|i| c.push(OrderCancel { order_id: i })))
        .await
        .unwrap();
    c.push_to("other", &1).await.unwrap();
    let f = s.fetch(0, &t, 6, LEASE).await.unwrap();
    let leases: Vec<_> = f.jobs.iter().map(|j| j.lease.clone()).collect();
    s.ack(&leases[0..3]).await.unwrap();
    assert!(s.retry(&leases[3], LEASE, "payment down").await.unwrap());
    assert!(s.dead_letter(&leases[4], "no such order").await.unwrap());
    assert!(s.postpone(&leases[5], LEASE).await.unwrap());
    // A worker that died holding a job: its run failed too.
    s.fetch(0, &t, 1, Duration::from_millis(1)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(s.reclaim(0, 10).await.unwrap().requeued, 1);

    let hour = c.throughput("order-cancel").await.unwrap();
    assert_eq!(
        (hour.done(), hour.failed()),
        (3, 3),
        "postponed runs are neither"
    );
    assert_eq!(hour.minutes.len(), 60);
    let last = hour.minutes.last().unwrap().minute;
    let age = SystemTime::now().duration_since(last).unwrap();
    assert!(
        age < Duration::from_secs(120),
        "the last minute is now: {age:?}"
    );
    assert!(hour.minutes.windows(2).all(|w| w[0].minute < w[1].minute));
    let other = c.throughput("other").await.unwrap();
    assert_eq!((other.done(), other.failed()), (0, 0));
}
