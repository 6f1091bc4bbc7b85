//! Groups within a topic (README "Groups"): a grouped job holds one of its group's slots from
//! when it is let in line until it ends; at most the topic's group concurrency (1 by default:
//! one at a time, in push order) are held at once, and the rest wait, parked, so one group's
//! million jobs take their turns as another group's one does.

use std::time::Duration;

use dq::admin::{Cursor, GroupLoad};
use dq::store::{DeadLetters, LeaseRef};
use dq::{Due, ErrorKind, JobState};

use super::{Harness, Kind};
use crate::support::{topic, OrderCancel, TestClient, LEASE};

const TOPIC: &str = "order-cancel";

/// Pushes ready jobs `(id, group)` in order, one call each.
async fn push_grouped(c: &TestClient, jobs: &[(&str, Option<&str>)]) {
    for (n, (id, group)) in (0u64..).zip(jobs) {
        let mut push = c.push(OrderCancel { order_id: n }).id(*id);
        if let Some(g) = group {
            push = push.group(*g);
        }
        push.await.unwrap();
    }
}

/// The ids (and leases) one fetch of up to `max` hands over, in order.
async fn fetch_ids(c: &TestClient, max: usize, lease: Duration) -> Vec<(String, LeaseRef)> {
    let fetched = c.store().fetch(0, &topic(TOPIC), max, lease).await.unwrap();
    fetched
        .jobs
        .into_iter()
        .map(|j| (j.lease.id.to_string(), j.lease))
        .collect()
}

fn ids(got: &[(String, LeaseRef)]) -> Vec<&str> {
    got.iter().map(|(id, _)| id.as_str()).collect()
}

async fn ack(c: &TestClient, lease: &LeaseRef) {
    ack_all(c, &[lease]).await;
}

async fn ack_all(c: &TestClient, leases: &[&LeaseRef]) {
    let done = crate::support::succeeded(leases.iter().copied());
    c.store().ack_succeeded(&done).await.unwrap();
}

/// The ids of the topic's ready jobs, as a listing shows them.
async fn listed_ready(c: &TestClient) -> Vec<String> {
    let page = c
        .jobs(TOPIC, JobState::Ready, Cursor::START, 100)
        .await
        .unwrap();
    page.jobs.iter().map(|j| j.id.to_string()).collect()
}

pub(crate) async fn a_groups_jobs_run_one_at_a_time_in_push_order(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    push_grouped(
        c,
        &[
            ("a", Some("acct-1")),
            ("b", Some("acct-1")),
            ("c", Some("acct-1")),
        ],
    )
    .await;
    assert_eq!(
        c.counts(TOPIC).await.unwrap().ready,
        3,
        "waiting jobs count as ready"
    );
    let first = fetch_ids(c, 10, LEASE).await;
    assert_eq!(ids(&first), ["a"], "one at a time");
    assert!(fetch_ids(c, 10, LEASE).await.is_empty(), "b waits for a");
    ack(c, &first[0].1).await;
    let second = fetch_ids(c, 10, LEASE).await;
    assert_eq!(ids(&second), ["b"], "then b, in push order");
    ack(c, &second[0].1).await;
    assert_eq!(ids(&fetch_ids(c, 10, LEASE).await), ["c"]);
}

pub(crate) async fn groups_take_turns_so_a_big_group_does_not_delay_a_small_one(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let big: Vec<String> = (0..100).map(|i| format!("big-{i}")).collect();
    let mut jobs: Vec<(&str, Option<&str>)> =
        big.iter().map(|id| (id.as_str(), Some("big"))).collect();
    jobs.push(("small-0", Some("small")));
    jobs.push(("plain", None));
    push_grouped(c, &jobs).await;
    let got = fetch_ids(c, 3, LEASE).await;
    assert_eq!(
        ids(&got),
        ["big-0", "small-0", "plain"],
        "the small group's job is second in line, not 101st"
    );
    // big-1 goes in line when big-0 ends: last, behind whatever came meanwhile.
    c.push(OrderCancel { order_id: 7 })
        .id("later")
        .await
        .unwrap();
    ack(c, &got[0].1).await;
    assert_eq!(ids(&fetch_ids(c, 10, LEASE).await), ["later", "big-1"]);
}

pub(crate) async fn a_dead_workers_group_slot_comes_back_and_its_job_runs_first_again(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    push_grouped(c, &[("a", Some("g")), ("b", Some("g"))]).await;
    let lost = fetch_ids(c, 10, Duration::from_millis(50)).await;
    assert_eq!(ids(&lost), ["a"]);
    tokio::time::sleep(Duration::from_millis(80)).await;
    assert_eq!(c.store().reclaim(0, 10).await.unwrap().requeued, 1);
    let again = fetch_ids(c, 10, LEASE).await;
    assert_eq!(ids(&again), ["a"], "a runs again before b, and alone");
}

