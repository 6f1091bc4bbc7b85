//! The `dq` binary against a real redis-server: every command, with `--json` and the human
//! table, and its error cases with their exit codes.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::Duration;

use dq::store::{RedisStore, Store};
use dq_testkit::RedisServer;
use serde_json::Value;

/// The `dq` binary on the Redis at `url`, in no namespace.
fn dq_on(url: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_dq"));
    command.env("DQ_REDIS_URL", url).env_remove("DQ_NAMESPACE");
    command
}

fn dq(redis: &RedisServer, args: &[&str]) -> Output {
    dq_on(&redis.url()).args(args).output().unwrap()
}

/// `dq args`, which must exit with `code`: what it said on stderr.
fn fails(redis: &RedisServer, args: &[&str], code: i32) -> String {
    let out = dq(redis, args);
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(code), "dq {args:?}: {said}");
    said
}

fn ok(out: &Output) -> String {
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "exit {:?}: {text}{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

fn json(out: &Output) -> Value {
    serde_json::from_str(ok(out).trim()).unwrap()
}

async fn client(redis: &RedisServer) -> dq::Client {
    client_and_store(redis).await.0
}

/// A client and the store under it, for tests that put jobs in a state only workers reach.
async fn client_and_store(redis: &RedisServer) -> (dq::Client, Arc<dyn Store>) {
    let config = dq::Config::builder()
        .redis_url(redis.url())
        .build()
        .unwrap();
    let store: Arc<dyn Store> = Arc::new(RedisStore::connect(&config).await.unwrap());
    (dq::Client::new(store.clone(), config), store)
}

/// Leases up to `max` ready jobs of `topic`, as a worker would, and dead-letters them with
/// `reason`; returns how many.
async fn dead_letter_all(store: &Arc<dyn Store>, topic: &str, max: usize, reason: &str) -> usize {
    let topic = dq::Topic::new(topic).unwrap();
    let leased = store
        .fetch(0, &topic, max, Duration::from_secs(30))
        .await
        .unwrap();
    for j in &leased.jobs {
        store.dead_letter(&j.lease, reason).await.unwrap();
    }
    leased.jobs.len()
}

/// Job `id` of `topic`, pushed, leased and acked as a worker whose handler returned `result`
/// would, the topic keeping its done jobs for an hour.
async fn succeed(c: &dq::Client, store: &Arc<dyn Store>, topic: &str, id: &str, result: &[u8]) {
    let name = dq::Topic::new(topic).unwrap();
    let keep = dq::store::Retention::for_age(Duration::from_secs(3600));
    store.set_retention(&name, Some(keep)).await.unwrap();
    c.push_json(topic, r#"{"order_id":7}"#)
        .id(id)
        .await
        .unwrap();
    let leased = store
        .fetch(0, &name, 1, Duration::from_secs(30))
        .await
        .unwrap();
    let lease = leased.jobs[0].lease.clone();
    assert_eq!(lease.id.as_str(), id);
    let done = [dq::store::Succeeded {
        lease,
        result: Some(result.to_vec()),
        run: 1,
    }];
    assert_eq!(store.ack_succeeded(&done).await.unwrap().acked, 1);
}

/// Job `id` of `topic`, with an empty payload, due in `delay`.
async fn push_delayed(c: &dq::Client, topic: &str, id: &str, delay: Duration) {
    c.push_json(topic, "{}").id(id).delay(delay).await.unwrap();
}

/// The row of `topic` in `dq stats --json`.
fn stats_row(redis: &RedisServer, topic: &str) -> Value {
    let stats = json(&dq(redis, &["stats", "--json"]));
    let row = stats
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["topic"] == topic);
    row.unwrap().clone()
}

#[tokio::test]
async fn stats_lists_every_topic_with_its_counts_and_lag() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    push_delayed(&c, "orders", "a", Duration::from_secs(60)).await;
    c.push_json("orders", "{}").id("b").await.unwrap();
    c.push_json("mails", "{}").await.unwrap();
    let orders = stats_row(&redis, "orders");
    assert_eq!(
        (orders["delayed"].as_u64(), orders["ready"].as_u64()),
        (Some(1), Some(1))
    );
    assert!(orders["oldest_ready_due_ms"].is_u64() && orders["next_due_ms"].is_u64());
    assert_eq!(
        (orders["done_1h"].as_u64(), orders["failed_1h"].as_u64()),
        (Some(0), Some(0))
    );
    let table = ok(&dq(&redis, &["stats"]));
    assert!(
        table.contains("DONE 1H") && table.contains("FAILED 1H"),
        "{table}"
    );
    assert!(table.starts_with("TOPIC"), "{table}");
    assert!(table.lines().any(|l| l.starts_with("mails ")), "{table}");
}

