#[dq::listener(topic = "t")]
fn handler(_n: u64) {}

fn main() {}
