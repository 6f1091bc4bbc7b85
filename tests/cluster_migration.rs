//! A live reshard of dq's slot (issue 15, finding 1): while a slot is MIGRATING, a script that
//! meets a key the old node lacks is aborted where it stands and Redis keeps what it already
//! wrote. Every dq script touches its keys before its first write, so an aborted call changes
//! nothing, and the job runs once the slot has moved.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod support;

use std::collections::HashMap;
use std::future::IntoFuture;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dq::{Client, Due, JobContext, JobState, Listener, Runtime};
use support::{lease_one, topic, RedisCluster, RedisServer, TestClient};

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
/// The master holding shard 0, another master to move it to, and shard 0's slot.
fn shard_zero_and_another_master(cluster: &RedisCluster) -> (&RedisServer, &RedisServer, String) {
    let jobs_key = "dq:{mig:0}:jobs";
    let source_port = cluster.master_of(jobs_key);
    let source = cluster.node(source_port);
    let target = cluster
        .masters()
        .into_iter()
        .find(|n| n.port() != source_port)
        .unwrap();
    let slot = reply_text(&source.command(&["CLUSTER", "KEYSLOT", jobs_key]));
    (source, target, slot)
}

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
    let c = TestClient::connect(config(&cluster)).await.unwrap();
    let s = c.store().clone();
    let (source, target, slot) = shard_zero_and_another_master(&cluster);

    // State that every script finds: a delayed job (delayed exists: two minutes ahead, not
    // far enough to be stored compact), one running (inflight and leases exist), and the jobs
    // each operation below is tried on.
    c.push_to("keep", &0)
        .id("far")
        .delay(Duration::from_secs(120))
        .await
        .unwrap();
    c.push_to("run", &0).id("held").await.unwrap();
    let held = lease_one(&s, "run").await;
    let (r, l) = stage(&c, &s).await;

    // The slot starts moving to the other master; no key has moved yet, and none of the ready
    // lists the operations write exists on the old node.
    begin_migration(source, target, &slot);

    let before = snapshot(source, &slot);
    let refused = try_each_operation(&c, &s, &r.lease, &l.lease).await;
    assert_eq!(
        refused.len(),
        6,
        "each needs a key the old node lacks: {refused:?}"
    );
    assert_eq!(
        snapshot(source, &slot),
        before,
        "an operation was aborted midway and left a partial write"
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
    c.reschedule_in("resched", "d", Due::After(Duration::ZERO))
        .await
        .unwrap();

    let mut topics = vec!["run"];
    topics.extend(TOPICS);
    let expected = ["held", "p", "r", "l", "x", "f", "d"].map(String::from);
    run_each_once(&cluster, &topics, &expected).await;
    let far = c.status_in("keep", "far").await.unwrap().unwrap();
    assert_eq!(far.state, JobState::Delayed);
}

/// The topics of the jobs `stage` leaves, and of the push `try_each_operation` tries.
const TOPICS: [&str; 6] = ["promote", "retry", "release", "reclaim", "resched", "fresh"];

/// Jobs for every operation to find: "p" due, "r" and "l" running (their leases returned),
/// "x" running with an expired lease, "d" delayed for 10 minutes.
async fn stage(
    c: &Client,
    s: &Arc<dyn dq::store::Store>,
) -> (dq::store::LeasedJob, dq::store::LeasedJob) {
    c.push_to("promote", &0)
        .id("p")
        .delay(Duration::from_millis(200))
        .await
        .unwrap();
    let mut leased = Vec::new();
    for (t, id) in [("retry", "r"), ("release", "l")] {
        c.push_to(t, &0).id(id).await.unwrap();
        leased.push(
            s.fetch(0, &topic(t), 1, LEASE)
                .await
                .unwrap()
                .jobs
                .remove(0),
        );
    }
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
    let l = leased.pop().unwrap();
    (leased.pop().unwrap(), l)
}

