use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, dq::Message)]
#[message(topic = "ride-reminder")]
struct RideReminder {
    ride_id: String,
}

/// No topic, no context, a control value as the result.
#[dq::listener(timeout = "none")]
async fn remind(msg: RideReminder) -> dq::Outcome {
    if msg.ride_id.is_empty() {
        dq::Outcome::DeadLetter("no ride".into())
    } else {
        dq::Outcome::Done
    }
}

#[dq::listener(topic = "plain")]
async fn plain(_n: u64) {}

fn main() {
    assert_eq!(<RideReminder as dq::Message>::TOPIC, "ride-reminder");
}
