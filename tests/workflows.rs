//! Workflows run by the runtime: a step's handler reads what the steps it comes after returned
//! (`JobContext::dependencies`), on the virtual clock of `dq::testing` and on a real Redis.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use dq::testing::TestRuntime;
use dq::workflow::{OnFailure, StepState, WorkflowState};
use dq::{JobContext, Listener, Runtime};
use support::RedisServer;

#[derive(serde::Serialize, serde::Deserialize)]
struct Order {
    order: u64,
}

#[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
struct Receipt {
    number: String,
}

type Seen = Arc<Mutex<Vec<(String, SystemTime)>>>;

/// charge -> (receipt), stock -> (count); ship after both, reading the receipt; refund after
/// both whatever happened, reading whether both succeeded.
fn listeners(seen: &Seen, stock_fails: bool) -> Vec<Listener> {
    let charge = Listener::new("charge-card", |o: Order| async move {
        Ok::<_, String>(Receipt {
            number: format!("r-{}", o.order),
        })
    });
    let stock = Listener::new("check-stock", move |_: Order| async move {
        if stock_fails {
            return Err("out of stock".to_owned());
        }
        Ok(3u32)
    })
    .retries(0);
    let s = seen.clone();
    let ship = Listener::new("ship-order", move |o: Order, ctx: JobContext| {
        let s = s.clone();
        async move {
            let deps = ctx.dependencies().await.map_err(|e| e.to_string())?;
            let receipt: Receipt = deps.value("charge").map_err(|e| e.to_string())?;
            let units: u32 = deps.value("stock").map_err(|e| e.to_string())?;
            let at = ctx.client().store_time().await.unwrap();
            s.lock()
                .unwrap()
                .push((format!("ship {} {} x{units}", o.order, receipt.number), at));
            Ok::<(), String>(())
        }
    });
    let s = seen.clone();
    let refund = Listener::new("refund-order", move |o: Order, ctx: JobContext| {
        let s = s.clone();
        async move {
            let deps = ctx.dependencies().await.map_err(|e| e.to_string())?;
            let failed: Vec<String> = deps
                .iter()
                .filter(|d| !d.succeeded())
                .map(|d| format!("{}: {}", d.name, d.error.clone().unwrap_or_default()))
                .collect();
            let at = ctx.client().store_time().await.unwrap();
            s.lock()
                .unwrap()
                .push((format!("refund {} after {failed:?}", o.order), at));
            Ok::<(), String>(())
        }
    });
    vec![charge, stock, ship, refund]
}

async fn push_checkout(client: &dq::Client, order: u64) {
    let msg = Order { order };
    let mut flow = client.workflow(format!("checkout-{order}"));
    flow.step_to("charge", "charge-card", &msg);
    flow.step_to("stock", "check-stock", &msg);
    flow.step_to("ship", "ship-order", &msg)
        .after("charge")
        .after("stock")
        .delay(Duration::from_secs(600));
    flow.step_to("refund", "refund-order", &msg)
        .after_with("charge", OnFailure::Run)
        .after_with("stock", OnFailure::Run);
    flow.push().await.unwrap();
}

async fn test_runtime(seen: &Seen, stock_fails: bool) -> TestRuntime {
    let mut builder = Runtime::builder().without_registered_listeners();
    for l in listeners(seen, stock_fails) {
        builder = builder.listener(l);
    }
    TestRuntime::start_with(builder).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_runs_its_delay_after_both_dependencies_and_reads_their_values() {
    let seen = Seen::default();
    let rt = test_runtime(&seen, false).await;
    let start = rt.now();
    push_checkout(rt.client(), 42).await;
    rt.advance(Duration::from_secs(599)).await;
    assert_eq!(
        seen.lock().unwrap().len(),
        1,
        "only the refund step ran: {seen:?}"
    );
    rt.advance(Duration::from_secs(2)).await;
    let seen = seen.lock().unwrap().clone();
    let ship = seen.iter().find(|(s, _)| s.starts_with("ship")).unwrap();
    assert_eq!(ship.0, "ship 42 r-42 x3");
    assert_eq!(
        ship.1.duration_since(start).unwrap().as_secs(),
        600,
        "due 600 s after its dependencies ended"
    );
    let refund = seen.iter().find(|(s, _)| s.starts_with("refund")).unwrap();
    assert_eq!(refund.0, "refund 42 after []");
    let info = rt
        .client()
        .workflow_status("checkout-42")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(info.state, WorkflowState::Succeeded);
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_step_cancels_the_step_after_it_and_runs_the_one_that_runs_anyway() {
    let seen = Seen::default();
    let rt = test_runtime(&seen, true).await;
    push_checkout(rt.client(), 7).await;
    rt.advance(Duration::from_secs(3600)).await;
    let seen: Vec<String> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|(s, _)| s.clone())
        .collect();
    assert_eq!(
        seen,
        [r#"refund 7 after ["stock: out of stock (attempt 1 of 1)"]"#]
    );
    let info = rt
        .client()
        .workflow_status("checkout-7")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(info.state, WorkflowState::Failed);
    assert_eq!(info.step("ship").unwrap().state, StepState::Cancelled);
    assert_eq!(info.step("refund").unwrap().state, StepState::Succeeded);
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflow_runs_on_redis_and_its_steps_read_their_dependencies_values() {
    let redis = RedisServer::start();
    let seen = Seen::default();
    let mut builder = Runtime::builder()
        .config(support::no_safety_tick(&redis).build().unwrap())
        .without_registered_listeners();
    for l in listeners(&seen, false) {
        builder = builder.listener(l);
    }
    let rt = builder.start().await.unwrap();
    let client = support::client(&redis).await;
    let msg = Order { order: 9 };
    let mut flow = client.workflow("checkout-9");
    flow.step_to("charge", "charge-card", &msg);
    flow.step_to("stock", "check-stock", &msg);
    flow.step_to("ship", "ship-order", &msg)
        .after("charge")
        .after("stock");
    flow.push().await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while client
        .workflow_status("checkout-9")
        .await
        .unwrap()
        .unwrap()
        .state
        == WorkflowState::Running
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the workflow did not end"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let seen: Vec<String> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|(s, _)| s.clone())
        .collect();
    assert_eq!(seen, ["ship 9 r-9 x3"]);
    let info = client.workflow_status("checkout-9").await.unwrap().unwrap();
    assert_eq!(info.state, WorkflowState::Succeeded);
    rt.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_workflow_is_refused_on_a_namespace_of_several_shards() {
    let redis = RedisServer::start();
    let config = support::no_safety_tick(&redis).shards(4).build().unwrap();
    let client = dq::Client::connect(config).await.unwrap();
    let mut flow = client.workflow("w");
    flow.step_to("a", "t", &1);
    let e = flow.push().await.unwrap_err();
    assert_eq!(e.kind(), dq::ErrorKind::InvalidInput);
    assert!(e.to_string().contains("one shard"), "{e}");
}
