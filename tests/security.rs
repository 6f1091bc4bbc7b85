//! Running with the least rights and sharing a Redis safely: the documented ACL is enough for
//! the whole runtime, namespaces never see each other's jobs, and `rediss://` connections
//! verify the server's certificate (and present the client's when Redis asks).

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod support;

use std::time::Duration;

use dq::{JobContext, Listener, Runtime};
use support::RedisServer;

async fn run_one_job(
    url: String,
    namespace: &str,
) -> (Runtime, std::sync::Arc<std::sync::Mutex<Vec<u32>>>) {
    run_with(
        dq::Config::builder()
            .redis_url(url)
            .namespace(namespace)
            .build()
            .unwrap(),
    )
    .await
}

async fn run_with(config: dq::Config) -> (Runtime, std::sync::Arc<std::sync::Mutex<Vec<u32>>>) {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let s = seen.clone();
    let listener = Listener::new("t", move |n: u32, _: JobContext| {
        let s = s.clone();
        async move { s.lock().unwrap().push(n) }
    });
    let rt = Runtime::builder()
        .config(config)
        .without_registered_listeners()
        .listener(listener)
        .start()
        .await
        .unwrap();
    (rt, seen)
}

async fn wait_for(seen: &std::sync::Mutex<Vec<u32>>, n: usize) {
    support::wait_until(
        Duration::from_secs(5),
        || seen.lock().unwrap().len() >= n,
        || format!("only {:?} ran", seen.lock().unwrap()),
    )
    .await;
}

/// Makes user `dqapp` with exactly `ACL_RULES` on `redis`; the URL that logs in as it.
fn least_rights_user(redis: &RedisServer) -> String {
    let mut args = vec!["ACL", "SETUSER", "dqapp", "on", ">s3cret"];
    args.extend(
        dq::store::ACL_RULES
            .split_whitespace()
            .filter(|r| *r != "\\"),
    );
    assert_eq!(redis.command(&args).trim(), "+OK");
    format!("redis://dqapp:s3cret@127.0.0.1:{}/", redis.port())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_acl_is_enough_for_pushing_running_and_administering() {
    let redis = RedisServer::start();
    let url = least_rights_user(&redis);

    let (rt, seen) = run_one_job(url, "app").await;
    let c = rt.client().clone();
    c.push_to("t", &1u32)
        .delay(Duration::from_millis(100))
        .await
        .unwrap();
    c.push_to("t", &2u32).await.unwrap();
    wait_for(&seen, 2).await;
    c.pause("t").await.unwrap();
    c.resume("t").await.unwrap();
    // A workflow's end sets its record's time to live (PEXPIRE).
    let mut flow = c.workflow("w");
    flow.step_to("only", "t", &3u32);
    flow.push().await.unwrap();
    wait_for(&seen, 3).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let state = c.workflow_status("w").await.unwrap().map(|w| w.state);
        if state == Some(dq::workflow::WorkflowState::Succeeded) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "workflow w: {state:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let ttl = redis.command(&["PTTL", "dq:{app:0}:workflow:w"]);
    assert!(
        ttl.trim().trim_start_matches(':').parse::<i64>().unwrap() > 0,
        "the ended workflow's record expires: PTTL {ttl}"
    );
    assert_eq!(c.stats("t").await.unwrap().counts.dead, 0);
    assert!(!c.workers().await.unwrap().is_empty());
    rt.shutdown().await.unwrap();

    // The same user cannot touch keys outside dq's, even with a command dq may use.
    let outside =
        redis::Client::open(format!("redis://dqapp:s3cret@127.0.0.1:{}/", redis.port())).unwrap();
    let mut conn = outside.get_multiplexed_async_connection().await.unwrap();
    let denied: redis::RedisResult<()> = redis::cmd("HSET")
        .arg("other-app:key")
        .arg("f")
        .arg("1")
        .query_async(&mut conn)
        .await;
    let error = denied.unwrap_err().to_string().to_lowercase();
    assert!(error.contains("permission"), "{error}");
    let denied: redis::RedisResult<()> = redis::cmd("FLUSHALL").query_async(&mut conn).await;
    assert!(denied
        .unwrap_err()
        .to_string()
        .to_lowercase()
        .contains("permission"));
}

/// The next item of `stream`, which must come within 10 s.
async fn next_event(stream: &mut dq::events::EventStream) -> dq::events::EventItem {
    let read = tokio::time::timeout(Duration::from_secs(10), stream.recv()).await;
    read.expect("an event within 10 s").unwrap().unwrap()
}

/// A reader of job events under the documented ACL: it reads, and resumes from a saved cursor
/// (whose entry it checks first, for a Redis gone back to an older state).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_acl_is_enough_for_reading_job_events_and_resuming_them() {
    use dq::events::{EventCursor, EventItem};
    let redis = RedisServer::start();
    let config = dq::Config::builder()
        .redis_url(least_rights_user(&redis))
        .namespace("app")
        .build()
        .unwrap();
    let listener = Listener::new("e", |_: u32| async {}).events(true);
    let rt = Runtime::builder()
        .config(config)
        .without_registered_listeners()
        .listener(listener)
        .start()
        .await
        .unwrap();
    let c = rt.client().clone();
    let later = Duration::from_secs(600);
    let mut events = c.events_from("e", EventCursor::start()).await.unwrap();
    c.push_to("e", &1u32).id("a").delay(later).await.unwrap();
    let EventItem::Event { cursor, .. } = next_event(&mut events).await else {
        panic!("an event");
    };
    c.push_to("e", &2u32).id("b").delay(later).await.unwrap();
    let mut resumed = c.events_from("e", cursor).await.unwrap();
    match next_event(&mut resumed).await {
        EventItem::Event { event, .. } => assert_eq!(event.id.as_str(), "b"),
        other => panic!("{other:?}"),
    }
    rt.shutdown().await.unwrap();
}

