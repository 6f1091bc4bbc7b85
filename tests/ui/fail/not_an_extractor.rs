// After the payload, every argument must be an extractor: `bool` is not one, and the error
// points at it, not at the return type.
#[dq::listener(topic = "t")]
async fn handler(_n: u64, _ctx: dq::JobContext, _flag: bool) -> Result<(), String> {
    Ok(())
}

fn main() {}