pub(crate) async fn a_cancelled_waiting_job_is_skipped_and_counted_out(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    push_grouped(c, &[("a", Some("g")), ("b", Some("g")), ("c", Some("g"))]).await;
    c.cancel_in(TOPIC, "b").await.unwrap();
    assert_eq!(c.counts(TOPIC).await.unwrap().ready, 2);
    assert!(c.status_in(TOPIC, "b").await.unwrap().is_none());
    let a = fetch_ids(c, 10, LEASE).await;
    ack(c, &a[0].1).await;
    assert_eq!(
        ids(&fetch_ids(c, 10, LEASE).await),
        ["c"],
        "b is gone, c is next"
    );
    assert_eq!(c.counts(TOPIC).await.unwrap().ready, 0);
}

pub(crate) async fn a_cancelled_job_in_line_gives_its_slot_to_the_next_of_its_group(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    push_grouped(c, &[("a", Some("g")), ("b", Some("g"))]).await;
    c.cancel_in(TOPIC, "a").await.unwrap();
    assert_eq!(c.counts(TOPIC).await.unwrap().ready, 1);
    assert_eq!(ids(&fetch_ids(c, 10, LEASE).await), ["b"]);
}

pub(crate) async fn a_group_concurrency_of_two_runs_two_of_a_group_at_once(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    push_grouped(c, &[("a", Some("g")), ("b", Some("g")), ("c", Some("g"))]).await;
    assert_eq!(ids(&fetch_ids(c, 10, LEASE).await), ["a"]);
    c.set_group_concurrency(TOPIC, Some(2)).await.unwrap();
    assert_eq!(c.group_concurrency(TOPIC).await.unwrap(), Some(2));
    assert_eq!(
        ids(&fetch_ids(c, 10, LEASE).await),
        ["b"],
        "a second slot, at once"
    );
    assert!(fetch_ids(c, 10, LEASE).await.is_empty(), "two run: c waits");
}

pub(crate) async fn a_retried_job_keeps_its_groups_slot_until_it_succeeds(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    push_grouped(c, &[("a", Some("g")), ("b", Some("g"))]).await;
    let a = fetch_ids(c, 10, LEASE).await;
    let retried = c.store().retry(&a[0].1, Duration::from_millis(60), "boom");
    assert!(retried.await.unwrap());
    assert!(
        fetch_ids(c, 10, LEASE).await.is_empty(),
        "b waits behind a's retry"
    );
    tokio::time::sleep(Duration::from_millis(80)).await;
    c.store().promote(0, 100).await.unwrap();
    let again = fetch_ids(c, 10, LEASE).await;
    assert_eq!(ids(&again), ["a"], "a runs again, alone");
    ack(c, &again[0].1).await;
    assert_eq!(ids(&fetch_ids(c, 10, LEASE).await), ["b"]);
}

pub(crate) async fn a_dead_letter_frees_its_slot_and_a_requeue_waits_its_turn(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    push_grouped(c, &[("a", Some("g")), ("b", Some("g"))]).await;
    let a = fetch_ids(c, 10, LEASE).await;
    assert!(c.store().dead_letter(&a[0].1, "bad").await.unwrap());
    let b = fetch_ids(c, 10, LEASE).await;
    assert_eq!(ids(&b), ["b"], "the dead letter's slot went to b");
    let a_id = dq::JobId::new("a").unwrap();
    let which = DeadLetters::Ids(std::slice::from_ref(&a_id));
    let t = topic(TOPIC);
    assert_eq!(c.store().requeue_dead(&t, which, 3).await.unwrap(), 1);
    assert_eq!(c.counts(TOPIC).await.unwrap().ready, 1);
    assert!(
        fetch_ids(c, 10, LEASE).await.is_empty(),
        "a waits for b's slot"
    );
    ack(c, &b[0].1).await;
    assert_eq!(ids(&fetch_ids(c, 10, LEASE).await), ["a"]);
}

pub(crate) async fn a_delayed_grouped_job_waits_for_its_group_when_due(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    push_grouped(c, &[("a", Some("g"))]).await;
    c.push(OrderCancel { order_id: 9 })
        .id("later")
        .group("g")
        .delay(Duration::from_millis(40))
        .await
        .unwrap();
    let a = fetch_ids(c, 10, LEASE).await;
    tokio::time::sleep(Duration::from_millis(60)).await;
    c.store().promote(0, 100).await.unwrap();
    assert_eq!(c.counts(TOPIC).await.unwrap().ready, 1);
    assert!(
        fetch_ids(c, 10, LEASE).await.is_empty(),
        "due, but a holds the slot"
    );
    ack(c, &a[0].1).await;
    assert_eq!(ids(&fetch_ids(c, 10, LEASE).await), ["later"]);
}

