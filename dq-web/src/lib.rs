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
//! - A `POST` whose `Origin` header names another site is refused with `403`, token or not.
//!   The dashboard's own origin is the host and port the request was addressed to (its `Host`
//!   header: the scheme is not compared, as TLS usually ends at a proxy in front), or one of
//!   [`Options::allowed_hosts`] (for a proxy that passes another `Host` on). `Origin: null` is
//!   refused; a request without `Origin` (curl, scripts) is judged by the token alone.
//! - The dashboard answers only requests addressed to one of its names, against DNS rebinding
//!   (a page of another site whose name is pointed at 127.0.0.1 would otherwise read and act on
//!   a dashboard without a token): by default `localhost` (and `*.localhost`) and any IP
//!   address, on any port; an IP address cannot be rebound, so the address the dashboard is
//!   bound to and every loopback address are in. Other names answer `421 Misdirected Request`
//!   until [`Options::allowed_hosts`] (`dq web --allowed-host`) lists them.
//! - The note a page shows after an action ("o1 was deleted.") is kept by the router and the
//!   redirect carries only a random key to it (`?note=<key>`, the last 256 notes are kept): a
//!   link made elsewhere cannot put text of its own on a page.
//! - [`Options::read_only`] hides every action and refuses them with `403`.
//! - [`Options::authorize`] decides, per request, between [`Access::Full`],
//!   [`Access::ReadOnly`] and [`Access::Denied`]; [`Options::token`] asks for a bearer token
//!   (or HTTP Basic with the token as password, so a browser can log in).
//! - Payloads, ids, errors and topic names are HTML-escaped.
//! - Every page does bounded work on Redis whatever the queue size: counts are kept by the
//!   scripts, listings are pages of at most 50 jobs (filters look at 500), and throughput is a
//!   ring of 60 one-minute slots.
//!
//! # What the actions do
//!
//! - **Run now** is shown for delayed jobs and makes one due now (BullMQ's `promote`). A job
//!   that is already ready keeps its place in line: the action says so and changes nothing
//!   (moving it would put it behind every job queued before it).
//! - **Reschedule** takes a delay (`10m`) or a UTC time; an impossible date
//!   (`2026-02-31 10:00`) is refused, not rolled over, and so is a time more than a minute
//!   before the store's clock (use Run now to run it at once).
//! - **Delete** on a dead letter deletes it only while it is a dead letter
//!   ([`dq_core::Client::delete_dead`]): if its id was pushed again or retried meanwhile, the
//!   new job is left alone and the page says so.
//! - A topic page for a name never pushed to (not among the topics, nothing counted, not
//!   paused) is `404`.
//! - Schedules can be paused, resumed, run now and removed (`dq schedules remove`; asks first).

mod actions;
mod pages;
mod view;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::extract::{OriginalUri, Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderValue, Method, StatusCode};
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

/// How the dashboard behaves: read-only mode, authorization, refresh period, the host names it
/// answers to.
#[derive(Clone)]
pub struct Options {
    read_only: bool,
    authorize: Option<Arc<Authorize>>,
    token: Option<String>,
    refresh: Duration,
    allowed_hosts: Vec<String>,
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("read_only", &self.read_only)
            .field("authorize", &self.authorize.is_some())
            .field("token", &self.token.as_ref().map(|_| "(set)"))
            .field("refresh", &self.refresh)
            .field("allowed_hosts", &self.allowed_hosts)
            .finish()
    }
}

impl Default for Options {
    fn default() -> Self {
        Options::new()
    }
}

