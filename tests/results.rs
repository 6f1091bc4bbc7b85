//! The values handlers return, end to end against a real redis-server: a program that pushed a
//! job (with a client of its own) waits for the value a worker's handler returned, or for its
//! last error; a topic without a retention keeps nothing and says so at once; a wait never
//! hangs; the retention a listener asks for is recorded at each start, so that leaving
//! `retain` out turns it off; and the progress a running handler reports is read by the
//! program that pushed, until the job ends.

#![allow(clippy::unwrap_used, unreachable_pub)] // test code: a panic is the failure report

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dq::admin::ChangeOutcome;
use dq::{
    Client, Config, Due, JobContext, JobInfo, JobResult, JobState, Listener, Message, Runtime,
};
use serde::{Deserialize, Serialize};
use support::RedisServer;
use tokio::sync::oneshot;

#[derive(Debug, Serialize, Deserialize)]
struct Invoice {
    order_id: u64,
}

impl Message for Invoice {
    const TOPIC: &'static str = "invoice";
}

/// What the invoicing handler returns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Receipt {
    number: String,
    cents: u64,
}

/// Longest a test waits for a job's end.
const WAIT: Duration = Duration::from_secs(10);
/// How long the listeners that keep records keep them.
const RETAIN: Duration = Duration::from_secs(3600);
/// A wait that answers without waiting answers within this.
const AT_ONCE: Duration = Duration::from_secs(2);

fn config(redis: &RedisServer) -> Config {
    Config::builder()
        .redis_url(redis.url())
        .namespace("results")
        .build()
        .unwrap()
}

/// A runtime on `redis` with only `listener`.
async fn runtime(redis: &RedisServer, listener: Listener) -> Runtime {
    support::start_on(config(redis), None, listener).await
}

/// The program that pushes: a client of its own, not the runtime's.
async fn producer(redis: &RedisServer) -> Client {
    Client::connect(config(redis)).await.unwrap()
}

fn receipt_of(order_id: u64) -> Receipt {
    Receipt {
        number: format!("R-{order_id}"),
        cents: order_id * 100,
    }
}

/// Answers each invoice with its receipt (no retention unless the test adds one).
fn invoicing() -> Listener {
    Listener::new(Invoice::TOPIC, |msg: Invoice| async move {
        Ok::<_, String>(receipt_of(msg.order_id))
    })
}

/// Pushes `Invoice { order_id }`, due now; returns its id.
async fn push(client: &Client, order_id: u64) -> String {
    let id = client.push(Invoice { order_id }).await.unwrap();
    id.as_str().to_owned()
}

/// Pushes `Invoice { order_id }`, due in an hour; returns its id.
async fn push_delayed(client: &Client, order_id: u64) -> String {
    let pushed = client
        .push(Invoice { order_id })
        .delay(Duration::from_secs(3600));
    pushed.await.unwrap().as_str().to_owned()
}

/// Waits (at most [`WAIT`]) for the end of invoice `id`, its value read as a [`Receipt`].
async fn wait(client: &Client, id: &str) -> JobResult<Receipt> {
    client.wait::<Invoice, Receipt>(id, WAIT).await.unwrap()
}

