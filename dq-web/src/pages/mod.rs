//! The pages: topics (the overview), one topic's jobs by state, one job, the workers, the
//! schedules, a workflow's graph, and the search for a job (or a workflow) by id.

mod job;
mod listing;
mod overview;
mod schedules;
mod search;
mod topic;
mod topic_body;
mod workers;
mod workflow;

pub(crate) use job::job;
pub(crate) use overview::{overview, topics_fragment};
pub(crate) use schedules::schedules;
pub(crate) use search::search;
pub(crate) use topic::topic;
pub(crate) use workers::workers;
pub(crate) use workflow::workflow;

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use dq_core::{Error, TopicStats};
use maud::Markup;

use crate::clock::span;
use crate::view::{self, page};
use crate::{Shared, Viewer};

/// A query string's fields (the empty ones left out).
type Query = HashMap<String, String>;

/// The query string's fields.
fn query(uri: &Uri) -> Query {
    form_urlencoded::parse(uri.query().unwrap_or("").as_bytes())
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

/// The note of the action that redirected here: the text the router kept under the URL's
/// `note` key, never text from the URL itself.
fn note(web: &Shared, q: &Query) -> Option<String> {
    q.get("note").and_then(|key| web.notes.get(key))
}

/// The whole page around `body`, with the note of the action that led here, if any.
fn with_note(
    web: &Shared,
    viewer: &Viewer,
    q: &Query,
    title: &str,
    refresh: Duration,
    body: Markup,
) -> Response {
    page(viewer, title, refresh, note(web, q).as_deref(), body).into_response()
}

/// What the person on call reads when the store does not answer.
pub(crate) fn store_error(viewer: &Viewer, what: &str, e: &Error) -> Response {
    let status = match e.kind() {
        dq_core::ErrorKind::InvalidInput => StatusCode::BAD_REQUEST,
        _ => StatusCode::SERVICE_UNAVAILABLE,
    };
    tracing::warn!(error = %e, "dq dashboard: could not {what}");
    view::error(
        status,
        Some(viewer),
        &format!("Could not {what}: {e}. If the store is down, this page works again once it answers; reload then."),
    )
}

/// How long the oldest ready job has waited past its due time.
fn lag(stats: &TopicStats, now: SystemTime) -> String {
    match stats.oldest_ready_due {
        Some(due) => span(now.duration_since(due).unwrap_or(Duration::ZERO)),
        None => "-".to_owned(),
    }
}