/// Marks `slot` as moving from `source` to `target` (IMPORTING, then MIGRATING); returns the
/// target's node id.
fn begin_migration(source: &RedisServer, target: &RedisServer, slot: &str) -> String {
    let (src_id, dst_id) = (node_id(source), node_id(target));
    assert!(target
        .command(&["CLUSTER", "SETSLOT", slot, "IMPORTING", &src_id])
        .starts_with("+OK"));
    assert!(source
        .command(&["CLUSTER", "SETSLOT", slot, "MIGRATING", &dst_id])
        .starts_with("+OK"));
    dst_id
}

/// Runs a runtime with a listener on each of `topics` until every id of `expected` ran;
/// asserts each ran once.
async fn run_each_once(cluster: &RedisCluster, topics: &[&str], expected: &[String]) {
    let seen: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    let mut b = Runtime::builder()
        .config(config(cluster))
        .without_registered_listeners();
    for t in topics {
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
    support::wait_until(
        Duration::from_secs(20),
        || {
            !(expected
                .iter()
                .any(|id| !seen.lock().unwrap().contains_key(id)))
        },
        || format!("jobs lost: only {:?} ran", seen.lock().unwrap()),
    )
    .await;
    rt.shutdown().await.unwrap();
    let seen = seen.lock().unwrap().clone();
    for id in expected {
        assert_eq!(seen.get(id), Some(&1), "{id} ran once: {seen:?}");
    }
}

/// Tries promote, push, retry, release, reclaim and reschedule (to now) at once (each waits
/// out the cluster client's retries of TRYAGAIN); returns the ones refused.
async fn try_each_operation(
    c: &Client,
    s: &Arc<dyn dq::store::Store>,
    r: &dq::store::LeaseRef,
    l: &dq::store::LeaseRef,
) -> Vec<&'static str> {
    let (promote, push, retry, release, reclaim, reschedule) = tokio::join!(
        s.promote(0, 1000),
        c.push_to("fresh", &1).id("f").into_future(),
        s.retry(r, Duration::ZERO, "boom"),
        s.release(std::slice::from_ref(l)),
        s.reclaim(0, 1000),
        c.reschedule_in("resched", "d", Due::After(Duration::ZERO)),
    );
    [
        ("promote", promote.is_err()),
        ("push", push.is_err()),
        ("retry", retry.is_err()),
        ("release", release.is_err()),
        ("reclaim", reclaim.is_err()),
        ("reschedule", reschedule.is_err()),
    ]
    .into_iter()
    .filter_map(|(what, refused)| refused.then_some(what))
    .collect()
}

/// The keys of `slot` on `node` whose names contain none of `keep` (the ones to move first).
fn keys_except(node: &RedisServer, slot: &str, keep: &[&str]) -> Vec<String> {
    snapshot(node, slot)
        .into_iter()
        .map(|(k, _)| k)
        .filter(|k| !keep.iter().any(|s| k.contains(s)))
        .collect()
}

/// Moves `keys` from `source` to `target` as `redis-cli --cluster reshard` does (MIGRATE,
/// without REPLACE: a key the target already has fails the reshard with BUSYKEY).
fn migrate(source: &RedisServer, target: &RedisServer, keys: &[String]) {
    if keys.is_empty() {
        return;
    }
    let port = target.port().to_string();
    let mut args = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
    args.extend(keys.iter().map(String::as_str));
    let reply = source.command(&args);
    assert!(reply.starts_with("+OK"), "MIGRATE failed: {reply}");
}

/// The keys of `after` that `before` lacks (snapshots of one node).
fn new_keys<'a>(before: &[(String, String)], after: &'a [(String, String)]) -> Vec<&'a String> {
    after
        .iter()
        .filter(|k| !before.iter().any(|o| o.0 == k.0))
        .map(|k| &k.0)
        .collect()
}

