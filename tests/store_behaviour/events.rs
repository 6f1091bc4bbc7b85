//! Job events: every step of a job of a topic with events on appears on its stream, in order,
//! with the job's id, the run and the time; a topic without events has no stream at all; a
//! reader that resumes from a cursor older than what the cap kept is told how many it missed.

use std::time::Duration;

use dq::events::{EventCursor, EventItem, EventKind, EventStream, JobEvent};
use dq::store::{Retention, Succeeded};

use super::{Harness, Kind};
use crate::support::{lease_one, topic, OrderCancel, TestClient};

const TOPIC: &str = "order-cancel";

/// Turns the topic's events on, keeping `cap` per shard.
async fn events_on(c: &TestClient, cap: u64) {
    c.store()
        .set_events(&topic(TOPIC), Some(cap))
        .await
        .unwrap();
}

/// The next item of `stream`, which must come within 5 s.
async fn next_item(stream: &mut EventStream) -> EventItem {
    let next = tokio::time::timeout(Duration::from_secs(5), stream.recv()).await;
    next.expect("an event within 5 s").unwrap().unwrap()
}

/// The next `n` events of `stream` (none may be missed).
async fn next_events(stream: &mut EventStream, n: usize) -> Vec<JobEvent> {
    let mut out = Vec::new();
    while out.len() < n {
        match next_item(stream).await {
            EventItem::Event { event, .. } => out.push(event),
            other => panic!("after {out:?}: {other:?}"),
        }
    }
    out
}

/// Each event as (kind, id, run), to compare whole sequences.
fn steps(events: &[JobEvent]) -> Vec<(&'static str, String, u32)> {
    events
        .iter()
        .map(|e| (e.kind.name(), e.id.to_string(), e.attempt))
        .collect()
}

fn step(kind: &'static str, id: &str, attempt: u32) -> (&'static str, String, u32) {
    (kind, id.to_owned(), attempt)
}

/// Whether Redis holds `key` (`None` on the memory store, which has no keys).
fn redis_has(h: &Harness, key: &str) -> Option<bool> {
    let server = match (&h._redis, &h._cluster) {
        (Some(redis), _) => redis,
        (None, Some(cluster)) => cluster.node(cluster.master_of(key)),
        (None, None) => return None,
    };
    Some(server.command(&["EXISTS", key]).trim() == ":1")
}

pub(crate) async fn a_jobs_life_gives_pushed_started_and_succeeded_in_order(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    events_on(c, 100).await;
    let mut events = c.events(TOPIC).await.unwrap();
    let before = c.store_time().await.unwrap();
    c.push(OrderCancel { order_id: 1 }).id("a").await.unwrap();
    let job = lease_one(c.store(), TOPIC).await;
    c.store().ack(&[job.lease]).await.unwrap();
    let seen = next_events(&mut events, 3).await;
    assert_eq!(
        steps(&seen),
        [
            step("pushed", "a", 0),
            step("started", "a", 1),
            step("succeeded", "a", 1)
        ]
    );
    assert_eq!(
        seen[0].kind,
        EventKind::Pushed { due: None },
        "ready at once"
    );
    assert_eq!(seen[2].kind, EventKind::Succeeded { value: None });
    assert!(seen.iter().all(|e| e.topic.as_str() == TOPIC));
    assert!(
        seen[0].at >= before - Duration::from_millis(1) && seen[0].at <= seen[2].at,
        "stamped by the store's clock, in order: {seen:?}"
    );
}

