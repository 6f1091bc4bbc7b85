//! Rate limits: a topic with a rate leases no more jobs than it allows, says how long until the
//! next may start, and a hold (a handler's `Outcome::RateLimited`) stops every fetch of the
//! topic until it ends.

use std::time::{Duration, Instant};

use dq::store::Fetched;
use dq::Rate;

use super::{Harness, Kind};
use crate::support::{topic, OrderCancel, TestClient, LEASE};

const TOPIC: &str = "order-cancel";

async fn push_ready(c: &TestClient, n: u64) {
    for i in 0..n {
        c.push(OrderCancel { order_id: i }).await.unwrap();
    }
}

async fn fetch(c: &TestClient, topic_name: &str, max: usize) -> Fetched {
    c.store()
        .fetch(0, &topic(topic_name), max, LEASE)
        .await
        .unwrap()
}

fn rate(text: &str) -> Option<Rate> {
    Some(text.parse().unwrap())
}

/// An operator lifts a handler's hold: the topic starts again at once, and a second lift says
/// there was none.
pub(crate) async fn a_lifted_hold_lets_the_topic_start_at_once(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let t = topic(TOPIC);
    c.push(OrderCancel { order_id: 1 }).await.unwrap();
    c.store().hold(&t, Duration::from_secs(3600)).await.unwrap();
    let held = c.store().fetch(0, &t, 5, LEASE).await.unwrap();
    assert!(held.jobs.is_empty() && held.throttled.is_some(), "{held:?}");
    assert!(c.lift_hold(TOPIC).await.unwrap(), "a hold was in force");
    assert_eq!(
        c.store().fetch(0, &t, 5, LEASE).await.unwrap().jobs.len(),
        1
    );
    assert!(c.stats(TOPIC).await.unwrap().held_until.is_none());
    assert!(!c.lift_hold(TOPIC).await.unwrap(), "none left to lift");
}

pub(crate) async fn a_rate_limited_fetch_leases_its_burst_and_says_when_the_next_may_start(
    kind: Kind,
) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    c.set_rate(TOPIC, rate("100/1s")).await.unwrap();
    assert_eq!(c.rate(TOPIC).await.unwrap(), rate("100/1s"));
    push_ready(c, 5).await;
    // 100 a second: one start every 10 ms, a burst of one.
    let first = fetch(c, TOPIC, 5).await;
    assert_eq!(first.jobs.len(), 1);
    let wait = first.throttled.expect("four jobs left behind");
    assert!(wait <= Duration::from_millis(10), "{wait:?}");
    let started = Instant::now();
    let mut leased = 1;
    while leased < 5 {
        let f = fetch(c, TOPIC, 5).await;
        if f.jobs.is_empty() {
            let wait = f.throttled.expect("jobs are ready: the limit says when");
            assert!(wait <= Duration::from_millis(10), "{wait:?}");
            tokio::time::sleep(wait).await;
        }
        leased += f.jobs.len();
    }
    // The four others came one by one, 10 ms apart: at least 30 ms after the first's next.
    assert!(
        started.elapsed() >= Duration::from_millis(30),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(c.counts(TOPIC).await.unwrap().running, 5);
}

pub(crate) async fn a_fetch_that_leaves_no_job_behind_is_not_throttled(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    c.set_rate(TOPIC, rate("100/1s")).await.unwrap();
    push_ready(c, 1).await;
    let f = fetch(c, TOPIC, 5).await;
    assert_eq!((f.jobs.len(), f.throttled), (1, None));
    // Nothing ready: the consumer waits for a push, not for the limit.
    let f = fetch(c, TOPIC, 5).await;
    assert_eq!((f.jobs.len(), f.throttled), (0, None));
}

pub(crate) async fn a_rate_is_never_exceeded_by_a_consumer_fetching_in_a_loop(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    // 50 a second, one every 20 ms: in 300 ms at most 300 / 20 + 1 starts (the burst).
    c.set_rate(TOPIC, rate("50/1s")).await.unwrap();
    push_ready(c, 40).await;
    let started = Instant::now();
    let mut leased = 0;
    while started.elapsed() < Duration::from_millis(300) {
        leased += fetch(c, TOPIC, 10).await.jobs.len();
    }
    let window = started.elapsed();
    let most = (window.as_millis() / 20 + 1) as usize;
    assert!(leased >= 1 && leased <= most, "{leased} in {window:?}");
}