#[test]
fn operations_md_gives_exactly_the_least_rights_rules_of_dq() {
    let doc = include_str!("../OPERATIONS.md");
    let line = doc
        .lines()
        .find(|l| l.contains("ACL SETUSER dq on >PASSWORD"))
        .unwrap();
    let documented: Vec<&str> = line
        .split_whitespace()
        .skip_while(|w| *w != ">PASSWORD")
        .skip(1)
        .collect();
    let rules: Vec<&str> = dq::store::ACL_RULES
        .split_whitespace()
        .filter(|r| *r != "\\")
        .collect();
    assert_eq!(documented, rules);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_namespaces_on_one_redis_never_see_each_others_jobs() {
    let redis = RedisServer::start();
    let (a, seen_a) = run_one_job(redis.url(), "shop-a").await;
    let (b, seen_b) = run_one_job(redis.url(), "shop-b").await;
    a.client().push_to("t", &1u32).await.unwrap();
    b.client().push_to("t", &2u32).await.unwrap();
    b.client().push_to("t", &3u32).await.unwrap();
    wait_for(&seen_a, 1).await;
    wait_for(&seen_b, 2).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(*seen_a.lock().unwrap(), [1]);
    let mut got_b = seen_b.lock().unwrap().clone();
    got_b.sort();
    assert_eq!(got_b, [2, 3]);
    a.client()
        .push_to("only-a", &4u32)
        .delay(Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(b.client().counts("only-a").await.unwrap().delayed, 0);
    assert!(!b
        .client()
        .topics()
        .await
        .unwrap()
        .iter()
        .any(|t| t.as_str() == "only-a"));
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// A config for the TLS port of `redis`, trusting the test's certificate authority.
#[cfg(any(feature = "tls", feature = "rustls"))]
fn trusting_the_test_ca(redis: &RedisServer) -> dq::config::ConfigBuilder {
    let tls = dq::Config::builder().redis_url(redis.tls_url());
    tls.tls_ca_file(redis.tls_file("ca.crt"))
}

/// A runtime with `config` runs the job `n` it is given, and nothing else.
#[cfg(any(feature = "tls", feature = "rustls"))]
async fn runs_the_one_job(config: dq::Config, n: u32) {
    let (rt, seen) = run_with(config).await;
    rt.client().push_to("t", &n).await.unwrap();
    wait_for(&seen, 1).await;
    assert_eq!(*seen.lock().unwrap(), vec![n]);
    rt.shutdown().await.unwrap();
}

#[cfg(any(feature = "tls", feature = "rustls"))] // scripts/test: rustls, then OpenSSL
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_run_over_tls_with_a_private_certificate_authority() {
    let redis = RedisServer::start_tls(false);
    let config = trusting_the_test_ca(&redis).build().unwrap();
    runs_the_one_job(config, 7).await;
}

#[cfg(any(feature = "tls", feature = "rustls"))] // scripts/test: rustls, then OpenSSL
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_certificate_from_an_unknown_authority_is_refused() {
    let redis = RedisServer::start_tls(false);
    // No CA file: the system's trust store does not know the test's authority.
    let config = dq::Config::builder().redis_url(redis.tls_url());
    let err = dq::Client::connect(config.build().unwrap()).await;
    let err = err.unwrap_err().to_string();
    // Which library refused it: scripts/test runs these tests once with rustls (all features:
    // rustls wins) and once with OpenSSL alone.
    let by = if cfg!(feature = "rustls") {
        "invalid peer certificate: UnknownIssuer"
    } else {
        "certificate verify failed"
    };
    assert!(err.contains(by), "{err}");
}

#[cfg(any(feature = "tls", feature = "rustls"))] // scripts/test: rustls, then OpenSSL
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_requires_client_certificates_accepts_the_configured_one() {
    let redis = RedisServer::start_tls(true);
    assert!(
        dq::Client::connect(trusting_the_test_ca(&redis).build().unwrap())
            .await
            .is_err(),
        "a client without a certificate must be turned away"
    );
    let config = trusting_the_test_ca(&redis)
        .tls_client_cert(redis.tls_file("client.crt"), redis.tls_file("client.key"))
        .build()
        .unwrap();
    runs_the_one_job(config, 8).await;
}

/// Sets up `dqapp` with the documented rules on `redis`; its URL.
fn acl_user(redis: &RedisServer) -> String {
    let mut args = vec!["ACL", "SETUSER", "dqapp", "on", ">s3cret"];
    args.extend(dq::store::ACL_RULES.split_whitespace());
    assert_eq!(redis.command(&args).trim(), "+OK");
    format!("redis://dqapp:s3cret@127.0.0.1:{}/", redis.port())
}

/// Groups (README "Groups") as the documented ACL user: grouped pushes that wait for their
/// group's slot, a cancel of a waiting one, a wider group concurrency, a group rate, the stats
/// that list the busiest groups, and runs that hand each slot on: nothing is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_acl_user_runs_groups() {
    let redis = RedisServer::start();
    let config = dq::Config::builder()
        .redis_url(acl_user(&redis))
        .namespace("acl")
        .build()
        .unwrap();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let s = seen.clone();
    let listener = Listener::new("g", move |n: u32, _: JobContext| {
        let s = s.clone();
        async move { s.lock().unwrap().push(n) }
    });
    let c = dq::Client::connect(config.clone()).await.unwrap();
    for n in 0..6u32 {
        c.push_to("g", &n)
            .id(format!("j{n}"))
            .group(format!("acct-{}", n % 2))
            .await
            .unwrap();
    }
    c.cancel_in("g", "j4").await.unwrap();
    let stats = c.stats("g").await.unwrap();
    assert_eq!(stats.busiest_groups.len(), 2, "{stats:?}");
    c.set_group_concurrency("g", Some(2)).await.unwrap();
    // The fetch's group rate path too (at this rate, a burst of 10 of a group start at once).
    c.set_group_rate("g", Some("1000/1s".parse().unwrap()))
        .await
        .unwrap();
    let rt = Runtime::builder()
        .config(config)
        .without_registered_listeners()
        .listener(listener)
        .start()
        .await
        .unwrap();
    wait_for(&seen, 5).await;
    rt.shutdown().await.unwrap();
}

/// Issue 30, finding 3: the documented ACL lacked `multi`/`exec` (removing a schedule),
/// `wait` (`DQ_WAIT_REPLICAS`) and `asking` (reshards). Every operation of the client's API,
/// with the runtime running jobs, failing them into dead letters and firing a schedule, and
/// pushes that wait for a replica, as the documented user: nothing is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_acl_user_is_refused_no_documented_operation() {
    use dq::admin::Cursor;
    use dq::JobState;
    let redis = RedisServer::start();
    let _replica = support::replica_of(&redis);
    let url = acl_user(&redis);
    let config = dq::Config::builder()
        .redis_url(url)
        .namespace("acl")
        .shards(2)
        .wait_replicas(1, Duration::from_secs(2))
        .build()
        .unwrap();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let s = seen.clone();
    let ok = Listener::new("t", move |n: u32, _: JobContext| {
        let s = s.clone();
        async move { s.lock().unwrap().push(n) }
    });
    let failing = Listener::new("fails", |_: u32, _: JobContext| async {
        Err::<(), _>("no".to_owned())
    })
    .retries(0);
    let rt = Runtime::builder()
        .config(config)
        .without_registered_listeners()
        .listener(ok)
        .listener(failing)
        .start()
        .await
        .unwrap();
    let c = rt.client().clone();
    // Pushing, in every form.
    c.push_to("t", &1u32).await.unwrap();
    c.push_to("t", &2u32)
        .id("later")
        .delay(Duration::from_secs(600))
        .await
        .unwrap();
    c.push_to("t", &3u32)
        .id("unique")
        .unique_for(Duration::from_secs(60))
        .await
        .unwrap();
    c.push_to("t", &4u32)
        .id("debounced")
        .debounce(Duration::from_millis(50))
        .await
        .unwrap();
    c.push_batch((5..8u32).map(|n| c.push_to("t", &n)))
        .await
        .unwrap();
    c.push_to("fails", &0u32).id("doomed").await.unwrap();
    wait_for(&seen, 6).await;
    // Looking and changing.
    c.reschedule_in("t", "later", dq::Due::After(Duration::from_secs(900)))
        .await
        .unwrap();
    assert!(c.status_in("t", "later").await.unwrap().is_some());
    for state in [
        JobState::Delayed,
        JobState::Ready,
        JobState::Running,
        JobState::Dead,
    ] {
        c.jobs("t", state, Cursor::START, 10).await.unwrap();
    }
    c.counts("t").await.unwrap();
    c.stats("t").await.unwrap();
    c.throughput("t").await.unwrap();
    c.topics().await.unwrap();
    c.workers().await.unwrap();
    c.cancel_in("t", "later").await.unwrap();
    c.pause("t").await.unwrap();
    c.resume("t").await.unwrap();
    // Dead letters.
    let mut dead = 0;
    for _ in 0..100 {
        dead = c.counts("fails").await.unwrap().dead;
        if dead == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(dead, 1);
    c.jobs("fails", JobState::Dead, Cursor::START, 10)
        .await
        .unwrap();
    assert_eq!(c.retry_dead("fails", &["doomed"]).await.unwrap(), 1);
    for _ in 0..100 {
        if c.counts("fails").await.unwrap().dead == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(c.delete_dead("fails", &["doomed"]).await.unwrap(), 1);
    c.purge_dead("fails", Duration::ZERO).await.unwrap();
    c.retry_all_dead().await.unwrap();
    // Schedules: declared, fired by the runtime, paused, resumed, run now, removed (MULTI).
    c.schedule("beat")
        .every(Duration::from_secs(1))
        .message_to("t", &100u32)
        .upsert()
        .await
        .unwrap();
    wait_for(&seen, 7).await;
    c.schedules().await.unwrap();
    assert!(c.pause_schedule("beat").await.unwrap());
    assert!(c.resume_schedule("beat").await.unwrap());
    c.run_schedule_now("beat").await.unwrap();
    assert!(c.unschedule("beat").await.unwrap());
    rt.shutdown().await.unwrap();
}
