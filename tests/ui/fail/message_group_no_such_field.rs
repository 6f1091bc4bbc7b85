#[derive(serde::Serialize, serde::Deserialize, dq::Message)]
#[message(topic = "charge", group = "acount")]
struct Charge {
    account: String,
}

fn main() {}