/// Pushes "due-first" of group "g", due in 40 ms, and waits until it is due: with no mover
/// running, it waits in the delayed jobs as it would behind a mover held back.
async fn due_and_not_moved(c: &TestClient) {
    c.push(OrderCancel { order_id: 1 })
        .id("due-first")
        .group("g")
        .delay(Duration::from_millis(40))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(60)).await;
}

/// A group's jobs go in line in the order they fall due: a job pushed to run now does not pass
/// one of its group that fell due earlier and has not been moved in line yet (the mover behind:
/// every worker down, or a reshard holding calls back, as dq-chaos `groups-reshard` found).
pub(crate) async fn a_job_pushed_to_run_now_does_not_pass_one_of_its_group_already_due(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    due_and_not_moved(c).await;
    push_grouped(c, &[("now", Some("g"))]).await;
    c.store().promote(0, 100).await.unwrap();
    let first = fetch_ids(c, 10, LEASE).await;
    assert_eq!(ids(&first), ["due-first"], "the job due first runs first");
    ack(c, &first[0].1).await;
    c.store().promote(0, 100).await.unwrap();
    assert_eq!(ids(&fetch_ids(c, 10, LEASE).await), ["now"]);
}

/// The jobs of one call pushed to run now while the mover is behind keep the call's order: the
/// mover lets them in in push order, not in the order of their ids.
pub(crate) async fn jobs_pushed_together_behind_the_mover_go_in_line_in_push_order(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    due_and_not_moved(c).await;
    c.push_batch(
        ["zz", "mm", "aa"]
            .iter()
            .map(|id| c.push(OrderCancel { order_id: 2 }).id(*id).group("g")),
    )
    .await
    .unwrap();
    let mut order = Vec::new();
    for _ in 0..4 {
        c.store().promote(0, 100).await.unwrap();
        let got = fetch_ids(c, 10, LEASE).await;
        assert_eq!(got.len(), 1, "one of the group at a time: {:?}", ids(&got));
        order.push(got[0].0.clone());
        ack(c, &got[0].1).await;
    }
    assert_eq!(order, ["due-first", "zz", "mm", "aa"]);
}

/// A delayed job of a group rescheduled to run now does not pass one of its group that fell due
/// earlier and waits for the mover, as a push does not.
pub(crate) async fn a_job_rescheduled_to_run_now_does_not_pass_one_of_its_group_already_due(
    kind: Kind,
) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    due_and_not_moved(c).await;
    c.push(OrderCancel { order_id: 2 })
        .id("later")
        .group("g")
        .delay(Duration::from_secs(3600))
        .await
        .unwrap();
    c.reschedule::<OrderCancel>("later", Due::After(Duration::ZERO))
        .await
        .unwrap();
    c.store().promote(0, 100).await.unwrap();
    let first = fetch_ids(c, 10, LEASE).await;
    assert_eq!(ids(&first), ["due-first"], "the job due first runs first");
    ack(c, &first[0].1).await;
    c.store().promote(0, 100).await.unwrap();
    assert_eq!(ids(&fetch_ids(c, 10, LEASE).await), ["later"]);
}

pub(crate) async fn a_replaced_waiting_job_goes_last_of_its_group_once(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    push_grouped(c, &[("a", Some("g")), ("b", Some("g")), ("c", Some("g"))]).await;
    c.push(OrderCancel { order_id: 42 })
        .id("b")
        .group("g")
        .replace()
        .await
        .unwrap();
    assert_eq!(c.counts(TOPIC).await.unwrap().ready, 3);
    let mut order = Vec::new();
    for _ in 0..3 {
        let got = fetch_ids(c, 10, LEASE).await;
        assert_eq!(got.len(), 1, "one at a time: {order:?}");
        order.push(got[0].0.clone());
        ack(c, &got[0].1).await;
    }
    assert_eq!(order, ["a", "c", "b"]);
    assert!(fetch_ids(c, 10, LEASE).await.is_empty(), "b ran once");
}

