//! dq's web dashboard: every topic and job in a browser, live, with the actions an on-call
//! person needs (pause, run now, reschedule, cancel, retry from dead, purge).
//!
//! [`router`] is an axum [`Router`] to mount under any path prefix of an application's own web
//! server; `dq web --listen 127.0.0.1:8080` serves it on its own. Pages are rendered on the
//! server; the stylesheet and a small script (live numbers, select-all) are compiled into the
//! binary, so nothing is loaded from the internet and there is no build step.
//!
//! ```no_run
//! # async fn demo(client: dq_core::Client) -> std::io::Result<()> {
//! use dq_web::{Access, Options};
//!
//! let dashboard = dq_web::router(
//!     client.clone(),
//!     Options::new().authorize(|request| {
//!         // Your own auth: a session cookie, a header set by your proxy, ...
//!         match request.headers.get("x-user-role").map(|v| v.as_bytes()) {
//!             Some(b"admin") => Access::Full,
//!             Some(b"viewer") => Access::ReadOnly,
//!             _ => Access::Denied,
//!         }
//!     }),
//! );
//! let app = axum::Router::new().nest("/dq", dashboard);
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! axum::serve(listener, app).await
//! # }
//! ```
//!
//! # Safety
//!
//! - Every action is a `POST` carrying a CSRF token (random per router, compared in constant
//!   time); a cross-site `POST` is refused whatever it carries.
//! - [`Options::read_only`] hides every action and refuses them with `403`.
//! - [`Options::authorize`] decides, per request, between [`Access::Full`],
//!   [`Access::ReadOnly`] and [`Access::Denied`]; [`Options::token`] asks for a bearer token
//!   (or HTTP Basic with the token as password, so a browser can log in).
//! - Payloads, ids, errors and topic names are HTML-escaped.
//! - Every page does bounded work on Redis whatever the queue size: counts are kept by the
//!   scripts, listings are pages of at most 50 jobs (filters look at 500), and throughput is a
//!   ring of 60 one-minute slots.

mod actions;
mod pages;
mod view;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{OriginalUri, Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use dq_core::Client;

/// What a request may do, as decided by [`Options::authorize`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// See every page and take every action.
    Full,
    /// See every page; no action is shown and every action is refused.
    ReadOnly,
    /// Nothing: `403 Forbidden`.
    Denied,
}

type Authorize = dyn Fn(&Parts) -> Access + Send + Sync;

/// How the dashboard behaves: read-only mode, authorization, refresh period.
#[derive(Clone)]
pub struct Options {
    read_only: bool,
    authorize: Option<Arc<Authorize>>,
    token: Option<String>,
    refresh: Duration,
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("read_only", &self.read_only)
            .field("authorize", &self.authorize.is_some())
            .field("token", &self.token.as_ref().map(|_| "(set)"))
            .field("refresh", &self.refresh)
            .finish()
    }
}

impl Default for Options {
    fn default() -> Self {
        Options::new()
    }
}

impl Options {
    /// Every action allowed to whoever reaches the router, numbers refreshed every 2 s.
    pub fn new() -> Options {
        Options {
            read_only: false,
            authorize: None,
            token: None,
            refresh: Duration::from_secs(2),
        }
    }

    /// Shows every page but no action, and refuses every action with `403` (a read-only
    /// dashboard for a wider audience).
    pub fn read_only(mut self, read_only: bool) -> Options {
        self.read_only = read_only;
        self
    }

    /// Decides what each request may do, from its method, URI and headers (your session
    /// cookie, a header your proxy sets, ...). Called for every request, pages and actions.
    pub fn authorize(mut self, f: impl Fn(&Parts) -> Access + Send + Sync + 'static) -> Options {
        self.authorize = Some(Arc::new(f));
        self
    }

    /// Asks every request for this token, as `Authorization: Bearer <token>` or as the password
    /// of HTTP Basic (any user name), so that a browser can log in. A request without it gets
    /// `401` with a Basic challenge. Checked before [`Options::authorize`].
    pub fn token(mut self, token: impl Into<String>) -> Options {
        self.token = Some(token.into()).filter(|t| !t.is_empty());
        self
    }

