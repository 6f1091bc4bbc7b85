#[dq::listener(topic = "t", concurrency = 0)]
async fn a(_n: u64) {}

#[dq::listener(topic = "u", retries = 1, retries = 2)]
async fn b(_n: u64) {}

fn main() {}