pub(crate) async fn a_failing_job_gives_failed_and_retrying_then_dead(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let s = c.store();
    events_on(c, 100).await;
    let mut events = c.events(TOPIC).await.unwrap();
    c.push(OrderCancel { order_id: 1 }).id("a").await.unwrap();
    let first = lease_one(s, TOPIC).await;
    assert!(s.retry(&first.lease, Duration::ZERO, "boom").await.unwrap());
    let second = lease_one(s, TOPIC).await;
    assert!(s.dead_letter(&second.lease, "boom again").await.unwrap());
    let seen = next_events(&mut events, 6).await;
    assert_eq!(
        steps(&seen),
        [
            step("pushed", "a", 0),
            step("started", "a", 1),
            step("failed", "a", 1),
            step("retrying", "a", 1),
            step("started", "a", 2),
            step("dead", "a", 2),
        ]
    );
    let failed = EventKind::Failed {
        error: "boom".into(),
    };
    assert_eq!(seen[2].kind, failed);
    assert!(
        matches!(seen[3].kind, EventKind::Retrying { due } if due <= seen[4].at),
        "due at once: {seen:?}"
    );
    let dead = EventKind::Dead {
        error: "boom again".into(),
    };
    assert_eq!(seen[5].kind, dead);
}

pub(crate) async fn a_cancel_gives_cancelled_before_or_while_the_job_runs(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let s = c.store();
    events_on(c, 100).await;
    let mut events = c.events(TOPIC).await.unwrap();
    let later = Duration::from_secs(600);
    c.push(OrderCancel { order_id: 1 })
        .id("a")
        .delay(later)
        .await
        .unwrap();
    c.cancel_in(TOPIC, "a").await.unwrap();
    c.push(OrderCancel { order_id: 2 }).id("b").await.unwrap();
    let running = lease_one(s, TOPIC).await;
    c.cancel_in(TOPIC, "b").await.unwrap(); // asked of its worker: nothing happened yet
    assert!(s.cancel_running(&running.lease).await.unwrap());
    let seen = next_events(&mut events, 5).await;
    assert_eq!(
        steps(&seen),
        [
            step("pushed", "a", 0),
            step("cancelled", "a", 0),
            step("pushed", "b", 0),
            step("started", "b", 1),
            step("cancelled", "b", 1),
        ]
    );
    assert!(
        matches!(seen[0].kind, EventKind::Pushed { due: Some(due) } if due > seen[0].at),
        "a waits: {seen:?}"
    );
}

pub(crate) async fn every_other_step_of_a_job_is_announced_with_its_run(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let (s, t) = (c.store(), topic(TOPIC));
    events_on(c, 100).await;
    let mut events = c.events(TOPIC).await.unwrap();
    c.push(OrderCancel { order_id: 1 })
        .id("a")
        .delay(Duration::from_millis(50))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(60)).await;
    assert_eq!(s.promote(0, 10).await.unwrap().moved, 1);
    let run = lease_one(s, TOPIC).await;
    assert!(s.progress(&run.lease, b"0.5").await.unwrap());
    assert!(s.postpone(&run.lease, Duration::ZERO).await.unwrap());
    let again = lease_one(s, TOPIC).await;
    assert_eq!(s.release(&[again.lease]).await.unwrap(), 1);
    let short = s.fetch(0, &t, 1, Duration::from_millis(50)).await.unwrap();
    assert_eq!(short.jobs.len(), 1);
    tokio::time::sleep(Duration::from_millis(60)).await;
    assert_eq!(s.reclaim(0, 10).await.unwrap().requeued, 1);
    let seen = next_events(&mut events, 9).await;
    assert_eq!(
        steps(&seen),
        [
            step("pushed", "a", 0),
            step("promoted", "a", 0),
            step("started", "a", 1),
            step("progress", "a", 1),
            // A postponed run is not counted: the next one has the same number.
            step("postponed", "a", 1),
            step("started", "a", 1),
            step("released", "a", 1),
            step("started", "a", 1),
            step("stalled", "a", 1),
        ]
    );
    assert_eq!(
        seen[3].kind,
        EventKind::Progress {
            value: b"0.5".to_vec()
        }
    );
}