    /// How often the overview's and topic page's numbers are refreshed (default 2 s; zero:
    /// never, the page is reloaded by hand).
    pub fn refresh(mut self, every: Duration) -> Options {
        self.refresh = every;
        self
    }
}

/// What every handler shares.
struct Web {
    client: Client,
    options: Options,
    /// The CSRF token every form carries.
    csrf: String,
}

type Shared = Arc<Web>;

/// Where the router is mounted ("" at the root, "/dq" under `nest("/dq", ..)`), and what the
/// request may do.
#[derive(Clone, Debug)]
struct Viewer {
    base: String,
    can_act: bool,
}

/// The dashboard as an axum [`Router`]: mount it with `Router::nest("/prefix", ..)` or serve it
/// as it is.
pub fn router(client: Client, options: Options) -> Router {
    let web = Arc::new(Web {
        client,
        options,
        csrf: random_token(),
    });
    Router::new()
        .route("/", get(pages::overview))
        .route("/fragments/topics", get(pages::topics_fragment))
        .route("/workers", get(pages::workers))
        .route("/schedules", get(pages::schedules))
        .route("/schedules/{id}/{action}", post(actions::schedule))
        .route("/topics/{topic}", get(pages::topic))
        .route("/topics/{topic}/jobs/{id}", get(pages::job))
        .route("/topics/{topic}/pause", post(actions::pause))
        .route("/topics/{topic}/resume", post(actions::resume))
        .route("/topics/{topic}/bulk", post(actions::bulk))
        .route("/topics/{topic}/dead/retry", post(actions::retry_all_dead))
        .route("/topics/{topic}/dead/purge", post(actions::purge_all_dead))
        .route("/topics/{topic}/jobs/{id}/{action}", post(actions::job))
        .route("/assets/dq.css", get(view::stylesheet))
        .route("/assets/dq.js", get(view::script))
        .layer(middleware::from_fn_with_state(web.clone(), guard))
        .with_state(web)
}

/// Authenticates and authorizes every request, and tells the handlers where they are mounted.
async fn guard(State(web): State<Shared>, request: Request, next: Next) -> Response {
    let (mut parts, body) = request.into_parts();
    if let Some(token) = &web.options.token {
        if !token_matches(&parts, token) {
            return (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, r#"Basic realm="dq""#)],
                "401: this dashboard asks for its token (Authorization: Bearer <token>, or the token as the password)\n",
            )
                .into_response();
        }
    }
    let access = match &web.options.authorize {
        Some(authorize) => authorize(&parts),
        None => Access::Full,
    };
    if access == Access::Denied {
        return (
            StatusCode::FORBIDDEN,
            "403: not allowed by the dashboard's authorize hook\n",
        )
            .into_response();
    }
    let viewer = Viewer {
        base: mount_point(&parts),
        can_act: access == Access::Full && !web.options.read_only,
    };
    parts.extensions.insert(viewer);
    let mut response = next.run(Request::from_parts(parts, body)).await;
    let headers = response.headers_mut();
    // No framing by other sites (clickjacking), no sniffing, nothing cached by proxies.
    headers.insert("x-frame-options", HeaderValue::from_static("DENY"));
    headers.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        "content-security-policy",
        HeaderValue::from_static(
            "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'",
        ),
    );
    headers
        .entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    response
}

/// The path prefix the router is mounted under: the original path less the path the router
/// sees (axum's `nest` strips the prefix).
fn mount_point(parts: &Parts) -> String {
    let seen = parts.uri.path();
    let original = parts
        .extensions
        .get::<OriginalUri>()
        .map_or(seen, |o| o.0.path());
    let base = if seen == "/" {
        original.trim_end_matches('/')
    } else {
        original.strip_suffix(seen).unwrap_or("")
    };
    base.to_owned()
}

fn token_matches(parts: &Parts, token: &str) -> bool {
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
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
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
fn random_token() -> String {
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