/// Moves the keys `source` still holds of `slot` to `target` and gives the slot to `target`
/// (node id `dst_id`) on every master.
fn finish_migration(
    cluster: &RedisCluster,
    source: &RedisServer,
    target: &RedisServer,
    slot: &str,
    dst_id: &str,
) {
    migrate(source, target, &keys_except(source, slot, &[]));
    for node in cluster.masters() {
        assert!(node
            .command(&["CLUSTER", "SETSLOT", slot, "NODE", dst_id])
            .starts_with("+OK"));
    }
}

/// The other side of a live reshard: every key an operation used to declare has moved to the
/// new node, but a ready list it writes without declaring it has not. Redis sends the script
/// there (ASK), where that list reads as empty, and the write creates a second list on the new
/// node: the reshard then fails with BUSYKEY when it moves the old one (or, with REPLACE,
/// overwrites the new entries). Every key is declared now, so Redis refuses the call (TRYAGAIN)
/// while they are split, and nothing is written on either node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operation_whose_keys_are_split_between_two_nodes_is_refused_and_the_reshard_completes()
{
    let cluster = RedisCluster::start(3, 0);
    let c = TestClient::connect(config(&cluster)).await.unwrap();
    let s = c.store().clone();
    let (source, target, slot) = shard_zero_and_another_master(&cluster);

    let (r, l) = stage(&c, &s).await;
    // Each topic's ready list holds a job on the old node.
    for t in TOPICS {
        c.push_to(t, &0).id(format!("{t}-waiting")).await.unwrap();
    }

    // The slot starts moving, and every key but the ready lists moves.
    let dst_id = begin_migration(source, target, &slot);
    migrate(source, target, &keys_except(source, &slot, &[":ready:"]));

    let (on_source, on_target) = (snapshot(source, &slot), snapshot(target, &slot));
    let refused = try_each_operation(&c, &s, &r.lease, &l.lease).await;
    let (src, dst) = (snapshot(source, &slot), snapshot(target, &slot));
    let created = new_keys(&on_target, &dst);
    assert!(
        refused.len() == 6 && src == on_source && dst == on_target,
        "operations ran with their keys split between the nodes: refused only {refused:?}; new keys on the new node: {created:?}"
    );

    // The reshard completes: the ready lists move (no BUSYKEY), the slot is the new node's.
    finish_migration(&cluster, source, target, &slot, &dst_id);
    assert!(s.retry(&r.lease, Duration::ZERO, "boom").await.unwrap());
    assert_eq!(s.release(std::slice::from_ref(&l.lease)).await.unwrap(), 1);
    c.push_to("fresh", &1).id("f").await.unwrap();
    c.reschedule_in("resched", "d", Due::After(Duration::ZERO))
        .await
        .unwrap();

    let mut expected: Vec<String> = ["p", "r", "l", "x", "d", "f"].map(String::from).to_vec();
    expected.extend(TOPICS.iter().map(|t| format!("{t}-waiting")));
    run_each_once(&cluster, &TOPICS, &expected).await;
}

