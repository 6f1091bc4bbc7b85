#[derive(serde::Serialize, serde::Deserialize, dq::Message)]
struct Msg;

fn main() {}
