//! `dq::testing`: handlers tested on the in-memory store with a clock the test moves.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dq::testing::TestRuntime;
use dq::{JobContext, Listener, Runtime};

#[derive(serde::Serialize, serde::Deserialize)]
struct Reminder {
    ride: u32,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_hour_of_virtual_time_with_a_retry_on_the_way_takes_well_under_a_second() {
    let sent = Arc::new(Mutex::new(Vec::new()));
    let s = sent.clone();
    // Fails on its first attempt: the retry (exponential backoff from 1 s) happens within the hour.
    let listener = Listener::new("ride-reminder", move |r: Reminder, ctx: JobContext| {
        let s = s.clone();
        async move {
            if ctx.attempt() == 1 {
                return Err("sms gateway down");
            }
            s.lock().unwrap().push((r.ride, ctx.attempt()));
            Ok(())
        }
    });
    let rt = only(listener).await;
    let pushed_at = rt.now();
    rt.client()
        .push_to("ride-reminder", &Reminder { ride: 7 })
        .delay(Duration::from_secs(30 * 60))
        .await
        .unwrap();

    let real = Instant::now();
    rt.advance(Duration::from_secs(29 * 60)).await;
    assert!(sent.lock().unwrap().is_empty(), "not due yet");
    rt.advance(Duration::from_secs(31 * 60)).await;
    let elapsed = real.elapsed();

    assert_eq!(*sent.lock().unwrap(), [(7, 2)], "sent once, on the retry");
    assert_eq!(rt.handled("ride-reminder").len(), 1);
    assert_eq!(
        rt.now().duration_since(pushed_at).unwrap(),
        Duration::from_secs(3600)
    );
    assert!(
        elapsed < Duration::from_millis(500),
        "an hour took {elapsed:?} of real time"
    );
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_are_inspectable_in_tests() {
    let listener = Listener::new("doomed", |_: Reminder, _: JobContext| async {
        Err::<(), _>("always fails")
    });
    let rt = only(listener).await;
    rt.client()
        .push_to("doomed", &Reminder { ride: 1 })
        .id("r1")
        .await
        .unwrap();
    rt.advance(Duration::from_secs(600)).await;
    let dead = rt.dead("doomed").await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!((dead[0].id.as_str(), dead[0].attempt), ("r1", 3));
    assert!(dead[0]
        .last_error
        .as_deref()
        .unwrap()
        .contains("always fails"));
    rt.shutdown().await;
}

/// A handler that pushes a follow-up for another service (a topic this runtime has no listener
/// for) leaves that job ready; `advance` returns instead of waiting for someone to run it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn advance_returns_when_only_jobs_of_topics_handled_elsewhere_are_ready() {
    let rt = order_cancel_only().await;
    rt.client()
        .push_to("send-email", &Reminder { ride: 1 })
        .await
        .unwrap();
    rt.client()
        .push_to("order-cancel", &Reminder { ride: 2 })
        .delay(Duration::from_secs(60))
        .await
        .unwrap();
    advance_without_hanging(&rt, Duration::from_secs(120)).await;
    assert_eq!(rt.handled("order-cancel").len(), 1);
    let waiting = rt.client().counts("send-email").await.unwrap();
    assert_eq!(waiting.ready, 1, "left for the service that handles it");
    rt.shutdown().await;
}

/// A paused topic's ready jobs wait for `resume`; `advance` does not wait for them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn advance_returns_while_a_paused_topic_has_ready_jobs() {
    let rt = order_cancel_only().await;
    rt.client().pause("order-cancel").await.unwrap();
    rt.client()
        .push_to("order-cancel", &Reminder { ride: 1 })
        .await
        .unwrap();
    advance_without_hanging(&rt, Duration::from_secs(10)).await;
    assert!(rt.handled("order-cancel").is_empty(), "paused");
    rt.client().resume("order-cancel").await.unwrap();
    rt.advance(Duration::from_secs(2)).await;
    assert_eq!(rt.handled("order-cancel").len(), 1, "runs after resume");
    rt.shutdown().await;
}

