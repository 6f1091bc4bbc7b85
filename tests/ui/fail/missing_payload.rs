#[dq::listener(topic = "t")]
async fn handler() {}

fn main() {}
