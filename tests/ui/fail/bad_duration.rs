#[dq::listener(topic = "t", timeout = "5 parsecs")]
async fn handler(_n: u64) {}

fn main() {}