pub(crate) async fn a_succeeded_event_carries_the_value_only_when_the_topic_keeps_it(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let s = c.store();
    events_on(c, 100).await;
    let mut events = c.events(TOPIC).await.unwrap();
    let succeed = move |id: &'static str| async move {
        c.push(OrderCancel { order_id: 1 }).id(id).await.unwrap();
        let lease = lease_one(s, TOPIC).await.lease;
        let done = Succeeded {
            lease,
            result: Some(b"42".to_vec()),
            run: 1,
        };
        assert_eq!(s.ack_succeeded(&[done]).await.unwrap().acked, 1);
    };
    succeed("not-kept").await;
    let keep = Retention::for_age(Duration::from_secs(3600));
    s.set_retention(&topic(TOPIC), Some(keep)).await.unwrap();
    succeed("kept").await;
    let seen = next_events(&mut events, 6).await;
    assert_eq!(seen[2].kind, EventKind::Succeeded { value: None });
    let kept = EventKind::Succeeded {
        value: Some(b"42".to_vec()),
    };
    assert_eq!((seen[5].id.as_str(), &seen[5].kind), ("kept", &kept));
}

pub(crate) async fn a_topic_without_events_has_no_stream_at_all(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let s = c.store();
    let key = dq::store::ShardKeys::new("test", 0).events_stream(&topic(TOPIC));
    c.push(OrderCancel { order_id: 1 }).id("a").await.unwrap();
    let job = lease_one(s, TOPIC).await;
    s.ack(&[job.lease]).await.unwrap();
    assert_ne!(redis_has(&h, &key), Some(true), "no stream without events");
    assert_nothing_kept(c).await;
    // Turned on, then off: what was kept goes.
    events_on(c, 100).await;
    c.push(OrderCancel { order_id: 2 }).id("b").await.unwrap();
    assert_ne!(redis_has(&h, &key), Some(false), "b's push was written");
    s.set_events(&topic(TOPIC), None).await.unwrap();
    assert_ne!(
        redis_has(&h, &key),
        Some(true),
        "turned off: the stream goes"
    );
    assert_nothing_kept(c).await;
}

/// Issue 32 review (helper-61, finding 2): turning a topic's events off deleted its stream, and
/// the stream made when they were turned on again numbered its events from 1: a consumer
/// resuming from a cursor taken before read nothing until the new numbers passed its own, and
/// was not told. The numbering now goes on from where the deleted stream stopped.
pub(crate) async fn a_reader_resuming_across_events_turned_off_and_on_misses_nothing(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    events_on(c, 100).await;
    let mut events = c.events(TOPIC).await.unwrap();
    let mut cursor = None;
    for name in ["a", "b", "c"] {
        c.push(OrderCancel { order_id: 1 }).id(name).await.unwrap();
        match next_item(&mut events).await {
            EventItem::Event { event, cursor: at } if event.id.as_str() == name => {
                cursor = Some(at);
            }
            other => panic!("{name} pushed: {other:?}"),
        }
    }
    drop(events);
    let saved: EventCursor = cursor.unwrap().to_string().parse().unwrap();
    c.store().set_events(&topic(TOPIC), None).await.unwrap();
    events_on(c, 100).await;
    c.push(OrderCancel { order_id: 2 }).id("d").await.unwrap();
    let mut resumed = c.events_from(TOPIC, saved).await.unwrap();
    match next_item(&mut resumed).await {
        EventItem::Event { event, .. } => {
            assert_eq!((event.kind.name(), event.id.as_str()), ("pushed", "d"));
        }
        other => panic!("d's push, after those read: {other:?}"),
    }
}

/// No event of the topic is kept: a read from the start finds none in 300 ms.
async fn assert_nothing_kept(c: &TestClient) {
    let mut all = c.events_from(TOPIC, EventCursor::start()).await.unwrap();
    let nothing = tokio::time::timeout(Duration::from_millis(300), all.recv()).await;
    assert!(nothing.is_err(), "no event kept: {nothing:?}");
}

