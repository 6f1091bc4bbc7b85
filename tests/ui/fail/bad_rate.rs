// No period.
#[dq::listener(topic = "t", rate = "100")]
async fn no_period(_n: u64) {}

// No job at all is pausing the topic, not a rate.
#[dq::listener(topic = "u", rate = "0/1s")]
async fn zero(_n: u64) {}

// Under a millisecond.
#[dq::listener(topic = "v", rate = "10/0.5ms")]
async fn too_short(_n: u64) {}

fn main() {}
