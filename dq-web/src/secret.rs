//! The secrets: the dashboard's token (Bearer or HTTP Basic), the CSRF token, and comparing
//! them without leaking how much of a guess was right.

use axum::http::header;
use axum::http::request::Parts;

/// Whether the request carries `token`, as `Authorization: Bearer <token>` or as the password
/// of HTTP Basic (any user name).
pub(crate) fn token_matches(parts: &Parts, token: &str) -> bool {
    let Some(value) = parts
        .headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    if let Some(bearer) = value.strip_prefix("Bearer ") {
        return constant_time_eq(bearer.trim().as_bytes(), token.as_bytes());
    }
    if let Some(basic) = value.strip_prefix("Basic ") {
        let Some(decoded) = base64_decode(basic.trim()) else {
            return false;
        };
        let password = match decoded.iter().position(|&b| b == b':') {
            Some(colon) => &decoded[colon + 1..],
            None => &decoded[..],
        };
        return constant_time_eq(password, token.as_bytes());
    }
    false
}

/// Compares without stopping at the first difference, so the time taken does not tell an
/// attacker how much of a guess was right.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// Standard base64 (with or without padding), as HTTP Basic sends it.
fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in text.bytes().take_while(|&c| c != b'=') {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push(u8::try_from((acc >> bits) & 0xff).ok()?);
        }
    }
    Some(out)
}

/// 128 random bits from the operating system, as hex.
pub(crate) fn random_token() -> String {
    let mut bytes = [0u8; 16];
    // Without the OS's randomness there is no safe token: refuse to serve rather than use a
    // guessable one.
    if let Err(e) = getrandom::fill(&mut bytes) {
        panic!("dq-web: the operating system gave no random bytes for the CSRF token: {e}");
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn basic_auth_decodes_user_and_password() {
        assert_eq!(base64_decode("ZHE6czNjcmV0").unwrap(), b"dq:s3cret");
        assert_eq!(base64_decode("YQ==").unwrap(), b"a");
        assert!(base64_decode("not base64!").is_none());
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
    }

    #[test]
    fn csrf_tokens_differ_per_router() {
        assert_ne!(random_token(), random_token());
        assert_eq!(random_token().len(), 32);
    }
}
