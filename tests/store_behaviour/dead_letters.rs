//! Dead letters: they keep their error, page with a cursor, are retried (by id, the oldest
//! first, or all that died before the retry began), purged or deleted, and never block their
//! id or touch a job pushed again under it.

use std::time::{Duration, SystemTime};

use dq::admin::Cursor;
use dq::push::PushOutcome;
use dq::store::DeadLetters;
use dq::JobState;

use super::{existing, outcome, push_and_dead_letter, push_and_lease, Harness, Kind};
use crate::support::{id, topic, OrderCancel, LEASE};

pub(crate) async fn dead_letters_keep_the_error_and_can_be_listed_requeued_and_purged(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let s = c.store();
    let t = topic("order-cancel");
    push_and_dead_letter(c, "order-cancel", 3, |id| format!("order {id} not found")).await;
    assert_eq!(c.counts("order-cancel").await.unwrap().dead, 3);
    let dead = s.dead_jobs(&t, Cursor::START, 2).await.unwrap().jobs;
    assert_eq!(dead.len(), 2, "paged");
    assert_eq!(dead[0].state, JobState::Dead);
    assert!(dead[0].last_error.as_deref().unwrap().contains("not found"));

    let requeued = s.requeue_dead(&t, DeadLetters::Ids(&[id("1")]), 3).await;
    assert_eq!(requeued.unwrap(), 1);
    let info = existing(c, "order-cancel", "1").await;
    assert_eq!((info.state, info.attempt), (JobState::Ready, 0));

    let minute_ago = SystemTime::now() - Duration::from_secs(60);
    assert_eq!(
        s.purge_dead(&t, minute_ago, 100).await.unwrap(),
        0,
        "too young"
    );
    let in_a_second = SystemTime::now() + Duration::from_secs(1);
    assert_eq!(s.purge_dead(&t, in_a_second, 100).await.unwrap(), 2);
    assert!(c.status_in("order-cancel", "0").await.unwrap().is_none());
    assert_eq!(c.counts("order-cancel").await.unwrap().dead, 0);
}

pub(crate) async fn requeue_without_ids_takes_the_oldest_dead_letters_up_to_the_limit(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    push_and_dead_letter(c, "order-cancel", 5, |_| "boom".into()).await;
    let oldest_four = DeadLetters::DiedBy {
        before_us: u64::MAX,
        limit: 4,
    };
    let t = topic("order-cancel");
    assert_eq!(c.store().requeue_dead(&t, oldest_four, 3).await.unwrap(), 4);
    let counts = c.counts("order-cancel").await.unwrap();
    assert_eq!((counts.ready, counts.dead), (4, 1));
}

pub(crate) async fn a_dead_job_does_not_block_its_id(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let job = push_and_lease(c, "a").await;
    c.store().dead_letter(&job.lease, "boom").await.unwrap();
    let again = c.push(OrderCancel { order_id: 2 }).id("a");
    assert_eq!(outcome(again).await, PushOutcome::Created);
    let info = existing(c, "order-cancel", "a").await;
    assert_eq!((info.state, info.last_error), (JobState::Ready, None));
    assert_eq!(c.counts("order-cancel").await.unwrap().dead, 0);
}

