//! A checkout as a workflow: charge the card and check the stock at once; when both have
//! succeeded, ship 2 seconds later (a real shop would wait longer: the customer may still
//! cancel); if either fails, refund. The charge's receipt and the stock check's count reach
//! the shipping step through `ctx.dependencies()`.
//!
//! ```sh
//! cargo run --example checkout_flow                                   # in-memory store, ends by itself
//! DQ_REDIS_URL=redis://127.0.0.1:6379/ cargo run --example checkout_flow
//! ```
//!
//! Order 2's item is out of stock: its shipping step is cancelled and its refund runs.

use std::time::{Duration, Instant};

use tracing::info;

mod handlers {
    use serde::{Deserialize, Serialize};
    use tracing::info;

    /// The message every step of a checkout gets: which order.
    #[derive(Debug, Serialize, Deserialize)]
    pub(crate) struct Checkout {
        pub(crate) order: u64,
    }

    /// What the charge step returns, for the steps after it.
    #[derive(Debug, Serialize, Deserialize)]
    pub(crate) struct Receipt {
        pub(crate) number: String,
        pub(crate) cents: u64,
    }

    /// Charges the card; its value (the receipt) is kept in the workflow for the steps after it.
    #[dq::listener(topic = "charge-card")]
    async fn charge(msg: Checkout) -> Result<Receipt, String> {
        info!(order = msg.order, "card charged");
        Ok(Receipt {
            number: format!("R-{}", 1000 + msg.order),
            cents: 2599,
        })
    }

    /// Reserves the stock; order 2's item is out of stock (no retry: it will not come back).
    #[dq::listener(topic = "check-stock", retries = 0)]
    async fn check_stock(msg: Checkout) -> Result<u32, String> {
        if msg.order == 2 {
            return Err(format!("order {}: item out of stock", msg.order));
        }
        info!(order = msg.order, "stock reserved");
        Ok(1)
    }

    /// Runs only after the charge and the stock check both succeeded, reading the receipt.
    #[dq::listener(topic = "ship-order")]
    async fn ship(msg: Checkout, ctx: dq::JobContext) -> Result<(), String> {
        let deps = ctx.dependencies().await.map_err(|e| e.to_string())?;
        let receipt: Receipt = deps.value("charge").map_err(|e| e.to_string())?;
        let units: u32 = deps.value("stock").map_err(|e| e.to_string())?;
        info!(order = msg.order, receipt = %receipt.number, units, "shipped");
        Ok(())
    }

    /// Runs once the charge and the stock check have ended, whatever became of them: refunds
    /// when one failed and the card was charged.
    #[dq::listener(topic = "refund-order")]
    async fn refund(msg: Checkout, ctx: dq::JobContext) -> Result<(), String> {
        let deps = ctx.dependencies().await.map_err(|e| e.to_string())?;
        if deps.all_succeeded() {
            info!(order = msg.order, "nothing to refund");
            return Ok(());
        }
        for failed in deps.iter().filter(|d| !d.succeeded()) {
            info!(order = msg.order, step = %failed.name, error = ?failed.error, "a step failed");
        }
        match deps.value::<Receipt>("charge") {
            Ok(r) => info!(order = msg.order, receipt = %r.number, cents = r.cents, "refunded"),
            Err(_) => info!(
                order = msg.order,
                "the card was not charged: nothing to refund"
            ),
        }
        Ok(())
    }
}

#[tokio::main]
async fn main() -> dq::Result<()> {
    use dq::workflow::{OnFailure, WorkflowState};
    use handlers::Checkout;

    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_target(false)
        .init();
    let rt = dq::Runtime::builder().start().await?;
    let client = rt.client().clone();

    for order in 1..=2u64 {
        let msg = Checkout { order };
        let mut flow = client.workflow(format!("checkout-{order}"));
        flow.step_to("charge", "charge-card", &msg);
        flow.step_to("stock", "check-stock", &msg);
        flow.step_to("ship", "ship-order", &msg)
            .after("charge")
            .after("stock")
            .delay(Duration::from_secs(2));
        flow.step_to("refund", "refund-order", &msg)
            .after_with("charge", OnFailure::Run)
            .after_with("stock", OnFailure::Run);
        let outcome = flow.push().await?;
        info!(order, ?outcome, "checkout workflow pushed");
    }

    // Wait until both workflows have ended, then shut down gracefully.
    let started = Instant::now();
    for order in 1..=2u64 {
        let id = format!("checkout-{order}");
        loop {
            let info = client.workflow_status(&id).await?;
            let Some(info) = info.filter(|i| i.state != WorkflowState::Running) else {
                if started.elapsed() > Duration::from_secs(30) {
                    tracing::error!(workflow = %id, "still running after 30 s; giving up");
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            for step in &info.steps {
                info!(workflow = %id, step = %step.name, state = %step.state.as_str(), "final");
            }
            info!(workflow = %id, state = %info.state.as_str(), "workflow ended");
            break;
        }
    }
    rt.shutdown().await?;
    Ok(())
}
