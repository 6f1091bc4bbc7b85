//! README's first command, `cargo run --example order_cancel`, works with nothing configured
//! (in-memory store) and against Redis, and ends by itself with the expected orders cancelled.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod support;

use std::path::PathBuf;
use std::process::Command;

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

fn run_order_cancel(redis_url: Option<String>) -> String {
    let mut cmd = Command::new(example("order_cancel"));
    cmd.env_remove("DQ_REDIS_URL").env("NO_COLOR", "1");
    if let Some(url) = redis_url {
        cmd.env("DQ_REDIS_URL", url);
    }
    let out = cmd.output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    // Strip colour codes, whatever the subscriber decided.
    let text = text
        .split('\u{1b}')
        .enumerate()
        .map(|(i, part)| {
            if i == 0 {
                part
            } else {
                part.split_once('m').map_or(part, |(_, rest)| rest)
            }
        })
        .collect::<String>();
    assert!(out.status.success(), "the example failed:\n{text}");
    text
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