/// Review of groups (helper-33, finding 1): a replace that moves a job holding a slot into
/// another group gives the old group's slot back and waits its turn in the new one: two jobs
/// of one group never run at once.
pub(crate) async fn a_replace_into_another_group_hands_the_old_slot_on(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    push_grouped(
        c,
        &[("a1", Some("a")), ("a2", Some("a")), ("b1", Some("b"))],
    )
    .await;
    let first = fetch_ids(c, 1, LEASE).await;
    assert_eq!(ids(&first), ["a1"]);
    let b1 = fetch_ids(c, 1, LEASE).await;
    assert_eq!(ids(&b1), ["b1"]);
    // a1 ends: a2 goes in line with a's slot. Moved to group b, where b1 runs, it must wait.
    ack(c, &first[0].1).await;
    c.push(OrderCancel { order_id: 5 })
        .id("a2")
        .group("b")
        .replace()
        .await
        .unwrap();
    c.store().promote(0, 100).await.unwrap();
    assert!(
        fetch_ids(c, 10, LEASE).await.is_empty(),
        "a2 is in b now and waits for b1"
    );
    push_grouped(c, &[("a3", Some("a"))]).await;
    assert_eq!(
        ids(&fetch_ids(c, 10, LEASE).await),
        ["a3"],
        "a's slot came back"
    );
    ack(c, &b1[0].1).await;
    c.store().promote(0, 100).await.unwrap();
    assert_eq!(ids(&fetch_ids(c, 10, LEASE).await), ["a2"], "then a2, in b");
}

/// Review of issue 33's groups (helper-45): one batch replace moves a group's slot holder and
/// its next waiting job to another group. The old group's slot goes to the job after them, not
/// to the waiting job the same call moves away: every job runs once, one at a time per group,
/// and no slot is left held by nobody.
pub(crate) async fn a_batch_moving_a_slot_holder_and_its_next_job_runs_each_once(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    push_grouped(
        c,
        &[("a1", Some("a")), ("a2", Some("a")), ("a3", Some("a"))],
    )
    .await;
    let moved = ["a1", "a2"].map(|id| {
        c.push(OrderCancel { order_id: 9 })
            .id(id)
            .group("b")
            .replace()
    });
    c.push_batch(moved).await.unwrap();
    let mut runs: Vec<String> = run_all(c).await.into_iter().map(|(id, _)| id).collect();
    runs.sort();
    assert_eq!(runs, ["a1", "a2", "a3"], "each job once");
    let counts = c.counts(TOPIC).await.unwrap();
    assert_eq!((counts.ready, counts.running), (0, 0), "{counts:?}");
    let stats = c.stats(TOPIC).await.unwrap();
    assert!(
        stats.busiest_groups.is_empty(),
        "{:?}",
        stats.busiest_groups
    );
    push_grouped(c, &[("a4", Some("a")), ("b9", Some("b"))]).await;
    let mut last = ids(&fetch_ids(c, 10, LEASE).await)
        .into_iter()
        .map(str::to_owned)
        .collect::<Vec<_>>();
    last.sort();
    assert_eq!(last, ["a4", "b9"], "no slot of a or b left held");
}

/// The same with the waiting job replaced into its own group: it runs once, one at a time with
/// the rest of its group. (Which of a2 and a3 runs first differs: the in-memory store applies a
/// batch job by job, so a2 takes the slot a1 gave back and keeps it; the Redis store plans the
/// batch as a whole, so a2 goes last of its group.)
pub(crate) async fn a_batch_moving_a_slot_holder_and_replacing_its_next_job_runs_each_once(
    kind: Kind,
) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    push_grouped(
        c,
        &[("a1", Some("a")), ("a2", Some("a")), ("a3", Some("a"))],
    )
    .await;
    replace_in_one_call(c, &[("a1", "b"), ("a2", "a")]).await;
    assert_eq!(ran_in_group(c, "a").await, ["a2", "a3"], "each once");
    let counts = c.counts(TOPIC).await.unwrap();
    assert_eq!((counts.ready, counts.running), (0, 0), "{counts:?}");
    push_grouped(c, &[("a4", Some("a"))]).await;
    assert_eq!(
        ids(&fetch_ids(c, 10, LEASE).await),
        ["a4"],
        "a's slot came back"
    );
}

/// Review of the groups' lists (helper-56, finding 1): a batch that moves a group's slot holder
/// to another group and replaces the first of several jobs waiting behind it runs every job
/// once (a list popped past the replaced job kept its new entry, last in line).
pub(crate) async fn a_batch_moving_a_slot_holder_and_replacing_one_of_several_waiting_runs_each_once(
    kind: Kind,
) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    push_grouped(
        c,
        &[
            ("a1", Some("a")),
            ("a2", Some("a")),
            ("a3", Some("a")),
            ("a4", Some("a")),
        ],
    )
    .await;
    // The waiting job first: it goes in line again in this call (a job after the move waits
    // for the mover).
    replace_in_one_call(c, &[("a2", "a"), ("a1", "b")]).await;
    assert_eq!(ran_in_group(c, "a").await, ["a2", "a3", "a4"], "each once");
    let counts = c.counts(TOPIC).await.unwrap();
    assert_eq!((counts.ready, counts.running), (0, 0), "{counts:?}");
}