/// A test runtime whose only listener handles "order-cancel" (and does nothing).
/// `advance`, which must return at once rather than wait for jobs no listener here will take.
async fn advance_without_hanging(rt: &TestRuntime, by: Duration) {
    let started = Instant::now();
    rt.advance(by).await;
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(5),
        "advance({by:?}) took {took:?}"
    );
}

async fn order_cancel_only() -> TestRuntime {
    let listener = Listener::new("order-cancel", |r: Reminder, ctx: JobContext| async move {
        let _ = (r, ctx);
    });
    only(listener).await
}

/// A test runtime with this one listener, not the program's registered ones.
async fn only(listener: Listener) -> TestRuntime {
    TestRuntime::start_with(
        Runtime::builder()
            .without_registered_listeners()
            .listener(listener),
    )
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unique_window_ends_with_the_virtual_clock() {
    let listener = Listener::new("report", |_: Reminder, _: JobContext| async {
        Ok::<(), String>(())
    });
    let rt = only(listener).await;
    let push = || {
        rt.client()
            .push_to("report", &Reminder { ride: 1 })
            .unique_key("account-42")
            .unique_for(Duration::from_secs(10 * 60))
            .send()
    };
    assert_eq!(
        push().await.unwrap().outcome,
        dq::push::PushOutcome::Created
    );
    rt.advance(Duration::from_secs(60)).await;
    assert_eq!(rt.handled("report").len(), 1, "ran");
    let held = push().await.unwrap().outcome;
    assert!(
        matches!(held, dq::push::PushOutcome::Unique { .. }),
        "{held:?}"
    );
    rt.advance(Duration::from_secs(10 * 60)).await;
    assert_eq!(
        push().await.unwrap().outcome,
        dq::push::PushOutcome::Created,
        "the window ended"
    );
    rt.shutdown().await;
}

/// What the invoicing listener of the wait tests returns for an order.
fn receipt_of(order_id: u32) -> String {
    format!("R-{order_id}")
}

/// A test runtime whose "invoice" listener answers each invoice with its receipt and keeps the
/// ends for an hour, with invoice `i1` pushed, due in ten minutes of the test clock.
async fn invoice_due_in_ten_minutes() -> TestRuntime {
    let invoicing = Listener::new("invoice", |r: Reminder| async move {
        Ok::<_, String>(receipt_of(r.ride))
    })
    .retain(Duration::from_secs(3600));
    let rt = only(invoicing).await;
    rt.client()
        .push_to("invoice", &Reminder { ride: 42 })
        .id("i1")
        .delay(Duration::from_secs(10 * 60))
        .await
        .unwrap();
    rt
}

/// Waits at most `timeout` for invoice `i1` while the test clock moves by `by`; returns the
/// answer and the real time it took. The wait is polled first, so it starts at the current
/// test time, before the clock moves.
async fn wait_while_advancing(
    rt: &TestRuntime,
    timeout: Duration,
    by: Duration,
) -> (dq::JobResult<String>, Duration) {
    let real = Instant::now();
    let wait = rt.client().wait_in::<String>("invoice", "i1", timeout);
    let (answer, ()) = tokio::join!(biased; wait, rt.advance(by));
    (answer.unwrap(), real.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_times_out_when_the_test_clock_passes_its_timeout_not_after_real_seconds() {
    let rt = invoice_due_in_ten_minutes().await;

    let minute = Duration::from_secs(60);
    let (answer, real) = wait_while_advancing(&rt, minute, Duration::from_secs(61)).await;

    assert_eq!(answer, dq::JobResult::Pending, "the job is due in 10 min");
    assert!(
        real < Duration::from_secs(5),
        "a wait of a minute on the test clock took {real:?} of real time"
    );
    let info = rt.client().status_in("invoice", "i1").await.unwrap();
    assert_eq!(info.map(|i| i.state), Some(dq::JobState::Delayed));
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_gets_the_value_of_a_job_due_in_ten_minutes_when_the_test_advances_ten_minutes() {
    let rt = invoice_due_in_ten_minutes().await;

    let quarter = Duration::from_secs(15 * 60);
    let ten_minutes = Duration::from_secs(10 * 60);
    let (answer, real) = wait_while_advancing(&rt, quarter, ten_minutes).await;

    assert_eq!(answer, dq::JobResult::Succeeded(receipt_of(42)));
    assert!(real < Duration::from_secs(5), "took {real:?} of real time");
    rt.shutdown().await;
}

/// One move of the clock from before the job's due time to after the wait's deadline: the
/// wait ran out first, as it would have in real time, though the job then runs in the same
/// move and its value is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_shorter_than_the_jobs_delay_runs_out_even_when_one_advance_passes_both() {
    let rt = invoice_due_in_ten_minutes().await;

    let minute = Duration::from_secs(60);
    let ten_minutes = Duration::from_secs(10 * 60);
    let (answer, _) = wait_while_advancing(&rt, minute, ten_minutes).await;

    assert_eq!(answer, dq::JobResult::Pending, "ran out at minute 1");
    assert_eq!(rt.handled("invoice").len(), 1, "the job ran at minute 10");
    let kept = rt
        .client()
        .result_in::<String>("invoice", "i1")
        .await
        .unwrap();
    assert_eq!(kept, dq::JobResult::Succeeded(receipt_of(42)));
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_events_are_stamped_by_the_virtual_clock() {
    use dq::events::{EventItem, EventKind};
    let listener = Listener::new("report", |_: Reminder, _: JobContext| async {}).events(true);
    let start = std::time::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let rt = TestRuntime::builder()
        .without_registered_listeners()
        .listener(listener)
        .starting_at(start)
        .start()
        .await
        .unwrap();
    let mut events = rt.client().events("report").await.unwrap();
    let hour = Duration::from_secs(3600);
    let pushed_at = rt.now();
    rt.client()
        .push_to("report", &Reminder { ride: 1 })
        .id("r")
        .delay(hour)
        .await
        .unwrap();
    rt.advance(hour).await;
    let mut seen = Vec::new();
    while seen.len() < 4 {
        let item = tokio::time::timeout(Duration::from_secs(5), events.recv()).await;
        if let EventItem::Event { event, .. } = item.unwrap().unwrap().unwrap() {
            seen.push(event);
        }
    }
    let kinds: Vec<&str> = seen.iter().map(|e| e.kind.name()).collect();
    assert_eq!(kinds, ["pushed", "promoted", "started", "succeeded"]);
    assert_eq!(seen[0].at, pushed_at, "stamped by the test clock");
    assert_eq!(
        seen[0].kind,
        EventKind::Pushed {
            due: Some(pushed_at + hour)
        }
    );
    assert!(
        seen[1..].iter().all(|e| e.at == pushed_at + hour),
        "an hour later by the test clock: {seen:?}"
    );
    rt.shutdown().await;
}

/// Issue 32, item 7 (helper-61's review: no test of it): a running handler's progress is read
/// through `status` in the test runtime, and goes when the job ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_handlers_progress_is_read_through_status_in_tests() {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let (reported, mut has_reported) = tokio::sync::mpsc::unbounded_channel();
    let g = gate.clone();
    let listener = Listener::new("report", move |_: Reminder, ctx: JobContext| {
        let (g, reported) = (g.clone(), reported.clone());
        async move {
            ctx.progress(&serde_json::json!({"rows": 40})).await?;
            let _ = reported.send(());
            let _ = g.acquire().await;
            Ok::<(), dq::Error>(())
        }
    });
    let rt = only(listener).await;
    let c = rt.client();
    c.push_to("report", &Reminder { ride: 1 })
        .id("r")
        .await
        .unwrap();
    let heard = tokio::time::timeout(Duration::from_secs(5), has_reported.recv()).await;
    assert_eq!(heard.unwrap(), Some(()), "the handler reported");
    let info = c.status_in("report", "r").await.unwrap().unwrap();
    assert_eq!(info.state, dq::JobState::Running);
    let progress: serde_json::Value = serde_json::from_slice(&info.progress.unwrap()).unwrap();
    assert_eq!(progress, serde_json::json!({"rows": 40}));
    gate.add_permits(1);
    rt.wait_idle().await;
    assert!(
        c.status_in("report", "r").await.unwrap().is_none(),
        "done: gone"
    );
    rt.shutdown().await;
}

/// Issue 32, item 5 in the test runtime: a cancel of a running job reaches its handler through
/// `JobContext::cancelled`, and the job ends cancelled, run once, not retried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_handler_hears_its_cancel_in_tests() {
    let (started, mut has_started) = tokio::sync::mpsc::unbounded_channel();
    let runs = Arc::new(Mutex::new(Vec::new()));
    let r = runs.clone();
    let listener = Listener::new("report", move |_: Reminder, ctx: JobContext| {
        let (started, r) = (started.clone(), r.clone());
        async move {
            let _ = started.send(());
            tokio::select! {
                () = ctx.cancelled() => r.lock().unwrap().push("stopped"),
                () = tokio::time::sleep(Duration::from_secs(5)) => r.lock().unwrap().push("ran out"),
            }
            Err::<(), _>("stopped before the end")
        }
    });
    let rt = only(listener).await;
    let c = rt.client();
    c.push_to("report", &Reminder { ride: 1 })
        .id("r")
        .await
        .unwrap();
    let heard = tokio::time::timeout(Duration::from_secs(5), has_started.recv()).await;
    assert_eq!(heard.unwrap(), Some(()), "the handler started");
    let asked = c.cancel_in("report", "r").await.unwrap();
    assert_eq!(asked, dq::admin::ChangeOutcome::CancelRequested);
    rt.wait_idle().await;
    assert_eq!(
        *runs.lock().unwrap(),
        ["stopped"],
        "once, stopped by the cancel"
    );
    assert!(
        c.status_in("report", "r").await.unwrap().is_none(),
        "cancelled: gone, not retried"
    );
    rt.advance(Duration::from_secs(3600)).await;
    assert_eq!(runs.lock().unwrap().len(), 1, "no later run");
    rt.shutdown().await;
}

/// A listener's `max_pending` holds in the test runtime as on Redis: the push past it fails
/// with `TopicFull`, and once a job has run there is room again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listeners_max_pending_refuses_pushes_past_it_in_tests() {
    let listener = Listener::new("reminders", |_: Reminder, _: JobContext| async {
        Ok::<(), String>(())
    })
    .max_pending(2);
    let rt = only(listener).await;
    let later = Duration::from_secs(60);
    for ride in [1, 2] {
        rt.client()
            .push_to("reminders", &Reminder { ride })
            .delay(later)
            .await
            .unwrap();
    }
    let full = rt
        .client()
        .push_to("reminders", &Reminder { ride: 3 })
        .await
        .unwrap_err();
    assert_eq!(full.kind(), dq::ErrorKind::TopicFull, "{full}");
    rt.advance(later).await;
    rt.client()
        .push_to("reminders", &Reminder { ride: 3 })
        .await
        .unwrap();
}

/// A listener's rate runs on the test clock: one job a minute starts at once, the next when
/// the clock has moved a minute (not a real minute later), and a test that advances an hour
/// sees all of them run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listeners_rate_spreads_its_jobs_on_the_test_clock() {
    let listener = Listener::new("reminders", |_: Reminder, _: JobContext| async {
        Ok::<(), String>(())
    })
    .rate("1/1m".parse().unwrap());
    let rt = only(listener).await;
    for ride in [1, 2, 3] {
        rt.client()
            .push_to("reminders", &Reminder { ride })
            .await
            .unwrap();
    }
    let started = Instant::now();
    rt.wait_idle().await;
    assert_eq!(rt.handled("reminders").len(), 1, "one at once");
    rt.advance(Duration::from_secs(30)).await;
    assert_eq!(rt.handled("reminders").len(), 1, "the next after a minute");
    rt.advance(Duration::from_secs(30)).await;
    assert_eq!(rt.handled("reminders").len(), 2);
    rt.advance(Duration::from_secs(3600)).await;
    assert_eq!(rt.handled("reminders").len(), 3);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    rt.shutdown().await;
}

