//! A live reshard of dq's slot (issue 15, finding 1): while a slot is MIGRATING, a script that
//! meets a key the old node lacks is aborted where it stands and Redis keeps what it already
//! wrote. Every dq script touches its keys before its first write, so an aborted call changes
//! nothing, and the job runs once the slot has moved.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dq::{Client, JobContext, JobState, Listener, Runtime, Schedule};
use support::{topic, RedisCluster, RedisServer};

const LEASE: Duration = Duration::from_secs(30);

fn config(cluster: &RedisCluster) -> dq::Config {
    dq::Config::builder()
        .redis_cluster(cluster.urls())
        .shards(1)
        .namespace("mig")
        .lease(Duration::from_secs(2))
        .build()
        .unwrap()
}

/// The text of a bulk or integer reply of `RedisServer::command`.
fn reply_text(reply: &str) -> String {
    reply
        .lines()
        .nth(1)
        .unwrap_or(reply.trim_start_matches([':', '+']))
        .trim()
        .to_owned()
}

fn node_id(node: &RedisServer) -> String {
    reply_text(&node.command(&["CLUSTER", "MYID"]))
}

/// Every key of the slot on `node` with its DUMP: equal snapshots mean nothing was written.
fn snapshot(node: &RedisServer, slot: &str) -> Vec<(String, String)> {
    let keys = node.command(&["CLUSTER", "GETKEYSINSLOT", slot, "1000"]);
    let mut names: Vec<String> = keys
        .lines()
        .filter(|l| !l.starts_with('*') && !l.starts_with('$'))
        .map(str::to_owned)
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|k| {
            let dump = node.command(&["DUMP", &k]);
            (k, dump)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operation_refused_while_its_slot_migrates_changes_nothing_and_no_job_is_lost() {
    let cluster = RedisCluster::start(3, 0);
    let c = Client::connect(config(&cluster)).await.unwrap();
    let s = c.store().clone();
    let jobs_key = "dq:{mig:0}:jobs";
    let source_port = cluster.master_of(jobs_key);
    let source = cluster.node(source_port);
    let target = cluster
        .masters()
        .into_iter()
        .find(|n| n.port() != source_port)
        .unwrap();
    let slot = reply_text(&source.command(&["CLUSTER", "KEYSLOT", jobs_key]));

    // State that every script finds: a job far ahead (delayed exists), one running (inflight and
    // leases exist), and the jobs each operation below is tried on.
    c.push_to("keep", &0)
        .id("far")
        .delay(Duration::from_secs(3600))
        .await
        .unwrap();
    c.push_to("run", &0).id("held").await.unwrap();
    let held = s
        .fetch(0, &topic("run"), 1, LEASE)
        .await
        .unwrap()
        .jobs
        .remove(0);
    c.push_to("promote", &0)
        .id("p")
        .delay(Duration::from_millis(200))
        .await
        .unwrap();
    c.push_to("retry", &0).id("r").await.unwrap();
    let r = s
        .fetch(0, &topic("retry"), 1, LEASE)
        .await
        .unwrap()
        .jobs
        .remove(0);
    c.push_to("release", &0).id("l").await.unwrap();
    let l = s
        .fetch(0, &topic("release"), 1, LEASE)
        .await
        .unwrap()
        .jobs
        .remove(0);
    c.push_to("reclaim", &0).id("x").await.unwrap();
    let _ = s
        .fetch(0, &topic("reclaim"), 1, Duration::from_millis(1))
        .await
        .unwrap();
    c.push_to("resched", &0)
        .id("d")
        .delay(Duration::from_secs(600))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await; // "p" is due, "x"'s lease expired

    // The slot starts moving to the other master; no key has moved yet, and none of the ready
    // lists the operations write exists on the old node.
    let (src_id, dst_id) = (node_id(source), node_id(target));
    assert!(target
        .command(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &src_id])
        .starts_with("+OK"));
    assert!(source
        .command(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &dst_id])
        .starts_with("+OK"));

    let mut before = snapshot(source, &slot);
    let mut refused = Vec::new();
    let mut check = |what: &str, failed: bool| {
        let after = snapshot(source, &slot);
        if failed {
            assert_eq!(
                after, before,
                "{what} was aborted midway and left a partial write"
            );
            refused.push(what.to_owned());
        } else {
            before = after;
        }
    };
    check("promote", s.promote(0, 1000).await.is_err());
    check("push", c.push_to("fresh", &1).id("f").await.is_err());
    check(
        "retry",
        s.retry(&r.lease, Duration::ZERO, "boom").await.is_err(),
    );
    check(
        "release",
        s.release(std::slice::from_ref(&l.lease)).await.is_err(),
    );
    check("reclaim", s.reclaim(0, 1000).await.is_err());
    check(
        "reschedule",
        c.reschedule("resched", "d", Schedule::After(Duration::ZERO))
            .await
            .is_err(),
    );
    assert_eq!(
        refused,
        [
            "promote",
            "push",
            "retry",
            "release",
            "reclaim",
            "reschedule"
        ],
        "each needs a key the old node lacks"
    );

    // The migration is called off (as `redis-cli --cluster fix` would): everything goes through.
    assert!(source
        .command(&["CLUSTER", "SETSLOT", &slot, "STABLE"])
        .starts_with("+OK"));
    assert!(target
        .command(&["CLUSTER", "SETSLOT", &slot, "STABLE"])
        .starts_with("+OK"));
    assert!(s.retry(&r.lease, Duration::ZERO, "boom").await.unwrap());
    assert_eq!(s.release(std::slice::from_ref(&l.lease)).await.unwrap(), 1);
    assert!(s.release(std::slice::from_ref(&held.lease)).await.unwrap() == 1);
    c.push_to("fresh", &1).id("f").await.unwrap();
    c.reschedule("resched", "d", Schedule::After(Duration::ZERO))
        .await
        .unwrap();

    let seen: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    let mut b = Runtime::builder()
        .config(config(&cluster))
        .without_registered_listeners();
    for t in [
        "run", "promote", "retry", "release", "reclaim", "fresh", "resched",
    ] {
        let seen = seen.clone();
        b = b.listener(Listener::new(t, move |_: u32, ctx: JobContext| {
            let seen = seen.clone();
            async move {
                *seen
                    .lock()
                    .unwrap()
                    .entry(ctx.id().to_string())
                    .or_default() += 1;
            }
        }));
    }
    let rt = b.start().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while seen.lock().unwrap().len() < 7 {
        assert!(
            Instant::now() < deadline,
            "jobs lost: only {:?} ran",
            seen.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    rt.shutdown().await.unwrap();
    let seen = seen.lock().unwrap().clone();
    for id in ["held", "p", "r", "l", "x", "f", "d"] {
        assert_eq!(seen.get(id), Some(&1), "{id} ran once: {seen:?}");
    }
    let far = c.status("keep", "far").await.unwrap().unwrap();
    assert_eq!(far.state, JobState::Delayed);
}
