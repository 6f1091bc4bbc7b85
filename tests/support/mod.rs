//! Shared set-up for the integration tests: a real redis-server per test.
#![allow(dead_code, unreachable_pub, unused_imports)]

use std::sync::Arc;

use dq::store::{RedisStore, Store};
use dq::{Client, Config};
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
