//! A job's history (`Client::job_history`): its events still kept, oldest first, with the
//! error of each run that failed, while the job itself keeps only the latest.

use std::time::Duration;

use dq::events::EventKind;

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