impl Options {
    /// Every action allowed to whoever reaches the router, numbers refreshed every 2 s,
    /// answering to `localhost` and IP addresses.
    pub fn new() -> Options {
        Options {
            read_only: false,
            authorize: None,
            token: None,
            refresh: Duration::from_secs(2),
            allowed_hosts: Vec::new(),
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

    /// Host names the dashboard answers to besides `localhost` and IP addresses (which it
    /// always answers to), e.g. `["dq.internal.example"]`: the names in its URL when it is
    /// reached through DNS or a proxy. Any port; case does not matter; `.example.com` takes
    /// `example.com` and every name under it. A port or scheme given with a name is ignored
    /// (`https://dq.example:8443` is `dq.example`). Calls add up.
    ///
    /// A request whose `Host` is none of these is answered `421 Misdirected Request`: this
    /// keeps a page of another site from reaching the dashboard by pointing its own name at
    /// this machine (DNS rebinding). A `POST` whose `Origin` names one of these hosts is taken
    /// as coming from the dashboard's own pages (for a proxy that passes another `Host` on).
    pub fn allowed_hosts<I, S>(mut self, hosts: I) -> Options
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        for host in hosts {
            let host: String = host.into();
            let bare = host
                .split_once("://")
                .map_or(host.as_str(), |(_, rest)| rest);
            let bare = bare.split('/').next().unwrap_or("");
            let name = match bare.strip_prefix('.') {
                // A domain and its subdomains: keep the leading dot.
                Some(domain) => split_host(domain).map(|(h, _)| format!(".{h}")),
                None => split_host(bare).map(|(h, _)| h),
            };
            if let Some(name) = name.filter(|n| !n.is_empty() && n != ".") {
                self.allowed_hosts.push(name);
            }
        }
        self
    }
}

/// The notes of the last actions, for the page each redirects to: the redirect carries a
/// random key (`?note=<key>`), never the text, so a link made elsewhere shows nothing.
#[derive(Default)]
struct Notes {
    recent: Mutex<VecDeque<(String, String)>>,
}

/// How many notes are kept (the oldest goes first): a note is read right after its action.
const KEPT_NOTES: usize = 256;

impl Notes {
    /// Keeps `text`; returns its key, or `None` when the system gave no random bytes (the page
    /// then shows no note).
    fn put(&self, text: String) -> Option<String> {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes).ok()?;
        let key: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let mut recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        if recent.len() >= KEPT_NOTES {
            recent.pop_front();
        }
        recent.push_back((key.clone(), text));
        Some(key)
    }

    /// The note kept under `key`, if it is one of the last ones.
    fn get(&self, key: &str) -> Option<String> {
        let recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        recent
            .iter()
            .find(|(k, _)| constant_time_eq(k.as_bytes(), key.as_bytes()))
            .map(|(_, text)| text.clone())
    }
}

