//! The [`Message`] trait binding a payload type to its topic.

use serde::de::DeserializeOwned;
use serde::Serialize;

/// A payload type bound to the topic it is pushed to; usually derived:
///
/// ```ignore
/// #[derive(serde::Serialize, serde::Deserialize, dq::Message)]
/// #[message(topic = "order-cancel")]
/// struct OrderCancel { order_id: u64 }
/// ```
///
/// Payloads travel as JSON, so a field added with `#[serde(default)]` keeps old jobs readable.
pub trait Message: Serialize + DeserializeOwned + Send + Sync + 'static {
    /// The topic this message is pushed to and handled from.
    const TOPIC: &'static str;
}