/// Pushes `jobs` ({id, group}) again, replacing them, in one batch: one push call.
async fn replace_in_one_call(c: &TestClient, jobs: &[(&str, &str)]) {
    let replaced = jobs.iter().map(|&(id, group)| {
        c.push(OrderCancel { order_id: 9 })
            .id(id)
            .group(group)
            .replace()
    });
    c.push_batch(replaced).await.unwrap();
}

/// Runs everything (`run_all`) and returns the ids that ran in `group`, sorted.
async fn ran_in_group(c: &TestClient, group: &str) -> Vec<String> {
    let mut ids: Vec<String> = run_all(c)
        .await
        .into_iter()
        .filter(|(_, g)| g == group)
        .map(|(id, _)| id)
        .collect();
    ids.sort();
    ids
}

/// Promotes, fetches and acks until nothing is left: the ids run with their groups, in order;
/// fails when two jobs of one group were leased at once.
async fn run_all(c: &TestClient) -> Vec<(String, String)> {
    let mut runs = Vec::new();
    for _ in 0..10 {
        c.store().promote(0, 100).await.unwrap();
        let got = fetch_ids(c, 10, LEASE).await;
        if got.is_empty() {
            break;
        }
        let mut groups = Vec::new();
        for (id, _) in &got {
            let info = c.status_in(TOPIC, id).await.unwrap().unwrap();
            groups.push(info.group.unwrap());
        }
        let mut distinct = groups.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(
            distinct.len(),
            groups.len(),
            "two of one group at once: {got:?}"
        );
        for ((id, lease), group) in got.iter().zip(groups) {
            runs.push((id.clone(), group));
            ack(c, lease).await;
        }
    }
    runs
}

pub(crate) async fn a_waiting_job_rescheduled_to_later_leaves_the_line(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    push_grouped(c, &[("a", Some("g")), ("b", Some("g")), ("c", Some("g"))]).await;
    let later = Due::After(Duration::from_secs(3600));
    c.reschedule_in(TOPIC, "b", later).await.unwrap();
    let counts = c.counts(TOPIC).await.unwrap();
    assert_eq!((counts.ready, counts.delayed), (2, 1));
    let a = fetch_ids(c, 10, LEASE).await;
    ack(c, &a[0].1).await;
    assert_eq!(ids(&fetch_ids(c, 10, LEASE).await), ["c"]);
}

pub(crate) async fn stats_and_listings_show_the_waiting_jobs_and_the_busiest_groups(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    push_grouped(
        c,
        &[
            ("a1", Some("a")),
            ("a2", Some("a")),
            ("a3", Some("a")),
            ("b1", Some("b")),
            ("b2", Some("b")),
        ],
    )
    .await;
    assert_eq!(
        listed_ready(c).await,
        ["a1", "b1", "a2", "a3", "b2"],
        "in line, then waiting in push order"
    );
    let stats = c.stats(TOPIC).await.unwrap();
    assert_eq!(stats.counts.ready, 5);
    assert_eq!(
        stats.busiest_groups,
        [GroupLoad::new("a", 2, 1), GroupLoad::new("b", 1, 1)]
    );
    assert_eq!(stats.group_concurrency, None);
    let info = c.status_in(TOPIC, "a3").await.unwrap().unwrap();
    assert_eq!(
        (info.state, info.group.as_deref()),
        (JobState::Ready, Some("a"))
    );
}

/// A job its group lets in when a slot comes back goes in line at its priority: ahead of the
/// topic's plain ready jobs when its priority is higher (the ack reads the priorities of the
/// jobs it lets in only in a topic that has some).
pub(crate) async fn a_job_its_group_lets_in_goes_in_line_at_its_priority(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    push_grouped(c, &[("a1", Some("acct-1"))]).await;
    c.push(OrderCancel { order_id: 1 })
        .id("a2")
        .group("acct-1")
        .priority(5)
        .await
        .unwrap();
    push_grouped(c, &[("x1", None), ("x2", None)]).await;
    let first = fetch_ids(c, 1, LEASE).await;
    assert_eq!(ids(&first), ["a1"]);
    ack(c, &first[0].1).await;
    let next = fetch_ids(c, 3, LEASE).await;
    assert_eq!(
        ids(&next),
        ["a2", "x1", "x2"],
        "a2 at priority 5 goes first"
    );
}

