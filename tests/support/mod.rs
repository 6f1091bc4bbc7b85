//! Shared set-up for the integration tests: a real redis-server per test.
#![allow(dead_code, unreachable_pub, unused_imports)]

pub mod faulty;
pub mod groups;
pub mod worker;

use std::sync::Arc;
use std::time::{Duration, Instant};

use dq::store::{RedisStore, Store};
use dq::{Client, Config, JobInfo, JobState, Listener, Runtime};
pub use dq_testkit::{RedisCluster, RedisServer};

/// A client and the store under it, which tests drive directly (a `Client` does not hand its
/// store out); derefs to the client.
#[derive(Clone)]
pub struct TestClient {
    client: Client,
    store: Arc<dyn Store>,
}

impl TestClient {
    pub fn new(store: Arc<dyn Store>, config: Config) -> TestClient {
        TestClient {
            client: Client::new(store.clone(), config),
            store,
        }
    }

    /// Connects to the Redis (or cluster) of `config`, as `Client::connect` does.
    pub async fn connect(config: Config) -> dq::Result<TestClient> {
        let store = RedisStore::connect(&config).await?;
        Ok(TestClient::new(Arc::new(store), config))
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    pub fn client(&self) -> &Client {
        &self.client
    }
}

impl std::ops::Deref for TestClient {
    type Target = Client;

    fn deref(&self) -> &Client {
        &self.client
    }
}

pub async fn client(redis: &RedisServer) -> TestClient {
    client_with(redis, |b| b).await
}

pub async fn client_with(
    redis: &RedisServer,
    tweak: impl FnOnce(dq::config::ConfigBuilder) -> dq::config::ConfigBuilder,
) -> TestClient {
    let config = tweak(Config::builder().redis_url(redis.url()).namespace("test"))
        .build()
        .expect("valid test config");
    TestClient::connect(config)
        .await
        .expect("connect to test redis")
}

pub fn topic(name: &str) -> dq::Topic {
    dq::Topic::new(name).expect("valid topic")
}

pub fn id(name: &str) -> dq::JobId {
    dq::JobId::new(name).expect("valid id")
}

/// The message most store tests push.
#[derive(Debug, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct OrderCancel {
    pub order_id: u64,
}

impl dq::Message for OrderCancel {
    const TOPIC: &'static str = "order-cancel";
}

/// The lease store tests take jobs with.
pub const LEASE: std::time::Duration = std::time::Duration::from_secs(10);

/// A config for `redis` (default namespace).
pub fn config(redis: &RedisServer) -> Config {
    Config::builder()
        .redis_url(redis.url())
        .build()
        .expect("valid test config")
}

/// A config for `redis` (namespace `test`, as [`client`]'s) whose safety tick, an hour, never
/// comes during a test: only what the test does, and the wake-ups that causes, moves jobs.
pub fn no_safety_tick(redis: &RedisServer) -> dq::config::ConfigBuilder {
    Config::builder()
        .redis_url(redis.url())
        .namespace("test")
        .safety_tick(Duration::from_secs(3600))
}

/// A runtime with `config`, on `store` when given, with only `listener`.
pub async fn start_on(
    config: Config,
    store: Option<Arc<dyn Store>>,
    listener: Listener,
) -> Runtime {
    let mut builder = Runtime::builder().config(config);
    if let Some(store) = store {
        builder = builder.store(store);
    }
    builder
        .without_registered_listeners()
        .listener(listener)
        .start()
        .await
        .expect("start the test runtime")
}

/// A runtime on `redis` ([`no_safety_tick`]) with only `listener`.
pub async fn runtime_with(redis: &RedisServer, listener: Listener) -> Runtime {
    let config = no_safety_tick(redis).build().expect("valid test config");
    start_on(config, None, listener).await
}

/// Polls a job until it is dead-lettered (5 s at most).
pub async fn wait_until_dead(c: &Client, topic_name: &str, id: &str) -> JobInfo {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let info = c.status_in(topic_name, id).await.expect("status");
        match info {
            Some(info) if info.state == JobState::Dead => return info,
            _ => assert!(
                Instant::now() < deadline,
                "{topic_name}:{id} never dead: {info:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Polls a job until it finished (its record is gone; 5 s at most).
pub async fn wait_until_done(c: &Client, topic_name: &str, id: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while let Some(info) = c.status_in(topic_name, id).await.expect("status") {
        assert!(
            Instant::now() < deadline,
            "{topic_name}:{id} never done: {info:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Polls `done` every 5 ms until it holds; fails the test with `what()` after `limit`.
pub async fn wait_until<D: std::fmt::Display>(
    limit: std::time::Duration,
    mut done: impl FnMut() -> bool,
    what: impl Fn() -> D,
) {
    let deadline = std::time::Instant::now() + limit;
    while !done() {
        assert!(std::time::Instant::now() < deadline, "{}", what());
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

/// The state of a job, or `None` when there is no such job.
pub async fn state_of(client: &Client, topic: &str, id: &str) -> Option<dq::JobState> {
    let info = client.status_in(topic, id).await.expect("status");
    info.map(|info| info.state)
}

/// Pushes `OrderCancel { order_id }` as job `id`, due after `delay`.
pub async fn push_order(c: &Client, order_id: u64, id: &str, delay: std::time::Duration) {
    c.push(OrderCancel { order_id })
        .id(id)
        .delay(delay)
        .await
        .expect("push");
}

/// Leases the first ready job of `topic` in shard 0 (fails the test when there is none).
/// Each lease as a run that succeeded (its first, no value), to ack.
pub fn succeeded<'l>(
    leases: impl IntoIterator<Item = &'l dq::store::LeaseRef>,
) -> Vec<dq::store::Succeeded> {
    leases
        .into_iter()
        .map(|lease| dq::store::Succeeded {
            lease: lease.clone(),
            result: None,
            run: 1,
        })
        .collect()
}

pub async fn lease_one(store: &Arc<dyn Store>, topic_name: &str) -> dq::store::LeasedJob {
    let mut fetched = store
        .fetch(0, &topic(topic_name), 1, LEASE)
        .await
        .expect("fetch");
    assert!(!fetched.jobs.is_empty(), "no ready job of {topic_name}");
    fetched.jobs.remove(0)
}

/// A replica of `master` (no persistence), caught up.
pub fn replica_of(master: &RedisServer) -> RedisServer {
    let port = master.port().to_string();
    let replica = RedisServer::start_with(&[
        "--save",
        "",
        "--appendonly",
        "no",
        "--replicaof",
        "127.0.0.1",
        &port,
    ]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !replica
        .command(&["INFO", "replication"])
        .contains("master_link_status:up")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the replica never synced"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    replica
}
