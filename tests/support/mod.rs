//! Shared set-up for the integration tests: a real redis-server per test.
#![allow(dead_code, unreachable_pub, unused_imports)]

use dq::{Client, Config};
pub use dq_testkit::{RedisCluster, RedisServer};

pub async fn client(redis: &RedisServer) -> Client {
    client_with(redis, |b| b).await
}

pub async fn client_with(
    redis: &RedisServer,
    tweak: impl FnOnce(dq::ConfigBuilder) -> dq::ConfigBuilder,
) -> Client {
    let config = tweak(Config::builder().redis_url(redis.url()).namespace("test"))
        .build()
        .expect("valid test config");
    Client::connect(config)
        .await
        .expect("connect to test redis")
}

pub fn topic(name: &str) -> dq::Topic {
    dq::Topic::new(name).expect("valid topic")
}

pub fn id(name: &str) -> dq::JobId {
    dq::JobId::new(name).expect("valid id")
}