/// How close a topic runs to its rate, on the test clock (issue 33, item 8; helper-69, finding
/// 7): idle, none of it; with a backlog, the runs of the last full minute use all of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn how_much_of_its_rate_a_topic_used_is_read_from_its_last_full_minute() {
    let rate: dq::Rate = "1/1s".parse().unwrap();
    let listener = Listener::new("reminders", |_: Reminder, _: JobContext| async {
        Ok::<(), String>(())
    })
    .rate(rate);
    let rt = only(listener).await;
    let c = rt.client();
    let idle = c.throughput("reminders").await.unwrap().rate_used(rate);
    assert_eq!(idle, Some(0.0));
    let jobs = (0..300).map(|ride| c.push_to("reminders", &Reminder { ride }));
    c.push_batch(jobs).await.unwrap();
    for _ in 0..150 {
        rt.advance(Duration::from_secs(1)).await;
    }
    let hour = c.throughput("reminders").await.unwrap();
    let used = hour.rate_used(rate).unwrap();
    assert!((0.95..=1.05).contains(&used), "{used}: {:?}", hour.minutes);
    rt.shutdown().await;
}

/// `Outcome::RateLimited` holds the topic on the test clock: the job runs again once the
/// clock has moved past the hold, on the same attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limited_run_runs_again_when_the_test_clock_passes_the_hold() {
    let attempts = Arc::new(Mutex::new(Vec::new()));
    let seen = attempts.clone();
    let listener = Listener::new("provider", move |_: Reminder, ctx: JobContext| {
        let seen = seen.clone();
        async move {
            let mut seen = seen.lock().unwrap();
            seen.push(ctx.attempt());
            if seen.len() == 1 {
                dq::Outcome::RateLimited(Duration::from_secs(600))
            } else {
                dq::Outcome::Done
            }
        }
    });
    let rt = only(listener).await;
    rt.client()
        .push_to("provider", &Reminder { ride: 1 })
        .await
        .unwrap();
    rt.wait_idle().await;
    rt.advance(Duration::from_secs(599)).await;
    assert_eq!(*attempts.lock().unwrap(), [1], "held for ten minutes");
    rt.advance(Duration::from_secs(1)).await;
    assert_eq!(*attempts.lock().unwrap(), [1, 1], "again, no attempt spent");
    assert_eq!(rt.handled("provider").len(), 1);
    rt.shutdown().await;
}

