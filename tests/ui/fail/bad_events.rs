// Events are on or off; a cap goes with them, and keeps at least one.
#[dq::listener(topic = "t", events = "yes")]
async fn not_a_bool(_n: u64) {}
#[dq::listener(topic = "u", events_cap = 1000)]
async fn cap_alone(_n: u64) {}
#[dq::listener(topic = "v", events = true, events_cap = 0)]
async fn zero_cap(_n: u64) {}

fn main() {}
