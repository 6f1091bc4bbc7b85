//! The job envelope: what dq stores in Redis for each job.
//!
//! One value per job in the shard's `jobs` hash, read and rewritten by the Lua scripts, so it is
//! plain text up to the payload and cheap to parse on both sides:
//!
//! ```text
//! 2:<attempt>:<max_attempts>:<created_us>:<due_us>:<error_len>:<error bytes><payload bytes>
//! ```
//!
//! * `2` is the format version. Format 1, which development builds before 0.1.0 wrote, also
//!   held a lease token; it is refused as unknown (the job is dead-lettered with its raw value
//!   kept, never dropped).
//! * `attempt` counts the runs that ended without success: failed, timed out, or lost with
//!   their worker (counted when the lease is reclaimed). A fetch does not rewrite the envelope:
//!   the lease token that refuses an ack from a worker whose lease was taken over lives in the
//!   shard's `leases` hash. A running job is on run `attempt + 1`, which is what
//!   [`LeasedJob`](crate::LeasedJob) and [`JobInfo`](crate::JobInfo) show.
//! * times are integer microseconds since the Unix epoch, from Redis `TIME`.
//! * `error_len` bytes of the last error (0 when none), then the payload (JSON from serde).
//!
//! The same parser lives in `lua/lib.lua`; both must change together.

use crate::error::{Error, Result};

/// Current envelope format version.
pub const ENVELOPE_VERSION: u32 = 2;

/// A job as stored: bookkeeping and the serialized payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Envelope {
    /// Runs counted so far (see the module documentation: stored, the runs that ended without
    /// success; in a [`LeasedJob`](crate::LeasedJob), the run being made, from 1).
    pub attempt: u32,
    /// Runs allowed before the job is dead-lettered (retries + 1).
    pub max_attempts: u32,
    /// When the job was first pushed, in microseconds since the Unix epoch.
    pub created_us: u64,
    /// When the job is (or was) due, in microseconds since the Unix epoch.
    pub due_us: u64,
    /// The error of the latest failed attempt.
    pub last_error: Option<String>,
    /// The serialized message.
    pub payload: Vec<u8>,
}

impl Envelope {
    /// Encodes the envelope in the current format.
    pub fn encode(&self) -> Vec<u8> {
        let err = self.last_error.as_deref().unwrap_or("");
        let mut out = format!(
            "{ENVELOPE_VERSION}:{}:{}:{}:{}:{}:{err}",
            self.attempt,
            self.max_attempts,
            self.created_us,
            self.due_us,
            err.len()
        )
        .into_bytes();
        out.extend_from_slice(&self.payload);
        out
    }

    /// Decodes an envelope; `location` names where it was read, for the error.
    pub fn decode(raw: &[u8], location: &str) -> Result<Envelope> {
        Envelope::decode_with(raw, || location.to_owned())
    }

    /// Like [`Envelope::decode`], naming the location only when there is an error (a fetch
    /// decodes thousands of envelopes a second; formatting each one's location cost more
    /// than decoding it).
    pub fn decode_with(raw: &[u8], location: impl Fn() -> String) -> Result<Envelope> {
        let malformed = |reason: &str| Error::Malformed {
            location: location(),
            reason: format!("{reason} (envelope starts {:?})", preview(raw)),
        };
        let mut fields = [0u64; 6];
        let mut pos = 0;
        for (n, field) in fields.iter_mut().enumerate() {
            let end = raw[pos..]
                .iter()
                .position(|&b| b == b':')
                .ok_or_else(|| malformed("header ends early"))?;
            let text = std::str::from_utf8(&raw[pos..pos + end])
                .map_err(|_| malformed("header is not text"))?;
            *field = text
                .parse()
                .map_err(|_| malformed(&format!("header field {n} is not a number")))?;
            pos += end + 1;
        }
        let [version, attempt, max_attempts, created_us, due_us, err_len] = fields;
        if version != u64::from(ENVELOPE_VERSION) {
            return Err(malformed(&format!(
                "envelope version {version} is not known to this release of dq (it reads version {ENVELOPE_VERSION})"
            )));
        }
        let err_len = usize::try_from(err_len).map_err(|_| malformed("error length too large"))?;
        if raw.len() < pos + err_len {
            return Err(malformed("error length runs past the end"));
        }
        let last_error = match err_len {
            0 => None,
            _ => Some(String::from_utf8_lossy(&raw[pos..pos + err_len]).into_owned()),
        };
        let small = |v: u64, what: &str| {
            u32::try_from(v).map_err(|_| malformed(&format!("{what} out of range")))
        };
        Ok(Envelope {
            attempt: small(attempt, "attempt")?,
            max_attempts: small(max_attempts, "max_attempts")?,
            created_us,
            due_us,
            last_error,
            payload: raw[pos + err_len..].to_vec(),
        })
    }
}

fn preview(raw: &[u8]) -> String {
    String::from_utf8_lossy(&raw[..raw.len().min(48)]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelope_round_trips_with_and_without_error() {
        let mut env = Envelope {
            attempt: 2,
            max_attempts: 3,
            created_us: 1_700_000_000_000_123,
            due_us: 1_700_000_000_600_456,
            last_error: None,
            payload: br#"{"order_id":42}"#.to_vec(),
        };
        assert_eq!(Envelope::decode(&env.encode(), "t").unwrap(), env);
        env.last_error = Some("boom: a:b:c".into());
        assert_eq!(Envelope::decode(&env.encode(), "t").unwrap(), env);
    }

    #[test]
    fn malformed_envelope_names_location_and_reason() {
        for raw in [
            &b"garbage"[..],
            b"9:0:3:1:1:0:",
            b"2:0:3:1:1:99:short",
            b"1:0:3:0:1:1:0:{}",
        ] {
            let err = Envelope::decode(raw, "dq:{app:0}:jobs/t:1").unwrap_err();
            let text = err.to_string();
            assert!(text.contains("dq:{app:0}:jobs/t:1"), "{text}");
        }
    }
}
