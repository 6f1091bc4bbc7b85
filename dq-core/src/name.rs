//! Validated names: [`Topic`] and [`JobId`], checked at the edge with an error naming the value
//! by the rules of `dq-syntax` (which the macros check at compile time too).

use std::fmt;

use dq_syntax::{id_problem, topic_problem};
pub use dq_syntax::{MAX_JOB_ID_LEN, MAX_TOPIC_LEN};

use crate::error::{Error, Result};

/// What is wrong with `group` as a group key, which follows the rules of a job id (a push's
/// and a schedule's); `None` when nothing is.
pub(crate) fn group_key_problem(group: &str) -> Option<String> {
    id_problem(group).map(|reason| {
        format!(
            "group {group:?} is not a valid group key ({reason}); it follows the rules of a job id"
        )
    })
}

macro_rules! name_impls {
    ($ty:ident, $problem:path, $error:expr) => {
        impl $ty {
            /// Checks the text and wraps it; an error names the text and what is wrong with it.
            pub fn new(text: impl Into<String>) -> Result<$ty> {
                let text = text.into();
                match $problem(&text) {
                    None => Ok($ty(text)),
                    Some(reason) => Err($error(text, reason)),
                }
            }

            /// The text as written.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&self.0, f)
            }
        }

        impl AsRef<str> for $ty {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl std::str::FromStr for $ty {
            type Err = Error;
            fn from_str(s: &str) -> Result<Self> {
                $ty::new(s)
            }
        }

        impl TryFrom<&str> for $ty {
            type Error = Error;
            fn try_from(s: &str) -> Result<Self> {
                $ty::new(s)
            }
        }

        impl TryFrom<String> for $ty {
            type Error = Error;
            fn try_from(s: String) -> Result<Self> {
                $ty::new(s)
            }
        }

        impl serde::Serialize for $ty {
            fn serialize<S: serde::Serializer>(
                &self,
                s: S,
            ) -> std::result::Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
            }
        }

        impl<'de> serde::Deserialize<'de> for $ty {
            fn deserialize<D: serde::Deserializer<'de>>(
                d: D,
            ) -> std::result::Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                $ty::new(s).map_err(serde::de::Error::custom)
            }
        }
    };
}

/// The name of a stream of jobs handled by one listener, such as `order-cancel`.
///
/// A topic is 1 to 128 ASCII letters, digits, `-`, `_` or `.`.
///
/// ```
/// use dq_core::Topic;
/// assert!(Topic::new("order-cancel").is_ok());
/// assert!(Topic::new("order cancel").is_err());
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Topic(String);

name_impls!(Topic, topic_problem, |topic, reason| Error::InvalidTopic {
    topic,
    reason
});

/// The identity of one job within its topic, such as an order number.
///
/// Pushing a second job with an id that is still pending does not create a second job (see
/// [`OnConflict`](crate::OnConflict)). An id is 1 to 256 bytes of printable text without
/// whitespace, control characters, `{`, `}`, `:` or `*`.
///
/// ```
/// use dq_core::JobId;
/// assert!(JobId::new("order-42").is_ok());
/// assert!(JobId::new("order:42").is_err());
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JobId(String);

name_impls!(JobId, id_problem, |id, reason| Error::InvalidJobId {
    id,
    reason
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_rejects_each_unsafe_form_with_its_reason() {
        for bad in ["", "a b", "a{b", "a}b", "a:b", "a*b", "a\nb", "é"] {
            let err = Topic::new(bad).expect_err(bad);
            assert!(err.to_string().contains("invalid topic"), "{err}");
        }
        assert!(Topic::new("x".repeat(129)).is_err());
        assert!(Topic::new("x".repeat(128)).is_ok());
    }

    #[test]
    fn job_id_rejects_each_unsafe_form_and_accepts_unicode() {
        for bad in ["", "a b", "a{b", "a}b", "a:b", "a*b", "a\nb", "a\tb"] {
            assert!(JobId::new(bad).is_err(), "{bad:?} accepted");
        }
        assert!(JobId::new("x".repeat(10 * 1024)).is_err());
        assert!(JobId::new("commande-été-42").is_ok());
    }
}