/// What every handler shares.
struct Web {
    client: Client,
    options: Options,
    /// The CSRF token every form carries.
    csrf: String,
    /// What the last actions did.
    notes: Notes,
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
        notes: Notes::default(),
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

/// Checks the host, authenticates and authorizes every request, refuses actions from other
/// origins, and tells the handlers where they are mounted.
async fn guard(State(web): State<Shared>, request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    let mut response = match admit_request(&web, parts) {
        Ok(parts) => next.run(Request::from_parts(parts, body)).await,
        Err(refused) => *refused,
    };
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

/// The checks of [`guard`], in order: host, token, authorize hook, origin of an action.
fn admit_request(web: &Shared, mut parts: Parts) -> Result<Parts, Box<Response>> {
    let host = request_host(&parts);
    let host_ok = host
        .as_deref()
        .and_then(split_host)
        .is_some_and(|(name, _)| host_allowed(&name, &web.options.allowed_hosts));
    if !host_ok {
        let shown = host.as_deref().unwrap_or("(none)");
        let name = host
            .as_deref()
            .and_then(split_host)
            .map_or_else(|| "dq.example.com".to_owned(), |(name, _)| name);
        let message = format!(
            "421: this dashboard does not answer to the host {shown:?}. It answers to localhost, IP addresses and the names it is given, so that a page of another site cannot reach it by pointing its own name at this machine (DNS rebinding). If {name:?} is the dashboard's own name, allow it: Options::allowed_hosts([{name:?}]) where the router is built, or `dq web --allowed-host {name}`.\n"
        );
        return Err(Box::new(
            (StatusCode::MISDIRECTED_REQUEST, message).into_response(),
        ));
    }
    if let Some(token) = &web.options.token {
        if !token_matches(&parts, token) {
            return Err(Box::new(
                (
                    StatusCode::UNAUTHORIZED,
                    [(header::WWW_AUTHENTICATE, r#"Basic realm="dq""#)],
                    "401: this dashboard asks for its token (Authorization: Bearer <token>, or the token as the password)\n",
                )
                    .into_response(),
            ));
        }
    }
    let access = match &web.options.authorize {
        Some(authorize) => authorize(&parts),
        None => Access::Full,
    };
    if access == Access::Denied {
        return Err(Box::new(
            (
                StatusCode::FORBIDDEN,
                "403: not allowed by the dashboard's authorize hook\n",
            )
                .into_response(),
        ));
    }
    let viewer = Viewer {
        base: mount_point(&parts),
        can_act: access == Access::Full && !web.options.read_only,
    };
    if parts.method != Method::GET && parts.method != Method::HEAD {
        if let Some(origin) = parts.headers.get(header::ORIGIN) {
            let origin = String::from_utf8_lossy(origin.as_bytes()).into_owned();
            if !origin_allowed(&origin, host.as_deref(), &web.options.allowed_hosts) {
                let message = format!(
                    "The action was refused: it was sent by a page of {origin:?} (its Origin header), not by a page of this dashboard ({}). If the dashboard is reached under that name through a proxy, allow it: Options::allowed_hosts where the router is built, or `dq web --allowed-host`.",
                    host.as_deref().unwrap_or("?")
                );
                return Err(Box::new(view::error(
                    StatusCode::FORBIDDEN,
                    Some(&viewer),
                    &message,
                )));
            }
        }
    }
    parts.extensions.insert(viewer);
    Ok(parts)
}

/// The host and port the request was addressed to: the request target's authority (HTTP/2,
/// or an absolute URI), else the `Host` header.
fn request_host(parts: &Parts) -> Option<String> {
    if let Some(authority) = parts.uri.authority() {
        return Some(authority.as_str().to_owned());
    }
    parts
        .headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// `host[:port]` (`[v6]:port` for IPv6) as the lower-case host and the port, if any; `None`
/// when it is no host.
fn split_host(authority: &str) -> Option<(String, Option<u16>)> {
    let authority = authority.trim();
    // Userinfo never belongs in a Host header; refuse rather than guess.
    if authority.is_empty() || authority.contains(['@', '/', '\\', ' ']) {
        return None;
    }
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':')?),
        };
        (format!("[{inside}]"), port)
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h.to_owned(), Some(p)),
            None => (authority.to_owned(), None),
        }
    };
    let port = match port {
        Some(p) => Some(p.parse::<u16>().ok()?),
        None => None,
    };
    let mut host = host.to_ascii_lowercase();
    // `localhost.` is `localhost`.
    if host.ends_with('.') && host.len() > 1 {
        host.pop();
    }
    if host.is_empty() || (host.contains(':') && !host.starts_with('[')) {
        return None;
    }
    Some((host, port))
}

/// Whether the dashboard answers to `host` (lower case, no port): localhost, an IP address,
/// or a configured name.
fn host_allowed(host: &str, allowed: &[String]) -> bool {
    let ip = host.parse::<std::net::Ipv4Addr>().is_ok()
        || host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .is_some_and(|h| h.parse::<std::net::Ipv6Addr>().is_ok());
    ip || host == "localhost" || host.ends_with(".localhost") || configured(host, allowed)
}

/// Whether `host` is one of [`Options::allowed_hosts`] (`.example.com`: it or a name under it).
fn configured(host: &str, allowed: &[String]) -> bool {
    allowed.iter().any(|a| match a.strip_prefix('.') {
        Some(domain) => host == domain || host.ends_with(a.as_str()),
        None => host == a,
    })
}