/// A group of concurrency two counts its slots right as its jobs end and the next ones come in
/// (helper-46's review of the ack that leaves an unchanged count alone): an ack that lets in as
/// many as it frees leaves the count as it was, one that lets in fewer lowers it, and a group
/// whose slots came back takes new jobs at once.
pub(crate) async fn a_groups_slot_count_follows_its_jobs_as_they_end_and_come_in(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    c.set_group_concurrency(TOPIC, Some(2)).await.unwrap();
    let five = [
        ("a1", Some("g")),
        ("a2", Some("g")),
        ("a3", Some("g")),
        ("a4", Some("g")),
        ("a5", Some("g")),
    ];
    push_grouped(c, &five).await;
    let first = fetch_ids(c, 10, LEASE).await;
    assert_eq!(ids(&first), ["a1", "a2"]);
    ack(c, &first[0].1).await;
    let busiest = c.stats(TOPIC).await.unwrap().busiest_groups;
    assert_eq!(busiest, [GroupLoad::new("g", 2, 2)], "a3 took a1's slot");
    let third = fetch_ids(c, 10, LEASE).await;
    assert_eq!(ids(&third), ["a3"]);
    ack_all(c, &[&first[1].1, &third[0].1]).await;
    let next = fetch_ids(c, 10, LEASE).await;
    assert_eq!(ids(&next), ["a4", "a5"], "two out, two in");
    ack(c, &next[0].1).await;
    push_grouped(c, &[("b1", Some("g")), ("b2", Some("g"))]).await;
    let b1 = fetch_ids(c, 10, LEASE).await;
    assert_eq!(ids(&b1), ["b1"], "one slot was free: b1 at once, b2 waits");
    let busiest = c.stats(TOPIC).await.unwrap().busiest_groups;
    assert_eq!(busiest, [GroupLoad::new("g", 1, 2)]);
    ack_all(c, &[&next[1].1, &b1[0].1]).await;
    let b2 = fetch_ids(c, 10, LEASE).await;
    assert_eq!(ids(&b2), ["b2"]);
    ack(c, &b2[0].1).await;
    push_grouped(
        c,
        &[("c1", Some("g")), ("c2", Some("g")), ("c3", Some("g"))],
    )
    .await;
    assert_eq!(
        ids(&fetch_ids(c, 10, LEASE).await),
        ["c1", "c2"],
        "every slot came back"
    );
}

/// One ack of jobs of several groups lets in the next job of each: the busiest groups count
/// each down by one, and a group left with none waiting leaves the list.
pub(crate) async fn an_ack_of_several_groups_counts_each_groups_waiting_jobs_down(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    push_grouped(
        c,
        &[
            ("a1", Some("a")),
            ("b1", Some("b")),
            ("c1", Some("c")),
            ("a2", Some("a")),
            ("a3", Some("a")),
            ("b2", Some("b")),
            ("c2", Some("c")),
            ("c3", Some("c")),
            ("c4", Some("c")),
        ],
    )
    .await;
    let got = fetch_ids(c, 10, Duration::from_secs(60)).await;
    assert_eq!(ids(&got), ["a1", "b1", "c1"]);
    ack_all(c, &got.iter().map(|(_, lease)| lease).collect::<Vec<_>>()).await;
    let stats = c.stats(TOPIC).await.unwrap();
    assert_eq!(
        stats.busiest_groups,
        [GroupLoad::new("c", 2, 1), GroupLoad::new("a", 1, 1)],
        "b has none waiting any more"
    );
    assert_eq!(
        ids(&fetch_ids(c, 10, Duration::from_secs(60)).await),
        ["a2", "b2", "c2"]
    );
}

pub(crate) async fn a_group_key_that_is_not_a_valid_key_is_refused(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let err = c
        .push(OrderCancel { order_id: 1 })
        .group("has space")
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
}

/// A group rate of 5/1s: a start every 200 ms per group (and a burst of one).
fn five_a_second() -> dq::Rate {
    "5/1s".parse().unwrap()
}

pub(crate) async fn a_group_rate_spaces_a_groups_starts_and_leaves_other_groups_alone(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let t = topic(TOPIC);
    c.store().set_group_concurrency(&t, Some(3)).await.unwrap();
    c.store()
        .set_group_rate(&t, Some(five_a_second()))
        .await
        .unwrap();
    assert_eq!(
        c.store().group_rate(&t).await.unwrap(),
        Some(five_a_second())
    );
    push_grouped(
        c,
        &[
            ("a1", Some("acct-1")),
            ("a2", Some("acct-1")),
            ("b1", Some("acct-2")),
            ("n1", None),
        ],
    )
    .await;
    let fetched_at = std::time::SystemTime::now();
    let first = fetch_ids(c, 10, LEASE).await;
    assert_eq!(
        ids(&first),
        ["a1", "b1", "n1"],
        "one start for each group now; a job without a group is not limited"
    );
    let a2 = c.status_in(TOPIC, "a2").await.unwrap().expect("a2 is kept");
    assert_eq!(a2.state, JobState::Delayed, "a2 waits for its group's turn");
    let wait = a2.due.duration_since(fetched_at).unwrap_or_default();
    assert!(
        wait >= Duration::from_millis(150) && wait <= Duration::from_millis(400),
        "a2 is due when its group may start again, 200 ms after a1 (less the 5 ms tolerance): {wait:?}"
    );
    assert!(
        fetch_ids(c, 10, LEASE).await.is_empty(),
        "nothing else may start yet"
    );
    tokio::time::sleep(Duration::from_millis(260)).await;
    c.store().promote(0, 100).await.unwrap();
    let second = fetch_ids(c, 10, LEASE).await;
    assert_eq!(ids(&second), ["a2"], "a2 starts once its group may");
}