/// The invoice's record once it is no longer pending (5 s at most): `None` when none is kept.
async fn once_ended(client: &Client, id: &str) -> Option<JobInfo> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let info = client.status::<Invoice>(id).await.unwrap();
        match info.as_ref().map(|i| i.state) {
            None => return None,
            Some(JobState::Done | JobState::Dead) => return info,
            Some(state) => assert!(
                Instant::now() < deadline,
                "invoice {id} still {state} after 5 s"
            ),
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_waits_for_the_value_a_worker_returns() {
    let redis = RedisServer::start();
    let rt = runtime(&redis, invoicing().retain(RETAIN)).await;
    let client = producer(&redis).await;

    // Waited for as soon as it is pushed: the store wakes the wait when the job succeeds.
    let id = push(&client, 42).await;
    assert_eq!(
        wait(&client, &id).await,
        JobResult::Succeeded(receipt_of(42))
    );

    // The record stays: read, or waited for again, it answers at once with the same value.
    let begun = Instant::now();
    assert_eq!(
        wait(&client, &id).await,
        JobResult::Succeeded(receipt_of(42))
    );
    assert!(begun.elapsed() < AT_ONCE, "took {:?}", begun.elapsed());
    let read = client.result::<Invoice, Receipt>(&id).await.unwrap();
    assert_eq!(read, JobResult::Succeeded(receipt_of(42)));
    let info = client.status::<Invoice>(&id).await.unwrap().unwrap();
    assert_eq!(info.state, JobState::Done);
    let json = info.result.expect("the value is in the record");
    let kept: Receipt = serde_json::from_slice(&json).unwrap();
    assert_eq!(kept, receipt_of(42));

    // Read as some other type, the value is an error that says so, not a panic nor a default.
    let misread = client.result::<Invoice, Vec<u64>>(&id).await;
    assert!(misread.is_err(), "{misread:?}");
    rt.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_returning_nothing_ends_the_wait_as_a_success_without_a_value() {
    let redis = RedisServer::start();
    let quiet = Listener::new(
        Invoice::TOPIC,
        |_: Invoice| async move { Ok::<(), String>(()) },
    );
    let rt = runtime(&redis, quiet.retain(RETAIN)).await;
    let client = producer(&redis).await;

    let id = push(&client, 1).await;
    assert_eq!(wait(&client, &id).await, JobResult::SucceededEmpty);
    let info = client.status::<Invoice>(&id).await.unwrap().unwrap();
    assert_eq!((info.state, info.result), (JobState::Done, None));
    rt.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_job_ends_the_wait_with_its_last_error() {
    let redis = RedisServer::start();
    let declining = Listener::new(Invoice::TOPIC, |_: Invoice| async move {
        Err::<Receipt, _>("the card was declined")
    })
    .retries(0)
    .retain(RETAIN);
    let rt = runtime(&redis, declining).await;
    let client = producer(&redis).await;

    let id = push(&client, 7).await;
    match wait(&client, &id).await {
        JobResult::Dead { error, attempts } => {
            assert!(error.contains("the card was declined"), "{error}");
            assert_eq!(attempts, 1, "retries(0): one run");
        }
        other => panic!("invoice {id} should be dead, not {other:?}"),
    }
    // The dead letter says the same, and so does a read.
    let info = once_ended(&client, &id)
        .await
        .expect("a dead letter is kept");
    assert_eq!(info.state, JobState::Dead);
    let read = client.result::<Invoice, Receipt>(&id).await.unwrap();
    assert!(matches!(read, JobResult::Dead { .. }), "{read:?}");
    rt.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_on_a_topic_without_retention_answers_not_kept_once_the_job_has_run() {
    let redis = RedisServer::start();
    let rt = runtime(&redis, invoicing()).await;
    let client = producer(&redis).await;

    // A job that ran: no record of it is kept, and a wait says so at once.
    let ran = push(&client, 1).await;
    assert!(
        once_ended(&client, &ran).await.is_none(),
        "no record kept without a retention"
    );
    let begun = Instant::now();
    assert_eq!(wait(&client, &ran).await, JobResult::NotKept);
    assert!(begun.elapsed() < AT_ONCE, "took {:?}", begun.elapsed());
    let read = client.result::<Invoice, Receipt>(&ran).await.unwrap();
    assert_eq!(read, JobResult::NotKept);

    // One still delayed is pending: a wait waits for it, and is told when it has run.
    let delayed = push_delayed(&client, 2).await;
    let read = client.result::<Invoice, Receipt>(&delayed).await.unwrap();
    assert_eq!(read, JobResult::Pending);
    let short = Duration::from_millis(300);
    let waited = client.wait::<Invoice, Receipt>(&delayed, short).await;
    assert_eq!(waited.unwrap(), JobResult::Pending);
    let now = Due::After(Duration::ZERO);
    let moved = client.reschedule::<Invoice>(&delayed, now).await.unwrap();
    assert_eq!(moved, ChangeOutcome::Done);
    let begun = Instant::now();
    assert_eq!(wait(&client, &delayed).await, JobResult::NotKept);
    assert!(
        begun.elapsed() < AT_ONCE,
        "woken when it ran: {:?}",
        begun.elapsed()
    );
    rt.shutdown().await.unwrap();
}

/// A producer that pushes and waits while its workers are still starting: the topic's
/// retention is not recorded yet, and the wait still gets the value once they run the job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_made_before_the_workers_start_gets_the_value() {
    let redis = RedisServer::start();
    let client = producer(&redis).await;
    let id = client.push(Invoice { order_id: 7 }).await.unwrap();
    let waiting = {
        let client = client.clone();
        let id = id.to_string();
        tokio::spawn(async move { wait(&client, &id).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let rt = runtime(&redis, invoicing().retain(RETAIN)).await;
    assert_eq!(waiting.await.unwrap(), JobResult::Succeeded(receipt_of(7)));
    rt.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_times_out_cleanly_on_a_job_still_delayed() {
    let redis = RedisServer::start();
    let rt = runtime(&redis, invoicing().retain(RETAIN)).await;
    let client = producer(&redis).await;

    let id = push_delayed(&client, 3).await;
    let timeout = Duration::from_millis(500);
    let begun = Instant::now();
    let waited = client.wait::<Invoice, Receipt>(&id, timeout).await.unwrap();
    let took = begun.elapsed();
    assert_eq!(waited, JobResult::Pending);
    assert!(
        took >= timeout - Duration::from_millis(100) && took < timeout + AT_ONCE,
        "a wait of {timeout:?} took {took:?}"
    );

    // The job is as it was, and the client goes on working: moved to now, the job runs, and
    // the next wait gets its value.
    let info = client.status::<Invoice>(&id).await.unwrap().unwrap();
    assert_eq!(info.state, JobState::Delayed);
    let now = Due::After(Duration::ZERO);
    let moved = client.reschedule::<Invoice>(&id, now).await.unwrap();
    assert_eq!(moved, ChangeOutcome::Done);
    assert_eq!(
        wait(&client, &id).await,
        JobResult::Succeeded(receipt_of(3))
    );
    rt.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_without_retain_turns_retention_off_at_its_next_start() {
    let redis = RedisServer::start();
    let client = producer(&redis).await;

    let rt = runtime(&redis, invoicing().retain(RETAIN)).await;
    let kept = push(&client, 1).await;
    assert_eq!(
        wait(&client, &kept).await,
        JobResult::Succeeded(receipt_of(1))
    );
    rt.shutdown().await.unwrap();

    // The same listener without `retain`, started again: the jobs that succeed from now on
    // leave no record, and waits for them say so at once.
    let rt = runtime(&redis, invoicing()).await;
    let not_kept = push(&client, 2).await;
    assert!(
        once_ended(&client, &not_kept).await.is_none(),
        "the retention is off: no record kept"
    );
    let begun = Instant::now();
    assert_eq!(wait(&client, &not_kept).await, JobResult::NotKept);
    assert!(begun.elapsed() < AT_ONCE, "took {:?}", begun.elapsed());
    rt.shutdown().await.unwrap();

    // And `retain` given again turns it back on.
    let rt = runtime(&redis, invoicing().retain(RETAIN)).await;
    let kept_again = push(&client, 3).await;
    assert_eq!(
        wait(&client, &kept_again).await,
        JobResult::Succeeded(receipt_of(3))
    );
    rt.shutdown().await.unwrap();
}

/// Redis lost what the runtime declared (restarted without persistence, flushed): the ticker
/// declares the retention again, as it does the schedules and retries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retention_redis_lost_is_declared_again() {
    let redis = RedisServer::start();
    let rt = runtime(&redis, invoicing().retain(RETAIN)).await;
    let client = producer(&redis).await;
    redis.command(&["FLUSHALL"]);

    let deadline = Instant::now() + Duration::from_secs(10);
    for order_id in 1_u64.. {
        let id = push(&client, order_id).await;
        match wait(&client, &id).await {
            JobResult::Succeeded(receipt) => {
                assert_eq!(receipt, receipt_of(order_id));
                break;
            }
            JobResult::NotKept => assert!(
                Instant::now() < deadline,
                "the retention was not declared again within 10 s"
            ),
            other => panic!("invoice {id}: {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    rt.shutdown().await.unwrap();
}

/// How far an invoice's handler has come, as it reports it.
#[derive(Debug, Serialize)]
struct Step {
    done: u32,
    of: u32,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_handlers_progress_is_read_by_the_producer_until_the_job_ends() {
    let redis = RedisServer::start();
    // The handler reports its progress, then waits for the test to let it finish.
    let (go_on, gate) = oneshot::channel::<()>();
    let gate = Arc::new(Mutex::new(Some(gate)));
    let reporting = Listener::new(Invoice::TOPIC, move |msg: Invoice, ctx: JobContext| {
        let gate = gate.clone();
        async move {
            let step = Step { done: 1, of: 2 };
            ctx.progress(&step).await.map_err(|e| e.to_string())?;
            let gate = gate.lock().unwrap().take();
            if let Some(gate) = gate {
                let _ = gate.await;
            }
            Ok::<_, String>(receipt_of(msg.order_id))
        }
    });
    let rt = runtime(&redis, reporting.retain(RETAIN)).await;
    let client = producer(&redis).await;

    let id = push(&client, 5).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    let progress = loop {
        let info = client.status_in(Invoice::TOPIC, &id).await.unwrap();
        if let Some(JobInfo {
            state: JobState::Running,
            progress: Some(progress),
            ..
        }) = info
        {
            break progress;
        }
        assert!(
            Instant::now() < deadline,
            "no progress within 5 s: {info:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let read: serde_json::Value = serde_json::from_slice(&progress).unwrap();
    assert_eq!(read, serde_json::json!({ "done": 1, "of": 2 }));

    // Let go, the job ends: its record has its value, and the progress of its run is gone.
    go_on.send(()).unwrap();
    assert_eq!(
        wait(&client, &id).await,
        JobResult::Succeeded(receipt_of(5))
    );
    let info = client
        .status_in(Invoice::TOPIC, &id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((info.state, info.progress), (JobState::Done, None));
    rt.shutdown().await.unwrap();
}
