//! A topic's page: its last hour, and its jobs in one state, a page at a time, with filters;
//! what is read from the store and the query string. [`topic_body`](super::topic_body)
//! renders it.

use axum::extract::{Path, State};
use axum::http::{StatusCode, Uri};
use axum::response::Response;
use axum::Extension;
use dq_core::{Cursor, JobState, TopicCounts, TopicStats};

use super::listing::{Listing, TopicView};
use super::topic_body::topic_body;
use super::{query, store_error, with_note, Query};
use crate::view::{self, seg};
use crate::{Shared, Viewer};

/// Jobs per page of a listing.
const PAGE: usize = 50;
/// Jobs a filtered listing looks at per page (the matches among them are shown).
const FILTER_WINDOW: usize = 500;

pub(crate) async fn topic(
    State(web): State<Shared>,
    Extension(viewer): Extension<Viewer>,
    Path(topic): Path<String>,
    uri: Uri,
) -> Response {
    let q = query(&uri);
    let client = &web.client;
    let read = tokio::try_join!(
        client.stats(&topic),
        client.throughput(&topic),
        client.store_time()
    );
    let (stats, hour, now) = match read {
        Ok(found) => found,
        Err(e) => return store_error(&viewer, &format!("read topic {topic:?}"), &e),
    };
    if let Err(refused) = known(&web, &viewer, &topic, &stats).await {
        return *refused;
    }
    let listing = match Listing::from_query(&q, default_state(&stats.counts)) {
        Ok(listing) => listing,
        Err(message) => return view::error(StatusCode::BAD_REQUEST, Some(&viewer), &message),
    };
    let limit = if listing.filtered() {
        FILTER_WINDOW
    } else {
        PAGE
    };
    let found = match client.jobs(&topic, listing.state, listing.at, limit).await {
        Ok(p) => p,
        Err(e) => return store_error(&viewer, &format!("list topic {topic:?}"), &e),
    };
    let link = format!("{}/topics/{}", viewer.base, seg(&topic));
    let shown = TopicView {
        topic: &topic,
        here: match uri.query() {
            Some(query) => format!("{link}?{query}"),
            None => link.clone(),
        },
        next: found
            .next
            .map(|cursor| next_page(&link, &q, listing.state, cursor)),
        link,
        viewer: &viewer,
        csrf: &web.csrf,
        stats: &stats,
        hour: &hour,
        now,
        query: &q,
        looked_at: found.jobs.len(),
        jobs: found.jobs.iter().filter(|j| listing.matches(j)).collect(),
        listing,
    };
    let body = topic_body(&shown);
    with_note(&web, &viewer, &q, &topic, web.options.refresh, body)
}

/// `404` for a name nothing was ever pushed to. Only asked when nothing is counted: a topic
/// whose jobs all ran is still a topic.
async fn known(
    web: &Shared,
    viewer: &Viewer,
    topic: &str,
    stats: &TopicStats,
) -> Result<(), Box<Response>> {
    let c = stats.counts;
    let counted = c.delayed > 0 || c.ready > 0 || c.running > 0 || c.dead > 0 || c.done > 0;
    if counted || stats.paused {
        return Ok(());
    }
    match web.client.topics().await {
        Ok(all) if !all.iter().any(|t| t.as_str() == topic) => {
            let message = format!(
                "No topic {topic:?}: nothing was ever pushed to it in this namespace. The overview lists every topic."
            );
            Err(Box::new(view::error(
                StatusCode::NOT_FOUND,
                Some(viewer),
                &message,
            )))
        }
        Ok(_) => Ok(()),
        Err(e) => Err(Box::new(store_error(
            viewer,
            &format!("read topic {topic:?}"),
            &e,
        ))),
    }
}

/// The state a topic page opens on: the first of ready, delayed, running, dead and done that
/// has jobs (delayed when none has).
fn default_state(c: &TopicCounts) -> JobState {
    [
        (JobState::Ready, c.ready),
        (JobState::Delayed, c.delayed),
        (JobState::Running, c.running),
        (JobState::Dead, c.dead),
        (JobState::Done, c.done),
    ]
    .into_iter()
    .find(|(_, n)| *n > 0)
    .map_or(JobState::Delayed, |(s, _)| s)
}

/// The next page's address: the same state and filters, from `cursor` (and no note).
fn next_page(link: &str, q: &Query, state: JobState, cursor: Cursor) -> String {
    let mut params: Vec<(String, String)> = q
        .iter()
        .filter(|(k, _)| k.as_str() != "cursor" && k.as_str() != "note")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    params.push(("state".into(), state.as_str().into()));
    params.push(("cursor".into(), cursor.to_string()));
    params.sort();
    params.dedup_by(|a, b| a.0 == b.0);
    let encoded: String = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(params)
        .finish();
    format!("{link}?{encoded}")
}