pub(crate) async fn lifting_the_rate_lets_every_ready_job_out(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    c.set_rate(TOPIC, rate("1/1m")).await.unwrap();
    push_ready(c, 5).await;
    assert_eq!(fetch(c, TOPIC, 5).await.jobs.len(), 1);
    let held = fetch(c, TOPIC, 5).await;
    assert_eq!(held.jobs.len(), 0);
    assert!(
        held.throttled.unwrap() > Duration::from_secs(50),
        "{held:?}"
    );
    c.set_rate(TOPIC, None).await.unwrap();
    assert_eq!(c.rate(TOPIC).await.unwrap(), None);
    assert_eq!(fetch(c, TOPIC, 5).await.jobs.len(), 4);
}

pub(crate) async fn a_hold_stops_every_fetch_of_its_topic_until_it_ends(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    push_ready(c, 3).await;
    c.push_to("other", &9).await.unwrap();
    c.store()
        .hold(&topic(TOPIC), Duration::from_millis(300))
        .await
        .unwrap();
    let held = fetch(c, TOPIC, 5).await;
    assert!(held.jobs.is_empty(), "{held:?}");
    let wait = held.throttled.expect("held: says until when");
    assert!(
        wait > Duration::from_millis(200) && wait <= Duration::from_millis(300),
        "{wait:?}"
    );
    // Another topic is not held; the held one says until when.
    assert_eq!(fetch(c, "other", 5).await.jobs.len(), 1);
    let until = c.stats(TOPIC).await.unwrap().held_until.expect("held");
    let left = until
        .duration_since(std::time::SystemTime::now())
        .unwrap_or_default();
    assert!(left <= Duration::from_millis(300), "{left:?}");
    assert_eq!(c.stats("other").await.unwrap().held_until, None);
    tokio::time::sleep(wait).await;
    let after = fetch(c, TOPIC, 5).await;
    assert_eq!((after.jobs.len(), after.throttled), (3, None));
    assert_eq!(
        c.stats(TOPIC).await.unwrap().held_until,
        None,
        "the hold is over"
    );
}

/// Issue 33 review (helper-28, finding 2): every runtime start declares its listener's rate,
/// and each declaration started the limit afresh, so each restart of a worker let one more job
/// start at once. The same rate declared again keeps where the limit stands; a new one starts
/// afresh.
pub(crate) async fn declaring_the_same_rate_again_keeps_where_the_limit_stands(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    c.set_rate(TOPIC, rate("1/1h")).await.unwrap();
    push_ready(c, 3).await;
    assert_eq!(fetch(c, TOPIC, 5).await.jobs.len(), 1);
    c.set_rate(TOPIC, rate("1/1h")).await.unwrap();
    let again = fetch(c, TOPIC, 5).await;
    assert_eq!(
        again.jobs.len(),
        0,
        "a restart is no reason to start one more"
    );
    c.set_rate(TOPIC, rate("2/1h")).await.unwrap();
    assert_eq!(
        fetch(c, TOPIC, 5).await.jobs.len(),
        1,
        "a new rate starts afresh"
    );
}

/// Issue 33 review (helper-28, finding 4): the jobs of a lost fetch were leased again during a
/// hold. They go back to the front of the ready list instead, as during a pause.
pub(crate) async fn a_lost_fetchs_jobs_wait_out_a_hold_in_the_ready_list(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    push_ready(c, 1).await;
    let consumer = |nonce, lost| dq::store::Fetcher::new("c", nonce, lost);
    let s = c.store();
    // The reply of this fetch "was lost": its job is leased to nobody.
    let (first, again) = (consumer(1, Vec::new()), consumer(2, vec![1]));
    let lost = s.fetch_for(0, &topic(TOPIC), 5, LEASE, &first).await;
    assert_eq!(lost.unwrap().jobs.len(), 1);
    s.hold(&topic(TOPIC), Duration::from_secs(60))
        .await
        .unwrap();
    let held = s
        .fetch_for(0, &topic(TOPIC), 5, LEASE, &again)
        .await
        .unwrap();
    assert!(held.jobs.is_empty(), "{held:?}");
    if matches!(kind, Kind::Memory) {
        return; // its replies cannot be lost: nothing is taken back
    }
    assert!(
        held.throttled.unwrap() > Duration::from_secs(50),
        "{held:?}"
    );
    let counts = c.counts(TOPIC).await.unwrap();
    assert_eq!(
        (counts.ready, counts.running),
        (1, 0),
        "back in the ready list"
    );
}