/// A listener's global concurrency holds in the test runtime: one at a time, all of them run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listeners_global_concurrency_holds_in_tests() {
    let active = Arc::new(Mutex::new((0u32, 0u32))); // (now, most)
    let seen = active.clone();
    let listener = Listener::new("reminders", move |_: Reminder, _: JobContext| {
        let seen = seen.clone();
        async move {
            {
                let mut a = seen.lock().unwrap();
                a.0 += 1;
                a.1 = a.1.max(a.0);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
            seen.lock().unwrap().0 -= 1;
            Ok::<(), String>(())
        }
    })
    .concurrency(4)
    .global_concurrency(1);
    let rt = only(listener).await;
    for ride in 0..5 {
        rt.client()
            .push_to("reminders", &Reminder { ride })
            .await
            .unwrap();
    }
    rt.wait_idle().await;
    assert_eq!(rt.handled("reminders").len(), 5);
    assert_eq!(active.lock().unwrap().1, 1, "one at a time");
    rt.shutdown().await;
}

/// Priorities on the virtual clock: jobs due at the same time run highest first, and within a
/// priority in the order they were pushed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_due_together_run_highest_priority_first_in_tests() {
    let ran = Arc::new(Mutex::new(Vec::new()));
    let r = ran.clone();
    let listener = Listener::new("mail", move |m: Reminder, _: JobContext| {
        let r = r.clone();
        async move { r.lock().unwrap().push(m.ride) }
    })
    .concurrency(1);
    let rt = only(listener).await;
    for (ride, priority) in [(1, 0), (2, -5), (3, 5), (4, 0), (5, 5)] {
        rt.client()
            .push_to("mail", &Reminder { ride })
            .delay(Duration::from_secs(60))
            .priority(priority)
            .await
            .unwrap();
    }
    rt.advance(Duration::from_secs(61)).await;
    assert_eq!(*ran.lock().unwrap(), [3, 5, 1, 4, 2]);
    rt.shutdown().await;
}

