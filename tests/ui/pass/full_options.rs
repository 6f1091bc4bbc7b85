use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, dq::Message)]
#[message(topic = "order-cancel")]
struct OrderCancel {
    order_id: u64,
}

#[dq::listener(topic = "order-cancel", concurrency = 32, timeout = "5s", retries = 2, backoff = "fixed:250ms", rate = "100/1s", max_pending = 100000, global_concurrency = 8)]
async fn cancel_order(msg: OrderCancel, ctx: dq::JobContext) -> Result<(), std::io::Error> {
    let _ = (msg.order_id, ctx.attempt());
    Ok(())
}

fn main() {
    // The function stays a normal, callable async fn.
    let _future = cancel_order(OrderCancel { order_id: 1 }, dq::JobContext::for_test("order-cancel", "1").unwrap());
}
