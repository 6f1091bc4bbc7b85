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
///
/// A message whose jobs belong to groups (one account's, one tenant's: README "Groups") names
/// the field that holds its group, `#[message(topic = "charge", group = "account")]`, and
/// [`Client::push`](crate::Client::push) puts each job in its group; by hand, implement
/// [`Message::group`].
pub trait Message: Serialize + DeserializeOwned + Send + Sync + 'static {
    /// The topic this message is pushed to and handled from.
    const TOPIC: &'static str;

    /// The group this message's job belongs to ([`PushBuilder::group`](crate::PushBuilder::group)),
    /// `None` for none (the default). A push's own `.group(...)` wins over it.
    fn group(&self) -> Option<String> {
        None
    }
}
