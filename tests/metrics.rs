//! The Prometheus endpoint, scraped over HTTP on 127.0.0.1 while a topic runs: lateness,
//! durations, outcomes and queue depth per topic and state.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod support;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use dq::{JobContext, Listener, Outcome, Runtime};
use support::RedisServer;

fn scrape(addr: std::net::SocketAddr) -> String {
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_endpoint_shows_lateness_outcomes_and_depth_of_a_running_topic() {
    let redis = RedisServer::start();
    let addr: std::net::SocketAddr = format!("127.0.0.1:{}", dq_testkit::unused_port())
        .parse()
        .unwrap();
    let listener = Listener::new("orders", |n: u32, _: JobContext| async move {
        if n == 0 {
            Outcome::DeadLetter("order not found".into())
        } else {
            Outcome::Done
        }
    });
    let builder = Runtime::builder()
        .config(support::config(&redis))
        .without_registered_listeners()
        .listener(listener);
    let rt = builder.metrics_addr(addr).start().await.unwrap();
    let c = rt.client();
    c.push_batch((0..4u32).map(|n| c.push_to("orders", &n).delay(Duration::from_millis(50))))
        .await
        .unwrap();
    c.push_to("orders", &9u32)
        .delay(Duration::from_secs(3600))
        .await
        .unwrap();

    let deadline = Instant::now() + Duration::from_secs(15);
    let text = loop {
        let text = scrape(addr);
        let ready = text.contains(r#"dq_jobs_succeeded_total{topic="orders"} 3"#)
            && text.contains(r#"dq_queue_jobs{topic="orders",state="delayed"} 1"#);
        if ready || Instant::now() > deadline {
            break text;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    for expected in [
        r#"dq_jobs_pushed_total{topic="orders"} 5"#,
        r#"dq_jobs_started_total{topic="orders"} 4"#,
        r#"dq_jobs_succeeded_total{topic="orders"} 3"#,
        r#"dq_jobs_dead_lettered_total{topic="orders"} 1"#,
        r#"dq_job_lateness_seconds_bucket{topic="orders",le="0.005"}"#,
        r#"dq_job_duration_seconds_count{topic="orders"} 4"#,
        r#"dq_queue_jobs{topic="orders",state="delayed"} 1"#,
        r#"dq_queue_jobs{topic="orders",state="dead"} 1"#,
        r#"dq_queue_lag_seconds{topic="orders"}"#,
    ] {
        assert!(text.contains(expected), "missing {expected} in:\n{text}");
    }
    rt.shutdown().await.unwrap();
}
