//! The overview: the last hour of every topic summed, then every topic's counts (the done
//! jobs it keeps among them), lag, last hour and state, refreshed live.

use std::time::SystemTime;

use axum::extract::State;
use axum::http::Uri;
use axum::response::{Html, IntoResponse, Response};
use axum::Extension;
use dq_core::{Error, Throughput, TopicStats};
use maud::{html, Markup};

use super::{lag, query, store_error, with_note};
use crate::chart::{hour_chart, sparkline, summed, Scope};
use crate::clock::{relative, span};
use crate::view::pause_or_resume;
use crate::{Shared, Viewer};

/// Most topics the overview shows (each costs two calls per shard), and the search looks in.
pub(super) const MAX_TOPICS: usize = 200;

struct TopicRow {
    name: String,
    stats: TopicStats,
    hour: Throughput,
}

/// The first [`MAX_TOPICS`] topics' rows, how many topics there are, and the store's clock.
async fn topic_rows(web: &Shared) -> Result<(Vec<TopicRow>, usize, SystemTime), Error> {
    let client = &web.client;
    let topics = client.topics().await?;
    let total = topics.len();
    let now = client.store_time().await?;
    let rows = topics.into_iter().take(MAX_TOPICS).map(|t| async move {
        let (stats, hour) =
            tokio::try_join!(client.stats(t.as_str()), client.throughput(t.as_str()))?;
        Ok::<_, Error>(TopicRow {
            name: t.as_str().to_owned(),
            stats,
            hour,
        })
    });
    let rows = futures_util::future::try_join_all(rows).await?;
    Ok((rows, total, now))
}

fn topic_table_rows(web: &Shared, viewer: &Viewer, rows: &[TopicRow], now: SystemTime) -> Markup {
    let base = &viewer.base;
    html! {
        @for row in rows {
            @let c = &row.stats.counts;
            @let link = format!("{base}/topics/{}", row.name);
            tr data-topic=(row.name) {
                td { a href=(link) { (row.name) } }
                td.num data-count="delayed" { a href={ (link) "?state=delayed" } { (c.delayed) } }
                td.num data-count="ready" { a href={ (link) "?state=ready" } { (c.ready) } }
                td.num data-count="running" { a href={ (link) "?state=running" } { (c.running) } }
                td.num.bad[c.dead > 0] data-count="dead" {
                    a href={ (link) "?state=dead" } { (c.dead) }
                }
                td.num data-count="done" { a href={ (link) "?state=done" } { (c.done) } }
                td.num { (lag(&row.stats, now)) }
                td { @if let Some(next) = row.stats.next_due { (relative(next, now)) } @else { "-" } }
                td.num { (row.hour.done()) }
                td.num.bad[row.hour.failed() > 0] { (row.hour.failed()) }
                td { (sparkline(&row.hour)) }
                td {
                    @if row.stats.paused { span.badge.paused { "paused" } } @else { "running" }
                    @if viewer.can_act {
                        " "
                        (pause_or_resume(&link, row.stats.paused, &web.csrf))
                    }
                }
            }
        }
        @if rows.is_empty() {
            tr { td colspan="12" { "No topics yet: nothing was ever pushed in this namespace." } }
        }
    }
}

pub(crate) async fn overview(
    State(web): State<Shared>,
    Extension(viewer): Extension<Viewer>,
    uri: Uri,
) -> Response {
    let q = query(&uri);
    let (rows, total, now) = match topic_rows(&web).await {
        Ok(found) => found,
        Err(e) => return store_error(&viewer, "read the topics", &e),
    };
    let all = summed(rows.iter().map(|r| &r.hour));
    let body = html! {
        h1 { "Topics" }
        @if total > rows.len() {
            p.hint { "The first " (rows.len()) " of " (total) " topics; the others by URL: /topics/<name>." }
        }
        figure.hour {
            (hour_chart(&all, Scope::EveryTopic))
            figcaption.hint {
                "Runs done and failed per minute over the last hour, every topic "
                @if total > rows.len() { "shown " }
                "summed (as of this page's load)."
            }
        }
        table.topics {
            thead { tr {
                th { "Topic" } th.num { "Delayed" } th.num { "Ready" } th.num { "Running" } th.num { "Dead" }
                th.num title="Succeeded jobs the topic keeps (only with a retention: retain = \"1h\")" { "Done (kept)" }
                th.num title="How long the oldest ready job has waited past its due time" { "Lag" }
                th { "Next due" } th.num { "Done (1h)" } th.num { "Failed (1h)" }
                th { "Last hour, per minute" } th { "State" }
            } }
            tbody #topics data-refresh={ (viewer.base) "/fragments/topics" } {
                (topic_table_rows(&web, &viewer, &rows, now))
            }
        }
        p.hint { "Times by the store's clock; numbers refresh every " (span(web.options.refresh)) "." }
    };
    with_note(&web, &viewer, &q, "Topics", web.options.refresh, body)
}

/// The overview's rows alone, for the live refresh.
pub(crate) async fn topics_fragment(
    State(web): State<Shared>,
    Extension(viewer): Extension<Viewer>,
) -> Response {
    match topic_rows(&web).await {
        Ok((rows, _, now)) => {
            Html(topic_table_rows(&web, &viewer, &rows, now).into_string()).into_response()
        }
        Err(e) => store_error(&viewer, "read the topics", &e),
    }
}
