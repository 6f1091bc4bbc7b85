#[dq::listener(topic = "t", timeout = "5 parsecs")]
async fn handler(_n: u64) {}

#[dq::listener(topic = "u", timeout = "0s")]
async fn never_runs(_n: u64) {}

// The same rules as the DQ_* variables: days are a unit.
#[dq::listener(topic = "v", timeout = "1d", backoff = "fixed:0.5d")]
async fn slow(_n: u64) {}

fn main() {}
