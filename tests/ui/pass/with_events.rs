// A topic's job events, on with a cap of its own, or said to be off.
#[dq::listener(topic = "invoice", events = true, events_cap = 50000)]
async fn send_invoice(order_id: u64) {
    let _ = order_id;
}

#[dq::listener(topic = "mail", events = false)]
async fn send_mail(_to: String) {}

fn main() {}