pub(crate) async fn a_reader_resuming_behind_the_cap_is_told_how_many_it_missed(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    events_on(c, 10).await;
    let mut events = c.events(TOPIC).await.unwrap();
    c.push(OrderCancel { order_id: 0 })
        .id("first")
        .await
        .unwrap();
    let cursor = match next_item(&mut events).await {
        EventItem::Event { event, cursor } if event.id.as_str() == "first" => cursor,
        other => panic!("{other:?}"),
    };
    drop(events);
    // Saved as text and read back, as a consumer that restarts does.
    let saved: EventCursor = cursor.to_string().parse().unwrap();
    // One push each: a call's events of one kind share one entry, and the cap counts entries.
    for i in 0..200u64 {
        let push = c.push(OrderCancel { order_id: i }).id(i.to_string());
        push.await.unwrap();
    }
    let mut resumed = c.events_from(TOPIC, saved).await.unwrap();
    let missed = match next_item(&mut resumed).await {
        EventItem::Lagged { shard: 0, missed } => missed,
        other => panic!("told of the lag first: {other:?}"),
    };
    assert!((1..200).contains(&missed), "{missed}");
    // The rest follow, up to the last push, none missed besides those.
    let mut read = 0;
    loop {
        match next_item(&mut resumed).await {
            EventItem::Event { event, .. } => {
                read += 1;
                if event.id.as_str() == "199" {
                    break;
                }
            }
            other => panic!("told once: {other:?}"),
        }
    }
    assert_eq!(missed + read, 200, "{missed} missed and {read} read");
}

/// A bulk push writes one stream entry for its jobs (Redis): a consumer that stopped inside it
/// and resumes from its cursor gets the rest of it, each event once.
pub(crate) async fn a_reader_resumed_inside_a_bulk_push_gets_the_rest_of_it_once(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    events_on(c, 10).await;
    let mut events = c.events(TOPIC).await.unwrap();
    let jobs = (0..10u64).map(|i| c.push(OrderCancel { order_id: i }).id(i.to_string()));
    c.push_batch(jobs).await.unwrap();
    let mut cursor = None;
    for want in ["0", "1", "2"] {
        match next_item(&mut events).await {
            EventItem::Event { event, cursor: at } if event.id.as_str() == want => {
                cursor = Some(at);
            }
            other => panic!("event of {want} first: {other:?}"),
        }
    }
    drop(events);
    let saved: EventCursor = cursor.unwrap().to_string().parse().unwrap();
    let mut resumed = c.events_from(TOPIC, saved).await.unwrap();
    let mut rest = Vec::new();
    while rest.len() < 7 {
        match next_item(&mut resumed).await {
            EventItem::Event { event, .. } => rest.push(event.id.as_str().to_owned()),
            other => panic!("nothing missed: {other:?}"),
        }
    }
    assert_eq!(rest, ["3", "4", "5", "6", "7", "8", "9"]);
    let more = tokio::time::timeout(Duration::from_millis(300), resumed.recv()).await;
    assert!(more.is_err(), "nothing twice: {more:?}");
}

/// The cap counts events, not stream entries: fifty bulk pushes of a hundred jobs (fifty
/// entries on Redis) keep about the cap's latest events, not five thousand.
pub(crate) async fn the_cap_counts_events_however_many_an_entry_holds(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    events_on(c, 100).await;
    for batch in 0..50u64 {
        let jobs = (0..100u64).map(|i| {
            let push = c.push(OrderCancel { order_id: i });
            push.id(format!("{batch}-{i}"))
        });
        c.push_batch(jobs).await.unwrap();
    }
    // From the start: what is kept, oldest first (a reader from the start is owed nothing).
    let mut all = c.events_from(TOPIC, EventCursor::start()).await.unwrap();
    let mut read = 0u64;
    loop {
        match next_item(&mut all).await {
            EventItem::Event { event, .. } => {
                read += 1;
                if event.id.as_str() == "49-99" {
                    break;
                }
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(
        (100..1000).contains(&read),
        "at least the cap kept, and about as many: {read}"
    );
}
