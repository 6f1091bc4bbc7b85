// A count without an age.
#[dq::listener(topic = "t", retain_count = 1000)]
async fn count_alone(_n: u64) {}

// Keeping no records is leaving `retain` out.
#[dq::listener(topic = "u", retain = "1h", retain_count = 0)]
async fn zero_count(_n: u64) {}
#[dq::listener(topic = "v", retain = "0s")]
async fn zero_age(_n: u64) {}

fn main() {}
