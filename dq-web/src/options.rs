//! What the application decides: read-only mode, authorization, the token, the refresh period
//! and the host names the dashboard answers to.

use std::sync::Arc;
use std::time::Duration;

use axum::http::request::Parts;

use crate::hosts::split_host;

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

pub(crate) type Authorize = dyn Fn(&Parts) -> Access + Send + Sync;

/// How the dashboard behaves: read-only mode, authorization, refresh period, the host names it
/// answers to.
#[derive(Clone)]
pub struct Options {
    pub(crate) read_only: bool,
    pub(crate) authorize: Option<Arc<Authorize>>,
    pub(crate) token: Option<String>,
    pub(crate) refresh: Duration,
    pub(crate) allowed_hosts: Vec<String>,
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
            self.allowed_hosts.extend(host_name(&host));
        }
        self
    }
}

/// The name of an allowed host as given (`https://dq.example:8443/` is `dq.example`; a leading
/// dot, for a domain and its subdomains, is kept), or `None` when it names no host.
fn host_name(host: &str) -> Option<String> {
    let bare = host.split_once("://").map_or(host, |(_, rest)| rest);
    let bare = bare.split('/').next().unwrap_or("");
    let name = match bare.strip_prefix('.') {
        // A domain and its subdomains: keep the leading dot.
        Some(domain) => split_host(domain).map(|(h, _)| format!(".{h}")),
        None => split_host(bare).map(|(h, _)| h),
    };
    name.filter(|n| !n.is_empty() && n != ".")
}