/// Issue 30, finding 3: the documented ACL user through a reshard. While dq's slot is moving
/// and its keys are on the new node, the old node answers ASK and the cluster client follows it
/// with ASKING, which the documented rules lacked: every call was refused until the slot moved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_acl_user_follows_a_reshard() {
    let cluster = RedisCluster::start(3, 0);
    for node in cluster.nodes() {
        let mut args = vec!["ACL", "SETUSER", "dqapp", "on", ">s3cret"];
        args.extend(dq::store::ACL_RULES.split_whitespace());
        assert_eq!(node.command(&args).trim(), "+OK");
    }
    let urls: Vec<String> = cluster
        .urls()
        .iter()
        .map(|u| u.replacen("redis://", "redis://dqapp:s3cret@", 1))
        .collect();
    let acl = dq::Config::builder()
        .redis_cluster(urls)
        .shards(1)
        .namespace("mig")
        .build()
        .unwrap();
    let c = TestClient::connect(acl).await.unwrap();
    let nightly = c.schedule("nightly").cron("0 3 * * *");
    nightly.topic("cleanup").upsert().await.unwrap();
    c.push_to("t", &1).id("before").await.unwrap();
    let (source, target, slot) = shard_zero_and_another_master(&cluster);
    let dst_id = begin_migration(source, target, &slot);
    migrate(source, target, &keys_except(source, &slot, &[]));
    // Every key is on the new node, the slot still the old one's: a read is sent there by ASK
    // (the cluster client follows it with ASKING).
    c.workers().await.expect("workers read through ASK");
    for node in cluster.masters() {
        assert!(node
            .command(&["CLUSTER", "SETSLOT", &slot, "NODE", &dst_id])
            .starts_with("+OK"));
    }
    c.push_to("t", &2).id("after").await.unwrap();
    run_each_once(&cluster, &["t"], &["before".into(), "after".into()]).await;
}

/// Issue 33 review (helper-28, finding 1): a throttled fetch looked at its ready list again
/// after its batch had been trimmed off it (to say whether the consumer should come back when
/// the rate allows), when the trim may have deleted the list: while the slot migrated, Redis
/// aborted the script there, with the job leased to nobody until its lease ran out (a run
/// counted that never happened). Now the fetch reads the list's length before its first write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttled_fetch_that_empties_its_ready_list_while_its_slot_migrates_leases_its_job() {
    let cluster = RedisCluster::start(3, 0);
    let c = TestClient::connect(config(&cluster)).await.unwrap();
    let s = c.store().clone();
    let (source, target, slot) = shard_zero_and_another_master(&cluster);
    // Every key the fetch names exists on the old node, so Redis runs it: the paused set,
    // the events (the topic's stream too), a delayed job, a running job with a cancel asked,
    // the consumer's record of its last fetch, the topic's generations (a replaced ready job),
    // its limits (the rate), its ranked set (a job of priority -1, which waits behind `a`), its
    // dead letters, its kept successes and its groups' times under a group rate. (The delayed
    // job two minutes ahead: one due further ahead is stored compact, out of `delayed`.)
    c.pause("other").await.unwrap();
    s.set_events(&topic("slow"), Some(100)).await.unwrap();
    c.push_to("keep", &0)
        .id("far")
        .delay(Duration::from_secs(120))
        .await
        .unwrap();
    c.push_to("run", &0).id("held").await.unwrap();
    let _held = lease_one(&s, "run").await;
    c.cancel_in("run", "held").await.unwrap();
    c.push_to("slow", &0).id("z").await.unwrap();
    let consumer = |nonce| dq::store::Fetcher::new("c", nonce, Vec::new());
    let first = s.fetch_for(0, &topic("slow"), 1, LEASE, &consumer(1)).await;
    let first = first.unwrap().jobs;
    assert_eq!(first.len(), 1);
    let retention = dq::store::Retention {
        age: Duration::from_secs(3600),
        count: 10,
    };
    s.set_retention(&topic("slow"), Some(retention))
        .await
        .unwrap();
    let ok = dq::store::Succeeded {
        lease: first[0].lease.clone(),
        result: None,
        run: 1,
    };
    s.ack_succeeded(&[ok]).await.unwrap();
    c.push_to("slow", &0).id("d").await.unwrap();
    let doomed = lease_one(&s, "slow").await;
    assert!(s.dead_letter(&doomed.lease, "boom").await.unwrap());
    // A group rate, and a group that has used it (its time is kept in `gtat:slow`).
    c.set_group_rate("slow", Some("1/1h".parse().unwrap()))
        .await
        .unwrap();
    c.push_to("slow", &0).id("g").group("acct").await.unwrap();
    let _g = lease_one(&s, "slow").await;
    c.set_rate("slow", Some("1/1m".parse().unwrap()))
        .await
        .unwrap();
    c.push_to("slow", &0).id("a").await.unwrap();
    c.push_to("slow", &1).id("a").replace().await.unwrap();
    c.push_to("slow", &2).id("low").priority(-1).await.unwrap();
    begin_migration(source, target, &slot);
    // One job may start (the burst): the fetch takes it and empties the list.
    let during = s
        .fetch_for(0, &topic("slow"), 10, LEASE, &consumer(2))
        .await;
    for node in [source, target] {
        assert!(node
            .command(&["CLUSTER", "SETSLOT", &slot, "STABLE"])
            .starts_with("+OK"));
    }
    let during = during.expect("every key the fetch reads was there when it began");
    let ids: Vec<String> = during.jobs.iter().map(|j| j.lease.id.to_string()).collect();
    assert_eq!(ids, ["a"]);
}