#[derive(serde::Serialize, serde::Deserialize, dq::Message)]
#[message(topic = "charge", group = "account")]
struct Charge {
    account: String,
    n: u32,
}

/// Groups in tests: a message that names its group field puts each job in its account's group,
/// so one account's jobs run one at a time in push order while another account's run beside
/// them, whatever the listener's concurrency.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_accounts_charges_run_one_at_a_time_in_order_beside_another_accounts() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let running = Arc::new(Mutex::new(std::collections::HashMap::<String, u32>::new()));
    let (l, r) = (log.clone(), running.clone());
    let listener = Listener::new("charge", move |c: Charge, _: JobContext| {
        let (l, r) = (l.clone(), r.clone());
        async move {
            let now = {
                let mut r = r.lock().unwrap();
                let n = r.entry(c.account.clone()).or_default();
                *n += 1;
                *n
            };
            l.lock().unwrap().push((c.account.clone(), c.n, now));
            tokio::time::sleep(Duration::from_millis(20)).await;
            *r.lock().unwrap().get_mut(&c.account).unwrap() -= 1;
        }
    })
    .concurrency(8);
    let rt = only(listener).await;
    for (account, n) in [("a", 1), ("a", 2), ("b", 1), ("a", 3), ("b", 2)] {
        let charge = Charge {
            account: account.into(),
            n,
        };
        rt.client().push(charge).await.unwrap();
    }
    rt.advance(Duration::from_secs(1)).await;
    for _ in 0..100 {
        if log.lock().unwrap().len() == 5 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let log = log.lock().unwrap().clone();
    let of = |account: &str| -> Vec<u32> {
        log.iter()
            .filter(|(a, ..)| a == account)
            .map(|(_, n, _)| *n)
            .collect()
    };
    assert_eq!(of("a"), [1, 2, 3], "in push order: {log:?}");
    assert_eq!(of("b"), [1, 2], "{log:?}");
    assert!(
        log.iter().all(|(.., at_once)| *at_once == 1),
        "two of one account at once: {log:?}"
    );
    rt.shutdown().await;
}

