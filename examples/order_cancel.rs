//! The order-cancel story, end to end: every new order gets a job that cancels it if it is
//! still unpaid when its time is up. Some customers pay in time; the payment service flakes
//! now and then, so some cancellations are retried.
//!
//! ```sh
//! cargo run --example order_cancel                                   # in-memory store, ends by itself
//! DQ_REDIS_URL=redis://127.0.0.1:6379/ cargo run --example order_cancel
//! cargo run --example order_cancel -- --serve                        # keep running until Ctrl-C
//! ```
//!
//! The listener lives in `mod handlers` below: `#[dq::listener]` registers it wherever it is,
//! `Runtime::builder().start()` finds it, and hands it the shop registered with `.state(..)`.

use std::time::{Duration, Instant};

use tracing::info;

/// A stand-in for the shop's database: the listener gets it as `State<Shop>`, registered
/// with `Runtime::builder().state(..)` (a real shop would hold a connection pool here).
mod shop {
    use std::collections::BTreeMap;
    use std::sync::{Arc, Mutex, MutexGuard};

    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub(crate) enum Order {
        Unpaid,
        Paid,
        Cancelled,
    }

    /// Cheap to clone: clones share the orders.
    #[derive(Clone, Debug, Default)]
    pub(crate) struct Shop {
        orders: Arc<Mutex<BTreeMap<u64, Order>>>,
    }

    impl Shop {
        fn orders(&self) -> MutexGuard<'_, BTreeMap<u64, Order>> {
            self.orders.lock().unwrap_or_else(|p| p.into_inner())
        }
        pub(crate) fn place(&self, id: u64) {
            self.orders().insert(id, Order::Unpaid);
        }
        pub(crate) fn pay(&self, id: u64) {
            self.orders().insert(id, Order::Paid);
        }
        pub(crate) fn state(&self, id: u64) -> Option<Order> {
            self.orders().get(&id).copied()
        }
        pub(crate) fn cancel(&self, id: u64) {
            self.orders().insert(id, Order::Cancelled);
        }
        pub(crate) fn all(&self) -> Vec<(u64, Order)> {
            self.orders().iter().map(|(k, v)| (*k, *v)).collect()
        }
    }
}

mod handlers {
    use serde::{Deserialize, Serialize};
    use tracing::{info, warn};

    use crate::shop::{Order, Shop};

    /// "Cancel order N if it is still unpaid."
    #[derive(Debug, Serialize, Deserialize, dq::Message)]
    #[message(topic = "order-cancel")]
    pub(crate) struct OrderCancel {
        pub(crate) order_id: u64,
    }

    /// Cancels the order unless it was paid in the meantime. After the payload, a listener
    /// takes what it needs, in any order: here the shop (registered at start) and the context.
    #[dq::listener(concurrency = 8, timeout = "5s", retries = 2, backoff = "fixed:300ms")]
    async fn cancel_unpaid_order(
        msg: OrderCancel,
        shop: dq::State<Shop>,
        ctx: dq::JobContext,
    ) -> Result<(), String> {
        let id = msg.order_id;
        // The payment service times out on the first try for every third order: the job fails
        // and dq runs it again after the backoff.
        if id.is_multiple_of(3) && ctx.attempt() == 1 {
            warn!(order = id, "payment service timed out; dq will retry");
            return Err(format!("payment service timed out checking order {id}"));
        }
        match shop.state(id) {
            Some(Order::Unpaid) => {
                shop.cancel(id);
                info!(
                    order = id,
                    attempt = ctx.attempt(),
                    "order still unpaid: cancelled"
                );
            }
            Some(state) => info!(order = id, ?state, "order no longer unpaid: nothing to do"),
            None => return Err(format!("order {id} does not exist")),
        }
        Ok(())
    }
}

#[tokio::main]
async fn main() -> dq::Result<()> {
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_target(false)
        .init();
    let serve = std::env::args().any(|a| a == "--serve");

    let shop = shop::Shop::default();
    let rt = dq::Runtime::builder().state(shop.clone()).start().await?;
    let client = rt.client().clone();

    // Six orders; each is cancelled 1.5 s after it is placed unless it is paid by then.
    for id in 1..=6u64 {
        shop.place(id);
        client
            .push(handlers::OrderCancel { order_id: id })
            .id(id.to_string()) // one cancellation per order, however often this runs
            .delay(Duration::from_millis(1500))
            .await?;
        info!(
            order = id,
            "order placed; cancellation due in 1.5 s unless paid"
        );
    }
    // Order 2 is paid: its job will find it paid. Order 5 is paid and its job cancelled.
    shop.pay(2);
    shop.pay(5);
    client.cancel::<handlers::OrderCancel>("5").await?;
    info!("orders 2 and 5 paid; the cancellation of order 5 was withdrawn");

    if serve {
        info!("serving until Ctrl-C");
        rt.run_until_shutdown_signal().await?;
        return Ok(());
    }

    // Demo mode: wait until every job is handled, then shut down gracefully.
    let started = Instant::now();
    loop {
        let c = client.counts("order-cancel").await?;
        if c.delayed + c.ready + c.running == 0 {
            break;
        }
        if started.elapsed() > Duration::from_secs(30) {
            tracing::error!(?c, "jobs still pending after 30 s; giving up");
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let report = rt.shutdown().await?;
    for (id, state) in shop.all() {
        info!(order = id, ?state, "final");
    }
    info!(?report, "done");
    Ok(())
}
