//! The [`Message`] trait binding a payload type to its topic.

use serde::de::DeserializeOwned;
use serde::Serialize;

/// A payload type bound to the topic it is pushed to. Usually derived with
/// `#[derive(dq::Message)] #[message(topic = "order-cancel")]`; by hand it reads:
///
/// ```
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct OrderCancel { order_id: u64 }
///
/// impl dq_core::Message for OrderCancel {
///     const TOPIC: &'static str = "order-cancel";
/// }
/// ```
///
/// Payloads travel as JSON, so a field added with `#[serde(default)]` keeps old jobs readable.
pub trait Message: Serialize + DeserializeOwned + Send + Sync + 'static {
    /// The topic this message is pushed to and handled from.
    const TOPIC: &'static str;
}
