//! README's first command, `cargo run --example order_cancel`, works with nothing configured
//! (in-memory store) and against Redis, and ends by itself with the expected orders cancelled;
//! so does `cargo run --example checkout_flow`, a workflow that ships one order and refunds the
//! other; and `cargo run --example flow_control`, charges under a rate, a global concurrency,
//! groups, a priority and `max_pending`;
//! the `axum_service` example serves HTTP, runs the jobs its requests push, and stops on one
//! signal.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::RedisServer;

/// `cargo test` builds the examples next to the test binaries: target/<profile>/examples.
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let path = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples")
        .join(name);
    assert!(
        path.exists(),
        "{} is missing: run the tests with `cargo test`, which builds the examples",
        path.display()
    );
    path
}

/// Runs example `name` to its end, on Redis at `redis_url` or (`None`) on the in-memory store,
/// and what it printed; it must succeed.
fn run_example(name: &str, redis_url: Option<String>) -> String {
    let mut cmd = Command::new(example(name));
    cmd.env_remove("DQ_REDIS_URL").env("NO_COLOR", "1");
    if let Some(url) = redis_url {
        cmd.env("DQ_REDIS_URL", url);
    }
    let out = cmd.output().unwrap();
    let text = output_text(&out);
    assert!(out.status.success(), "the example failed:\n{text}");
    text
}

fn run_order_cancel(redis_url: Option<String>) -> String {
    run_example("order_cancel", redis_url)
}

/// What a finished example printed, without colour codes, whatever the subscriber decided.
fn output_text(out: &std::process::Output) -> String {
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    text.split('\u{1b}')
        .enumerate()
        .map(|(i, part)| {
            if i == 0 {
                part
            } else {
                part.split_once('m').map_or(part, |(_, rest)| rest)
            }
        })
        .collect()
}

fn assert_story(text: &str) {
    for (order, state) in [
        (1, "Cancelled"),
        (2, "Paid"),
        (3, "Cancelled"),
        (4, "Cancelled"),
        (5, "Paid"),
        (6, "Cancelled"),
    ] {
        assert!(
            text.contains(&format!("final order={order} state={state}")),
            "order {order} should be {state}:\n{text}"
        );
    }
    assert!(
        text.contains("payment service timed out; dq will retry"),
        "a retry is shown:\n{text}"
    );
}

#[test]
fn order_cancel_example_runs_with_nothing_configured() {
    let text = run_order_cancel(None);
    assert!(text.contains("running on the in-memory store"), "{text}");
    assert_story(&text);
}

#[test]
fn order_cancel_example_runs_on_redis() {
    let redis = RedisServer::start();
    let text = run_order_cancel(Some(redis.url()));
    assert!(!text.contains("in-memory store"), "{text}");
    assert_story(&text);
}

fn run_checkout_flow(redis_url: Option<String>) -> String {
    let text = run_example("checkout_flow", redis_url);
    for line in [
        "shipped order=1 receipt=R-1001 units=1",
        "nothing to refund order=1",
        "refunded order=2 receipt=R-1002 cents=2599",
        "workflow ended workflow=checkout-1 state=succeeded",
        "final workflow=checkout-2 step=ship state=cancelled",
        "workflow ended workflow=checkout-2 state=failed",
    ] {
        assert!(text.contains(line), "{line:?} is missing:\n{text}");
    }
    assert!(
        !text.contains("order=2 receipt=R-1002 units"),
        "order 2 never ships:\n{text}"
    );
    text
}

#[test]
fn checkout_flow_example_runs_with_nothing_configured() {
    run_checkout_flow(None);
}

#[test]
fn checkout_flow_example_runs_on_redis() {
    let redis = RedisServer::start();
    run_checkout_flow(Some(redis.url()));
}

