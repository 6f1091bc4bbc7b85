//! Job events against a real redis-server, through the runtime: a consumer in a process of its
//! own, killed (SIGKILL) and restarted from the cursor it printed, misses no event of a
//! 10,000-job run, and a program that only pushes
//! writes the `pushed` events of a topic whose listener turned them on.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod support;

use std::collections::HashMap;
use std::io::Write;
use std::time::{Duration, Instant};

use dq::events::{EventCursor, EventItem, EventKind, EventStream};
use dq::Listener;
use support::worker::{self, Target, WorkerProcess};
use support::{client, runtime_with, RedisServer};

const JOBS: u64 = 10_000;

/// The next item of `stream`, which must come within 10 s.
async fn next_item(stream: &mut EventStream) -> EventItem {
    let next = tokio::time::timeout(Duration::from_secs(10), stream.recv()).await;
    next.expect("an event within 10 s").unwrap().unwrap()
}

/// The test a consumer process runs, its role, and the variable that gives it the cursor to
/// read from.
const ENTRY: &str = "consumer_process_entry_point";
const CONSUMER: &str = "events-consumer";
const FROM: &str = "DQ_TEST_EVENTS_FROM";

/// A consumer in a process of its own (this test binary run again): reads the topic's events
/// from the cursor in [`FROM`] and prints each, `<kind> <id> <cursor after it>`, a line each,
/// until the parent kills it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_process_entry_point() {
    let Some((role, target)) = worker::role() else {
        return; // a normal test run: nothing to do
    };
    assert_eq!(role, CONSUMER);
    let from: EventCursor = std::env::var(FROM).unwrap().parse().unwrap();
    let config = target.config("test").build().unwrap();
    let client = dq::Client::connect(config).await.unwrap();
    let mut events = client.events_from("bulk", from).await.unwrap();
    worker::say_started();
    while let Some(item) = events.recv().await {
        let line = match item.unwrap() {
            EventItem::Event { event, cursor } => {
                format!("{} {} {cursor}", event.kind.name(), event.id)
            }
            other => format!("other {other:?}"),
        };
        let mut out = std::io::stdout().lock();
        writeln!(out, "{line}").unwrap();
        out.flush().unwrap();
    }
}

