// The first argument is the payload: a listener that starts with an extractor is told so,
// not that the extractor cannot be deserialized.
#[derive(Clone)]
struct Shop;

#[dq::listener(topic = "t")]
async fn context_only(_ctx: dq::JobContext) {}

#[dq::listener(topic = "u")]
async fn state_first(_shop: dq::State<Shop>, _n: u64) {}

fn main() {}