/// `cargo run --example flow_control`: the provider saw the topic's rate, its global
/// concurrency and one account at a time, in push order; a flood was refused by `max_pending`.
fn run_flow_control(redis_url: Option<String>) {
    let text = run_example("flow_control", redis_url);
    for line in [
        "limits held at_most_23_in_a_second=true at_most_4_at_once=true one_account_at_a_time=true in_push_order=true vip_among_the_first_six=true flood_refused=true",
        "charges refused by max_pending",
        "429 from the provider: topic held",
    ] {
        assert!(text.contains(line), "{line:?} is missing:\n{text}");
    }
}

#[test]
fn flow_control_example_runs_with_nothing_configured() {
    run_flow_control(None);
}

#[test]
fn flow_control_example_runs_on_redis() {
    let redis = RedisServer::start();
    run_flow_control(Some(redis.url()));
}

/// Kills the example if the test fails before it stopped it.
struct Running(Option<Child>);

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(child) = self.0.as_mut() {
            dq_testkit::process::kill(child);
        }
    }
}

/// One HTTP/1.1 request; the status and the body.
fn http(port: u16, method: &str, path: &str) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_owned();
    Ok((status, body))
}

/// Places orders 1 and 2 over HTTP, pays order 2, sees order 1 cancelled by its job and order
/// 2 left paid, then stops the service with one SIGTERM and checks both parts stopped.
fn run_axum_service(redis_url: Option<String>) -> String {
    let port = dq_testkit::unused_port();
    let mut cmd = Command::new(example("axum_service"));
    cmd.env_remove("DQ_REDIS_URL")
        .env("NO_COLOR", "1")
        .env("LISTEN", format!("127.0.0.1:{port}"))
        .env("CANCEL_AFTER", "500ms")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(url) = redis_url {
        cmd.env("DQ_REDIS_URL", url);
    }
    let mut running = Running(Some(cmd.spawn().unwrap()));
    let started = Instant::now();
    while http(port, "GET", "/health").is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the service did not listen"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        http(port, "POST", "/orders/1").unwrap(),
        (200, "order 1 placed\n".into())
    );
    assert_eq!(http(port, "POST", "/orders/2").unwrap().0, 200);
    assert_eq!(
        http(port, "POST", "/orders/2/pay").unwrap(),
        (200, "order 2 paid\n".into())
    );
    assert_eq!(http(port, "GET", "/orders/1").unwrap().1, "unpaid\n");
    let deadline = Instant::now() + Duration::from_secs(10);
    while http(port, "GET", "/orders/1").unwrap().1 != "cancelled\n" {
        assert!(Instant::now() < deadline, "order 1 was not cancelled");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(http(port, "GET", "/orders/2").unwrap().1, "paid\n");
    // A client retrying its POST after paying (or after the cancellation) reopens nothing.
    assert_eq!(
        http(port, "POST", "/orders/2").unwrap(),
        (409, "order 2 is paid\n".into())
    );
    assert_eq!(http(port, "POST", "/orders/1").unwrap().0, 409);
    std::thread::sleep(Duration::from_millis(700)); // past CANCEL_AFTER: no job cancels order 2
    assert_eq!(http(port, "GET", "/orders/2").unwrap().1, "paid\n");

    let child = running.0.take().unwrap();
    dq_testkit::process::terminate(child.id()).unwrap();
    let out = child.wait_with_output().unwrap();
    let text = output_text(&out);
    assert!(out.status.success(), "the service failed:\n{text}");
    for line in [
        "order placed order=1",
        "order still unpaid: cancelled order=1",
        "web server and dq runtime stopped",
    ] {
        assert!(text.contains(line), "{line:?} missing:\n{text}");
    }
    text
}

#[test]
fn axum_service_example_runs_jobs_pushed_by_its_requests_on_the_memory_store() {
    let text = run_axum_service(None);
    assert!(text.contains("running on the in-memory store"), "{text}");
}

#[test]
fn axum_service_example_runs_jobs_pushed_by_its_requests_on_redis() {
    let redis = RedisServer::start();
    let text = run_axum_service(Some(redis.url()));
    assert!(!text.contains("in-memory store"), "{text}");
}