/// Reads `consumer`'s lines into `seen` (each job's events by kind) until `stop` says so;
/// returns the cursor after the last event read, `from` when it read none.
fn read_events(
    consumer: &WorkerProcess,
    seen: &mut HashMap<(String, String), u32>,
    mut from: String,
    mut stop: impl FnMut(&HashMap<(String, String), u32>, usize) -> bool,
) -> String {
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut read = 0;
    while !stop(seen, read) {
        assert!(
            Instant::now() < deadline,
            "{} events of {JOBS} jobs seen",
            seen.len()
        );
        let line = tokio::task::block_in_place(|| consumer.next_line(Duration::from_secs(10)));
        let line = line.expect("an event within 10 s");
        let mut parts = line.splitn(3, ' ');
        let (kind, id, cursor) = (parts.next(), parts.next(), parts.next());
        let (Some(kind), Some(id), Some(cursor)) = (kind, id, cursor) else {
            panic!("an event line: {line}");
        };
        assert_ne!(kind, "other", "nothing is missed within the cap: {line}");
        *seen.entry((id.to_owned(), kind.to_owned())).or_default() += 1;
        from = cursor.to_owned();
        read += 1;
    }
    from
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_killed_and_restarted_from_its_cursor_misses_no_event_of_a_10000_job_run() {
    // Half of the jobs are pushed and run while the consumer is dead.
    let redis = RedisServer::start();
    // Every event of the run fits within the cap: pushed, started and succeeded for each job.
    let listener = Listener::new("bulk", |_: u64| async {})
        .concurrency(64)
        .events(true)
        .events_cap(50_000);
    let rt = runtime_with(&redis, listener).await;
    let client = rt.client().clone();
    let target = Target::server(&redis);
    // The consumer process reads from the stream's end as it starts, before the pushes.
    let first = WorkerProcess::start_with(ENTRY, CONSUMER, &target, &[(FROM, "now".into())]);
    let push = |range: std::ops::Range<u64>| {
        let client = client.clone();
        async move {
            for chunk in range.collect::<Vec<_>>().chunks(1000) {
                let jobs = chunk
                    .iter()
                    .map(|i| client.push_to("bulk", i).id(i.to_string()));
                client.push_batch(jobs).await.unwrap();
            }
        }
    };
    // Half of the jobs while it reads.
    push(0..JOBS / 2).await;
    let mut seen = HashMap::new();
    // Part of the run, then the consumer is killed (SIGKILL): only its cursor, as it printed
    // it, survives.
    let cursor = read_events(&first, &mut seen, "now".into(), |_, read| read >= 9_000);
    drop(first);
    // The other half while it is dead: their events are written with no reader, and the
    // restarted one must find them all.
    push(JOBS / 2..JOBS).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while client.counts("bulk").await.unwrap() != Default::default() {
        assert!(std::time::Instant::now() < deadline, "the run ends");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let second = WorkerProcess::start_with(ENTRY, CONSUMER, &target, &[(FROM, cursor.clone())]);
    let all = 3 * JOBS as usize;
    read_events(&second, &mut seen, cursor, |seen, _| seen.len() == all);
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n != 1).collect();
    assert!(twice.is_empty(), "each event once: {twice:?}");
    for i in 0..JOBS {
        for kind in ["pushed", "started", "succeeded"] {
            let key = (i.to_string(), kind.to_owned());
            assert!(seen.contains_key(&key), "job {i}'s {kind} missed");
        }
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

/// The `pushed` event of job `id`, or a panic saying what came instead.
fn pushed_id(item: EventItem) -> String {
    match item {
        EventItem::Event { event, .. } if event.kind.name() == "pushed" => event.id.to_string(),
        other => panic!("expected a pushed event, got {other:?}"),
    }
}

/// Redis restarted from an older snapshot (as after a crash with `save` persistence, or a
/// failover to a replica that had not received the last writes): the events after the
/// snapshot are gone and the stream's numbers go on from before them. A reader is told, and
/// reads every event written since, whether it stayed connected or resumed from its cursor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_of_a_stream_rolled_back_by_redis_is_told_and_misses_no_event_written_since() {
    let mut redis = RedisServer::start();
    let listener = Listener::new("mail", |_: u64| async {}).events(true);
    runtime_with(&redis, listener)
        .await
        .shutdown()
        .await
        .unwrap();
    let producer = client(&redis).await;
    let later = Duration::from_secs(600);
    let mut live = producer
        .events_from("mail", EventCursor::start())
        .await
        .unwrap();
    for id in ["a1", "a2"] {
        producer
            .push_to("mail", &1u64)
            .id(id)
            .delay(later)
            .await
            .unwrap();
    }
    redis.command(&["SAVE"]);
    for id in ["b1", "b2", "b3"] {
        producer
            .push_to("mail", &1u64)
            .id(id)
            .delay(later)
            .await
            .unwrap();
    }
    let mut read = Vec::new();
    for _ in 0..5 {
        read.push(pushed_id(next_item(&mut live).await));
    }
    assert_eq!(read, ["a1", "a2", "b1", "b2", "b3"]);
    let saved = live.cursor().to_string();

    redis.restart(); // loads the snapshot: b1, b2 and b3 and their events are gone
                     // Numbered 3 to 6: past the reader's 5, so a check by number alone would miss 3 to 5.
    let since = ["c1", "c2", "c3", "c4"];
    for id in since {
        let deadline = Instant::now() + Duration::from_secs(10);
        while let Err(e) = producer.push_to("mail", &1u64).id(id).delay(later).await {
            assert!(
                Instant::now() < deadline,
                "the push of {id} within 10 s: {e}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let resumed = client(&redis).await;
    let mut from_cursor = resumed
        .events_from("mail", saved.parse().unwrap())
        .await
        .unwrap();
    for stream in [&mut live, &mut from_cursor] {
        match next_item(stream).await {
            EventItem::RolledBack { shard, forgotten } => assert_eq!((shard, forgotten), (0, 3)),
            other => panic!("expected word of the rollback, got {other:?}"),
        }
        for id in since {
            assert_eq!(pushed_id(next_item(stream).await), id);
        }
    }
}