pub(crate) async fn a_job_held_back_by_its_group_rate_keeps_its_slot_and_its_place(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let t = topic(TOPIC);
    c.store()
        .set_group_rate(&t, Some(five_a_second()))
        .await
        .unwrap();
    // Concurrency 1: a1 runs and ends, a2 is let in and held back by the rate; a3 waits behind
    // it, parked, and never overtakes it.
    push_grouped(
        c,
        &[
            ("a1", Some("acct-1")),
            ("a2", Some("acct-1")),
            ("a3", Some("acct-1")),
        ],
    )
    .await;
    let first = fetch_ids(c, 10, LEASE).await;
    assert_eq!(ids(&first), ["a1"]);
    ack(c, &first[0].1).await;
    assert!(
        fetch_ids(c, 10, LEASE).await.is_empty(),
        "a2 is held back by the rate"
    );
    let a2 = c.status_in(TOPIC, "a2").await.unwrap().expect("a2 is kept");
    assert_eq!(a2.state, JobState::Delayed);
    assert_eq!(
        c.status_in(TOPIC, "a3")
            .await
            .unwrap()
            .expect("a3 is kept")
            .state,
        JobState::Ready,
        "a3 waits for the slot a2 holds"
    );
    assert_eq!(listed_ready(c).await, ["a3"]);
    tokio::time::sleep(Duration::from_millis(260)).await;
    c.store().promote(0, 100).await.unwrap();
    let second = fetch_ids(c, 10, LEASE).await;
    assert_eq!(ids(&second), ["a2"], "a2 goes first, in push order");
    ack(c, &second[0].1).await;
    tokio::time::sleep(Duration::from_millis(260)).await;
    c.store().promote(0, 100).await.unwrap();
    assert_eq!(ids(&fetch_ids(c, 10, LEASE).await), ["a3"]);
}

pub(crate) async fn a_group_rate_lifted_lets_the_groups_jobs_start_at_once(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let t = topic(TOPIC);
    c.store().set_group_concurrency(&t, Some(2)).await.unwrap();
    c.store()
        .set_group_rate(&t, Some(five_a_second()))
        .await
        .unwrap();
    c.store().set_group_rate(&t, None).await.unwrap();
    assert_eq!(c.store().group_rate(&t).await.unwrap(), None);
    push_grouped(c, &[("a1", Some("acct-1")), ("a2", Some("acct-1"))]).await;
    assert_eq!(ids(&fetch_ids(c, 10, LEASE).await), ["a1", "a2"]);
}

pub(crate) async fn jobs_held_back_by_a_group_rate_start_in_the_order_they_were_held_back(
    kind: Kind,
) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let t = topic(TOPIC);
    c.store().set_group_concurrency(&t, Some(2)).await.unwrap();
    c.store()
        .set_group_rate(&t, Some(five_a_second()))
        .await
        .unwrap();
    // z1 is held back first, b2 (an id that sorts before it) after: both may start at the
    // group's next turn, z1 first.
    push_grouped(
        c,
        &[
            ("a0", Some("acct-1")),
            ("z1", Some("acct-1")),
            ("b2", Some("acct-1")),
        ],
    )
    .await;
    let first = fetch_ids(c, 10, LEASE).await;
    assert_eq!(ids(&first), ["a0"], "z1 is held back, b2 waits for a slot");
    ack(c, &first[0].1).await;
    assert!(
        fetch_ids(c, 10, LEASE).await.is_empty(),
        "b2 is held back too"
    );
    tokio::time::sleep(Duration::from_millis(260)).await;
    c.store().promote(0, 100).await.unwrap();
    assert_eq!(
        ids(&fetch_ids(c, 10, LEASE).await),
        ["z1"],
        "the job held back first starts first"
    );
}

