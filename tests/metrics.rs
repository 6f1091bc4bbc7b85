//! The Prometheus endpoint, scraped over HTTP on 127.0.0.1 while topics run: lateness,
//! durations, outcomes and queue depth per topic and state; cancels of running jobs, progress
//! reports, kept results and waits by answer; event readers' events read, missed and behind.
//!
//! The `metrics` recorder is one per process, so the tests share one endpoint (see
//! [`endpoint`]) and each looks at topics of its own.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod support;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use dq::admin::ChangeOutcome;
use dq::events::EventItem;
use dq::{JobContext, JobResult, Listener, Outcome, Runtime};
use support::RedisServer;

/// A wait no job of these tests reaches unless something is broken.
const LONG: Duration = Duration::from_secs(10);

/// The Prometheus endpoint of this test process: installed once through
/// `RuntimeBuilder::metrics_addr`, by a runtime on the in-memory store that runs on a tokio
/// runtime of its own (on a thread that outlives every test), so that each test's runtime
/// records into it whichever test comes first.
fn endpoint() -> SocketAddr {
    static ENDPOINT: OnceLock<SocketAddr> = OnceLock::new();
    *ENDPOINT.get_or_init(|| {
        let addr: SocketAddr = format!("127.0.0.1:{}", dq_testkit::unused_port())
            .parse()
            .unwrap();
        let (installed, is_installed) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let tokio = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            tokio.block_on(async move {
                let in_memory = dq::Config::builder().build().unwrap();
                let rt = Runtime::builder()
                    .config(in_memory)
                    .without_registered_listeners()
                    .metrics_addr(addr)
                    .start()
                    .await
                    .unwrap();
                installed.send(()).unwrap();
                // Serve for as long as the process lives.
                std::future::pending::<()>().await;
                drop(rt);
            });
        });
        is_installed.recv().unwrap();
        addr
    })
}

fn scrape(addr: SocketAddr) -> String {
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    text
}

