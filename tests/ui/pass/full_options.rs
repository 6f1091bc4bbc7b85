use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, dq::Message)]
#[message(topic = "order-cancel", group = "account")]
struct OrderCancel {
    order_id: u64,
    account: u64,
}

#[dq::listener(topic = "order-cancel", concurrency = 32, timeout = "5s", retries = 2, backoff = "fixed:250ms", rate = "100/1s", max_pending = 100000, global_concurrency = 8, group_concurrency = 2, group_rate = "10/1s")]
async fn cancel_order(msg: OrderCancel, ctx: dq::JobContext) -> Result<(), std::io::Error> {
    let _ = (msg.order_id, ctx.attempt());
    Ok(())
}

fn main() {
    // The function stays a normal, callable async fn.
    assert_eq!(dq::Message::group(&OrderCancel { order_id: 1, account: 7 }).as_deref(), Some("7"));
    let _future = cancel_order(OrderCancel { order_id: 1, account: 7 }, dq::JobContext::for_test("order-cancel", "1").unwrap());
}