#[tokio::test]
async fn stats_count_the_done_jobs_a_topic_keeps() {
    let redis = RedisServer::start();
    let (c, store) = client_and_store(&redis).await;
    succeed(&c, &store, "invoices", "i1", br#"{"receipt":"R-1"}"#).await;
    succeed(&c, &store, "invoices", "i2", br#"{"receipt":"R-2"}"#).await;
    c.push_json("mails", "{}").await.unwrap();
    let invoices = stats_row(&redis, "invoices");
    assert_eq!(invoices["done"].as_u64(), Some(2), "{invoices}");
    assert_eq!(invoices["ready"].as_u64(), Some(0), "{invoices}");
    assert_eq!(stats_row(&redis, "mails")["done"].as_u64(), Some(0));
    let table = ok(&dq(&redis, &["stats"]));
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    let row: Vec<&str> = table
        .lines()
        .find(|l| l.starts_with("invoices "))
        .unwrap()
        .split_whitespace()
        .collect();
    let done = header.iter().position(|h| *h == "DONE").unwrap();
    assert_eq!(row[done], "2", "{table}");
}

#[tokio::test]
async fn jobs_pages_through_a_state_with_the_printed_cursor() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    c.push_batch((0..5).map(|i| {
        c.push_json("t", "{}")
            .id(format!("j{i}"))
            .delay(Duration::from_secs(60 + i))
    }))
    .await
    .unwrap();
    let first = json(&dq(
        &redis,
        &["jobs", "t", "--state", "delayed", "--limit", "3", "--json"],
    ));
    assert_eq!(first["jobs"].as_array().unwrap().len(), 3);
    let cursor = first["next"].as_u64().unwrap().to_string();
    let second = json(&dq(
        &redis,
        &["jobs", "t", "--limit", "3", "--cursor", &cursor, "--json"],
    ));
    let ids: Vec<_> = second["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids, ["j3", "j4"]);
    assert!(second["next"].is_null());
    let table = ok(&dq(&redis, &["jobs", "t", "--limit", "3"]));
    assert!(
        table.contains("more: dq jobs t --state delayed --limit 3 --cursor"),
        "{table}"
    );
}

#[tokio::test]
async fn push_then_show_and_an_unknown_job_exits_3() {
    let redis = RedisServer::start();
    let pushed = json(&dq(
        &redis,
        &[
            "push",
            "t",
            r#"{"order_id":42}"#,
            "--id",
            "42",
            "--in",
            "10m",
            "--json",
        ],
    ));
    assert_eq!(pushed["outcome"], "Created");
    let again = json(&dq(&redis, &["push", "t", "{}", "--id", "42", "--json"]));
    assert_eq!(again["outcome"], "AlreadyPending");
    let job = json(&dq(&redis, &["show", "t", "42", "--json"]));
    assert_eq!(job["state"].as_str(), Some("delayed"));
    assert_eq!(
        job["payload"],
        serde_json::json!({ "order_id": 42 }),
        "a JSON payload is shown as nested JSON"
    );
    let table = ok(&dq(&redis, &["show", "t", "42"]));
    assert!(
        table.contains("attempt") && table.contains("0 of 3"),
        "{table}"
    );
    let said = fails(&redis, &["jobs", "no-such-topic"], 3);
    assert!(
        said.contains("unknown topic \"no-such-topic\"") && said.contains("known topics: t"),
        "{said}"
    );
    assert!(fails(&redis, &["show", "t", "nope"], 3).contains("no job \"nope\""));
    assert!(fails(&redis, &["push", "t", "not json"], 1).contains("not JSON"));
}

#[tokio::test]
async fn push_with_a_priority_runs_first_and_shows_it() {
    let redis = RedisServer::start();
    ok(&dq(&redis, &["push", "t", "{}", "--id", "plain"]));
    ok(&dq(
        &redis,
        &["push", "t", "{}", "--id", "later", "--priority", "-3"],
    ));
    ok(&dq(
        &redis,
        &["push", "t", "{}", "--id", "first", "--priority", "7"],
    ));
    let listed = json(&dq(&redis, &["jobs", "t", "--state", "ready", "--json"]));
    let order: Vec<(String, i64)> = listed["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| {
            (
                j["id"].as_str().unwrap().into(),
                j["priority"].as_i64().unwrap(),
            )
        })
        .collect();
    let expected = [("first", 7), ("plain", 0), ("later", -3)].map(|(id, p)| (id.into(), p));
    assert_eq!(order, expected, "listed in the order they run");
    let table = ok(&dq(&redis, &["show", "t", "first"]));
    assert!(table.contains("priority") && table.contains('7'), "{table}");
    let said = fails(&redis, &["push", "t", "{}", "--priority", "11"], 2);
    assert!(said.contains("11"), "{said}");
}

/// `dq push --group` puts jobs in a group; `dq groups` shows the ones waiting for a slot and
/// sets the group concurrency, which lets the next one in at once.
#[tokio::test]
async fn grouped_pushes_wait_their_turn_and_dq_groups_shows_and_widens_them() {
    let redis = RedisServer::start();
    for id in ["a1", "a2", "a3"] {
        ok(&dq(
            &redis,
            &["push", "t", "{}", "--id", id, "--group", "acct-1"],
        ));
    }
    let listed = json(&dq(&redis, &["jobs", "t", "--state", "ready", "--json"]));
    let groups: Vec<&str> = listed["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["group"].as_str().unwrap())
        .collect();
    assert_eq!(groups, ["acct-1"; 3]);
    let shown = json(&dq(&redis, &["groups", "t", "--json"]));
    assert_eq!(
        shown["group_concurrency"],
        serde_json::Value::Null,
        "{shown}"
    );
    assert_eq!(shown["busiest_groups"][0]["group"], "acct-1", "{shown}");
    assert_eq!(shown["busiest_groups"][0]["waiting"], 2, "{shown}");
    assert_eq!(shown["busiest_groups"][0]["holding"], 1, "{shown}");
    let table = ok(&dq(&redis, &["groups", "t"]));
    assert!(
        table.contains("acct-1") && table.contains("WAITING"),
        "{table}"
    );
    ok(&dq(&redis, &["groups", "t", "--concurrency", "2"]));
    let shown = json(&dq(&redis, &["groups", "t", "--json"]));
    assert_eq!(shown["group_concurrency"], 2, "{shown}");
    assert_eq!(
        shown["busiest_groups"][0]["waiting"], 1,
        "one more let in: {shown}"
    );
    let said = fails(&redis, &["groups", "t", "--concurrency", "0"], 2);
    assert!(said.contains("at least 1"), "{said}");
}

/// `dq stats` shows a grouped topic's group limits and its busiest group in its table (and
/// the busiest groups in `--json`); a topic that never had groups shows none.
#[tokio::test]
async fn stats_show_a_topics_group_limits_and_busiest_group() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    for _ in 0..3 {
        c.push_json("charge", "{}").group("acct-7").await.unwrap();
    }
    c.push_json("charge", "{}").group("acct-8").await.unwrap();
    c.push_json("mails", "{}").await.unwrap();
    c.set_group_rate("charge", Some("10/1s".parse().unwrap()))
        .await
        .unwrap();
    let table = ok(&dq(&redis, &["stats"]));
    let header = table.lines().next().unwrap();
    assert!(header.contains("GROUPS"), "{table}");
    let row = |topic: &str| {
        table
            .lines()
            .find(|l| l.starts_with(&format!("{topic} ")))
            .unwrap()
            .to_owned()
    };
    assert!(
        row("charge").contains("at most 1 at once, 10/1s each, busiest acct-7 (2 waiting)"),
        "{table}"
    );
    let column = header.find("GROUPS").unwrap();
    assert!(row("mails")[column..].starts_with("- "), "{table}");
    let charge = stats_row(&redis, "charge");
    assert_eq!(charge["busiest_groups"][0]["group"], "acct-7", "{charge}");
    assert_eq!(charge["busiest_groups"][0]["waiting"], 2, "{charge}");
}

/// `dq groups --rate`: sets how many jobs of each group start per period, prints it beside
/// the group concurrency (and in `dq stats --json`), lifts it with `off`.
#[tokio::test]
async fn groups_rate_is_set_shown_and_lifted() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    c.push_json("t", "{}").group("acct-1").await.unwrap();
    let table = ok(&dq(&redis, &["groups", "t"]));
    assert!(table.contains("group rate: none"), "{table}");
    let said = ok(&dq(&redis, &["groups", "t", "--rate", "5/1s"]));
    assert!(said.contains("5/1s"), "{said}");
    assert_eq!(
        c.group_rate("t").await.unwrap(),
        Some("5/1s".parse().unwrap())
    );
    let table = ok(&dq(&redis, &["groups", "t"]));
    assert!(table.contains("group rate: 5/1s"), "{table}");
    let shown = json(&dq(&redis, &["groups", "t", "--json"]));
    assert_eq!(shown["group_rate"], "5/1s", "{shown}");
    let stats = ok(&dq(&redis, &["stats", "--json"]));
    assert!(stats.contains(r#""group_rate":"5/1s""#), "{stats}");
    let said = fails(&redis, &["groups", "t", "--rate", "5"], 2);
    assert!(said.contains("<count>/<period>"), "{said}");
    ok(&dq(&redis, &["groups", "t", "--rate", "off"]));
    assert_eq!(c.group_rate("t").await.unwrap(), None);
    let shown = json(&dq(&redis, &["groups", "t", "--json"]));
    assert_eq!(shown["group_rate"], serde_json::Value::Null, "{shown}");
    let table = ok(&dq(&redis, &["groups", "t"]));
    assert!(table.contains("group rate: none"), "{table}");
}

#[tokio::test]
async fn show_lists_each_failed_runs_error_oldest_first() {
    let redis = RedisServer::start();
    let (c, store) = client_and_store(&redis).await;
    c.push_json("t", r#"{"order_id":7}"#)
        .id("flaky")
        .await
        .unwrap();
    let topic = dq::Topic::new("t").unwrap();
    let leased = store.fetch(0, &topic, 1, Duration::from_secs(30)).await;
    let lease = leased.unwrap().jobs[0].lease.clone();
    assert!(store
        .retry(&lease, Duration::ZERO, "card declined")
        .await
        .unwrap());
    assert_eq!(dead_letter_all(&store, "t", 1, "gateway timeout").await, 1);
    let job = json(&dq(&redis, &["show", "t", "flaky", "--json"]));
    let errors = job["errors"].as_array().expect("errors").clone();
    let runs: Vec<(u64, &str)> = errors
        .iter()
        .map(|e| (e["run"].as_u64().unwrap(), e["error"].as_str().unwrap()))
        .collect();
    assert_eq!(
        runs,
        [(1, "card declined"), (2, "gateway timeout")],
        "{job}"
    );
    assert!(errors.iter().all(|e| e["at_ms"].is_u64()), "{job}");
    let table = ok(&dq(&redis, &["show", "t", "flaky"]));
    let first = table.find("run 1 failed").expect("run 1");
    let second = table.find("run 2 failed").expect("run 2");
    assert!(first < second, "{table}");
    assert!(table[first..second].contains("card declined"), "{table}");
}

/// A running job whose worker was asked to stop it says so in `dq show`; once cancelled, its
/// topic keeps a mark of it (with a retention), and `dq show` says it was cancelled rather
/// than that there is no such job.
#[tokio::test]
async fn show_says_a_running_jobs_cancel_was_requested_and_a_cancelled_job_was_cancelled() {
    let redis = RedisServer::start();
    let (c, store) = client_and_store(&redis).await;
    let topic = dq::Topic::new("t").unwrap();
    let keep = dq::store::Retention::for_age(Duration::from_secs(3600));
    store.set_retention(&topic, Some(keep)).await.unwrap();
    c.push_json("t", r#"{"order_id":7}"#)
        .id("slow")
        .await
        .unwrap();
    let leased = store.fetch(0, &topic, 1, Duration::from_secs(30)).await;
    let lease = leased.unwrap().jobs[0].lease.clone();
    let job = json(&dq(&redis, &["show", "t", "slow", "--json"]));
    assert_eq!(job["cancel_requested"], false, "{job}");
    let asked = c.cancel_in("t", "slow").await.unwrap();
    assert_eq!(asked, dq::admin::ChangeOutcome::CancelRequested);
    let job = json(&dq(&redis, &["show", "t", "slow", "--json"]));
    assert_eq!(
        (job["state"].as_str(), &job["cancel_requested"]),
        (Some("running"), &serde_json::json!(true)),
        "{job}"
    );
    let table = ok(&dq(&redis, &["show", "t", "slow"]));
    assert!(
        table.contains("requested: its worker was asked to stop it"),
        "{table}"
    );
    // Its handler listened: the run ends, cancelled.
    assert!(store.cancel_running(&lease).await.unwrap());
    let said = fails(&redis, &["show", "t", "slow"], 3);
    assert!(said.contains("was cancelled"), "{said}");
    // One never pushed is not said to be cancelled.
    let said = fails(&redis, &["show", "t", "nope"], 3);
    assert!(said.contains("no job \"nope\""), "{said}");
}

#[tokio::test]
async fn a_done_job_shows_its_result_in_show_and_in_jobs_state_done() {
    let redis = RedisServer::start();
    let (c, store) = client_and_store(&redis).await;
    succeed(&c, &store, "t", "paid", br#"{"receipt":"R-1"}"#).await;
    let job = json(&dq(&redis, &["show", "t", "paid", "--json"]));
    assert_eq!(job["state"], "done", "{job}");
    assert_eq!(
        job["result"],
        serde_json::json!({ "receipt": "R-1" }),
        "the result is shown as nested JSON"
    );
    assert!(job["state_time_ms"].is_u64(), "when it succeeded: {job}");
    let table = ok(&dq(&redis, &["show", "t", "paid"]));
    assert!(
        table.contains("succeeded") && table.contains(" ago"),
        "{table}"
    );
    assert!(
        table.lines().any(|l| l.trim() == r#""receipt": "R-1""#),
        "the result as pretty JSON: {table}"
    );
    let page = json(&dq(&redis, &["jobs", "t", "--state", "done", "--json"]));
    assert_eq!(page["jobs"][0]["id"], "paid", "{page}");
    assert_eq!(page["jobs"][0]["result"]["receipt"], "R-1", "{page}");
    let table = ok(&dq(&redis, &["jobs", "t", "--state", "done"]));
    assert!(
        table.starts_with("ID") && table.contains("SUCCEEDED") && table.contains("R-1"),
        "{table}"
    );
    // A job that has not run has no result.
    push_delayed(&c, "t", "later", Duration::from_secs(60)).await;
    let job = json(&dq(&redis, &["show", "t", "later", "--json"]));
    assert!(job["result"].is_null(), "{job}");
}

#[tokio::test]
async fn a_running_job_shows_the_progress_it_reported_in_show() {
    let redis = RedisServer::start();
    let (c, store) = client_and_store(&redis).await;
    c.push_json("t", r#"{"order_id":7}"#)
        .id("busy")
        .await
        .unwrap();
    let leased = store
        .fetch(0, &dq::Topic::new("t").unwrap(), 1, Duration::from_secs(30))
        .await
        .unwrap();
    let lease = leased.jobs[0].lease.clone();
    // Running, nothing reported yet: no progress row, a null field.
    let job = json(&dq(&redis, &["show", "t", "busy", "--json"]));
    assert_eq!(job["state"], "running", "{job}");
    assert!(job["progress"].is_null(), "{job}");
    let table = ok(&dq(&redis, &["show", "t", "busy"]));
    assert!(!table.contains("progress"), "{table}");
    let reported = store.progress(&lease, br#"{"done":3,"of":10}"#).await;
    assert!(reported.unwrap());
    let job = json(&dq(&redis, &["show", "t", "busy", "--json"]));
    assert_eq!(
        job["progress"],
        serde_json::json!({ "done": 3, "of": 10 }),
        "the progress is shown as nested JSON"
    );
    let table = ok(&dq(&redis, &["show", "t", "busy"]));
    assert!(
        table.lines().any(|l| l.starts_with("progress")),
        "a progress row: {table}"
    );
    assert!(
        table.lines().any(|l| l.trim() == r#""done": 3,"#),
        "the progress as pretty JSON: {table}"
    );
}

#[tokio::test]
async fn cancel_and_reschedule_say_what_happened_by_exit_code() {
    let redis = RedisServer::start();
    let (c, store) = client_and_store(&redis).await;
    push_delayed(&c, "t", "a", Duration::from_secs(600)).await;
    c.push_json("t", "{}").id("running").await.unwrap();
    store
        .fetch(0, &dq::Topic::new("t").unwrap(), 1, Duration::from_secs(30))
        .await
        .unwrap();
    ok(&dq(&redis, &["reschedule", "t", "a", "--in", "1h"]));
    let due = json(&dq(&redis, &["show", "t", "a", "--json"]))["due_ms"]
        .as_u64()
        .unwrap();
    let now_ms = dq::store::to_us(std::time::SystemTime::now()) / 1000;
    assert!(due > now_ms + 3_500_000, "moved to an hour from now");
    fails(&redis, &["reschedule", "t", "running", "--in", "1m"], 4);
    ok(&dq(&redis, &["cancel", "t", "a"]));
    fails(&redis, &["cancel", "t", "a"], 3);
    // A running job is not deleted: its worker (none here) is asked to stop it.
    let said = ok(&dq(&redis, &["cancel", "t", "running"]));
    assert!(said.contains("asked its worker to stop it"), "{said}");
    let said = json(&dq(&redis, &["cancel", "t", "running", "--json"]));
    assert_eq!(said["result"], "cancel requested", "{said}");
    let still = json(&dq(&redis, &["show", "t", "running", "--json"]));
    assert_eq!(still["state"], "running", "{still}");
}

#[tokio::test]
async fn dead_letters_are_listed_retried_and_purged() {
    let redis = RedisServer::start();
    let (c, store) = client_and_store(&redis).await;
    c.push_batch((0..3).map(|i| c.push_json("t", "{}").id(i.to_string())))
        .await
        .unwrap();
    dead_letter_all(&store, "t", 3, "order service said 404").await;
    let list = ok(&dq(&redis, &["dead", "list", "t"]));
    assert!(list.contains("order service said 404"), "{list}");
    let retried = json(&dq(&redis, &["dead", "retry", "t", "1", "--json"]));
    assert_eq!(retried["retried"], 1);
    // Neither ids nor --all: a usage error.
    fails(&redis, &["dead", "retry", "t"], 2);
    let purged = json(&dq(
        &redis,
        &["dead", "purge", "t", "--older-than", "1d", "--json"],
    ));
    assert_eq!(purged["purged"], 0, "nothing is a day old");
    ok(&dq(&redis, &["dead", "retry", "t", "--all"]));
    assert_eq!(c.counts("t").await.unwrap().ready, 3);
    c.push_json("u", "{}").id("x").await.unwrap();
    for topic in ["t", "u"] {
        dead_letter_all(&store, topic, 10, "boom").await;
    }
    let everywhere = json(&dq(&redis, &["dead", "retry", "--all-topics", "--json"]));
    assert_eq!(everywhere["retried"], 4, "three of t and one of u");
}

#[tokio::test]
async fn pause_and_resume_show_in_stats() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    c.push_json("t", "{}").await.unwrap();
    ok(&dq(&redis, &["pause", "t"]));
    assert!(ok(&dq(&redis, &["stats"])).contains("t (paused)"));
    assert!(c.stats("t").await.unwrap().paused);
    ok(&dq(&redis, &["resume", "t"]));
    assert!(!c.stats("t").await.unwrap().paused);
}

/// Issue 30 finding 7: `dq pause` of a topic nobody pushed to (a typo, most often) is refused
/// with the known topics unless `--force`, and a forced pause shows in `dq stats`.
#[tokio::test]
async fn pause_of_an_unknown_topic_asks_for_force_and_then_shows_in_stats() {
    let redis = RedisServer::start();
    client(&redis)
        .await
        .push_json("orders", "{}")
        .await
        .unwrap();
    let said = fails(&redis, &["pause", "ordres"], 3);
    assert!(
        said.contains("unknown topic \"ordres\"")
            && said.contains("known topics: orders")
            && said.contains("--force"),
        "{said}"
    );
    assert!(
        !ok(&dq(&redis, &["stats"])).contains("ordres"),
        "nothing was paused"
    );
    ok(&dq(&redis, &["pause", "later", "--force"]));
    assert!(ok(&dq(&redis, &["stats"])).contains("later (paused)"));
    let later = stats_row(&redis, "later");
    assert_eq!(
        (later["paused"].as_bool(), later["ready"].as_u64()),
        (Some(true), Some(0))
    );
}

/// Issue 30 finding 7: push options that mean nothing are refused, with the reason, and store
/// nothing; `--in 0s` is due now, as its help says.
#[tokio::test]
async fn push_options_that_mean_nothing_are_refused() {
    let redis = RedisServer::start();
    let refused = |extra: &[&str], code: i32, says: &str| {
        let mut args = vec!["push", "t", "{}", "--id", "a"];
        args.extend_from_slice(extra);
        let said = fails(&redis, &args, code);
        assert!(said.contains(says), "{extra:?}: {said}");
    };
    refused(&["--unique-for", "0s"], 1, "unique_for of 0s");
    refused(
        &["--unique-for", "100000d"],
        1,
        "over the limit of 200 years",
    );
    refused(&["--debounce", "0s"], 1, "debounce of 0s");
    refused(&["--retries", "100000"], 2, "100000 is not in 0..=1000");
    let c = client(&redis).await;
    assert!(c.topics().await.unwrap().is_empty(), "nothing was stored");
    let now = json(&dq(
        &redis,
        &["push", "t", "{}", "--id", "now", "--in", "0s", "--json"],
    ));
    assert_eq!(now["outcome"], "Created");
    let job = c.status_in("t", "now").await.unwrap().unwrap();
    assert_eq!(job.state, dq::JobState::Ready);
    ok(&dq(&redis, &["push", "t", "{}", "--retries", "1000"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_lists_a_running_runtime() {
    let redis = RedisServer::start();
    let listener = dq::Listener::new("t", |_: serde_json::Value, _: dq::JobContext| async {});
    let rt = dq::Runtime::builder()
        .config(
            dq::Config::builder()
                .redis_url(redis.url())
                .build()
                .unwrap(),
        )
        .without_registered_listeners()
        .listener(listener)
        .start()
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let workers = loop {
        let w = json(&dq(&redis, &["workers", "--json"]));
        if !w.as_array().unwrap().is_empty() || std::time::Instant::now() > deadline {
            break w;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        workers[0]["pid"].as_u64(),
        Some(u64::from(std::process::id()))
    );
    assert_eq!(workers[0]["topics"][0], "t");
    assert!(ok(&dq(&redis, &["workers"])).contains("LAST SEEN"));
    rt.shutdown().await.unwrap();
}

#[tokio::test]
async fn watch_refreshes_until_told_to_stop() {
    let redis = RedisServer::start();
    client(&redis).await.push_json("t", "{}").await.unwrap();
    let out = ok(&dq(&redis, &["watch", "--iterations", "2"]));
    assert_eq!(out.matches("dq watch:").count(), 2, "{out}");
}

#[test]
fn unreachable_redis_and_missing_url_are_clear_errors() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let started = std::time::Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_dq"))
        .args([
            "--redis-url",
            &format!("redis://127.0.0.1:{port}/"),
            "stats",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    // Refused is reported at once, not after a reconnect round (it took 7.5 s).
    assert!(
        started.elapsed() < std::time::Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is Redis reachable"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(env!("CARGO_BIN_EXE_dq"))
        .arg("stats")
        .env_remove("DQ_REDIS_URL")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("set DQ_REDIS_URL"));
}

#[tokio::test]
async fn an_invalid_topic_is_refused_with_the_reason() {
    let redis = RedisServer::start();
    let said = fails(&redis, &["show", "a{b}", "1"], 1);
    assert!(said.contains("invalid topic \"a{b}\""), "{said}");
}

/// `dq web` on a port of its choosing: the address it prints, then one request.
#[tokio::test]
async fn web_serves_the_dashboard_and_asks_for_its_token() {
    use std::io::{BufRead, BufReader, Read, Write};
    let redis = RedisServer::start();
    client(&redis)
        .await
        .push_to("order-cancel", &1)
        .await
        .unwrap();
    let mut web = dq_on(&redis.url())
        .args(["web", "--listen", "127.0.0.1:0"])
        .args(["--allowed-host", "dq.internal.example"])
        .env("DQ_WEB_TOKEN", "s3cret")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    let mut out = BufReader::new(web.stdout.take().unwrap());
    out.read_line(&mut line).unwrap();
    let addr = line
        .trim()
        .strip_prefix("dq web: serving the dashboard on http://")
        .and_then(|a| a.strip_suffix('/'))
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_owned();
    let get_from = |host: &str, auth: &str| {
        let mut s = std::net::TcpStream::connect(&addr).unwrap();
        let request = format!("GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n{auth}\r\n");
        s.write_all(request.as_bytes()).unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        text
    };
    let get = |auth: &str| get_from(addr.as_str(), auth);
    // The server is another process: blocking reads here hold up nothing.
    assert!(get("").starts_with("HTTP/1.1 401"));
    let page = get("Authorization: Bearer s3cret\r\n");
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    assert!(page.contains("data-topic=\"order-cancel\""), "{page}");
    // Host names: localhost, IP addresses, and those given with --allowed-host (DNS rebinding).
    let auth = "Authorization: Bearer s3cret\r\n";
    let page = get_from("dq.internal.example", auth);
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    let page = get_from("evil.example", auth);
    assert!(page.starts_with("HTTP/1.1 421"), "{page}");
    dq_testkit::process::terminate(web.id()).unwrap();
    let status = web.wait().unwrap();
    assert!(status.success(), "stops cleanly on SIGTERM: {status}");
    line.clear();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "dq web: stopped");
}

#[tokio::test]
async fn push_with_unique_for_is_refused_after_success_and_debounce_replaces() {
    let redis = RedisServer::start();
    let (_, store) = client_and_store(&redis).await;
    let push = |topic: &str, id: &str, extra: &[&str]| {
        let mut args = vec!["push", topic, "{}", "--id", id, "--json"];
        args.extend_from_slice(extra);
        json(&dq(&redis, &args))
    };
    let unique = ["--unique-for", "10m"];
    assert_eq!(push("report", "acct-42", &unique)["outcome"], "Created");
    let topic = dq::Topic::new("report").unwrap();
    let leased = store
        .fetch(0, &topic, 1, Duration::from_secs(60))
        .await
        .unwrap();
    store.ack(&[leased.jobs[0].lease.clone()]).await.unwrap();
    let refused = push("report", "acct-42", &unique);
    assert!(
        refused["outcome"].as_str().unwrap().starts_with("Unique"),
        "{refused}"
    );
    let debounce = ["--debounce", "2s"];
    let debounced = push("doc-save", "d7", &debounce);
    assert_eq!(debounced["outcome"], "Created");
    let again = push("doc-save", "d7", &debounce);
    assert_eq!(again["outcome"], "Replaced");
}

#[tokio::test]
async fn schedules_are_listed_paused_resumed_run_and_removed() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    c.schedule("nightly")
        .cron("0 3 * * *")
        .tz("Europe/Paris")
        .topic("cleanup")
        .upsert()
        .await
        .unwrap();
    let listed = json(&dq(&redis, &["schedules", "--json"]));
    assert_eq!(listed[0]["id"], "nightly");
    assert_eq!(listed[0]["repeat"], "cron \"0 3 * * *\" in Europe/Paris");
    assert_eq!(listed[0]["paused"], false);
    let table = ok(&dq(&redis, &["schedules"]));
    assert!(
        table.starts_with("SCHEDULE") && table.contains("cleanup"),
        "{table}"
    );
    assert!(ok(&dq(&redis, &["schedules", "pause", "nightly"])).contains("nightly paused"));
    assert_eq!(
        json(&dq(&redis, &["schedules", "--json"]))[0]["paused"],
        true
    );
    ok(&dq(&redis, &["schedules", "resume", "nightly"]));
    let run = json(&dq(&redis, &["schedules", "run", "nightly", "--json"]));
    let job = run["job"].as_str().unwrap();
    assert!(job.starts_with("nightly@now-"), "{run}");
    assert!(c.status_in("cleanup", job).await.unwrap().is_some());
    ok(&dq(&redis, &["schedules", "remove", "nightly"]));
    let gone = fails(&redis, &["schedules", "pause", "nightly"], 3);
    assert!(gone.contains("no schedule \"nightly\""), "{gone}");
}

/// Issue 30, finding 3: every command of `dq` as the documented least-rights ACL user
/// (`dq::store::ACL_RULES`): nothing refused. `schedules remove` runs an atomic pipeline
/// (MULTI/EXEC), which the documented rules lacked.
#[tokio::test]
async fn every_command_works_as_the_documented_acl_user() {
    let redis = RedisServer::start();
    let mut args = vec!["ACL", "SETUSER", "dqcli", "on", ">s3cret"];
    args.extend(dq::store::ACL_RULES.split_whitespace());
    assert_eq!(redis.command(&args).trim(), "+OK");
    let url = format!("redis://dqcli:s3cret@127.0.0.1:{}/", redis.port());
    let run = |args: &[&str]| {
        let out = dq_on(&url).args(args).output().unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "dq {args:?}: {text}");
        assert!(!text.contains("NOPERM"), "dq {args:?}: {text}");
        text
    };
    let (c, store) = client_and_store(&redis).await;
    c.schedule("nightly")
        .cron("0 3 * * *")
        .topic("cleanup")
        .upsert()
        .await
        .unwrap();
    // The pushes below write job events (XREVRANGE, XADD in the script); `dq events` reads them.
    let t = dq::Topic::new("t").unwrap();
    store.set_events(&t, Some(100)).await.unwrap();
    run(&["push", "t", "{}", "--id", "a", "--in", "10m"]);
    run(&["push", "t", "{}", "--id", "b"]);
    run(&["push", "t", "{}", "--id", "u", "--unique-for", "1m"]);
    // A job with a priority waits in the topic's ranked set (ZADD, ZCOUNT in the listing).
    run(&["push", "t", "{}", "--id", "r", "--priority", "3"]);
    run(&["stats"]);
    run(&["jobs", "t", "--state", "delayed"]);
    run(&["jobs", "t", "--state", "ready"]);
    run(&["show", "t", "a"]);
    run(&["reschedule", "t", "a", "--in", "1h"]);
    run(&["cancel", "t", "a"]);
    run(&["pause", "t"]);
    run(&["resume", "t"]);
    run(&["workers"]);
    // A dead letter, as a worker leaves it.
    assert_eq!(dead_letter_all(&store, "t", 1, "boom").await, 1);
    run(&["dead", "list", "t"]);
    run(&["dead", "retry", "t", "--all"]);
    run(&["dead", "purge", "t", "--older-than", "1d"]);
    run(&["schedules"]);
    run(&["schedules", "pause", "nightly"]);
    run(&["schedules", "resume", "nightly"]);
    run(&["schedules", "run", "nightly"]);
    run(&["schedules", "remove", "nightly"]);
    assert!(c.schedules().await.unwrap().is_empty());
    run(&["events", "t", "--from", "start", "--limit", "2"]);
}

/// `dq events` prints a topic's job events, one line each (JSON with the cursor after each),
/// and a cursor given back with `--from` resumes right after its event.
#[tokio::test]
async fn events_prints_a_topics_job_events_and_resumes_from_a_printed_cursor() {
    let redis = RedisServer::start();
    let (c, store) = client_and_store(&redis).await;
    let topic = dq::Topic::new("mails").unwrap();
    store.set_events(&topic, Some(100)).await.unwrap();
    c.push_json("mails", "{}").id("a").await.unwrap();
    push_delayed(&c, "mails", "b", Duration::from_secs(60)).await;
    let out = dq(
        &redis,
        &[
            "events", "mails", "--from", "start", "--limit", "2", "--json",
        ],
    );
    let lines: Vec<Value> = ok(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(lines[0]["event"], "pushed");
    assert_eq!(lines[0]["id"], "a");
    assert!(lines[0]["due_ms"].is_null(), "ready at once: {}", lines[0]);
    assert!(lines[1]["due_ms"].is_u64(), "b waits: {}", lines[1]);
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(said.contains("--from"), "the cursor to resume from: {said}");
    let cursor = lines[0]["cursor"].as_str().unwrap();
    let next = json(&dq(
        &redis,
        &[
            "events", "mails", "--from", cursor, "--limit", "1", "--json",
        ],
    ));
    assert_eq!(next["id"], "b", "right after a: {next}");
    let text = ok(&dq(
        &redis,
        &["events", "mails", "--from", "start", "--limit", "2"],
    ));
    let b = text
        .lines()
        .find(|l| l.contains("pushed") && l.contains(" b "));
    assert!(b.is_some_and(|l| l.contains("due in")), "{text}");
    let bad = fails(&redis, &["events", "mails", "--from", "yesterday"], 2);
    assert!(bad.contains("yesterday"), "{bad}");
}

/// Issue 32 review (helper-61, finding 11): `dq events` that stopped on an error (here the
/// topic's stream key holds something else) left without the cursor to resume from, which it
/// prints when it stops for any other reason.
#[tokio::test]
async fn events_stopped_by_an_error_still_say_where_to_resume() {
    let redis = RedisServer::start();
    let (c, store) = client_and_store(&redis).await;
    let topic = dq::Topic::new("mails").unwrap();
    store.set_events(&topic, Some(100)).await.unwrap();
    c.push_json("mails", "{}").id("a").await.unwrap();
    let stream = dq::store::ShardKeys::new("dq", 0).events_stream(&topic);
    assert!(redis.command(&["DEL", &stream]).starts_with(':'));
    assert!(redis
        .command(&["SET", &stream, "not a stream"])
        .starts_with('+'));
    let out = dq(
        &redis,
        &["events", "mails", "--from", "start", "--limit", "5"],
    );
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "the error ends it: {said}");
    assert!(said.contains("--from"), "the cursor to resume from: {said}");
}

/// Issue 31: `dq push -` reads the payload from stdin and `dq push @path` from a file, both past
/// the ~128 KiB one command-line argument holds on Linux, and the job stores it byte for byte;
/// a file that cannot be read is named, on one line.
#[tokio::test]
async fn push_reads_a_large_payload_from_stdin_or_a_file() {
    use std::io::Write;
    let redis = RedisServer::start();
    let big = |fill: &str| format!(r#"{{"blob":"{}"}}"#, fill.repeat(250 * 1024));
    let from_file = big("f");
    let path = redis.dir().join("payload.json");
    std::fs::write(&path, &from_file).unwrap();
    let arg = format!("@{}", path.display());
    let pushed = json(&dq(&redis, &["push", "t", &arg, "--id", "file", "--json"]));
    assert_eq!(pushed["outcome"], "Created");

    let from_stdin = big("s");
    let mut child = dq_on(&redis.url())
        .args(["push", "t", "-", "--id", "stdin", "--json"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let written = from_stdin.clone();
    // From another thread: a pipe holds less than the payload, and the output is read meanwhile.
    // The end of the closure closes the pipe, which ends the payload.
    let writer = std::thread::spawn(move || stdin.write_all(written.as_bytes()));
    let out = child.wait_with_output().unwrap();
    // The outcome first: if dq failed without reading, its stderr says more than a broken pipe.
    assert_eq!(json(&out)["outcome"], "Created");
    writer.join().unwrap().unwrap();

    let c = client(&redis).await;
    for (id, sent) in [("file", &from_file), ("stdin", &from_stdin)] {
        let job = c.status_in("t", id).await.unwrap().unwrap();
        // The lengths, then a bare comparison: assert_eq! of the payloads would print 250 KiB.
        assert_eq!(job.payload.len(), sent.len(), "{id}");
        assert!(
            job.payload == sent.as_bytes(),
            "{id}: the stored payload differs"
        );
    }

    let missing = format!("@{}", redis.dir().join("no-such.json").display());
    let said = fails(&redis, &["push", "t", &missing], 1);
    assert!(
        said.contains("cannot read the payload file") && said.contains("no-such.json"),
        "{said}"
    );
    assert_eq!(said.lines().count(), 1, "one line: {said}");
    // `output()` gives the child an empty stdin: said as such, not as a JSON parse error.
    let said = fails(&redis, &["push", "t", "-"], 1);
    assert!(
        said.contains("read from stdin is not JSON: it is empty"),
        "{said}"
    );
}

/// Issue 31: a subcommand's help lists its own options first, the connection ones apart after.
#[test]
fn push_help_lists_its_own_options_before_the_connection_ones() {
    let out = Command::new(env!("CARGO_BIN_EXE_dq"))
        .args(["push", "--help"])
        .output()
        .unwrap();
    let help = ok(&out);
    let at = |text: &str| {
        help.find(text)
            .unwrap_or_else(|| panic!("no {text:?} in {help}"))
    };
    assert!(at("--debounce") < at("Connection:"), "{help}");
    assert!(at("Connection:") < at("--redis-url"), "{help}");
    assert!(help.contains("@FILE"), "{help}");
}

/// `dq` reads the TLS files of the `DQ_*` variables, as the workers do: a Redis whose
/// certificate a private authority signed, asking for a client certificate, is reachable with
/// `DQ_TLS_CA_FILE`, `DQ_TLS_CERT_FILE` and `DQ_TLS_KEY_FILE`, and refused without them.
#[cfg(any(feature = "tls", feature = "rustls"))]
#[test]
fn the_command_reaches_a_tls_redis_with_the_certificate_files_of_the_environment() {
    let redis = RedisServer::start_tls(true);
    let stats = |with_files: bool| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_dq"));
        cmd.args(["--redis-url", &redis.tls_url(), "--json", "stats"])
            .env_remove("DQ_NAMESPACE");
        if with_files {
            cmd.env("DQ_TLS_CA_FILE", redis.tls_file("ca.crt"))
                .env("DQ_TLS_CERT_FILE", redis.tls_file("client.crt"))
                .env("DQ_TLS_KEY_FILE", redis.tls_file("client.key"));
        }
        cmd.output().unwrap()
    };
    ok(&stats(true));
    let refused = stats(false);
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
}

/// `dq rate TOPIC --lift-hold`: ends a handler's hold now, and says when there was none.
#[tokio::test]
async fn rate_lift_hold_ends_a_hold_now() {
    let redis = RedisServer::start();
    let (c, store) = client_and_store(&redis).await;
    c.push_json("t", "{}").await.unwrap();
    let t = dq::Topic::new("t").unwrap();
    store.hold(&t, Duration::from_secs(600)).await.unwrap();
    assert!(
        ok(&dq(&redis, &["stats"])).contains("held"),
        "the hold shows"
    );
    let lifted = json(&dq(&redis, &["rate", "t", "--lift-hold", "--json"]));
    assert_eq!(lifted["lifted"], true);
    assert!(ok(&dq(&redis, &["rate", "t", "--lift-hold"])).contains("no hold"));
}

/// `dq max-pending`: sets the bound a push past which is refused, prints it, lifts it.
#[tokio::test]
async fn max_pending_sets_prints_and_lifts_a_topics_bound() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    assert!(ok(&dq(&redis, &["max-pending", "t"])).contains("no bound"));
    ok(&dq(&redis, &["max-pending", "t", "1"]));
    assert_eq!(c.max_pending("t").await.unwrap(), Some(1));
    assert!(ok(&dq(&redis, &["max-pending", "t"])).contains("at most 1 jobs pending"));
    c.push_json("t", "{}").await.unwrap();
    assert!(
        ok(&dq(&redis, &["stats"])).contains("1 (full)"),
        "dq stats shows the bound"
    );
    let full = c.push_json("t", "{}").await.unwrap_err();
    assert_eq!(full.kind(), dq::ErrorKind::TopicFull, "{full}");
    let said = fails(&redis, &["max-pending", "t", "0"], 2);
    assert!(said.contains("at least 1"), "{said}");
    ok(&dq(&redis, &["max-pending", "t", "off"]));
    assert_eq!(c.max_pending("t").await.unwrap(), None);
    c.push_json("t", "{}").await.unwrap();
}

/// `dq rate`: sets the rate the fetch holds every worker to, prints it, lifts it; `dq stats`
/// shows it.
#[tokio::test]
async fn rate_sets_prints_and_lifts_a_topics_rate_limit() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    assert!(ok(&dq(&redis, &["rate", "t"])).contains("no rate limit"));
    let said = ok(&dq(&redis, &["rate", "t", "100/1s"]));
    assert!(said.contains("one start every 10ms"), "{said}");
    assert_eq!(c.rate("t").await.unwrap(), Some("100/1s".parse().unwrap()));
    c.push_json("t", "{}").await.unwrap();
    let stats = ok(&dq(&redis, &["stats", "--json"]));
    assert!(stats.contains(r#""rate":"100/1s""#), "{stats}");
    // No run yet: none of the rate used (the share itself is tested on the test clock).
    assert!(stats.contains(r#""rate_used":0.0"#), "{stats}");
    assert!(stats.contains(r#""rate_window_minutes":1"#), "{stats}");
    let table = ok(&dq(&redis, &["stats"]));
    assert!(table.contains("100/1s (0% last min)"), "{table}");
    let said = fails(&redis, &["rate", "t", "100"], 2);
    assert!(said.contains("<count>/<period>"), "{said}");
    ok(&dq(&redis, &["rate", "t", "off"]));
    assert_eq!(c.rate("t").await.unwrap(), None);
}

/// `dq events TOPIC --job ID`: one job's history, each failed run's error in order.
#[tokio::test]
async fn events_of_one_job_print_its_history_with_each_runs_error() {
    let redis = RedisServer::start();
    let (c, store) = client_and_store(&redis).await;
    let t = dq::Topic::new("mails").unwrap();
    store.set_events(&t, Some(100)).await.unwrap();
    c.push_json("mails", "{}").id("m1").await.unwrap();
    for error in ["smtp refused", "smtp timeout"] {
        let f = store.fetch(0, &t, 1, Duration::from_secs(60)).await;
        let f = f.unwrap();
        let lease = &f.jobs[0].lease;
        assert!(store.retry(lease, Duration::ZERO, error).await.unwrap());
    }
    let said = ok(&dq(&redis, &["events", "mails", "--job", "m1"]));
    let first = said.find("smtp refused").expect(&said);
    let second = said.find("smtp timeout").expect(&said);
    assert!(first < second, "oldest first: {said}");
    assert_eq!(
        said.lines().count(),
        7,
        "pushed, then two runs of started, failed, retrying: {said}"
    );
    let none = ok(&dq(&redis, &["events", "mails", "--job", "nope"]));
    assert!(none.contains("no events kept for job nope"), "{none}");
}

/// `dq global-concurrency`: sets the limit the fetch holds every worker to, prints it, lifts
/// it; `dq stats` shows the running jobs against it.
#[tokio::test]
async fn global_concurrency_sets_prints_and_lifts_a_topics_limit() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    assert!(ok(&dq(&redis, &["global-concurrency", "t"])).contains("no global concurrency"));
    ok(&dq(&redis, &["global-concurrency", "t", "10"]));
    assert_eq!(c.global_concurrency("t").await.unwrap(), Some(10));
    c.push_json("t", "{}").await.unwrap();
    assert!(ok(&dq(&redis, &["stats"])).contains("0/10"));
    let said = fails(&redis, &["global-concurrency", "t", "0"], 2);
    assert!(said.contains("at least 1"), "{said}");
    ok(&dq(&redis, &["global-concurrency", "t", "off"]));
    assert_eq!(c.global_concurrency("t").await.unwrap(), None);
}

#[tokio::test]
async fn workflow_shows_each_steps_state_and_cancel_cancels_what_has_not_run() {
    let redis = RedisServer::start();
    let (c, store) = client_and_store(&redis).await;
    let mut flow = c.workflow("checkout-1");
    flow.step_to("charge", "charge-card", &1);
    flow.step_to("ship", "ship-order", &2).after("charge");
    flow.step_to("refund", "refund-order", &3)
        .after_with("charge", dq::workflow::OnFailure::Run);
    flow.push().await.unwrap();
    let charge = store
        .fetch(
            0,
            &dq::Topic::new("charge-card").unwrap(),
            1,
            Duration::from_secs(30),
        )
        .await
        .unwrap();
    assert_eq!(charge.jobs.len(), 1);

    let table = ok(&dq(&redis, &["workflow", "checkout-1"]));
    assert!(table.contains("workflow checkout-1: running"), "{table}");
    assert!(table.contains("pending (running)"), "{table}");
    assert!(table.contains("blocked"), "{table}");
    assert!(
        table.contains("charge (run)"),
        "the policy shows when not the default: {table}"
    );
    let v = json(&dq(&redis, &["workflow", "checkout-1", "--json"]));
    assert_eq!(v["state"], "running");
    assert_eq!(v["steps"][1]["step"], "ship");
    assert_eq!(v["steps"][1]["state"], "blocked");
    assert_eq!(v["steps"][2]["after"][0]["on_failure"], "run");

    let v = json(&dq(
        &redis,
        &["workflow", "checkout-1", "--cancel", "--json"],
    ));
    assert_eq!(
        v["steps"], 3,
        "two blocked steps cancelled, the running one asked to stop"
    );
    let v = json(&dq(&redis, &["workflow", "checkout-1", "--json"]));
    assert_eq!(v["cancelled"], true);
    assert_eq!(v["steps"][1]["state"], "cancelled");
    let v = json(&dq(&redis, &["workflows", "checkout-1", "--json"]));
    assert_eq!(
        v["workflow"], "checkout-1",
        "`dq workflows` is the same command"
    );
    let said = fails(&redis, &["workflow", "nothing"], 3);
    assert!(said.contains("no workflow \"nothing\""), "{said}");
}

/// `dq expand` (before a rollback, OPERATIONS.md) moves the jobs stored compact and says how
/// many; the jobs stay delayed, and a second run finds none.
#[tokio::test]
async fn expand_moves_the_jobs_stored_compact_and_says_how_many() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    for id in ["a", "b"] {
        c.push_json("reminders", "{}")
            .id(id)
            .delay(Duration::from_secs(3 * 3600))
            .await
            .unwrap();
    }
    let said = ok(&dq(&redis, &["expand"]));
    assert!(
        said.contains("2 jobs moved out of compact storage"),
        "{said}"
    );
    let again = json(&dq(&redis, &["expand", "--json"]));
    assert_eq!(
        (again["expanded"].as_u64(), again["parts_left"].as_u64()),
        (Some(0), Some(0))
    );
    assert_eq!(stats_row(&redis, "reminders")["delayed"].as_u64(), Some(2));
}
