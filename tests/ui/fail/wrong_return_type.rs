#[dq::listener(topic = "t")]
async fn handler(_n: u64) -> i32 {
    7
}

fn main() {}
