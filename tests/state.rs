//! Listeners with application state: `State<T>`, `Client`, `JobContext` and user-written
//! extractors after the payload, in any order, on the memory store and on Redis; a listener
//! asking for state nobody registered fails `start()`, naming itself, the type and the call.

#![allow(clippy::unwrap_used, unreachable_pub)] // test code: a panic is the failure report

mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dq::testing::TestRuntime;
use dq::{JobContext, Listener, State};
use support::RedisServer;

/// The shop's orders; clones share them.
#[derive(Clone, Debug, Default)]
pub struct Shop {
    orders: Arc<Mutex<BTreeMap<u64, &'static str>>>,
}

impl Shop {
    fn set(&self, id: u64, state: &'static str) {
        self.orders.lock().unwrap().insert(id, state);
    }
    fn get(&self, id: u64) -> Option<&'static str> {
        self.orders.lock().unwrap().get(&id).copied()
    }
}

/// The mails sent; clones share them.
#[derive(Clone, Debug, Default)]
pub struct Mailer {
    sent: Arc<Mutex<Vec<String>>>,
}

impl Mailer {
    fn send(&self, text: String) {
        self.sent.lock().unwrap().push(text);
    }
    fn sent(&self) -> Vec<String> {
        let mut sent = self.sent.lock().unwrap().clone();
        sent.sort();
        sent
    }
}

/// A user-written extractor: the tenant named in the payload's `"tenant"` field. A job
/// without one is dead-lettered before the handler runs.
#[derive(Debug)]
pub struct Tenant(String);

impl dq::FromJob for Tenant {
    fn from_job(job: &JobContext) -> Result<Self, dq::Outcome> {
        #[derive(serde::Deserialize)]
        struct Meta {
            tenant: String,
        }
        serde_json::from_slice::<Meta>(job.payload())
            .map(|m| Tenant(m.tenant))
            .map_err(|e| dq::Outcome::DeadLetter(format!("the payload names no tenant: {e}")))
    }
}

/// Three listeners taking two state types, the client and the context in different orders,
/// and a fourth taking the user-written extractor.
mod listeners {
    use dq::{Client, JobContext, State};
    use serde::{Deserialize, Serialize};

    use super::{Mailer, Shop, Tenant};

    #[derive(Serialize, Deserialize, dq::Message)]
    #[message(topic = "state-order-cancel")]
    pub struct OrderCancel {
        pub order_id: u64,
    }

    #[derive(Serialize, Deserialize, dq::Message)]
    #[message(topic = "state-notify")]
    pub struct Notify {
        pub order_id: u64,
    }

    #[derive(Serialize, Deserialize, dq::Message)]
    #[message(topic = "state-refund")]
    pub struct Refund {
        pub order_id: u64,
    }

    #[derive(Serialize, Deserialize, dq::Message)]
    #[message(topic = "state-invoice")]
    pub struct Invoice {
        pub amount: u64,
    }

    /// Cancels the order in the shop and pushes the notification as a follow-up job.
    #[dq::listener]
    async fn cancel_order(
        msg: OrderCancel,
        shop: State<Shop>,
        client: Client,
    ) -> Result<(), dq::Error> {
        shop.set(msg.order_id, "cancelled");
        client
            .push(Notify {
                order_id: msg.order_id,
            })
            .await?;
        Ok(())
    }

    #[dq::listener]
    async fn notify(msg: Notify, mail: State<Mailer>, ctx: JobContext, shop: State<Shop>) {
        let state = shop.get(msg.order_id).unwrap_or("unknown");
        mail.send(format!(
            "order {} is {state} (attempt {})",
            msg.order_id,
            ctx.attempt()
        ));
    }

    #[dq::listener]
    async fn refund(msg: Refund, ctx: JobContext, shop: State<Shop>, mail: State<Mailer>) {
        shop.set(msg.order_id, "refunded");
        mail.send(format!("refund {} on {}", msg.order_id, ctx.topic()));
    }

    #[dq::listener]
    async fn invoice(msg: Invoice, tenant: Tenant, mail: State<Mailer>) {
        mail.send(format!("invoice of {} for {}", msg.amount, tenant.0));
    }
}

use listeners::{Invoice, OrderCancel, Refund};

const EXPECTED: [&str; 4] = [
    "invoice of 12 for acme",
    "order 1 is cancelled (attempt 1)",
    "order 2 is cancelled (attempt 1)",
    "refund 3 on state-refund",
];

async fn push_story(client: &dq::Client) {
    for id in [1, 2] {
        client.push(OrderCancel { order_id: id }).await.unwrap();
    }
    client.push(Refund { order_id: 3 }).await.unwrap();
    client
        .push_to(
            "state-invoice",
            &serde_json::json!({"amount": 12, "tenant": "acme"}),
        )
        .await
        .unwrap();
}

