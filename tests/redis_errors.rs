//! What a Redis failure says (issue 30, finding 4): each refusal is named for what it is, with
//! its `ErrorKind` and what to do, where every one used to ask "is Redis reachable?". Against
//! real redis-servers: an ACL that denies a command, a wrong password, a full Redis, a replica,
//! and a node of a Redis Cluster reached as a single Redis.

#![allow(clippy::unwrap_used, unreachable_pub)] // test code: a panic is the failure report

mod support;

use dq::ErrorKind;
use support::{client, replica_of, RedisCluster, RedisServer, TestClient};

/// Creates the user `dqapp` (password `s3cret`) with dq's ACL rules but `without` these, and
/// returns the URL that logs in as it.
fn dq_user(redis: &RedisServer, without: &[&str]) -> String {
    let mut args = vec!["ACL", "SETUSER", "dqapp", "on", ">s3cret"];
    args.extend(
        dq::store::ACL_RULES
            .split_whitespace()
            .filter(|r| *r != "\\" && !without.contains(r)),
    );
    assert_eq!(redis.command(&args).trim(), "+OK");
    format!("redis://dqapp:s3cret@127.0.0.1:{}/", redis.port())
}

async fn connect(url: String) -> dq::Result<TestClient> {
    let config = dq::Config::builder()
        .redis_url(url)
        .namespace("test")
        .build()
        .unwrap();
    TestClient::connect(config).await
}

fn says(error: &dq::Error, what: &[&str]) {
    let text = error.to_string();
    for said in what {
        assert!(text.contains(said), "{text:?} does not say {said:?}");
    }
    assert!(
        !text.contains("is Redis reachable"),
        "only an unreachable Redis is asked about: {text}"
    );
}

#[tokio::test]
async fn a_command_the_acl_denies_is_named_with_the_rules_to_grant() {
    let redis = RedisServer::start();
    let c = connect(dq_user(&redis, &["+sadd"])).await.unwrap();
    // Sent as a command (a pause): Redis names it.
    let err = c.pause("t").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Denied, "{err}");
    assert!(!err.is_connection(), "retrying does not grant it: {err}");
    says(&err, &["'sadd' command", "+sadd", "dq::store::ACL_RULES"]);
    // Called by a script (push.lua adds the topic to its set): Redis 7.0 does not name it, and
    // the message says where to look.
    let err = c.push_to("t", &1).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Denied, "{err}");
    says(&err, &["ACL LOG", "dq::store::ACL_RULES"]);
}

#[tokio::test]
async fn a_wrong_password_is_denied_not_unreachable() {
    let redis = RedisServer::start();
    dq_user(&redis, &[]);
    let url = format!("redis://dqapp:wrong@127.0.0.1:{}/", redis.port());
    let err = connect(url)
        .await
        .err()
        .expect("a wrong password is turned away");
    assert_eq!(err.kind(), ErrorKind::Denied, "{err}");
    assert!(!err.is_connection(), "{err}");
    says(&err, &["user and password", "DQ_REDIS_URL"]);
}

#[tokio::test]
async fn a_full_redis_says_it_is_full_and_what_to_do() {
    let redis = RedisServer::start();
    let c = client(&redis).await;
    c.push_to("t", &1).await.unwrap();
    // noeviction is Redis' default policy: a write is refused, nothing is deleted.
    assert_eq!(
        redis.command(&["CONFIG", "SET", "maxmemory", "1"]).trim(),
        "+OK"
    );
    let err = c.push_to("t", &2).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Full, "{err}");
    assert!(!err.is_connection(), "{err}");
    says(&err, &["Redis is full", "nothing was written", "maxmemory"]);
    redis.command(&["CONFIG", "SET", "maxmemory", "0"]);
    c.push_to("t", &3).await.unwrap();
    assert_eq!(
        c.counts("t").await.unwrap().ready,
        2,
        "the refused push wrote nothing"
    );
}

#[tokio::test]
async fn a_replica_refuses_a_push_as_read_only_and_takes_it_once_promoted() {
    let master = RedisServer::start();
    let replica = replica_of(&master);
    let c = client(&replica).await;
    let err = c.push_to("t", &1).id("a").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ReadOnly, "{err}");
    assert!(err.is_connection(), "worth retrying: a failover ends");
    says(&err, &["replica", "DQ_REDIS_URL", "master"]);
    assert_eq!(c.counts("t").await.unwrap().ready, 0);
    // A failover promotes it: the same client's next push goes through, on a new connection.
    assert_eq!(replica.command(&["REPLICAOF", "NO", "ONE"]).trim(), "+OK");
    c.push_to("t", &1).id("a").await.unwrap();
    assert_eq!(c.counts("t").await.unwrap().ready, 1);
}

/// DQ_REDIS_URL naming one node of a cluster: the node that does not hold the shard's slot
/// answers MOVED, for ever; the error says to set DQ_REDIS_CLUSTER.
#[tokio::test]
async fn a_cluster_node_reached_as_a_single_redis_says_to_set_dq_redis_cluster() {
    let cluster = RedisCluster::start(3, 0);
    let mut refused = Vec::new();
    for node in cluster.nodes() {
        let c = connect(node.url()).await.unwrap();
        if let Err(err) = c.push_to("t", &1).id("a").await {
            refused.push(err);
        }
    }
    // One node holds the slot of the one shard, the others redirect.
    assert_eq!(refused.len(), 2, "{refused:?}");
    let err = &refused[0];
    assert_eq!(err.kind(), ErrorKind::Moved, "{err}");
    assert!(!err.is_connection(), "retrying does not help: {err}");
    says(err, &["Redis Cluster", "DQ_REDIS_CLUSTER"]);
}
