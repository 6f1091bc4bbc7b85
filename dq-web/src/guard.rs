//! The middleware every request goes through: the host, the token, the authorize hook and the
//! origin of an action are checked before any handler runs, and every response gets the
//! headers that keep other sites from framing or caching it.

use axum::extract::{OriginalUri, Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::hosts::{host_allowed, origin_allowed, request_host, split_host};
use crate::secret::token_matches;
use crate::{view, Access, Shared, Viewer};

/// A request turned away, with the page or text that says why.
type Refused = Box<Response>;

/// Checks the host, authenticates and authorizes every request, refuses actions from other
/// origins, and tells the handlers where they are mounted.
pub(crate) async fn guard(State(web): State<Shared>, request: Request, next: Next) -> Response {
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
fn admit_request(web: &Shared, mut parts: Parts) -> Result<Parts, Refused> {
    let host = request_host(&parts);
    check_host(web, host.as_deref())?;
    check_token(web, &parts)?;
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
    check_origin(web, &parts, host.as_deref(), &viewer)?;
    parts.extensions.insert(viewer);
    Ok(parts)
}

/// `421` unless the request was addressed to one of the dashboard's names (against DNS
/// rebinding), saying how to allow the name if it is the dashboard's own.
fn check_host(web: &Shared, host: Option<&str>) -> Result<(), Refused> {
    let name = host.and_then(split_host).map(|(name, _)| name);
    if name
        .as_deref()
        .is_some_and(|name| host_allowed(name, &web.options.allowed_hosts))
    {
        return Ok(());
    }
    let shown = host.unwrap_or("(none)");
    let name = name.unwrap_or_else(|| "dq.example.com".to_owned());
    let message = format!(
        "421: this dashboard does not answer to the host {shown:?}. It answers to localhost, IP addresses and the names it is given, so that a page of another site cannot reach it by pointing its own name at this machine (DNS rebinding). If {name:?} is the dashboard's own name, allow it: Options::allowed_hosts([{name:?}]) where the router is built, or `dq web --allowed-host {name}`.\n"
    );
    Err(Box::new(
        (StatusCode::MISDIRECTED_REQUEST, message).into_response(),
    ))
}

/// `401` with a Basic challenge (a browser then asks for it) when a token is set and the
/// request does not carry it.
fn check_token(web: &Shared, parts: &Parts) -> Result<(), Refused> {
    match &web.options.token {
        Some(token) if !token_matches(parts, token) => Err(Box::new(
            (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, r#"Basic realm="dq""#)],
                "401: this dashboard asks for its token (Authorization: Bearer <token>, or the token as the password)\n",
            )
                .into_response(),
        )),
        _ => Ok(()),
    }
}

/// `403` for an action whose `Origin` names another site. A request without `Origin` (curl,
/// scripts) is left to the CSRF token.
fn check_origin(
    web: &Shared,
    parts: &Parts,
    host: Option<&str>,
    viewer: &Viewer,
) -> Result<(), Refused> {
    if parts.method == Method::GET || parts.method == Method::HEAD {
        return Ok(());
    }
    let Some(origin) = parts.headers.get(header::ORIGIN) else {
        return Ok(());
    };
    let origin = String::from_utf8_lossy(origin.as_bytes()).into_owned();
    if origin_allowed(&origin, host, &web.options.allowed_hosts) {
        return Ok(());
    }
    let message = format!(
        "The action was refused: it was sent by a page of {origin:?} (its Origin header), not by a page of this dashboard ({}). If the dashboard is reached under that name through a proxy, allow it: Options::allowed_hosts where the router is built, or `dq web --allowed-host`.",
        host.unwrap_or("?")
    );
    Err(Box::new(view::error(
        StatusCode::FORBIDDEN,
        Some(viewer),
        &message,
    )))
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