fn assert_story(shop: &Shop, mailer: &Mailer) {
    assert_eq!(mailer.sent(), EXPECTED);
    assert_eq!(shop.get(1), Some("cancelled"));
    assert_eq!(shop.get(2), Some("cancelled"));
    assert_eq!(shop.get(3), Some("refunded"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listeners_get_two_state_types_the_client_and_the_context_on_the_memory_store() {
    let (shop, mailer) = (Shop::default(), Mailer::default());
    let with_shop = TestRuntime::builder().state(shop.clone());
    let rt = with_shop.state(mailer.clone()).start().await.unwrap();
    push_story(rt.client()).await;
    rt.wait_idle().await;
    assert_story(&shop, &mailer);
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listeners_get_two_state_types_the_client_and_the_context_on_redis() {
    let redis = RedisServer::start();
    let config = support::config(&redis);
    let (shop, mailer) = (Shop::default(), Mailer::default());
    let rt = dq::Runtime::builder()
        .config(config)
        .state(mailer.clone())
        .state(shop.clone())
        .start()
        .await
        .unwrap();
    push_story(rt.client()).await;
    support::wait_until(
        Duration::from_secs(10),
        || mailer.sent().len() >= EXPECTED.len(),
        || format!("sent so far: {:?}", mailer.sent()),
    )
    .await;
    assert_story(&shop, &mailer);
    rt.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_listener_asking_for_unregistered_state_fails_start_naming_itself_the_type_and_the_call()
{
    // Shop is registered, Mailer is not: `notify`, `refund` and `invoice` need it.
    let error = TestRuntime::builder()
        .state(Shop::default())
        .start()
        .await
        .unwrap_err();
    assert_eq!(error.kind(), dq::ErrorKind::InvalidInput);
    let text = error.to_string();
    let named = ["notify", "refund", "invoice"]
        .iter()
        .any(|f| text.contains(&format!("state::listeners::{f} (tests/state.rs:")));
    assert!(named, "the listener's path and location: {text}");
    for part in [
        "takes `State<state::Mailer>`",
        "no `state::Mailer` was registered (registered: state::Shop)",
        "`Runtime::builder().state(value)` before `start()`",
        "`TestRuntime::builder().state(value)`",
    ] {
        assert!(text.contains(part), "{part:?} missing from: {text}");
    }
}

#[tokio::test]
async fn a_closure_listener_asking_for_unregistered_state_fails_start_with_its_location() {
    let line = line!() + 3;
    let error = TestRuntime::builder()
        .without_registered_listeners()
        .listener(Listener::new(
            "closures",
            |_n: u64, _s: State<Shop>| async {},
        ))
        .start()
        .await
        .unwrap_err();
    let text = error.to_string();
    let at = format!("closure at tests/state.rs:{line}");
    assert!(text.contains(&at), "{text}");
    assert!(
        text.contains("no `state::Shop` was registered (none is registered)"),
        "{text}"
    );
}

#[tokio::test]
async fn one_state_type_registered_twice_fails_start() {
    let error = TestRuntime::builder()
        .state(Shop::default())
        .state(Mailer::default())
        .state(Shop::default())
        .start()
        .await
        .unwrap_err();
    assert_eq!(error.kind(), dq::ErrorKind::Config);
    assert!(
        error
            .to_string()
            .contains("`state::Shop` is registered twice"),
        "{error}"
    );
}

#[tokio::test]
async fn a_closure_listener_takes_extractors_in_any_order() {
    let shop = Shop::default();
    let listener = Listener::new(
        "closures",
        |n: u64, ctx: JobContext, shop: State<Shop>| async move {
            assert_eq!(ctx.topic().as_str(), "closures");
            shop.set(n, "seen");
        },
    );
    let rt = TestRuntime::builder()
        .without_registered_listeners()
        .state(shop.clone())
        .listener(listener)
        .start()
        .await
        .unwrap();
    rt.client().push_to("closures", &7).await.unwrap();
    rt.wait_idle().await;
    assert_eq!(shop.get(7), Some("seen"));
    rt.shutdown().await;
}

#[tokio::test]
async fn an_extractor_that_rejects_the_job_dead_letters_it_without_running_the_handler() {
    let mailer = Mailer::default();
    let rt = TestRuntime::builder()
        .state(Shop::default())
        .state(mailer.clone())
        .start()
        .await
        .unwrap();
    rt.client()
        .push(Invoice { amount: 5 })
        .id("no-tenant")
        .await
        .unwrap();
    rt.wait_idle().await;
    assert!(
        mailer.sent().is_empty(),
        "the handler ran: {:?}",
        mailer.sent()
    );
    let dead = rt.dead("state-invoice").await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].id.as_str(), "no-tenant");
    let error = dead[0].last_error.as_deref().unwrap_or_default();
    assert!(error.contains("the payload names no tenant"), "{error}");
    rt.shutdown().await;
}

/// An extractor with a bug: it panics.
struct Flaky;

impl dq::FromJob for Flaky {
    fn from_job(_: &JobContext) -> Result<Self, dq::Outcome> {
        panic!("tenant table not loaded")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extractor_that_panics_fails_the_run_and_the_job_is_retried_then_dead_lettered() {
    let ran = Arc::new(Mutex::new(0));
    let count = ran.clone();
    let listener = Listener::new("state-flaky", move |_: u64, _: Flaky| {
        let count = count.clone();
        async move {
            *count.lock().unwrap() += 1;
            Ok::<(), String>(())
        }
    });
    let rt = TestRuntime::start_with(
        dq::Runtime::builder()
            .without_registered_listeners()
            .listener(listener),
    )
    .await
    .unwrap();
    rt.client()
        .push_to("state-flaky", &7)
        .id("f")
        .await
        .unwrap();
    // Not stalled: every attempt fails at once and the retries come on the virtual clock.
    rt.advance(Duration::from_secs(600)).await;
    assert_eq!(*ran.lock().unwrap(), 0, "the handler never ran");
    let dead = rt.dead("state-flaky").await.unwrap();
    assert_eq!(
        (dead.len(), dead[0].attempt),
        (1, 3),
        "retried, then dead-lettered"
    );
    let error = dead[0].last_error.as_deref().unwrap_or_default();
    assert!(
        error.contains("an argument extractor panicked: tenant table not loaded"),
        "{error}"
    );
    rt.shutdown().await;
}