pub(crate) async fn a_job_held_back_by_its_group_rate_leaves_the_room_it_took_unused(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let t = topic(TOPIC);
    c.store().set_global_concurrency(&t, Some(1)).await.unwrap();
    c.store().set_group_concurrency(&t, Some(2)).await.unwrap();
    c.store()
        .set_group_rate(&t, Some(five_a_second()))
        .await
        .unwrap();
    push_grouped(
        c,
        &[
            ("a1", Some("acct-1")),
            ("a2", Some("acct-1")),
            ("b1", Some("acct-2")),
        ],
    )
    .await;
    let first = fetch_ids(c, 10, LEASE).await;
    assert_eq!(ids(&first), ["a1"], "a global concurrency of 1");
    ack(c, &first[0].1).await;
    // The next fetch looks at a2 (one, as the global concurrency allows), holds it back and
    // leases nothing: the topic is not full, so the consumer comes back at once for b1.
    let held = c.store().fetch(0, &t, 10, LEASE).await.unwrap();
    assert!(held.jobs.is_empty());
    assert_eq!(held.held_back, 1, "the fetch says it held a2 back");
    assert!(!held.at_capacity, "no job runs: the topic is not full");
    assert_eq!(ids(&fetch_ids(c, 10, LEASE).await), ["b1"]);
}

pub(crate) async fn a_job_held_back_by_its_group_rate_does_not_throttle_the_topic(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let t = topic(TOPIC);
    c.store().set_group_concurrency(&t, Some(2)).await.unwrap();
    c.store()
        .set_group_rate(&t, Some(five_a_second()))
        .await
        .unwrap();
    push_grouped(
        c,
        &[
            ("a1", Some("acct-1")),
            ("a2", Some("acct-1")),
            ("b1", Some("acct-2")),
        ],
    )
    .await;
    assert_eq!(ids(&fetch_ids(c, 1, LEASE).await), ["a1"]);
    // A topic rate of one start a minute, set afresh: one start is allowed now. The fetch
    // looks at a2, its group's rate holds it back, and the start is left unused.
    c.set_rate(TOPIC, Some("1/1m".parse().unwrap()))
        .await
        .unwrap();
    let held = c.store().fetch(0, &t, 10, LEASE).await.unwrap();
    assert!(held.jobs.is_empty());
    assert_eq!(
        held.throttled, None,
        "the topic's rate still allows a start now"
    );
    assert_eq!(ids(&fetch_ids(c, 10, LEASE).await), ["b1"]);
}

pub(crate) async fn a_job_held_back_by_its_group_rate_is_announced_as_postponed(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let t = topic(TOPIC);
    c.store().set_events(&t, Some(100)).await.unwrap();
    c.store().set_group_concurrency(&t, Some(2)).await.unwrap();
    c.store()
        .set_group_rate(&t, Some(five_a_second()))
        .await
        .unwrap();
    push_grouped(c, &[("a1", Some("acct-1")), ("a2", Some("acct-1"))]).await;
    assert_eq!(ids(&fetch_ids(c, 10, LEASE).await), ["a1"]);
    let a2 = c.status_in(TOPIC, "a2").await.unwrap().expect("a2 is kept");
    let history = c.job_history(TOPIC, "a2").await.unwrap();
    let postponed: Vec<(u32, std::time::SystemTime)> = history
        .iter()
        .filter_map(|e| match &e.kind {
            dq::events::EventKind::Postponed { due } => Some((e.attempt, *due)),
            _ => None,
        })
        .collect();
    assert_eq!(
        postponed,
        [(1, a2.due)],
        "one postponed, its first run, due when it waits for"
    );
}

/// One ack of jobs of many grouped topics lets each group's next job in. (On a cluster the call
/// names the lists of every group it meets in one stop, lib.lua's `need`, not one stop a topic.)
pub(crate) async fn one_ack_of_many_grouped_topics_lets_each_groups_next_job_in(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let topics: Vec<String> = (0..10).map(|n| format!("grouped-{n}")).collect();
    let mut running = Vec::new();
    for t in &topics {
        for id in ["first", "second"] {
            c.push_to(t, &0).id(id).group("acct").await.unwrap();
        }
        let got = c.store().fetch(0, &topic(t), 10, LEASE).await.unwrap().jobs;
        assert_eq!(got.len(), 1, "{t}: one job of the group at a time");
        running.push(got[0].lease.clone());
    }
    let leases: Vec<&LeaseRef> = running.iter().collect();
    ack_all(c, &leases).await;
    for t in &topics {
        let got = c.store().fetch(0, &topic(t), 10, LEASE).await.unwrap().jobs;
        let ids: Vec<String> = got.iter().map(|j| j.lease.id.to_string()).collect();
        assert_eq!(ids, ["second"], "{t}: the group's next job");
    }
}