/// Whether an action's `Origin` is the dashboard itself: the host and port the request was
/// addressed to (a port left out is the scheme's default), or a configured host.
fn origin_allowed(origin: &str, own: Option<&str>, allowed: &[String]) -> bool {
    let Some((scheme, authority)) = origin.trim().split_once("://") else {
        return false; // `null` (a sandboxed page, a redirect from elsewhere) or garbage
    };
    let Some((host, port)) = split_host(authority) else {
        return false;
    };
    if configured(&host, allowed) {
        return true;
    }
    let Some((own_host, own_port)) = own.and_then(split_host) else {
        return false;
    };
    let default = match scheme.to_ascii_lowercase().as_str() {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    };
    let same_port = match (own_port, port) {
        (Some(a), Some(b)) => a == b,
        (Some(a), None) | (None, Some(a)) => Some(a) == default,
        (None, None) => true,
    };
    host == own_host && same_port
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
    fn hosts_split_into_name_and_port() {
        let split = |a: &str| split_host(a);
        let host = |h: &str, port: Option<u16>| Some((h.to_owned(), port));
        assert_eq!(split("LocalHost:8080"), host("localhost", Some(8080)));
        assert_eq!(split("[::1]:80"), host("[::1]", Some(80)));
        assert_eq!(split("[::1]"), host("[::1]", None));
        assert_eq!(split("dq.example."), host("dq.example", None));
        assert_eq!(split("a:b:c"), None);
        assert_eq!(split("evil.example:99999"), None);
        assert_eq!(split("user@evil.example"), None);
        assert_eq!(split(""), None);
    }

    #[test]
    fn only_loopback_names_ip_addresses_and_configured_hosts_are_answered() {
        let none: &[String] = &[];
        for ok in [
            "localhost",
            "app.localhost",
            "127.0.0.1",
            "10.1.2.3",
            "[::1]",
            "[fe80::1]",
        ] {
            assert!(host_allowed(ok, none), "{ok}");
        }
        for refused in [
            "evil.example",
            "localhost.evil.example",
            "127.0.0.1.nip.io",
            "[evil]",
        ] {
            assert!(!host_allowed(refused, none), "{refused}");
        }
        let options = Options::new().allowed_hosts(["DQ.Internal.Example:8443", ".corp.example"]);
        let allowed = &options.allowed_hosts;
        assert!(host_allowed("dq.internal.example", allowed));
        assert!(host_allowed("corp.example", allowed));
        assert!(host_allowed("dq.eu.corp.example", allowed));
        assert!(!host_allowed("evilcorp.example", allowed));
    }

    #[test]
    fn an_origin_must_be_the_host_the_request_was_sent_to() {
        let none: &[String] = &[];
        assert!(origin_allowed(
            "http://127.0.0.1:8080",
            Some("127.0.0.1:8080"),
            none
        ));
        assert!(origin_allowed(
            "https://dq.example",
            Some("dq.example"),
            none
        ));
        assert!(origin_allowed(
            "http://dq.example",
            Some("dq.example:80"),
            none
        ));
        assert!(!origin_allowed(
            "http://127.0.0.1:3000",
            Some("127.0.0.1:8080"),
            none
        ));
        assert!(!origin_allowed(
            "http://evil.example",
            Some("127.0.0.1:8080"),
            none
        ));
        assert!(!origin_allowed("null", Some("127.0.0.1:8080"), none));
        assert!(!origin_allowed(
            "https://dq.example:8443",
            Some("dq.example"),
            none
        ));
        let behind_proxy = Options::new().allowed_hosts(["dq.example"]).allowed_hosts;
        assert!(origin_allowed(
            "https://dq.example",
            Some("127.0.0.1:8080"),
            &behind_proxy
        ));
    }

    #[test]
    fn notes_are_found_by_their_key_only() {
        let notes = Notes::default();
        let key = notes.put("o1 was deleted.".into()).unwrap();
        assert_eq!(notes.get(&key).as_deref(), Some("o1 was deleted."));
        assert_eq!(notes.get("Session expired"), None);
        for i in 0..KEPT_NOTES {
            notes.put(format!("note {i}"));
        }
        assert_eq!(notes.get(&key), None, "the oldest goes first");
    }

    #[test]
    fn csrf_tokens_differ_per_router() {
        assert_ne!(random_token(), random_token());
        assert_eq!(random_token().len(), 32);
    }
}