pub(crate) async fn deleting_a_dead_letter_leaves_a_job_pushed_again_under_its_id_alone(
    kind: Kind,
) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let s = c.store();
    let t = topic("order-cancel");
    push_and_dead_letter(c, "order-cancel", 3, |_| "boom".into()).await;
    // Meanwhile "1" is pushed again (a new job under the dead letter's id, pending now) and
    // "2" is retried: neither is a dead letter any more.
    let again = c.push(OrderCancel { order_id: 42 }).id("1");
    assert_eq!(outcome(again).await, PushOutcome::Created);
    let requeued = s.requeue_dead(&t, DeadLetters::Ids(&[id("2")]), 3).await;
    assert_eq!(requeued.unwrap(), 1);
    // A delete of what the dead-letter page showed (one id twice, one never pushed).
    let shown = [id("0"), id("1"), id("0"), id("2"), id("nope")];
    assert_eq!(s.delete_dead(&t, &shown).await.unwrap(), 1, "only 0");
    assert!(c.status_in("order-cancel", "0").await.unwrap().is_none());
    let new = existing(c, "order-cancel", "1").await;
    assert_eq!(
        (new.state, new.attempt, new.last_error),
        (JobState::Ready, 0, None)
    );
    assert_eq!(new.payload, br#"{"order_id":42}"#);
    let retried = existing(c, "order-cancel", "2").await;
    assert_eq!(retried.state, JobState::Ready);
    let counts = c.counts("order-cancel").await.unwrap();
    assert_eq!((counts.ready, counts.dead), (2, 0));
    // Through the client: nothing is a dead letter now, nothing is deleted.
    let all = ["0", "1", "2"];
    assert_eq!(c.delete_dead("order-cancel", &all).await.unwrap(), 0);
    assert_eq!(c.delete_dead("order-cancel", &[]).await.unwrap(), 0);
    // Both run, once each.
    let f = s.fetch(0, &t, 10, LEASE).await.unwrap();
    let mut ran: Vec<&str> = f.jobs.iter().map(|j| j.lease.id.as_str()).collect();
    ran.sort_unstable();
    assert_eq!(ran, ["1", "2"]);
}

pub(crate) async fn dead_letters_are_retried_and_purged_through_the_client(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    push_and_dead_letter(c, "t", 4, |_| "boom".into()).await;
    assert_eq!(c.retry_dead("t", &["1"]).await.unwrap(), 1);
    let dead = c
        .jobs("t", JobState::Dead, Cursor::START, 10)
        .await
        .unwrap();
    assert_eq!(dead.jobs.len(), 3);
    assert_eq!(
        c.purge_dead("t", Duration::from_secs(3600)).await.unwrap(),
        0,
        "all younger than an hour"
    );
    assert_eq!(c.retry_dead("t", &[]).await.unwrap(), 3);
    assert_eq!(c.counts("t").await.unwrap().ready, 4);
}

pub(crate) async fn dead_letters_page_with_a_cursor_at_most_1000_per_call(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    push_and_dead_letter(c, "t", 1205, |_| "boom".into()).await;
    let mut seen = std::collections::BTreeSet::new();
    let mut cursor = Some(Cursor::START);
    let mut pages = 0;
    while let Some(at) = cursor {
        let page = c.jobs("t", JobState::Dead, at, 5000).await.unwrap();
        assert!(page.jobs.len() <= 1000, "a page holds at most 1,000");
        for j in page.jobs {
            assert!(seen.insert(j.id.to_string()), "{} listed twice", j.id);
        }
        cursor = page.next;
        pages += 1;
        assert!(pages < 10, "the cursor ends");
    }
    assert_eq!(seen.len(), 1205, "every dead letter listed once");
}

pub(crate) async fn retry_all_dead_takes_only_what_died_before_it_began(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    let s = c.store();
    let t = topic("t");
    push_and_dead_letter(c, "t", 3, |_| "boom".into()).await;
    let cutoff = s.time_us().await.unwrap();
    tokio::time::sleep(Duration::from_millis(2)).await; // "later" is later, on any clock
    let died_by_cutoff = DeadLetters::DiedBy {
        before_us: cutoff,
        limit: 1000,
    };
    // Requeued and dead again before the caller asks for the next batch: not taken again.
    assert_eq!(s.requeue_dead(&t, died_by_cutoff, 3).await.unwrap(), 3);
    for j in s.fetch(0, &t, 3, LEASE).await.unwrap().jobs {
        s.dead_letter(&j.lease, "boom again").await.unwrap();
    }
    assert_eq!(s.requeue_dead(&t, died_by_cutoff, 3).await.unwrap(), 0);
    assert_eq!(c.counts("t").await.unwrap().dead, 3);
    // Through the client: one pass over what is dead now, and it ends.
    assert_eq!(c.retry_dead("t", &[]).await.unwrap(), 3);
    assert_eq!(c.counts("t").await.unwrap().ready, 3);
}
