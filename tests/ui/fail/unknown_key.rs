#[dq::listener(topic = "t", colour = "red")]
async fn handler(_n: u64) {}

fn main() {}