/// Review of events_off.lua (helper-63, finding 2): it deleted the topic's field of `events`
/// before writing `<topic>:n` there; with the topic the hash's only field, the delete removed
/// the hash and the write that followed was refused while the slot migrated ("non local key"):
/// events left on and the stream kept. The number is now written first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turning_events_off_while_the_slot_migrates_goes_through() {
    let cluster = RedisCluster::start(3, 0);
    let c = TestClient::connect(config(&cluster)).await.unwrap();
    let s = c.store().clone();
    let (source, target, slot) = shard_zero_and_another_master(&cluster);
    s.set_events(&topic("only"), Some(100)).await.unwrap();
    c.push_to("only", &0).id("a").await.unwrap();
    begin_migration(source, target, &slot);
    let off = s.set_events(&topic("only"), None).await;
    for node in [source, target] {
        assert!(node
            .command(&["CLUSTER", "SETSLOT", &slot, "STABLE"])
            .starts_with("+OK"));
    }
    off.expect("turned off while its slot migrates");
    let kept = reply_text(&source.command(&["HGET", "dq:{mig:0}:events", "only:n"]));
    assert_eq!(kept, "1", "the number of its last event is kept");
    let on = source.command(&["HEXISTS", "dq:{mig:0}:events", "only"]);
    assert_eq!(reply_text(&on), "0", "its events are off");
}

