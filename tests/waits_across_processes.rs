//! Waiting for a job's end across OS processes: the test is the producer, and the worker is
//! this test binary run again (`worker_process_entry_point`), with a client and a runtime of
//! its own. On one redis-server and on a Redis Cluster of 3 masters (16 shards), the producer
//! gets the value the worker's handler returned, a dead job's last error, a clear answer for a
//! record that is gone (its retention passed, or purged), and a clean timeout for a job nobody
//! runs in time; and a wait goes on through a restart of Redis, and through a failover of the
//! cluster master that holds its job, and gets the value.

#![allow(clippy::unwrap_used, unreachable_pub)] // test code: a panic is the failure report

mod support;

use std::time::{Duration, Instant};

use dq::{Client, JobResult, JobState, Listener, Runtime};
use serde::{Deserialize, Serialize};
use support::worker::{self, Target, WorkerProcess};
use support::{RedisCluster, RedisServer};

/// The namespace of parent and worker.
const NAMESPACE: &str = "waits";
/// The test the worker process runs, and its role.
const ENTRY: &str = "worker_process_entry_point";
const ROLE: &str = "invoicing";

/// Answered with a receipt; kept an hour.
const INVOICE: &str = "invoice";
/// Always fails with [`DECLINED_ERROR`]; kept an hour.
const DECLINED: &str = "declined";
/// Answered with a receipt; kept one second.
const BRIEF: &str = "brief";
const DECLINED_ERROR: &str = "the card was declined";

/// How long the records of [`INVOICE`] and [`DECLINED`] are kept.
const RETAIN: Duration = Duration::from_secs(3600);
/// How long the records of [`BRIEF`] are kept.
const BRIEFLY: Duration = Duration::from_secs(1);

/// Longest wait for a job the worker runs (generous: a loaded machine).
const WAIT: Duration = Duration::from_secs(20);
/// A wait that answers without waiting answers within this.
const AT_ONCE: Duration = Duration::from_secs(2);

#[derive(Debug, Serialize, Deserialize)]
struct Invoice {
    order_id: u64,
}

/// What the worker's handlers return.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Receipt {
    number: String,
    cents: u64,
}

fn receipt_of(order_id: u64) -> Receipt {
    Receipt {
        number: format!("R-{order_id}"),
        cents: order_id * 100,
    }
}

/// The worker process: runs the three topics above on the target its parent named, until it
/// is killed. Returns at once in a normal test run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_process_entry_point() {
    let Some((role, target)) = worker::role() else {
        return;
    };
    assert_eq!(role, ROLE, "a role this file does not know");
    let answering = |topic: &str| {
        Listener::new(topic, |msg: Invoice| async move {
            Ok::<_, String>(receipt_of(msg.order_id))
        })
    };
    let declining = Listener::new(DECLINED, |_: Invoice| async move {
        Err::<Receipt, _>(DECLINED_ERROR)
    });
    let rt = Runtime::builder()
        .config(target.config(NAMESPACE).build().unwrap())
        .without_registered_listeners()
        .listener(answering(INVOICE).retain(RETAIN))
        .listener(declining.retain(RETAIN))
        .listener(answering(BRIEF).retain(BRIEFLY))
        .start()
        .await
        .unwrap();
    worker::serve(rt).await;
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    Redis,
    Cluster,
}

/// A store of `kind`, a worker process running on it, and the producer's own client.
struct Setup {
    producer: Client,
    /// Killed before the store goes (fields drop in order).
    _worker: WorkerProcess,
    _redis: Option<RedisServer>,
    _cluster: Option<RedisCluster>,
}

impl Setup {
    async fn start(kind: Kind) -> Setup {
        let (redis, cluster, target) = match kind {
            Kind::Redis => {
                let redis = RedisServer::start();
                let target = Target::server(&redis);
                (Some(redis), None, target)
            }
            Kind::Cluster => {
                let cluster = RedisCluster::start(3, 0);
                let target = Target::cluster(&cluster);
                (None, Some(cluster), target)
            }
        };
        let worker = WorkerProcess::start(ENTRY, ROLE, &target);
        Setup {
            producer: producer(&target).await,
            _worker: worker,
            _redis: redis,
            _cluster: cluster,
        }
    }
}

/// The producer's client on `target`, in the worker's namespace.
async fn producer(target: &Target) -> Client {
    let config = target.config(NAMESPACE).build().unwrap();
    Client::connect(config).await.unwrap()
}

/// Pushes `Invoice { order_id }` to `topic` as job `id`, due now.
async fn push(client: &Client, topic: &str, id: &str, order_id: u64) {
    let invoice = Invoice { order_id };
    client.push_to(topic, &invoice).id(id).await.unwrap();
}

/// Waits (at most [`WAIT`]) for the end of job `id` of `topic`.
async fn wait(client: &Client, topic: &str, id: &str) -> JobResult<Receipt> {
    client.wait_in::<Receipt>(topic, id, WAIT).await.unwrap()
}

