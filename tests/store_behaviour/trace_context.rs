//! A job's trace context (what a push records with the `otel` feature, `NewJob::trace`): stored
//! with the job, handed to each of its runs through every rewrite of its envelope, and no
//! obstacle to anything that reads the job.

use std::time::Duration;

use dq::admin::{ChangeOutcome, Cursor};
use dq::push::OnConflict;
use dq::store::{DeadLetters, NewJob};
use dq::{Due, JobState};

use super::{existing, Harness, Kind};
use crate::support::{id, lease_one, topic};

/// A W3C trace context as a push records it: the traceparent, a newline, the tracestate.
const TRACE: &str =
    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\nrojo=00f067aa0ba902b7";

/// Job `name` of topic `traced`, due `due`, with [`TRACE`] (three runs allowed).
fn traced(name: &str, due: Due) -> NewJob {
    NewJob {
        topic: topic("traced"),
        id: id(name),
        due,
        max_attempts: 3,
        unique_for: None,
        fence: None,
        trace: Some(TRACE.to_owned()),
        priority: 0,
        group: None,
        id_drawn: false,
        payload: br#"{"n":1}"#.to_vec(),
    }
}

pub(crate) async fn a_jobs_trace_context_reaches_every_run_whatever_rewrote_the_job(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let s = h.client.store();
    let t = topic("traced");
    let in_an_hour = Due::After(Duration::from_secs(3600));
    s.push(vec![traced("a", in_an_hour)], OnConflict::Keep)
        .await
        .unwrap();
    // Rescheduled to now, it runs with it;
    let now = Due::After(Duration::ZERO);
    assert_eq!(
        s.reschedule(&t, &id("a"), now).await.unwrap(),
        ChangeOutcome::Done
    );
    let first = lease_one(s, "traced").await;
    assert_eq!(first.envelope.trace.as_deref(), Some(TRACE), "first run");
    // retried, it runs with it again;
    assert!(s.retry(&first.lease, Duration::ZERO, "boom").await.unwrap());
    let mut second = s.fetch(0, &t, 1, Duration::from_millis(10)).await.unwrap();
    let second = second.jobs.remove(0);
    let seen = (second.envelope.attempt, second.envelope.trace.as_deref());
    assert_eq!(seen, (2, Some(TRACE)), "after a retry");
    assert_eq!(second.envelope.last_error.as_deref(), Some("boom"));
    // its worker lost (the lease expires), the reclaimer takes it back: it runs with it again;
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert_eq!(s.reclaim(0, 100).await.unwrap().requeued, 1);
    let third = lease_one(s, "traced").await;
    assert_eq!(
        third.envelope.trace.as_deref(),
        Some(TRACE),
        "after a reclaim"
    );
    // dead-lettered and retried by hand, it runs with it again.
    assert!(s.dead_letter(&third.lease, "gave up").await.unwrap());
    let requeued = s.requeue_dead(&t, DeadLetters::Ids(&[id("a")]), 3).await;
    assert_eq!(requeued.unwrap(), 1);
    let fourth = lease_one(s, "traced").await;
    assert_eq!(
        fourth.envelope.trace.as_deref(),
        Some(TRACE),
        "after a requeue"
    );
    assert_eq!(
        fourth.envelope.payload, br#"{"n":1}"#,
        "the payload is whole"
    );
}

pub(crate) async fn a_traced_job_is_read_listed_and_counted_as_any(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let now = Due::After(Duration::ZERO);
    let later = Due::After(Duration::from_secs(60));
    let jobs = vec![traced("ready", now), traced("delayed", later)];
    c.store().push(jobs, OnConflict::Keep).await.unwrap();
    let ready = existing(c, "traced", "ready").await;
    assert_eq!(ready.state, JobState::Ready);
    assert_eq!(ready.payload, br#"{"n":1}"#);
    let stats = c.stats("traced").await.unwrap();
    assert_eq!(
        stats.oldest_ready_due,
        Some(ready.due),
        "stats read its due time"
    );
    assert_eq!((stats.counts.ready, stats.counts.delayed), (1, 1));
    let page = c.jobs("traced", JobState::Delayed, Cursor::START, 10);
    let listed = page.await.unwrap().jobs;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].payload, br#"{"n":1}"#);
}