/// A group rate on the test clock: group a's three jobs start a second apart, in push order,
/// though its group concurrency would let all three run at once, while group b's job starts at
/// once beside them. Read from the job events, which the test clock stamps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_rate_spaces_a_groups_starts_on_the_virtual_clock() {
    use dq::events::{EventItem, EventKind};
    let listener = Listener::new("charge", |_: Charge, _: JobContext| async {})
        .concurrency(8)
        .group_concurrency(3)
        .group_rate("1/1s".parse().unwrap())
        .events(true);
    let rt = only(listener).await;
    let mut events = rt.client().events("charge").await.unwrap();
    let pushed_at = rt.now();
    for (id, account, n) in [
        ("a1", "a", 1),
        ("a2", "a", 2),
        ("a3", "a", 3),
        ("b1", "b", 1),
    ] {
        let charge = Charge {
            account: account.into(),
            n,
        };
        rt.client().push(charge).id(id).await.unwrap();
    }
    rt.advance(Duration::from_secs(3)).await;
    assert_eq!(rt.handled("charge").len(), 4);
    let mut started = std::collections::HashMap::new();
    while started.len() < 4 {
        let item = tokio::time::timeout(Duration::from_secs(5), events.recv()).await;
        if let EventItem::Event { event, .. } = item.unwrap().unwrap().unwrap() {
            if event.kind == EventKind::Started {
                let since_push = event.at.duration_since(pushed_at).unwrap();
                started.insert(event.id.as_str().to_owned(), since_push);
            }
        }
    }
    let at = |id: &str| started[id];
    assert_eq!(at("a1"), Duration::ZERO, "{started:?}");
    assert_eq!(
        at("b1"),
        Duration::ZERO,
        "b does not wait for a: {started:?}"
    );
    // A start may come up to 5 ms before its turn (`Rate::LATE_WAKE`: the tolerance that lets
    // a late wake-up keep the next start in its place), so a second apart is 995 ms or more.
    let a_second = Duration::from_secs(1) - dq::Rate::LATE_WAKE;
    assert!(at("a2") >= at("a1") + a_second, "{started:?}");
    assert!(at("a3") >= at("a2") + a_second, "{started:?}");
    let late = Duration::from_millis(50);
    assert!(at("a2") <= Duration::from_secs(1) + late, "{started:?}");
    assert!(at("a3") <= Duration::from_secs(2) + late, "{started:?}");
    rt.shutdown().await;
}