/// Each behaviour as a test on one redis-server and on a cluster.
macro_rules! on_redis_and_cluster {
    ($($name:ident),* $(,)?) => {
        mod on_redis {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() { super::$name(super::Kind::Redis).await })*
        }
        mod on_cluster {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() { super::$name(super::Kind::Cluster).await })*
        }
    };
}

on_redis_and_cluster!(
    a_producer_process_gets_the_values_a_worker_process_returns,
    a_dead_job_ends_the_wait_with_its_last_error,
    a_wait_for_a_record_past_its_retention_answers_not_found,
    a_wait_for_a_purged_dead_letter_answers_not_found,
    a_wait_on_a_job_nobody_runs_in_time_times_out_cleanly,
);

/// Several jobs, each waited for at once by the producer (on the cluster these eight lie in
/// shards of all three masters).
async fn a_producer_process_gets_the_values_a_worker_process_returns(kind: Kind) {
    let setup = Setup::start(kind).await;
    let c = &setup.producer;
    let orders: Vec<u64> = (1..=8).collect();
    for &order_id in &orders {
        push(c, INVOICE, &format!("order-{order_id}"), order_id).await;
    }
    let waits = orders.iter().map(|order_id| async move {
        let id = format!("order-{order_id}");
        (*order_id, wait(c, INVOICE, &id).await)
    });
    for (order_id, answer) in futures_util::future::join_all(waits).await {
        assert_eq!(
            answer,
            JobResult::Succeeded(receipt_of(order_id)),
            "order {order_id}"
        );
    }
}

async fn a_dead_job_ends_the_wait_with_its_last_error(kind: Kind) {
    let setup = Setup::start(kind).await;
    let c = &setup.producer;
    let invoice = Invoice { order_id: 3 };
    let pushed = c.push_to(DECLINED, &invoice).id("card").max_retries(0);
    pushed.await.unwrap();

    match wait(c, DECLINED, "card").await {
        JobResult::Dead { error, attempts } => {
            assert!(error.contains(DECLINED_ERROR), "{error}");
            assert_eq!(attempts, 1, "max_retries(0): one run");
        }
        other => panic!("the job should be dead, not {other:?}"),
    }
}

/// A record outlives its topic's retention (1 s here) until a later ack in its shard trims it;
/// then a wait for it says there is no such job, at once.
async fn a_wait_for_a_record_past_its_retention_answers_not_found(kind: Kind) {
    let setup = Setup::start(kind).await;
    let c = &setup.producer;
    push(c, BRIEF, "first", 1).await;
    assert_eq!(
        wait(c, BRIEF, "first").await,
        JobResult::Succeeded(receipt_of(1))
    );

    tokio::time::sleep(BRIEFLY * 2).await;
    let next = same_shard_as(c, BRIEF, "first");
    push(c, BRIEF, &next, 2).await;
    assert_eq!(
        wait(c, BRIEF, &next).await,
        JobResult::Succeeded(receipt_of(2))
    );

    let begun = Instant::now();
    assert_eq!(wait(c, BRIEF, "first").await, JobResult::NotFound);
    assert!(begun.elapsed() < AT_ONCE, "took {:?}", begun.elapsed());
}

/// An id other than `id` whose job lies in the same shard (the ack of a job trims the records
/// of its own shard).
fn same_shard_as(c: &Client, topic: &str, id: &str) -> String {
    let topic = dq::Topic::new(topic).unwrap();
    let shards = c.config().shards;
    let shard = |job: &str| dq::store::shard_of(&topic, &dq::JobId::new(job).unwrap(), shards);
    (1u32..)
        .map(|n| format!("{id}-{n}"))
        .find(|other| shard(other.as_str()) == shard(id))
        .unwrap()
}

async fn a_wait_for_a_purged_dead_letter_answers_not_found(kind: Kind) {
    let setup = Setup::start(kind).await;
    let c = &setup.producer;
    let invoice = Invoice { order_id: 4 };
    let pushed = c.push_to(DECLINED, &invoice).id("card").max_retries(0);
    pushed.await.unwrap();
    let dead = wait(c, DECLINED, "card").await;
    assert!(matches!(dead, JobResult::Dead { .. }), "{dead:?}");

    assert_eq!(c.purge_dead(DECLINED, Duration::ZERO).await.unwrap(), 1);
    let begun = Instant::now();
    assert_eq!(wait(c, DECLINED, "card").await, JobResult::NotFound);
    assert!(begun.elapsed() < AT_ONCE, "took {:?}", begun.elapsed());
}