/// Makes every key an ack, a push, a promotion, a cancel and a status of topic "grp" (and of
/// "run") declare exist, as in a busy namespace: Redis sends a script to the new node of a
/// moving slot only when every key it declares is there (one missing makes it TRYAGAIN), so a
/// test that a call is refused for the one key that has not moved needs all the others.
async fn stage_every_key(c: &TestClient, source: &RedisServer) {
    let s = c.store().clone();
    // Events and a retention on; a kept success ("k1", with a
    // reservation), a dead letter ("d1"), a running job of another topic with a cancel asked
    // and a progress; a delayed job with a reservation; a replaced ready job ("a"), one of
    // priority -1 ("low"). Two keys no API call here makes are set as dq would: a schedule's
    // tick fence and the mark of a listening wait.
    let grp = topic("grp");
    s.set_events(&grp, Some(100)).await.unwrap();
    let retention = dq::store::Retention {
        age: Duration::from_secs(3600),
        count: 10,
    };
    s.set_retention(&grp, Some(retention)).await.unwrap();
    c.push_to("grp", &0)
        .id("k1")
        .unique_for(Duration::from_secs(3600))
        .await
        .unwrap();
    let k1 = lease_one(&s, "grp").await;
    let kept = dq::store::Succeeded {
        lease: k1.lease.clone(),
        result: None,
        run: 1,
    };
    s.ack_succeeded(&[kept]).await.unwrap();
    c.push_to("grp", &0).id("d1").await.unwrap();
    let d1 = lease_one(&s, "grp").await;
    assert!(s.dead_letter(&d1.lease, "boom").await.unwrap());
    c.push_to("run", &0).id("held").await.unwrap();
    let held = lease_one(&s, "run").await;
    assert!(s.progress(&held.lease, b"1").await.unwrap());
    c.cancel_in("run", "held").await.unwrap();
    // (A promotion declares every topic this client has pushed to: "run"'s keys too.)
    s.set_events(&topic("run"), Some(100)).await.unwrap();
    c.push_to("run", &0).id("r2").await.unwrap();
    c.push_to("run", &1).id("r2").replace().await.unwrap();
    c.push_to("run", &2).id("r3").priority(-1).await.unwrap();
    c.push_to("grp", &0)
        .id("later")
        .unique_for(Duration::from_secs(3600))
        .delay(Duration::from_secs(120))
        .await
        .unwrap();
    // A bound on "run" (the `limits` hash), a workflow with a step blocked (`workflows`), a
    // job due hours ahead (`far`, `farn`: lib.lua's far jobs), and a kept record of "grp"
    // taken out by a push of its id (`done:grp:taken`).
    c.set_max_pending("run", Some(1_000_000)).await.unwrap();
    let mut flow = c.workflow("wf");
    flow.step_to("s1", "run", &0);
    flow.step_to("s2", "run", &0).after("s1");
    flow.push().await.unwrap();
    c.push_to("run", &0)
        .id("later-far")
        .delay(Duration::from_secs(2 * 3600))
        .await
        .unwrap();
    c.push_to("grp", &0).id("k2").await.unwrap();
    let k2 = lease_one(&s, "grp").await;
    let kept = dq::store::Succeeded {
        lease: k2.lease.clone(),
        result: None,
        run: 1,
    };
    s.ack_succeeded(&[kept]).await.unwrap();
    c.push_to("grp", &0).id("k2").await.unwrap();
    lease_one(&s, "grp").await; // (left running: the tests lease their own jobs next)
    let prefix = "dq:{mig:0}:";
    for key in ["limits", "workflows", "far", "farn", "done:grp:taken"] {
        let exists = source.command(&["EXISTS", &format!("{prefix}{key}")]);
        assert_eq!(exists.trim(), ":1", "{key}");
    }
    source.command(&["HSET", &format!("{prefix}tick_fence"), "none", "0:0"]);
    source.command(&["SET", &format!("{prefix}waiting"), "1", "PX", "600000"]);
}

