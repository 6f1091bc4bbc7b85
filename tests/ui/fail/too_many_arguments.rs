#[dq::listener(topic = "t")]
async fn handler(_n: u64, _ctx: dq::JobContext, _extra: bool) {}

fn main() {}
