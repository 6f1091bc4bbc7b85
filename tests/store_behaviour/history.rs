//! A job's history: its events still kept (`Client::job_history`), oldest first, with the error
//! of each run that failed; and, events on or off, the errors of its failed runs that the job
//! itself keeps (`JobInfo::errors`).

use std::time::Duration;

use dq::events::EventKind;
use dq::store::Retention;
use dq::{JobInfo, JobState};

use super::{Harness, Kind};
use crate::support::{lease_one, topic, OrderCancel};

const TOPIC: &str = "order-cancel";

pub(crate) async fn a_jobs_history_keeps_the_error_of_each_run_that_failed(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let s = c.store();
    s.set_events(&topic(TOPIC), Some(100)).await.unwrap();
    c.push(OrderCancel { order_id: 1 }).id("a").await.unwrap();
    c.push(OrderCancel { order_id: 2 }).id("b").await.unwrap(); // another job's events
    for error in ["card declined", "gateway timeout"] {
        let run = lease_one(s, TOPIC).await;
        let run = if run.lease.id.as_str() == "a" {
            run
        } else {
            s.ack(&[run.lease]).await.unwrap(); // b succeeds at once
            lease_one(s, TOPIC).await
        };
        assert!(s.retry(&run.lease, Duration::ZERO, error).await.unwrap());
    }
    let last = lease_one(s, TOPIC).await;
    s.ack(&[last.lease]).await.unwrap();
    let history = c.job_history(TOPIC, "a").await.unwrap();
    let steps: Vec<(&str, u32)> = history.iter().map(|e| (e.kind.name(), e.attempt)).collect();
    assert_eq!(
        steps,
        [
            ("pushed", 0),
            ("started", 1),
            ("failed", 1),
            ("retrying", 1),
            ("started", 2),
            ("failed", 2),
            ("retrying", 2),
            ("started", 3),
            ("succeeded", 3),
        ]
    );
    let errors: Vec<&str> = history
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Failed { error } => Some(error.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(errors, ["card declined", "gateway timeout"], "each run's");
    assert!(history.iter().all(|e| e.id.as_str() == "a"));
    let info = c.status_in(TOPIC, "a").await.unwrap();
    assert!(info.is_none(), "the job itself is gone (no retention)");
}

pub(crate) async fn a_jobs_history_is_empty_when_its_topic_has_no_events(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    c.push(OrderCancel { order_id: 1 }).id("a").await.unwrap();
    let run = lease_one(c.store(), TOPIC).await;
    assert!(c
        .store()
        .retry(&run.lease, Duration::ZERO, "boom")
        .await
        .unwrap());
    let history = c.job_history(TOPIC, "a").await.unwrap();
    assert!(history.is_empty(), "{history:?}");
}

/// Which run, and its error, of each failed run `info` keeps; their times in order.
fn run_errors(info: &JobInfo) -> Vec<(u32, String)> {
    let times: Vec<u64> = info.errors.iter().map(|e| e.at_us).collect();
    assert!(times.iter().all(|&t| t > 0), "{times:?}");
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
    info.errors
        .iter()
        .map(|e| (e.run, e.error.clone()))
        .collect()
}

/// A job whose runs failed keeps each one's error (which run, when, what), its topic's events
/// off: while it waits, while it runs, and as the record of its success. A postponed run is
/// not one of them.
pub(crate) async fn a_job_keeps_the_error_of_each_failed_run_without_events(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let s = c.store();
    let hour = Retention::for_age(Duration::from_secs(3600));
    s.set_retention(&topic(TOPIC), Some(hour)).await.unwrap();
    c.push(OrderCancel { order_id: 1 }).id("a").await.unwrap();
    let run = lease_one(s, TOPIC).await;
    assert!(s
        .retry(&run.lease, Duration::ZERO, "card declined")
        .await
        .unwrap());
    let run = lease_one(s, TOPIC).await;
    assert!(s.postpone(&run.lease, Duration::ZERO).await.unwrap());
    let run = lease_one(s, TOPIC).await;
    assert!(s
        .retry(&run.lease, Duration::ZERO, "gateway timeout")
        .await
        .unwrap());
    let both = vec![
        (1, "card declined".to_owned()),
        (2, "gateway timeout".to_owned()),
    ];
    let waiting = c.status_in(TOPIC, "a").await.unwrap().unwrap();
    assert_eq!(run_errors(&waiting), both, "waiting: {waiting:?}");
    let run = lease_one(s, TOPIC).await;
    let running = c.status_in(TOPIC, "a").await.unwrap().unwrap();
    assert_eq!(running.state, JobState::Running);
    assert_eq!(run_errors(&running), both, "running");
    s.ack(&[run.lease]).await.unwrap();
    let done = c.status_in(TOPIC, "a").await.unwrap().unwrap();
    assert_eq!(done.state, JobState::Done);
    assert_eq!(run_errors(&done), both, "the record of its success");
    assert_eq!(done.last_error.as_deref(), Some("gateway timeout"));
}

/// A dead letter keeps the error of each failed run, the last the one that dead-lettered it;
/// retried (`retry_dead`), the job goes on with them.
pub(crate) async fn a_dead_letter_keeps_the_error_of_each_failed_run_and_a_retry_of_it_goes_on(
    kind: Kind,
) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let s = c.store();
    c.push(OrderCancel { order_id: 1 }).id("d").await.unwrap();
    let run = lease_one(s, TOPIC).await;
    assert!(s.retry(&run.lease, Duration::ZERO, "one").await.unwrap());
    let run = lease_one(s, TOPIC).await;
    assert!(s.dead_letter(&run.lease, "two").await.unwrap());
    let dead = c.status_in(TOPIC, "d").await.unwrap().unwrap();
    assert_eq!(dead.state, JobState::Dead);
    let runs = vec![(1, "one".to_owned()), (2, "two".to_owned())];
    assert_eq!(run_errors(&dead), runs);
    assert_eq!(c.retry_dead(TOPIC, &["d"]).await.unwrap(), 1);
    let again = c.status_in(TOPIC, "d").await.unwrap().unwrap();
    assert_eq!(run_errors(&again), runs, "retried: {again:?}");
}

/// A job that failed twelve times keeps the errors of the last ten runs, each cut to at most
/// a KiB at a character's start (the same on Redis, whose scripts cut it, and in memory); its
/// last error is kept whole.
pub(crate) async fn a_job_keeps_the_latest_ten_failed_runs_each_cut_at_a_characters_start(
    kind: Kind,
) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let s = c.store();
    c.push(OrderCancel { order_id: 1 })
        .id("f")
        .max_retries(20)
        .await
        .unwrap();
    // 1,023 bytes of x, then a two-byte character across the 1,024th byte.
    let long = format!("{}é", "x".repeat(dq::RUN_ERROR_TEXT - 1));
    for _ in 0..12 {
        let run = lease_one(s, TOPIC).await;
        assert!(s.retry(&run.lease, Duration::ZERO, &long).await.unwrap());
    }
    let info = c.status_in(TOPIC, "f").await.unwrap().unwrap();
    let runs: Vec<u32> = info.errors.iter().map(|e| e.run).collect();
    assert_eq!(runs, (3..=12).collect::<Vec<_>>(), "the latest ten");
    let cut = "x".repeat(dq::RUN_ERROR_TEXT - 1);
    assert!(
        info.errors.iter().all(|e| e.error == cut),
        "{:?}",
        info.errors[0]
    );
    assert_eq!(info.last_error.as_deref(), Some(long.as_str()), "whole");
}