/// Issue 33 (noticed in the review of issue 34): the keys of a group (`gq:<topic>:<group>`, the
/// list of its parked jobs, and the topic's group counts) were named inside the scripts and not
/// declared. Once every declared key had moved to the new node, Redis sent a grouped topic's
/// ack there (ASK), where the group's list, not moved yet, read as empty: the slot went back
/// and the parked job waited for good. A push or promotion that parked a job there started a
/// second list on the new node, and the reshard then failed with BUSYKEY. Now every call
/// declares them (those it cannot name beforehand after a first call that names them), so
/// Redis refuses each of these while the keys are split, and nothing is written on either node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grouped_operation_whose_group_list_has_not_moved_is_refused_and_no_job_waits_for_good() {
    let cluster = RedisCluster::start(3, 0);
    let c = TestClient::connect(config(&cluster)).await.unwrap();
    let s = c.store().clone();
    let (source, target, slot) = shard_zero_and_another_master(&cluster);

    stage_every_key(&c, source).await;

    // Group "acct" runs one job at a time: "g1" runs, "g2" waits in the group's list, "g4" is
    // due in 200 ms and will wait there too.
    c.push_to("grp", &0).id("g1").group("acct").await.unwrap();
    let g1 = lease_one(&s, "grp").await;
    assert_eq!(g1.lease.id.as_str(), "g1");
    c.push_to("grp", &0).id("g2").group("acct").await.unwrap();
    c.push_to("grp", &0)
        .id("g4")
        .group("acct")
        .delay(Duration::from_millis(200))
        .await
        .unwrap();
    c.push_to("grp", &0).id("a").await.unwrap();
    c.push_to("grp", &1).id("a").replace().await.unwrap();
    c.push_to("grp", &2).id("low").priority(-1).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;

    // (The promotion by a process that has pushed to no topic: it declares only the topics of
    // the due jobs it finds, "grp" here, whose keys all exist; one that declared "run" too
    // would be refused for "run"'s group keys, which do not exist, whatever it did with the
    // group's list.)
    let mover = TestClient::connect(config(&cluster)).await.unwrap();

    // The slot starts moving, and every key but the group's list moves.
    let dst_id = begin_migration(source, target, &slot);
    migrate(source, target, &keys_except(source, &slot, &[":gq:"]));

    let (on_source, on_target) = (snapshot(source, &slot), snapshot(target, &slot));
    let done = dq::store::Succeeded {
        lease: g1.lease.clone(),
        result: None,
        run: 1,
    };
    let (ack, push, promote) = tokio::join!(
        s.ack_succeeded(std::slice::from_ref(&done)),
        c.push_to("grp", &0).id("g3").group("acct").into_future(),
        mover.store().promote(0, 1000),
    );
    let (src, dst) = (snapshot(source, &slot), snapshot(target, &slot));
    let ran: Vec<&str> = [
        ("ack", ack.is_ok()),
        ("push", push.is_ok()),
        ("promote", promote.is_ok()),
    ]
    .into_iter()
    .filter_map(|(what, ran)| ran.then_some(what))
    .collect();
    let created = new_keys(&on_target, &dst);
    assert!(
        ran.is_empty() && src == on_source && dst == on_target,
        "grouped operations ran with their group's list on the other node: {ran:?} ran; new keys on the new node: {created:?}"
    );

    // The reshard completes (the group's list moves: no BUSYKEY), and every job runs once, in
    // its turn.
    finish_migration(&cluster, source, target, &slot, &dst_id);
    assert_eq!(s.ack_succeeded(&[done]).await.unwrap().acked, 1);
    c.push_to("grp", &0).id("g3").group("acct").await.unwrap();
    let expected = ["g2", "g4", "g3", "a", "low"].map(String::from);
    run_each_once(&cluster, &["grp"], &expected).await;
}

