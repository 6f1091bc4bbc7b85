// A message whose derive fails is one error: the listeners taking it add none of their own.
#[derive(serde::Serialize, serde::Deserialize, dq::Message)]
#[message(topic = "order cancel")]
struct OrderCancel;

#[dq::listener]
async fn cancel(_msg: OrderCancel) {}

#[derive(serde::Serialize, serde::Deserialize, dq::Message)]
struct NoTopic;

#[dq::listener]
async fn no_topic(_msg: NoTopic) {}

fn main() {}
