#[dq::listener(topic = "order cancel")]
async fn handler(_n: u64) {}

#[derive(serde::Serialize, serde::Deserialize, dq::Message)]
#[message(topic = "a{b}")]
struct Msg;

fn main() {}