async fn a_wait_on_a_job_nobody_runs_in_time_times_out_cleanly(kind: Kind) {
    let setup = Setup::start(kind).await;
    let c = &setup.producer;
    let invoice = Invoice { order_id: 5 };
    let later = c.push_to(INVOICE, &invoice).id("later");
    later.delay(Duration::from_secs(3600)).await.unwrap();

    let timeout = Duration::from_secs(1);
    let begun = Instant::now();
    let answer = c.wait_in::<Receipt>(INVOICE, "later", timeout).await;
    let took = begun.elapsed();
    assert_eq!(answer.unwrap(), JobResult::Pending);
    assert!(
        took >= timeout - Duration::from_millis(100) && took <= timeout + Duration::from_secs(1),
        "a wait of {timeout:?} took {took:?}"
    );
    let info = c.status_in(INVOICE, "later").await.unwrap().unwrap();
    assert_eq!(info.state, JobState::Delayed, "the job is as it was");
}

/// Redis restarted (SIGKILL, then the same port and data) while a producer waits: the worker
/// runs the job once Redis is back, and the wait, which lost its subscription and its
/// connection, gets the value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_goes_on_through_a_restart_of_redis_and_gets_the_value() {
    // Every write on disk before its reply: the restart loses nothing.
    let mut redis = RedisServer::start_with(&[
        "--save",
        "",
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
    ]);
    let target = Target::server(&redis);
    let _worker = WorkerProcess::start(ENTRY, ROLE, &target);
    let c = producer(&target).await;
    let invoice = Invoice { order_id: 9 };
    let pushed = c.push_to(INVOICE, &invoice).id("through");
    pushed.delay(Duration::from_secs(5)).await.unwrap();

    let waiting = {
        let c = c.clone();
        tokio::spawn(async move { c.wait_in::<Receipt>(INVOICE, "through", WAIT).await })
    };
    until_a_wait_listens(&redis).await;
    assert!(
        !waiting.is_finished(),
        "the wait ended before the restart: nothing would be tested"
    );
    redis.restart();

    let answer = waiting.await.unwrap();
    assert_eq!(answer.unwrap(), JobResult::Succeeded(receipt_of(9)));
}

/// Issue 32: a wait in flight while the cluster master holding its job fails over to its
/// replica (`CLUSTER FAILOVER`, as an operator's maintenance does) goes on, and gets the value
/// when the worker runs the job after the failover, soon after it is due, not at a later look.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_goes_on_through_a_failover_of_its_jobs_master_and_gets_the_value() {
    let cluster = RedisCluster::start(3, 1);
    let target = Target::cluster(&cluster);
    let _worker = WorkerProcess::start(ENTRY, ROLE, &target);
    let c = producer(&target).await;
    let id = "failover";
    let topic = dq::Topic::new(INVOICE).unwrap();
    let shard = dq::store::shard_of(&topic, &dq::JobId::new(id).unwrap(), c.config().shards);
    let master = cluster.master_of(&dq::store::ShardKeys::new(NAMESPACE, shard).jobs());
    let replica = cluster
        .nodes()
        .iter()
        .find(|n| {
            let info = n.command(&["INFO", "replication"]);
            let port = format!("master_port:{master}");
            info.contains("role:slave") && info.lines().any(|l| l.trim() == port)
        })
        .expect("the master of the job's shard has a replica");
    let delay = Duration::from_secs(8);
    let pushed_at = Instant::now();
    c.push_to(INVOICE, &Invoice { order_id: 7 })
        .id(id)
        .delay(delay)
        .await
        .unwrap();
    let waiting = {
        let c = c.clone();
        tokio::spawn(async move {
            let answer = c.wait_in::<Receipt>(INVOICE, id, WAIT).await;
            (answer, Instant::now())
        })
    };
    // The wait listens before the failover: its look was made on the old master.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(replica.command(&["CLUSTER", "FAILOVER"]).trim(), "+OK");
    support::wait_until(
        Duration::from_secs(5),
        || {
            replica
                .command(&["INFO", "replication"])
                .contains("role:master")
        },
        || "the failover did not happen",
    )
    .await;
    assert!(
        pushed_at.elapsed() < delay && !waiting.is_finished(),
        "the failover ended after the job was due: nothing would be tested"
    );
    let (answer, answered_at) = waiting.await.unwrap();
    assert_eq!(answer.unwrap(), JobResult::Succeeded(receipt_of(7)));
    let after_due = answered_at.duration_since(pushed_at).saturating_sub(delay);
    assert!(
        after_due < AT_ONCE,
        "answered {after_due:?} after the job was due: the end was not heard"
    );
}

/// Waits (10 s at most) until a wait's subscription to the job ends is in place.
async fn until_a_wait_listens(redis: &RedisServer) {
    let channel = dq::store::ShardKeys::new(NAMESPACE, 0).ended_channel();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        // `*2 $<n> <channel> :<subscribers>`: the count is the last line.
        let reply = redis.command(&["PUBSUB", "NUMSUB", &channel]);
        let count = reply.lines().last().and_then(|l| l.strip_prefix(':'));
        if count.is_some_and(|n| n != "0") {
            return;
        }
        assert!(Instant::now() < deadline, "no wait listens: {reply:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