/// Scrapes until every line of `expected` is there (15 s at most), and asserts that they are.
async fn scrape_until(expected: &[&str]) -> String {
    let addr = endpoint();
    let deadline = Instant::now() + Duration::from_secs(15);
    let text = loop {
        let text = scrape(addr);
        if expected.iter().all(|e| text.contains(e)) || Instant::now() > deadline {
            break text;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    for e in expected {
        assert!(text.contains(e), "missing {e} in:\n{text}");
    }
    text
}

/// A runtime on `redis` running only `listener`.
async fn worker(redis: &RedisServer, listener: Listener) -> Runtime {
    endpoint(); // the recorder is installed before anything is recorded
    support::start_on(support::config(redis), None, listener).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_endpoint_shows_lateness_outcomes_and_depth_of_a_running_topic() {
    let redis = RedisServer::start();
    let listener = Listener::new("orders", |n: u32, _: JobContext| async move {
        if n == 0 {
            Outcome::DeadLetter("order not found".into())
        } else {
            Outcome::Done
        }
    });
    let rt = worker(&redis, listener).await;
    let c = rt.client();
    c.push_batch((0..4u32).map(|n| c.push_to("orders", &n).delay(Duration::from_millis(50))))
        .await
        .unwrap();
    c.push_to("orders", &9u32)
        .delay(Duration::from_secs(3600))
        .await
        .unwrap();
    scrape_until(&[
        r#"dq_jobs_pushed_total{topic="orders"} 5"#,
        r#"dq_jobs_started_total{topic="orders"} 4"#,
        r#"dq_jobs_succeeded_total{topic="orders"} 3"#,
        r#"dq_jobs_dead_lettered_total{topic="orders"} 1"#,
        r#"dq_job_lateness_seconds_bucket{topic="orders",le="0.005"}"#,
        r#"dq_job_duration_seconds_count{topic="orders"} 4"#,
        r#"dq_queue_jobs{topic="orders",state="delayed"} 1"#,
        r#"dq_queue_jobs{topic="orders",state="dead"} 1"#,
        r#"dq_queue_jobs{topic="orders",state="done"} 0"#,
        r#"dq_queue_lag_seconds{topic="orders"}"#,
    ])
    .await;
    rt.shutdown().await.unwrap();
}

/// Issue 33 review (helper-62, finding 7): each flow limit of a topic, and how close the topic
/// is to it, show as gauges (there were none: only `dq stats` and the dashboard showed them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topics_limits_and_how_close_it_is_to_them_show_as_gauges() {
    let redis = RedisServer::start();
    let listener = Listener::new("payments", |_: u32, _: JobContext| async move {});
    let rt = worker(&redis, listener).await;
    let c = rt.client();
    c.set_max_pending("payments", Some(8)).await.unwrap();
    c.set_global_concurrency("payments", Some(4)).await.unwrap();
    c.set_rate("payments", Some("100/2s".parse().unwrap()))
        .await
        .unwrap();
    // Two jobs due in an hour: a quarter of the bound.
    for id in ["p1", "p2"] {
        let push = c.push_to("payments", &1u32).id(id);
        push.delay(Duration::from_secs(3600)).await.unwrap();
    }
    scrape_until(&[
        r#"dq_topic_limit{topic="payments",limit="max_pending"} 8"#,
        r#"dq_topic_limit{topic="payments",limit="global_concurrency"} 4"#,
        r#"dq_topic_limit{topic="payments",limit="rate_per_second"} 50"#,
        r#"dq_topic_limit{topic="payments",limit="group_concurrency"} 1"#,
        r#"dq_topic_limit{topic="payments",limit="group_rate_per_second"} 0"#,
        r#"dq_topic_limit_used_ratio{topic="payments",limit="max_pending"} 0.25"#,
        r#"dq_topic_limit_used_ratio{topic="payments",limit="global_concurrency"} 0"#,
        // No run in the last full minute: none of the rate used (the share itself is tested
        // on the test clock, tests/testing.rs).
        "dq_topic_limit_used_ratio{topic=\"payments\",limit=\"rate_per_second\"} 0\n",
        r#"dq_topic_held_seconds{topic="payments"} 0"#,
    ])
    .await;
    // A limit lifted: 0, not the ratio it had (helper-63, finding 4). Whole lines: "0" alone.
    c.set_max_pending("payments", None).await.unwrap();
    scrape_until(&[
        "dq_topic_limit{topic=\"payments\",limit=\"max_pending\"} 0\n",
        "dq_topic_limit_used_ratio{topic=\"payments\",limit=\"max_pending\"} 0\n",
    ])
    .await;
    rt.shutdown().await.unwrap();
}

/// A group's jobs waiting for its one slot show in `dq_queue_group_waiting_max`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_busiest_groups_waiting_jobs_show_as_a_gauge() {
    let redis = RedisServer::start();
    let gate = std::sync::Arc::new(tokio::sync::Semaphore::new(0));
    let g = gate.clone();
    let listener = Listener::new("accounts", move |_: u32, _: JobContext| {
        let g = g.clone();
        async move {
            let _ = g.acquire().await;
        }
    });
    let rt = worker(&redis, listener).await;
    let c = rt.client();
    for n in 0..4u32 {
        c.push_to("accounts", &n).group("acct-1").await.unwrap();
    }
    c.push_to("accounts", &9u32).group("acct-2").await.unwrap();
    scrape_until(&[r#"dq_queue_group_waiting_max{topic="accounts"} 3"#]).await;
    gate.add_permits(10);
    rt.shutdown().await.unwrap();
}

/// Jobs a group rate holds back are counted (issue 33: until then only their `postponed`
/// events told).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_held_back_by_their_groups_rate_are_counted() {
    let redis = RedisServer::start();
    let listener = Listener::new("tenants", |_: u32, _: JobContext| async move {})
        .group_concurrency(3)
        .group_rate("1/60s".parse::<dq::Rate>().unwrap());
    let rt = worker(&redis, listener).await;
    let c = rt.client();
    for n in 0..3u32 {
        c.push_to("tenants", &n).group("t-1").await.unwrap();
    }
    // One starts; the other two wait a minute each for their group's turn.
    scrape_until(&[
        r#"dq_jobs_started_total{topic="tenants"} 1"#,
        r#"dq_jobs_held_by_group_rate_total{topic="tenants"} 2"#,
    ])
    .await;
    rt.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_job_stopped_by_a_cancel_is_counted_as_cancelled_not_retried() {
    let redis = RedisServer::start();
    let (started, mut has_started) = tokio::sync::mpsc::unbounded_channel();
    let listener = Listener::new("reports", move |_: u32, ctx: JobContext| {
        let started = started.clone();
        async move {
            let _ = started.send(());
            ctx.cancelled().await;
            Err::<(), String>("stopped: cancelled".into())
        }
    })
    .no_timeout()
    .retries(3);
    let rt = worker(&redis, listener).await;
    let c = rt.client();
    c.push_to("reports", &1u32).id("r1").await.unwrap();
    let run = tokio::time::timeout(LONG, has_started.recv())
        .await
        .unwrap();
    assert_eq!(run, Some(()), "the handler started");
    let cancel = c.cancel_in("reports", "r1").await.unwrap();
    assert_eq!(cancel, ChangeOutcome::CancelRequested);
    let text = scrape_until(&[r#"dq_jobs_cancelled_total{topic="reports"} 1"#]).await;
    assert!(
        !text.contains(r#"dq_jobs_retried_total{topic="reports"}"#),
        "{text}"
    );
    // Issue 32 review (helper-61, finding 9): the run the cancel stopped was also counted as
    // failed, where the store's per-minute chart (the dashboard's) counts no run.
    assert!(
        !text.contains(r#"dq_jobs_failed_total{topic="reports"}"#),
        "{text}"
    );
    rt.shutdown().await.unwrap();
}

/// Issue 32 review (helper-63, finding 1): a run that failed before its worker heard of the
/// cancel asked of it was counted as retried (or dead-lettered), where the store deleted the
/// job as cancelled. The store now says so (`Leases::end_run`), and the runtime counts it as
/// cancelled. The worker here never hears of cancels (`Faulty::deaf_to_cancels`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_fails_before_its_worker_hears_of_its_cancel_is_counted_as_cancelled() {
    let redis = RedisServer::start();
    endpoint();
    let config = support::config(&redis);
    let store = support::faulty::Faulty {
        deaf_to_cancels: true,
        ..support::faulty::Faulty::new(&config).await
    };
    let (started, mut has_started) = tokio::sync::mpsc::unbounded_channel();
    let go = std::sync::Arc::new(tokio::sync::Notify::new());
    let fail = go.clone();
    let listener = Listener::new("exports", move |_: u32, _ctx: JobContext| {
        let (started, fail) = (started.clone(), fail.clone());
        async move {
            let _ = started.send(());
            fail.notified().await;
            Err::<(), String>("the export failed on its own".into())
        }
    })
    .no_timeout()
    .retries(3);
    let rt = support::start_on(config, Some(std::sync::Arc::new(store)), listener).await;
    let c = rt.client();
    c.push_to("exports", &1u32).id("e1").await.unwrap();
    let run = tokio::time::timeout(LONG, has_started.recv()).await;
    assert_eq!(run.unwrap(), Some(()), "the handler started");
    let cancel = c.cancel_in("exports", "e1").await.unwrap();
    assert_eq!(cancel, ChangeOutcome::CancelRequested);
    go.notify_one();
    let text = scrape_until(&[r#"dq_jobs_cancelled_total{topic="exports"} 1"#]).await;
    assert!(
        !text.contains(r#"dq_jobs_retried_total{topic="exports"}"#),
        "{text}"
    );
    let status = c.status_in("exports", "e1").await.unwrap();
    assert!(status.is_none(), "deleted: {status:?}");
    rt.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_meets_a_rate_limit_before_its_worker_hears_of_its_cancel_is_counted_as_cancelled(
) {
    let redis = RedisServer::start();
    endpoint();
    let config = support::config(&redis);
    let store = support::faulty::Faulty {
        deaf_to_cancels: true,
        ..support::faulty::Faulty::new(&config).await
    };
    let (started, mut has_started) = tokio::sync::mpsc::unbounded_channel();
    let go = std::sync::Arc::new(tokio::sync::Notify::new());
    let limited = go.clone();
    let listener = Listener::new("payouts", move |_: u32, _ctx: JobContext| {
        let (started, limited) = (started.clone(), limited.clone());
        async move {
            let _ = started.send(());
            limited.notified().await;
            Outcome::RateLimited(Duration::from_millis(10))
        }
    })
    .no_timeout();
    let rt = support::start_on(config, Some(std::sync::Arc::new(store)), listener).await;
    let c = rt.client();
    c.push_to("payouts", &1u32).id("p1").await.unwrap();
    let run = tokio::time::timeout(LONG, has_started.recv()).await;
    assert_eq!(run.unwrap(), Some(()), "the handler started");
    let cancel = c.cancel_in("payouts", "p1").await.unwrap();
    assert_eq!(cancel, ChangeOutcome::CancelRequested);
    go.notify_one();
    let text = scrape_until(&[r#"dq_jobs_cancelled_total{topic="payouts"} 1"#]).await;
    assert!(
        !text.contains(r#"dq_jobs_rate_limited_total{topic="payouts"}"#),
        "{text}"
    );
    let status = c.status_in("payouts", "p1").await.unwrap();
    assert!(status.is_none(), "deleted: {status:?}");
    rt.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_are_counted_by_what_they_answered() {
    let redis = RedisServer::start();
    let listener = Listener::new("invoices", |n: u32, _: JobContext| async move {
        if n == 0 {
            Outcome::DeadLetter("no such invoice".into())
        } else {
            Outcome::Done
        }
    })
    .retain(Duration::from_secs(3600));
    let rt = worker(&redis, listener).await;
    let c = rt.client();
    c.push_to("invoices", &1u32).id("paid").await.unwrap();
    c.push_to("invoices", &0u32).id("bad").await.unwrap();
    c.push_to("invoices", &1u32)
        .id("later")
        .delay(Duration::from_secs(3600))
        .await
        .unwrap();
    let wait = move |topic: &'static str, id: &'static str, timeout: Duration| async move {
        c.wait_in::<serde_json::Value>(topic, id, timeout)
            .await
            .unwrap()
    };
    assert_eq!(
        wait("invoices", "paid", LONG).await,
        JobResult::SucceededEmpty
    );
    let bad = wait("invoices", "bad", LONG).await;
    assert!(matches!(bad, JobResult::Dead { .. }), "{bad:?}");
    let short = Duration::from_millis(100);
    assert_eq!(wait("invoices", "later", short).await, JobResult::Pending);
    assert_eq!(wait("invoices", "never", LONG).await, JobResult::NotFound);
    // A topic no listener keeps records of: nothing to wait for.
    assert_eq!(wait("mails", "m1", LONG).await, JobResult::NotKept);
    scrape_until(&[
        r#"dq_waits_total{topic="invoices",answer="finished"} 1"#,
        r#"dq_waits_total{topic="invoices",answer="dead"} 1"#,
        r#"dq_waits_total{topic="invoices",answer="timed_out"} 1"#,
        r#"dq_waits_total{topic="invoices",answer="not_found"} 1"#,
        r#"dq_waits_total{topic="mails",answer="not_kept"} 1"#,
    ])
    .await;
    rt.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_reports_written_and_results_kept_are_counted() {
    let redis = RedisServer::start();
    let listener = Listener::new("exports", |rows: u32, ctx: JobContext| async move {
        ctx.progress(&(rows / 2)).await?;
        ctx.progress(&rows).await?;
        anyhow::Ok(rows)
    })
    .retain(Duration::from_secs(3600));
    let rt = worker(&redis, listener).await;
    let c = rt.client();
    for (id, rows) in [("e1", 10u32), ("e2", 20)] {
        c.push_to("exports", &rows).id(id).await.unwrap();
    }
    for id in ["e1", "e2"] {
        let end = c.wait_in::<u32>("exports", id, LONG).await.unwrap();
        assert!(matches!(end, JobResult::Succeeded(_)), "{id}: {end:?}");
    }
    scrape_until(&[
        r#"dq_progress_reports_total{topic="exports"} 4"#,
        r#"dq_results_kept_total{topic="exports"} 2"#,
        r#"dq_queue_jobs{topic="exports",state="done"} 2"#,
    ])
    .await;
    rt.shutdown().await.unwrap();
}

/// Issue 32 (helper-68, finding 9): an event reader's progress shows in the metrics: the
/// events it handed out, the events it missed behind its topic's cap, and how old the latest
/// one was when it was handed out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_readers_events_read_and_missed_and_their_age_are_reported() {
    let redis = RedisServer::start();
    let listener = Listener::new("tracked", |_: u32| async { Ok::<(), String>(()) })
        .events(true)
        .events_cap(10);
    let rt = worker(&redis, listener).await;
    let c = rt.client();
    let hour = Duration::from_secs(3600);
    let mut events = c.events("tracked").await.unwrap();
    c.push_to("tracked", &0u32)
        .id("first")
        .delay(hour)
        .await
        .unwrap();
    let cursor = match next_event(&mut events).await {
        EventItem::Event { event, cursor } if event.id.as_str() == "first" => cursor,
        other => panic!("{other:?}"),
    };
    drop(events);
    // One push each: a call's events share one entry, and the cap counts entries.
    for i in 0..200u32 {
        let push = c.push_to("tracked", &i).id(format!("j{i}")).delay(hour);
        push.await.unwrap();
    }
    let mut resumed = c.events_from("tracked", cursor).await.unwrap();
    let missed = match next_event(&mut resumed).await {
        EventItem::Lagged { missed, .. } => missed,
        other => panic!("told of the lag first: {other:?}"),
    };
    let mut read = 1; // "first"
    loop {
        match next_event(&mut resumed).await {
            EventItem::Event { event, .. } => {
                read += 1;
                if event.id.as_str() == "j199" {
                    break;
                }
            }
            other => panic!("{other:?}"),
        }
    }
    assert!((1..200).contains(&missed), "{missed}");
    scrape_until(&[
        // Whole lines: `} 20` must not pass for `} 201`.
        &format!("dq_events_read_total{{topic=\"tracked\"}} {read}\n"),
        &format!("dq_events_missed_total{{topic=\"tracked\"}} {missed}\n"),
        r#"dq_events_behind_seconds{topic="tracked"}"#,
    ])
    .await;
    rt.shutdown().await.unwrap();
}

/// The next item of `stream`, which must come within 5 s.
async fn next_event(stream: &mut dq::events::EventStream) -> EventItem {
    let next = tokio::time::timeout(Duration::from_secs(5), stream.recv()).await;
    next.expect("an event within 5 s").unwrap().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushes_refused_by_max_pending_are_counted() {
    let redis = RedisServer::start();
    let listener = Listener::new("bounded", |_: u32| async { Ok::<(), String>(()) }).max_pending(1);
    let rt = worker(&redis, listener).await;
    let c = rt.client();
    let hour = Duration::from_secs(3600);
    c.push_to("bounded", &1u32).delay(hour).await.unwrap();
    let full = c.push_to("bounded", &2u32).delay(hour).await.unwrap_err();
    assert_eq!(full.kind(), dq::ErrorKind::TopicFull, "{full}");
    let batch = (3..5u32).map(|n| c.push_to("bounded", &n).delay(hour));
    c.push_batch(batch).await.unwrap();
    scrape_until(&[
        r#"dq_jobs_pushed_total{topic="bounded"} 1"#,
        r#"dq_pushes_refused_full_total{topic="bounded"} 3"#,
    ])
    .await;
    rt.shutdown().await.unwrap();
}

/// A handler's `RateLimited` and the fetches the rate limit cut short are counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limited_runs_and_throttled_fetches_are_counted() {
    let redis = RedisServer::start();
    static MET_429: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let listener = Listener::new("limited", |n: u32| async move {
        if n == 0 && !MET_429.swap(true, std::sync::atomic::Ordering::SeqCst) {
            Outcome::RateLimited(Duration::from_millis(50))
        } else {
            Outcome::Done
        }
    })
    .rate("20/1s".parse().unwrap());
    let rt = worker(&redis, listener).await;
    let c = rt.client();
    c.push_to("limited", &0u32).id("first").await.unwrap();
    for n in 1..4u32 {
        c.push_to("limited", &n).await.unwrap();
    }
    scrape_until(&[
        r#"dq_jobs_rate_limited_total{topic="limited"} 1"#,
        r#"dq_jobs_succeeded_total{topic="limited"} 4"#,
        r#"dq_fetches_throttled_total{topic="limited"}"#,
    ])
    .await;
    rt.shutdown().await.unwrap();
}

/// Issue 33 review (helper-28, finding 5): a throttled consumer came back for each single
/// start the rate allowed (every millisecond at 1000/1s: a fetch per job). It waits at least
/// 5 ms, half the burst's 10 ms, and takes what came in one fetch: a fifth of the fetches, at
/// the same rate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttled_consumer_takes_its_jobs_a_few_milliseconds_at_a_time() {
    let redis = RedisServer::start();
    let listener = Listener::new("fast-limited", |_: u32| async { Ok::<(), String>(()) })
        .rate("1000/1s".parse().unwrap());
    let rt = worker(&redis, listener).await;
    let c = rt.client();
    let jobs = (0..1000u32).map(|n| c.push_to("fast-limited", &n));
    c.push_batch(jobs).await.unwrap();
    let text = scrape_until(&[r#"dq_jobs_succeeded_total{topic="fast-limited"} 1000"#]).await;
    let throttled: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix(r#"dq_fetches_throttled_total{topic="fast-limited"} "#))
        .expect("throttled fetches are counted")
        .trim()
        .parse()
        .unwrap();
    assert!(
        throttled < 400,
        "{throttled} throttled fetches for 1000 jobs"
    );
    rt.shutdown().await.unwrap();
}

/// Issue 33 review (helper-29, finding 2): a worker at a topic's global concurrency fetched
/// again at every end of any job of its process, so a busy topic beside it made it fetch in a
/// loop. It wakes at the ends of its own topic's jobs, and otherwise looks again after 10 ms,
/// then less and less often while the topic stays full.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_topic_is_not_fetched_at_every_end_of_another_topics_jobs() {
    let redis = RedisServer::start();
    endpoint();
    let slow = Listener::new("full-slow", |n: u32| async move {
        if n == 0 {
            tokio::time::sleep(Duration::from_millis(600)).await;
        }
        Ok::<(), String>(())
    })
    .global_concurrency(1);
    let busy = Listener::new("busy-beside", |_: u32| async { Ok::<(), String>(()) });
    let rt = dq::Runtime::builder()
        .config(support::config(&redis))
        .without_registered_listeners()
        .listener(slow)
        .listener(busy)
        .start()
        .await
        .unwrap();
    let c = rt.client();
    c.push_to("full-slow", &0u32).await.unwrap();
    c.push_to("full-slow", &1u32).await.unwrap();
    let jobs = (0..3000u32).map(|n| c.push_to("busy-beside", &n));
    c.push_batch(jobs).await.unwrap();
    let text = scrape_until(&[
        r#"dq_jobs_succeeded_total{topic="full-slow"} 2"#,
        r#"dq_jobs_succeeded_total{topic="busy-beside"} 3000"#,
    ])
    .await;
    let full: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix(r#"dq_fetches_at_capacity_total{topic="full-slow"} "#))
        .expect("fetches at capacity are counted")
        .trim()
        .parse()
        .unwrap();
    assert!(full < 100, "{full} fetches of a full topic in 600 ms");
    rt.shutdown().await.unwrap();
}

/// Issue 33: over a cluster's 16 shards the first shard counts a rated or globally limited
/// topic's starts for every shard, so a fetch elsewhere first asks it for a grant. Each of those
/// calls is counted by limit, call and outcome: with the first shard's master gone, `failed`
/// grows and tells the person on call why a limited topic stalls while its own shard is fine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_to_the_first_shard_that_counts_a_limit_for_all_are_counted_by_outcome() {
    endpoint();
    let mut cluster = support::RedisCluster::start(3, 0);
    let config = dq::Config::builder()
        .redis_cluster(cluster.urls())
        .build()
        .unwrap();
    let c = support::TestClient::connect(config).await.unwrap();
    let (rated, limited) = (
        support::topic("first-rated"),
        support::topic("first-limited"),
    );
    c.set_rate("first-rated", Some("1000/1s".parse().unwrap()))
        .await
        .unwrap();
    c.set_global_concurrency("first-limited", Some(3))
        .await
        .unwrap();
    // One job of each topic: a fetch of its shard uses one of its grant and gives back the
    // rest, a fetch of another shard gives back all it was granted.
    c.push_to("first-rated", &1u32).await.unwrap();
    c.push_to("first-limited", &1u32).await.unwrap();
    let mut leased = Vec::new();
    for shard in 1..16 {
        for t in [&rated, &limited] {
            let f = c.store().fetch(shard, t, 10, support::LEASE).await.unwrap();
            leased.extend(f.jobs.into_iter().map(|j| j.lease));
        }
    }
    c.store().release(&leased).await.unwrap();
    scrape_until(&[
        r#"dq_first_shard_calls_total{topic="first-rated",limit="rate",call="take",outcome="ok"}"#,
        r#"dq_first_shard_calls_total{topic="first-rated",limit="rate",call="give_back",outcome="ok"}"#,
        r#"dq_first_shard_calls_total{topic="first-limited",limit="global_concurrency",call="take",outcome="ok"}"#,
        r#"dq_first_shard_calls_total{topic="first-limited",limit="global_concurrency",call="free",outcome="ok"}"#,
    ])
    .await;
    // The first shard's master gone (no replica to take over), the other masters still
    // serving their slots: another shard's fetch of a limited topic gets no grant, says so,
    // and is counted.
    for m in cluster.masters() {
        m.command(&["CONFIG", "SET", "cluster-require-full-coverage", "no"]);
    }
    let first = cluster.master_of(&dq::store::ShardKeys::new("dq", 0).jobs());
    let shard = (1..16)
        .find(|&s| cluster.master_of(&dq::store::ShardKeys::new("dq", s).jobs()) != first)
        .unwrap();
    let id = (0..)
        .map(|i| format!("f{i}"))
        .find(|id| dq::store::shard_of(&rated, &dq::JobId::new(id.as_str()).unwrap(), 16) == shard)
        .unwrap();
    c.push_to("first-rated", &2u32).id(id).await.unwrap();
    cluster.node_mut(first).kill();
    let started = Instant::now();
    let fetched = c.store().fetch(shard, &rated, 10, support::LEASE).await;
    assert!(
        fetched.is_err(),
        "a job ready, no grant, no start: {fetched:?}"
    );
    eprintln!(
        "the fetch without its grant failed in {:?}",
        started.elapsed()
    );
    scrape_until(&[
        "dq_first_shard_calls_total{topic=\"first-rated\",limit=\"rate\",call=\"take\",outcome=\"failed\"} 1\n",
    ])
    .await;
}

/// Issue 33 (helper-76, finding 7): a fetch of a rated topic outside the first shard asked it
/// for starts for its whole batch, even in a shard with no job left, and gave back what it did
/// not start: a grant and a give-back for nothing at each empty fetch, and starts held from the
/// other shards meanwhile (lost when a later grant came before the give-back). A shard whose
/// last fetch took every ready job is now asked first how many it has: none, no grant; two,
/// a grant of two and nothing to give back; and once those two emptied it, none again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_that_ran_dry_is_asked_how_many_jobs_it_has_before_starts_are_taken_for_it() {
    endpoint();
    let cluster = support::RedisCluster::start(3, 0);
    let config = dq::Config::builder()
        .redis_cluster(cluster.urls())
        .build()
        .unwrap();
    let shards = config.shards;
    let c = support::TestClient::connect(config).await.unwrap();
    let t = support::topic("dry-rated");
    c.set_rate("dry-rated", Some("100000/1s".parse().unwrap()))
        .await
        .unwrap();
    // Ids whose jobs land in shard 5 (not the first).
    let in_shard = |n: usize, from: usize| -> Vec<String> {
        (from..)
            .map(|i| format!("d{i}"))
            .filter(|id| {
                dq::store::shard_of(&t, &dq::JobId::new(id.as_str()).unwrap(), shards) == 5
            })
            .take(n)
            .collect()
    };
    let push = |ids: Vec<String>| {
        c.push_batch(
            ids.into_iter()
                .map(|id| c.push_to("dry-rated", &1u32).id(id)),
        )
    };
    push(in_shard(3, 0)).await.unwrap();
    let first = c.store().fetch(5, &t, 10, support::LEASE).await.unwrap();
    assert_eq!(
        first.jobs.len(),
        3,
        "a grant of 10, three started, seven given back"
    );
    let empty = c.store().fetch(5, &t, 10, support::LEASE).await.unwrap();
    assert!(empty.jobs.is_empty() && empty.throttled.is_none());
    push(in_shard(2, 1000)).await.unwrap();
    let woken = c.store().fetch(5, &t, 10, support::LEASE).await.unwrap();
    assert_eq!(woken.jobs.len(), 2, "a grant of two, both started");
    // It took exactly what it was granted and left the shard empty: dry again (helper-82).
    let after = c.store().fetch(5, &t, 10, support::LEASE).await.unwrap();
    assert!(after.jobs.is_empty() && after.throttled.is_none());
    scrape_until(&[
        "dq_first_shard_calls_total{topic=\"dry-rated\",limit=\"rate\",call=\"take\",outcome=\"ok\"} 2\n",
        "dq_first_shard_calls_total{topic=\"dry-rated\",limit=\"rate\",call=\"give_back\",outcome=\"ok\"} 1\n",
    ])
    .await;
}
