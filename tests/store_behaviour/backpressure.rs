//! Backpressure: a topic bounded by `max_pending` refuses the pushes past its bound (a single
//! push with `Error::TopicFull`, a batch job by job), stores nothing of them, and takes jobs
//! again once its workers have made room.

use std::time::Duration;

use dq::push::PushOutcome;
use dq::ErrorKind;

use super::{Harness, Kind};
use crate::support::{lease_one, OrderCancel, TestClient};

const TOPIC: &str = "order-cancel";

/// How many jobs the topic holds: delayed, ready and running.
async fn pending(c: &TestClient) -> u64 {
    let n = c.counts(TOPIC).await.unwrap();
    n.delayed + n.ready + n.running
}

pub(crate) async fn a_push_past_max_pending_is_refused_and_stores_nothing(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    c.set_max_pending(TOPIC, Some(2)).await.unwrap();
    c.push(OrderCancel { order_id: 1 }).id("a").await.unwrap();
    c.push(OrderCancel { order_id: 2 })
        .id("b")
        .delay(Duration::from_secs(600))
        .await
        .unwrap();
    let refused = c
        .push(OrderCancel { order_id: 3 })
        .id("c")
        .await
        .unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::TopicFull, "{refused}");
    assert!(refused.to_string().contains("is full"), "{refused}");
    assert!(
        c.status_in(TOPIC, "c").await.unwrap().is_none(),
        "nothing stored"
    );
    assert_eq!(pending(c).await, 2);
    // A push of a pending id creates nothing: kept, or replaced with OnConflict::Replace.
    let kept = c
        .push(OrderCancel { order_id: 9 })
        .id("a")
        .send()
        .await
        .unwrap();
    assert_eq!(kept.outcome, PushOutcome::AlreadyPending);
    let replaced = c
        .push(OrderCancel { order_id: 9 })
        .id("b")
        .replace()
        .send()
        .await;
    assert_eq!(replaced.unwrap().outcome, PushOutcome::Replaced);
    // A running job still counts; once it has succeeded, there is room for one more.
    let running = lease_one(c.store(), TOPIC).await;
    let still = c
        .push(OrderCancel { order_id: 3 })
        .id("c")
        .await
        .unwrap_err();
    assert_eq!(still.kind(), ErrorKind::TopicFull);
    c.store().ack(&[running.lease]).await.unwrap();
    let created = c
        .push(OrderCancel { order_id: 3 })
        .id("c")
        .send()
        .await
        .unwrap();
    assert_eq!(created.outcome, PushOutcome::Created);
    assert_eq!(pending(c).await, 2);
}

pub(crate) async fn a_batch_past_max_pending_says_which_jobs_it_refused(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let c = &h.client;
    c.set_max_pending(TOPIC, Some(3)).await.unwrap();
    let jobs = (1..=5).map(|i| c.push(OrderCancel { order_id: i }).id(format!("j{i}")));
    let pushed = c.push_batch(jobs).await.unwrap();
    let outcomes: Vec<PushOutcome> = pushed.iter().map(|p| p.outcome).collect();
    let full = PushOutcome::Full { max_pending: 3 };
    assert_eq!(
        outcomes,
        [
            PushOutcome::Created,
            PushOutcome::Created,
            PushOutcome::Created,
            full,
            full
        ]
    );
    assert_eq!(pending(c).await, 3);
    for id in ["j4", "j5"] {
        assert!(c.status_in(TOPIC, id).await.unwrap().is_none(), "{id}");
    }
    let zero = c.set_max_pending(TOPIC, Some(0)).await.unwrap_err();
    assert_eq!(zero.kind(), ErrorKind::InvalidInput, "{zero}");
    // Without a bound, the topic takes any number again.
    c.set_max_pending(TOPIC, None).await.unwrap();
    let again = c
        .push(OrderCancel { order_id: 4 })
        .id("j4")
        .send()
        .await
        .unwrap();
    assert_eq!(again.outcome, PushOutcome::Created);
}
