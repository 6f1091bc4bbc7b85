//! Listeners registered with `#[dq::listener]` in other modules are found through `inventory`
//! and run by `Runtime::start`, with the options given in the attribute.

#![allow(clippy::unwrap_used, unreachable_pub)] // test code: a panic is the failure report

mod support;

use std::sync::Mutex;
use std::time::Duration;

use support::RedisServer;

static HANDLED: Mutex<Vec<String>> = Mutex::new(Vec::new());

mod orders {
    pub mod handlers {
        use serde::{Deserialize, Serialize};

        #[derive(Serialize, Deserialize, dq::Message)]
        #[message(topic = "order-cancel")]
        pub struct OrderCancel {
            pub order_id: u64,
        }

        #[dq::listener(concurrency = 4, timeout = "2s", retries = 1)]
        async fn cancel_order(msg: OrderCancel, ctx: dq::JobContext) -> Result<(), String> {
            assert_eq!(ctx.max_attempts(), 2, "retries = 1 from the attribute");
            super::super::HANDLED
                .lock()
                .unwrap()
                .push(format!("order {}", msg.order_id));
            Ok(())
        }
    }
}

mod reminders {
    #[dq::listener(topic = "ride-reminder")]
    async fn remind(ride: String) {
        super::HANDLED.lock().unwrap().push(format!("ride {ride}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listeners_in_other_modules_are_found_and_run() {
    let redis = RedisServer::start();
    let config = support::config(&redis);
    let rt = dq::Runtime::builder().config(config).start().await.unwrap();
    let c = rt.client();
    c.push(orders::handlers::OrderCancel { order_id: 42 })
        .await
        .unwrap();
    c.push_to("ride-reminder", "r-7").await.unwrap();
    support::wait_until(
        Duration::from_secs(5),
        || HANDLED.lock().unwrap().len() >= 2,
        || format!("handled only {:?}", HANDLED.lock().unwrap()),
    )
    .await;
    let mut handled = HANDLED.lock().unwrap().clone();
    handled.sort();
    assert_eq!(handled, ["order 42", "ride r-7"]);
    rt.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_second_listener_for_a_macro_registered_topic_is_refused_with_both_locations() {
    let redis = RedisServer::start();
    let config = support::config(&redis);
    let extra = dq::Listener::new("ride-reminder", |_: String, _: dq::JobContext| async {});
    let err = dq::Runtime::builder()
        .config(config)
        .listener(extra)
        .start()
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("listeners::reminders::remind (tests/listeners.rs:"),
        "{text}"
    );
    assert!(text.contains("closure at tests/listeners.rs:"), "{text}");
}
