//! The page frame, the formatting every page shares, and the compiled-in assets.

use std::time::Duration;

use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use dq_core::JobState;
use maud::{html, Markup, DOCTYPE};

use crate::Viewer;

const CSS: &str = include_str!("../assets/dq.css");
const JS: &str = include_str!("../assets/dq.js");

pub(crate) async fn stylesheet() -> Response {
    asset("text/css; charset=utf-8", CSS)
}

pub(crate) async fn script() -> Response {
    asset("text/javascript; charset=utf-8", JS)
}

fn asset(kind: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        body,
    )
        .into_response()
}

/// A whole page: the navigation, an optional note (what the last action did), the body.
pub(crate) fn page(
    viewer: &Viewer,
    title: &str,
    refresh: Duration,
    note: Option<&str>,
    body: Markup,
) -> Html<String> {
    let base = &viewer.base;
    let home = home(viewer);
    let markup = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · dq" }
                link rel="stylesheet" href={ (base) "/assets/dq.css" };
                script src={ (base) "/assets/dq.js" } defer {}
            }
            body data-refresh-ms=(refresh.as_millis()) {
                header {
                    nav {
                        a.brand href=(home) { "dq" }
                        a href=(home) { "Topics" }
                        a href={ (base) "/schedules" } { "Schedules" }
                        a href={ (base) "/workers" } { "Workers" }
                    }
                    (search_box(viewer))
                    @if !viewer.can_act {
                        span.badge.readonly title="Actions are hidden and refused" { "read-only" }
                    }
                }
                main {
                    @if let Some(note) = note {
                        p.note role="status" { (note) }
                    }
                    (body)
                }
            }
        }
    };
    Html(markup.into_string())
}

/// The header's search: a job by id, in every topic, or a workflow by its id
/// (`GET <base>/search?id=...`).
fn search_box(viewer: &Viewer) -> Markup {
    html! {
        form.search role="search" method="get" action={ (viewer.base) "/search" } {
            input type="search" name="id" placeholder="Job or workflow id"
                aria-label="Find a job by id in every topic, or a workflow by its id" required;
            " "
            button type="submit" { "Find" }
        }
    }
}

/// The overview's address: the mount point itself (`/dq`; axum's `nest` does not route
/// `/dq/`), or `/` at the root.
pub(crate) fn home(viewer: &Viewer) -> String {
    if viewer.base.is_empty() {
        "/".to_owned()
    } else {
        viewer.base.clone()
    }
}

/// An error page: what went wrong and what to do, with its status.
pub(crate) fn error(status: StatusCode, viewer: Option<&Viewer>, message: &str) -> Response {
    let fallback = Viewer {
        base: String::new(),
        can_act: false,
    };
    let viewer = viewer.unwrap_or(&fallback);
    let body = html! {
        h1 { (status.as_u16()) " " (status.canonical_reason().unwrap_or("")) }
        p.error { (message) }
        p { a href=(home(viewer)) { "Back to the topics" } }
    };
    (status, page(viewer, "Error", Duration::ZERO, None, body)).into_response()
}

/// A POST form with one button and the CSRF token.
pub(crate) fn button(action: &str, csrf: &str, label: &str, class: &str) -> Markup {
    html! {
        form.inline method="post" action=(action) {
            input type="hidden" name="csrf" value=(csrf);
            button type="submit" class=(class) { (label) }
        }
    }
}

/// The page of job `id` of `topic`.
pub(crate) fn job_page(viewer: &Viewer, topic: &str, id: &str) -> String {
    format!("{}/topics/{}/jobs/{}", viewer.base, seg(topic), seg(id))
}

/// The page of workflow `id`.
pub(crate) fn workflow_page(viewer: &Viewer, id: &str) -> String {
    format!("{}/workflows/{}", viewer.base, seg(id))
}

/// A job id or topic as one URL path segment: everything but letters, digits and `-._~`
/// percent-encoded (an id may hold `/`, `?`, `#` or `%`).
pub(crate) fn seg(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Like [`button`], asking the person to confirm first (for what cannot be undone).
pub(crate) fn confirm_button(action: &str, csrf: &str, label: &str, question: &str) -> Markup {
    html! {
        form.inline method="post" action=(action) data-confirm=(question) {
            input type="hidden" name="csrf" value=(csrf);
            button type="submit" class="danger" { (label) }
        }
    }
}

/// Resume when paused, else Pause: the small button of a topic's or a schedule's row (`link`
/// is its address; the action is `link/pause` or `link/resume`).
pub(crate) fn pause_or_resume(link: &str, paused: bool, csrf: &str) -> Markup {
    if paused {
        button(&format!("{link}/resume"), csrf, "Resume", "small")
    } else {
        button(&format!("{link}/pause"), csrf, "Pause", "small")
    }
}

/// The job's payload for a person: pretty JSON, or the text as it is.
pub(crate) fn pretty_payload(payload: &[u8]) -> String {
    match serde_json::from_slice::<serde_json::Value>(payload) {
        Ok(v) => serde_json::to_string_pretty(&v)
            .unwrap_or_else(|_| String::from_utf8_lossy(payload).into_owned()),
        Err(_) => String::from_utf8_lossy(payload).into_owned(),
    }
}

/// A done job's result on one line, for a listing's preview: compact JSON, or its text.
pub(crate) fn result_line(result: &[u8]) -> String {
    match serde_json::from_slice::<serde_json::Value>(result) {
        Ok(v) => v.to_string(),
        Err(_) => String::from_utf8_lossy(result).replace(['\n', '\r'], " "),
    }
}

/// The first `n` characters, with an ellipsis when cut.
pub(crate) fn clip(text: &str, n: usize) -> String {
    match text.char_indices().nth(n) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_owned(),
    }
}

pub(crate) fn state_name(state: JobState) -> &'static str {
    state.as_str()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn ids_are_one_path_segment() {
        assert_eq!(seg("order-42"), "order-42");
        assert_eq!(seg("a/b?c#d%e\"<"), "a%2Fb%3Fc%23d%25e%22%3C");
    }

    #[test]
    fn payloads_are_pretty_json_or_text() {
        assert_eq!(pretty_payload(br#"{"a":1}"#), "{\n  \"a\": 1\n}");
        assert_eq!(pretty_payload(b"not json"), "not json");
        assert_eq!(clip("abcdef", 3), "abc…");
        assert_eq!(clip("abc", 3), "abc");
    }

    #[test]
    fn results_are_previewed_on_one_line() {
        assert_eq!(result_line(b"{\n  \"a\": 1\n}"), r#"{"a":1}"#);
        assert_eq!(result_line(b"two\nlines"), "two lines");
    }
}
