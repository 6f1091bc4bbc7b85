//! Job events against a real redis-server, through the runtime: a consumer killed and restarted
//! from its saved cursor misses no event of a 10,000-job run, and a program that only pushes
//! writes the `pushed` events of a topic whose listener turned them on.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use dq::events::{EventCursor, EventItem, EventKind, EventStream};
use dq::Listener;
use support::{client, runtime_with, RedisServer};

const JOBS: u64 = 10_000;

/// The next item of `stream`, which must come within 10 s.
async fn next_item(stream: &mut EventStream) -> EventItem {
    let next = tokio::time::timeout(Duration::from_secs(10), stream.recv()).await;
    next.expect("an event within 10 s").unwrap().unwrap()
}

/// Reads `stream` until `stop` says so, counting the succeeded events per job id; returns the
/// cursor after the last event read.
async fn count_succeeded(
    stream: &mut EventStream,
    succeeded: &mut HashMap<String, u32>,
    mut stop: impl FnMut(&HashMap<String, u32>, usize) -> bool,
) -> EventCursor {
    let mut cursor = stream.cursor();
    let mut read = 0;
    while !stop(&*succeeded, read) {
        match next_item(stream).await {
            EventItem::Event {
                event,
                cursor: after,
            } => {
                if matches!(event.kind, EventKind::Succeeded { .. }) {
                    *succeeded.entry(event.id.to_string()).or_default() += 1;
                }
                cursor = after;
                read += 1;
            }
            other => panic!("nothing is missed within the cap: {other:?}"),
        }
    }
    cursor
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_killed_and_restarted_from_its_cursor_misses_no_event_of_a_10000_job_run() {
    let redis = RedisServer::start();
    // Every event of the run fits within the cap: pushed, started and succeeded for each job.
    let listener = Listener::new("bulk", |_: u64| async {})
        .concurrency(64)
        .events(true)
        .events_cap(50_000);
    let rt = runtime_with(&redis, listener).await;
    let client = rt.client().clone();
    let mut first = client.events("bulk").await.unwrap();
    for chunk in (0..JOBS).collect::<Vec<_>>().chunks(1000) {
        let jobs = chunk
            .iter()
            .map(|i| client.push_to("bulk", i).id(i.to_string()));
        client.push_batch(jobs).await.unwrap();
    }
    let mut succeeded = HashMap::new();
    // Part of the run, then the consumer is killed: only its cursor, as text, survives.
    let cursor = count_succeeded(&mut first, &mut succeeded, |_, read| read >= 3_000).await;
    drop(first);
    let saved = cursor.to_string();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut second = client
        .events_from("bulk", saved.parse().unwrap())
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(90);
    count_succeeded(&mut second, &mut succeeded, |seen, _| {
        assert!(
            Instant::now() < deadline,
            "{} of {JOBS} jobs seen",
            seen.len()
        );
        seen.len() as u64 == JOBS
    })
    .await;
    let twice: Vec<_> = succeeded.iter().filter(|(_, n)| **n != 1).collect();
    assert!(twice.is_empty(), "each job's success once: {twice:?}");
    for i in 0..JOBS {
        assert!(succeeded.contains_key(&i.to_string()), "job {i} missed");
    }
    rt.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_from_a_program_without_a_runtime_writes_its_pushed_event() {
    let redis = RedisServer::start();
    // A runtime turns the topic's events on at start, then goes away.
    let listener = Listener::new("mail", |_: u64| async {}).events(true);
    runtime_with(&redis, listener)
        .await
        .shutdown()
        .await
        .unwrap();
    let producer = client(&redis).await;
    let mut events = producer.events("mail").await.unwrap();
    producer
        .push_to("mail", &7u64)
        .id("m1")
        .delay(Duration::from_secs(60))
        .await
        .unwrap();
    match next_item(&mut events).await {
        EventItem::Event { event, .. } => {
            assert_eq!((event.id.as_str(), event.attempt), ("m1", 0));
            assert!(
                matches!(event.kind, EventKind::Pushed { due: Some(due) } if due > event.at),
                "{event:?}"
            );
        }
        other => panic!("{other:?}"),
    }
}
