use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, dq::Message)]
#[message(topic = "invoice")]
struct Invoice {
    order_id: u64,
}

#[derive(Serialize)]
struct Receipt {
    number: String,
}

// The value is kept as the job's result, for an hour, at most 1000 per shard.
#[dq::listener(retain = "1h", retain_count = 1000)]
async fn send_invoice(msg: Invoice) -> Result<Receipt, String> {
    Ok(Receipt {
        number: format!("R-{}", msg.order_id),
    })
}

// A verdict still reads as one.
#[dq::listener(topic = "verdict", retain = "10m")]
async fn verdict(_n: u64) -> Result<dq::Outcome, std::io::Error> {
    Ok(dq::Outcome::Done)
}

// No value, no retention: as before.
#[dq::listener(topic = "nothing")]
async fn nothing(_n: u64) -> Result<(), String> {
    Ok(())
}

fn main() {
    let _by_hand = dq::Listener::new("by-hand", |n: u64| async move { Ok::<_, String>(n * 2) })
        .retain(std::time::Duration::from_secs(60))
        .retain_count(10);
    let _done = dq::Outcome::done_with(&Receipt {
        number: "R-1".into(),
    });
}
