//! What every action shares: the checks that it may act (not read-only, same-site, the
//! form's CSRF token), the posted form, and the redirect back with a note.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use dq_core::Error;

use crate::pages::store_error;
use crate::secret::constant_time_eq;
use crate::{view, Shared, Viewer};

/// A posted form's fields, in order (`id` may come many times).
pub(crate) struct Form(Vec<(String, String)>);

impl Form {
    fn parse(body: &[u8]) -> Form {
        Form(
            form_urlencoded::parse(body)
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        )
    }

    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, v)| k == key && !v.is_empty())
            .map(|(_, v)| v.as_str())
    }

    pub(crate) fn all(&self, key: &str) -> Vec<&str> {
        self.0
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

/// An action that may be taken: extracting one runs [`admit`], so a handler that takes a
/// `Post` is never reached by a refused request (the refusal is the response). Each action
/// handler takes one, after its `Path`, and says only what it does.
pub(crate) struct Post {
    pub(crate) web: Shared,
    pub(crate) viewer: Viewer,
    pub(crate) form: Form,
    /// The form's `return`, else the referring page, when either is a page of this dashboard.
    came_from: Option<String>,
}

impl FromRequest<Shared> for Post {
    type Rejection = Response;

    async fn from_request(request: Request, web: &Shared) -> Result<Post, Response> {
        let (mut parts, body) = request.into_parts();
        let Extension(viewer) = Extension::<Viewer>::from_request_parts(&mut parts, web)
            .await
            .map_err(IntoResponse::into_response)?;
        let headers = parts.headers.clone();
        let body = Bytes::from_request(Request::from_parts(parts, body), web)
            .await
            .map_err(IntoResponse::into_response)?;
        let form = admit(web, &viewer, &headers, &body).map_err(|refused| *refused)?;
        let came_from = referring_page(&viewer, &form, &headers);
        Ok(Post {
            web: web.clone(),
            viewer,
            form,
            came_from,
        })
    }
}

impl Post {
    /// Where to go back to: the page the action came from, else `fallback`.
    pub(crate) fn return_to(&self, fallback: String) -> String {
        self.came_from.clone().unwrap_or(fallback)
    }

    /// A redirect (303) to `to` with a note of what was done: the note is kept by the router
    /// and the URL carries only its key, so that no link can put text of its own on a page.
    pub(crate) fn back(&self, to: &str, note: &str) -> Response {
        let mut url = to.to_owned();
        // One note only: drop the previous one (a `note` parameter, not "note=" in a job id).
        if let Some(i) = url.rfind("?note=").or_else(|| url.rfind("&note=")) {
            url.truncate(i);
        }
        if let Some(key) = self.web.notes.put(note.to_owned()) {
            let separator = if url.contains('?') { '&' } else { '?' };
            url = format!("{url}{separator}note={key}");
        }
        (StatusCode::SEE_OTHER, [(header::LOCATION, url)]).into_response()
    }

    /// An error page saying what was wrong with the action, with its status.
    pub(crate) fn error(&self, status: StatusCode, message: &str) -> Response {
        view::error(status, Some(&self.viewer), message)
    }

    /// The page saying the store did not `what`.
    pub(crate) fn store_error(&self, what: &str, e: &Error) -> Response {
        store_error(&self.viewer, what, e)
    }
}

/// Checks that the request may act: not read-only, same-site, with the form's CSRF token.
fn admit(
    web: &Shared,
    viewer: &Viewer,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Form, Box<Response>> {
    if !viewer.can_act {
        return Err(Box::new(view::error(
            StatusCode::FORBIDDEN,
            Some(viewer),
            "This dashboard is read-only for you: actions are refused. Ask for full access, or use the dq command-line tool.",
        )));
    }
    let cross_site = headers
        .get("sec-fetch-site")
        .is_some_and(|v| v.as_bytes() == b"cross-site");
    let form = Form::parse(body);
    let token_ok = form
        .get("csrf")
        .is_some_and(|t| constant_time_eq(t.as_bytes(), web.csrf.as_bytes()));
    if cross_site || !token_ok {
        return Err(Box::new(view::error(
            StatusCode::FORBIDDEN,
            Some(viewer),
            "The action was refused: it did not come from a page of this dashboard (missing or stale CSRF token; after a restart of the dashboard, reload the page and try again).",
        )));
    }
    Ok(form)
}

/// The page the action came from: the form's `return`, else the referring page, when either
/// is a page of this dashboard.
fn referring_page(viewer: &Viewer, form: &Form, headers: &HeaderMap) -> Option<String> {
    let referer = headers
        .get(header::REFERER)
        .and_then(|v| v.to_str().ok())
        .and_then(|r| {
            let after_scheme = r.split_once("://")?.1;
            Some(&after_scheme[after_scheme.find('/')?..])
        });
    let on_site = |path: &&str| ours(viewer, path);
    form.get("return")
        .filter(on_site)
        .or(referer.filter(on_site))
        .map(str::to_owned)
}

/// Whether `path` is a path under the dashboard's base and nothing a browser could read as
/// another host: no `//` start, and no backslash, whitespace or control character anywhere
/// (browsers read `\` as `/` and drop tabs and newlines, so `/\evil.example` is
/// `//evil.example`).
fn ours(viewer: &Viewer, path: &str) -> bool {
    if path
        .bytes()
        .any(|b| b == b'\\' || b.is_ascii_whitespace() || b.is_ascii_control())
    {
        return false;
    }
    let Some(rest) = path.strip_prefix(viewer.base.as_str()) else {
        return false;
    };
    !path.starts_with("//")
        && ((rest.starts_with('/') && !rest.starts_with("//"))
            || rest.starts_with('?')
            || (rest.is_empty() && !path.is_empty()))
}