/// Far jobs (README, "How jobs are stored") while their slot moves: every key has moved to the
/// new node but the part that holds them. The scripts name a part from what they read (`far`,
/// `farn`, an index entry), so each first call stops to name it (lib.lua's `need`), and the
/// call made with it declared is refused while the keys are split (TRYAGAIN): nothing is read
/// as empty on the new node, nothing written on either, and every job runs once afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operation_on_far_jobs_whose_part_has_not_moved_is_refused_and_no_job_is_lost() {
    let cluster = RedisCluster::start(3, 0);
    let c = TestClient::connect(config(&cluster)).await.unwrap();
    let s = c.store().clone();
    let (source, target, slot) = shard_zero_and_another_master(&cluster);
    stage_every_key(&c, source).await;
    // And the rest of what the calls below declare: "grp"'s groups (one running, one waiting),
    // a replaced ready job, one with a priority, a cancelled one's mark.
    c.push_to("grp", &0).id("g1").group("acct").await.unwrap();
    let g1 = lease_one(&s, "grp").await;
    c.push_to("grp", &0).id("g2").group("acct").await.unwrap();
    c.push_to("grp", &0).id("a").await.unwrap();
    c.push_to("grp", &1).id("a").replace().await.unwrap();
    c.push_to("grp", &2).id("low").priority(-1).await.unwrap();
    c.push_to("grp", &0)
        .id("gone")
        .delay(Duration::from_secs(60))
        .await
        .unwrap();
    c.cancel_in("grp", "gone").await.unwrap();

    // Far jobs: "fa", "fb", "fc", "fe" in one part; a new one, "fd", will be pushed with an id
    // whose index hash "fe"'s made (every index hash a call declares exists: above).
    let hours = Duration::from_secs(2 * 3600);
    for id in ["fa", "fb", "fc", "fe"] {
        c.push_to("grp", &0).id(id).delay(hours).await.unwrap();
    }
    let k = dq::store::ShardKeys::new("mig", 0);
    let fd = (0..)
        .map(|i| format!("fd{i}"))
        .find(|id| k.far_index(&format!("grp:{id}")) == k.far_index("grp:fe"))
        .unwrap();
    // Their part is due to move (as if the time had come): a promotion would move it.
    let far = "dq:{mig:0}:far";
    let parts = source.command(&["ZRANGE", far, "0", "-1"]);
    let part = parts
        .lines()
        .find(|l| l.ends_with(":grp"))
        .unwrap()
        .to_owned();
    assert!(source
        .command(&["ZADD", far, "XX", "0", &part])
        .starts_with(':'));

    // (The promotion by a process that has pushed to no topic: it declares no topic's keys,
    // which would not all exist, and a far part's move needs none but its dead set's.)
    let mover = TestClient::connect(config(&cluster)).await.unwrap();

    let dst_id = begin_migration(source, target, &slot);
    migrate(source, target, &keys_except(source, &slot, &[":far:"]));
    let (on_source, on_target) = (snapshot(source, &slot), snapshot(target, &slot));
    let (promote, cancel, replace, status, reschedule, push) = tokio::join!(
        mover.store().promote(0, 1000),
        c.cancel_in("grp", "fa"),
        c.push_to("grp", &1)
            .id("fb")
            .delay(hours)
            .replace()
            .into_future(),
        c.status_in("grp", "fc"),
        c.reschedule_in("grp", "fe", Due::After(Duration::ZERO)),
        c.push_to("grp", &0)
            .id(fd.as_str())
            .delay(hours)
            .into_future(),
    );
    let (src, dst) = (snapshot(source, &slot), snapshot(target, &slot));
    let ran: Vec<&str> = [
        ("promote", promote.is_ok()),
        ("cancel", cancel.is_ok()),
        ("replace", replace.is_ok()),
        ("status", status.is_ok()),
        ("reschedule", reschedule.is_ok()),
        ("push", push.is_ok()),
    ]
    .into_iter()
    .filter_map(|(what, ran)| ran.then_some(what))
    .collect();
    let created = new_keys(&on_target, &dst);
    assert!(
        ran.is_empty() && src == on_source && dst == on_target,
        "operations on far jobs ran with their part on the other node: {ran:?} ran; new keys on the new node: {created:?}"
    );

    // The reshard completes (nothing was made on the new node: no BUSYKEY), and each far job
    // is where it was: "fa" is cancelled now, "fb" replaced, and the others run once each.
    finish_migration(&cluster, source, target, &slot, &dst_id);
    drop(g1);
    assert_eq!(
        c.cancel_in("grp", "fa").await.unwrap(),
        dq::admin::ChangeOutcome::Done
    );
    let replaced = c
        .push_to("grp", &1)
        .id("fb")
        .delay(hours)
        .replace()
        .send()
        .await;
    assert_eq!(replaced.unwrap().outcome, dq::push::PushOutcome::Replaced);
    c.push_to("grp", &0)
        .id(fd.as_str())
        .delay(hours)
        .await
        .unwrap();
    let expected = ["fb", "fc", fd.as_str(), "fe"].map(String::from);
    for id in &expected {
        let now = c.reschedule_in("grp", id, Due::After(Duration::ZERO)).await;
        assert_eq!(now.unwrap(), dq::admin::ChangeOutcome::Done, "{id}");
    }
    run_each_once(&cluster, &["grp"], &expected).await;
    assert!(c.status_in("grp", "fa").await.unwrap().is_none());
}
