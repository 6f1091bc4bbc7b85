//! The public API's promises: errors that say their kind, a configuration that cannot reach a
//! store invalid, and a runtime whose failures are reported rather than swallowed.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dq::store::{MemoryStore, RedisStore};
use dq::{Client, Config, ErrorKind, Runtime};

/// A config made invalid after it was built (its fields are public), pointing at a closed port:
/// every entry refuses it with a configuration error before connecting, instead of panicking on
/// `% 0` at the first push.
#[tokio::test]
async fn a_config_made_invalid_after_it_was_built_is_refused_where_it_enters() {
    let mut config = Config::builder()
        .redis_url("redis://127.0.0.1:1/")
        .build()
        .unwrap();
    config.shards = 0;
    let err = Client::connect(config.clone()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Config, "{err}");
    let err = RedisStore::connect(&config).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Config, "{err}");
    let err = Runtime::builder()
        .config(config.clone())
        .without_registered_listeners()
        .start()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Config, "{err}");
}

/// A config read from a file with serde is checked like one built in code.
#[test]
fn a_deserialized_config_is_checked() {
    let err = serde_json::from_str::<Config>(r#"{"shards": 0}"#).unwrap_err();
    assert!(err.to_string().contains("shards"), "{err}");
    let ok: Config = serde_json::from_str(r#"{"shards": 4}"#).unwrap();
    assert_eq!(ok.shards, 4);
}

/// Errors say what kind of failure they are, so that a caller (or dq-chaos) can decide what to
/// do without reading the message.
#[tokio::test]
async fn errors_say_their_kind() {
    let err = dq::Topic::new("a b").unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    let err = Config::builder().lease(Duration::ZERO).build().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Config);
    let closed = Config::builder()
        .redis_url("redis://127.0.0.1:1/")
        .build()
        .unwrap();
    let err = Client::connect(closed).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
}

/// Issue 30 finding 7: push options that mean nothing are refused with the reason, before
/// anything is stored; at the limits, and with a delay of zero (due now), a push goes through.
#[tokio::test]
async fn push_options_that_mean_nothing_are_refused_with_the_reason() {
    let client = Client::new(
        Arc::new(MemoryStore::new()),
        Config::builder().build().unwrap(),
    );
    let refused = |err: dq::Error, says: &str| {
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
        assert!(matches!(err, dq::Error::InvalidPush { .. }), "{err}");
        assert!(
            err.to_string().contains(says),
            "{err} does not say {says:?}"
        );
    };
    let quiet = Duration::from_secs(2);
    let save = || client.push_to("doc-save", &1);
    let report = || client.push_to("report", &1).id("r");
    for (push, says) in [
        (save().debounce(quiet), "debounce needs an id"),
        (save().id("d").debounce(Duration::ZERO), "debounce of 0s"),
        (report().unique_for(Duration::ZERO), "unique_for of 0s"),
        (
            report().max_retries(100_000),
            "100000 retries is over the limit of 1000",
        ),
    ] {
        refused(push.await.unwrap_err(), says);
    }
    // One such push fails its whole batch.
    let batch = vec![
        client.push_to("t", &1).id("ok"),
        client
            .push_to("t", &2)
            .id("x")
            .max_retries(dq::limits::MAX_RETRIES + 1),
    ];
    refused(client.push_batch(batch).await.unwrap_err(), "MAX_RETRIES");
    assert!(
        client.topics().await.unwrap().is_empty(),
        "nothing was stored"
    );
    client
        .push_to("t", &1)
        .id("a")
        .max_retries(dq::limits::MAX_RETRIES)
        .delay(Duration::ZERO)
        .await
        .unwrap();
    let a = client.status_in("t", "a").await.unwrap().unwrap();
    assert_eq!((a.state, a.max_attempts), (dq::JobState::Ready, 1001));
    client
        .push_to("t", &2)
        .id("b")
        .debounce(quiet)
        .await
        .unwrap();
    client
        .push_to("t", &3)
        .unique_by_payload()
        .debounce(quiet)
        .await
        .unwrap();
    assert_eq!(client.counts("t").await.unwrap().delayed, 2);
}

/// A limit of zero is refused by every setter that takes one, with the reason, and leaves the
/// stored value as it was: a group concurrency of 0 is not read as 1 (the listener attribute,
/// the CLI and the other setters refuse it too).
#[tokio::test]
async fn a_limit_of_zero_is_refused_by_every_client_setter() {
    let client = Client::new(
        Arc::new(MemoryStore::new()),
        Config::builder().build().unwrap(),
    );
    client.set_group_concurrency("t", Some(3)).await.unwrap();
    client.set_global_concurrency("t", Some(3)).await.unwrap();
    client.set_max_pending("t", Some(3)).await.unwrap();
    for (err, says) in [
        (
            client
                .set_group_concurrency("t", Some(0))
                .await
                .unwrap_err(),
            "group_concurrency must be at least 1",
        ),
        (
            client
                .set_global_concurrency("t", Some(0))
                .await
                .unwrap_err(),
            "global_concurrency must be at least 1",
        ),
        (
            client.set_max_pending("t", Some(0)).await.unwrap_err(),
            "max_pending must be at least 1",
        ),
    ] {
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
        assert!(
            err.to_string().contains(says),
            "{err} does not say {says:?}"
        );
    }
    assert_eq!(client.group_concurrency("t").await.unwrap(), Some(3));
    assert_eq!(client.global_concurrency("t").await.unwrap(), Some(3));
    assert_eq!(client.max_pending("t").await.unwrap(), Some(3));
}

/// A listener asking for more retries than a push may is refused at start, by name.
#[tokio::test]
async fn a_listener_with_more_retries_than_the_limit_is_refused_at_start() {
    let listener = dq::Listener::new("t", |_: u32, _: dq::JobContext| async {})
        .retries(dq::limits::MAX_RETRIES + 1);
    let err = Runtime::builder()
        .store(Arc::new(MemoryStore::new()))
        .without_registered_listeners()
        .listener(listener)
        .start()
        .await
        .unwrap_err();
    assert!(matches!(err, dq::Error::InvalidListener { .. }), "{err}");
    assert!(err.to_string().contains("MAX_RETRIES"), "{err}");
}

/// A shutdown hook that panics is reported as failed; the hooks after it still run, and
/// `shutdown` returns the report instead of an empty one.
#[tokio::test]
async fn a_shutdown_hook_that_panics_is_reported_and_the_next_hook_still_runs() {
    let ran = Arc::new(AtomicBool::new(false));
    let r = ran.clone();
    let rt = Runtime::builder()
        .store(Arc::new(MemoryStore::new()))
        .without_registered_listeners()
        .on_shutdown("flush the cache", || async { panic!("cache gone") })
        .on_shutdown("close the pool", move || {
            let r = r.clone();
            async move { r.store(true, Ordering::SeqCst) }
        })
        .start()
        .await
        .unwrap();
    let report = rt.shutdown().await.unwrap();
    assert!(ran.load(Ordering::SeqCst), "the second hook ran");
    assert_eq!(
        (report.hooks_completed, report.hooks_failed),
        (1, 1),
        "{report:?}"
    );
}

#[derive(Debug, serde::Serialize, serde::Deserialize, dq::Message)]
#[message(topic = "order-cancel")]
struct OrderCancel {
    order_id: u64,
}

/// A job is cancelled, rescheduled and looked up by its message type, without retyping its
/// topic.
#[tokio::test]
async fn typed_calls_find_the_job_by_its_message_type() {
    let client = Client::new(
        Arc::new(MemoryStore::new()),
        Config::builder().build().unwrap(),
    );
    client
        .push(OrderCancel { order_id: 42 })
        .id("42")
        .delay(Duration::from_secs(600))
        .await
        .unwrap();
    let info = client.status::<OrderCancel>("42").await.unwrap().unwrap();
    assert_eq!(
        (info.topic.as_str(), info.state),
        ("order-cancel", dq::JobState::Delayed)
    );
    let moved = client
        .reschedule::<OrderCancel>("42", dq::Due::After(Duration::ZERO))
        .await
        .unwrap();
    assert_eq!(moved, dq::admin::ChangeOutcome::Done);
    assert_eq!(
        client.cancel::<OrderCancel>("42").await.unwrap(),
        dq::admin::ChangeOutcome::Done
    );
    assert!(client.status::<OrderCancel>("42").await.unwrap().is_none());
}

/// A job state prints as the CLI and the logs name it, and reads back from that name.
#[test]
fn job_states_read_back_what_they_print() {
    use dq::JobState;
    for state in [
        JobState::Delayed,
        JobState::Ready,
        JobState::Running,
        JobState::Dead,
        JobState::Done,
        JobState::Blocked,
    ] {
        assert_eq!(state.to_string().parse::<JobState>().unwrap(), state);
    }
    assert_eq!("DEAD".parse::<JobState>().unwrap(), JobState::Dead);
    let err = "finished".parse::<JobState>().unwrap_err();
    assert!(
        err.contains("delayed, ready, running, dead, done or blocked"),
        "{err}"
    );
}
