//! The fence behind "one job per tick" of a schedule, and the generation a schedule's spec and
//! resumes move it to.

use std::time::Duration;

use dq::admin::ChangeOutcome;
use dq::push::{OnConflict, PushOutcome};
use dq::store::{FiredTick, NewJob};
use dq::Due;

use super::{outcome, Harness, Kind};
use crate::support::{id, topic};

/// The fence behind "one job per tick": a store creates a tick's job only when no later tick
/// (or later generation) of its schedule was created before it, so a process that pushes a
/// tick long after it ran (its reservation over) makes nothing.
pub(crate) async fn a_ticks_job_is_created_once_per_generation_even_after_it_is_gone(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let s = h.client.store();
    let tick = |n: u64, generation: u64| NewJob {
        topic: topic("beats"),
        id: id(&format!("beat@{n}")),
        due: Due::After(Duration::from_secs(3600)),
        max_attempts: 1,
        unique_for: None,
        fence: Some(FiredTick {
            schedule: "beat".into(),
            generation,
            tick_us: n,
        }),
        trace: None,
        priority: 0,
        group: None,
        id_drawn: false,
        payload: b"{}".to_vec(),
    };
    let push = |job: NewJob| async move { s.push(vec![job], OnConflict::Keep).await.unwrap()[0] };
    assert_eq!(push(tick(2, 1)).await, PushOutcome::Created);
    // Gone (cancelled here; run and its reservation over alike): not made again,
    let cancelled = s.cancel(&topic("beats"), &id("beat@2")).await.unwrap();
    assert_eq!(cancelled, ChangeOutcome::Done);
    assert_eq!(push(tick(2, 1)).await, PushOutcome::AlreadyPending);
    // nor is an earlier tick; a later one is.
    assert_eq!(push(tick(1, 1)).await, PushOutcome::AlreadyPending);
    assert_eq!(push(tick(3, 1)).await, PushOutcome::Created);
    // A new generation (the spec changed, or the schedule was resumed) starts from any tick,
    // and the old one makes nothing more: it is told which generation superseded it.
    assert_eq!(push(tick(1, 2)).await, PushOutcome::Created);
    assert_eq!(
        push(tick(4, 1)).await,
        PushOutcome::Superseded { generation: 2 }
    );
    assert!(s
        .status(&topic("beats"), &id("beat@4"))
        .await
        .unwrap()
        .is_none());
    // Jobs without a fence are not held back by it.
    let plain = h.client.push_to("beats", &0).id("beat@5");
    assert_eq!(outcome(plain).await, PushOutcome::Created);
}

/// A schedule's generation grows when its spec changes or it is resumed (not when it is
/// declared again unchanged or paused), and a look that read an older one cannot move it.
pub(crate) async fn a_schedule_moves_on_only_under_the_generation_its_look_read(kind: Kind) {
    let h = Harness::new(kind, |b| b).await;
    let (c, s) = (h.client.client(), h.client.store());
    let declare = |secs: u64| {
        c.schedule("beat")
            .every(Duration::from_secs(secs))
            .topic("beats")
            .upsert()
    };
    let generation = || async { s.schedule("beat").await.unwrap().unwrap().generation };
    declare(60).await.unwrap();
    let first = generation().await;
    declare(60).await.unwrap();
    assert_eq!(generation().await, first, "declared again unchanged");
    declare(120).await.unwrap();
    let changed = generation().await;
    assert!(changed > first, "changed: {changed} after {first}");
    assert!(c.pause_schedule("beat").await.unwrap());
    assert_eq!(generation().await, changed, "paused");
    assert!(c.resume_schedule("beat").await.unwrap());
    let resumed = generation().await;
    assert!(resumed > changed, "resumed: {resumed} after {changed}");
    let next = s.schedule("beat").await.unwrap().unwrap().next_us.unwrap();
    let fired = |generation| FiredTick {
        schedule: "beat".into(),
        generation,
        tick_us: next,
    };
    let old = s.advance_schedule(&fired(changed), Some(next + 1)).await;
    assert!(
        !old.unwrap(),
        "moved under the generation before the resume"
    );
    assert!(s
        .advance_schedule(&fired(resumed), Some(next + 1))
        .await
        .unwrap());
    // Removed, it takes nothing along when declared again: a new generation, above the last.
    assert!(c.unschedule("beat").await.unwrap());
    declare(60).await.unwrap();
    assert!(generation().await > resumed);
}
