//! The pages: topics (the overview), one topic's jobs by state, one job, the workers.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use axum::extract::{Path, State};
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use dq_core::{Cursor, Error, JobInfo, JobState, Page, Throughput, TopicStats};
use maud::{html, Markup};

use crate::view::{self, button, clip, page, parse_utc, relative, seg, utc};
use crate::{Shared, Viewer};

/// Most topics the overview shows (each costs two calls per shard).
pub(crate) const MAX_TOPICS: usize = 200;
/// Jobs per page of a listing.
pub(crate) const PAGE: usize = 50;
/// Jobs a filtered listing looks at per page (the matches among them are shown).
pub(crate) const FILTER_WINDOW: usize = 500;

/// The query string's fields.
pub(crate) fn query(uri: &Uri) -> HashMap<String, String> {
    form_urlencoded::parse(uri.query().unwrap_or("").as_bytes())
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

/// The note of the action that redirected here: the text the router kept under the URL's
/// `note` key, never text from the URL itself.
pub(crate) fn note(web: &Shared, q: &HashMap<String, String>) -> Option<String> {
    q.get("note").and_then(|key| web.notes.get(key))
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

struct TopicRow {
    name: String,
    stats: TopicStats,
    hour: Throughput,
}

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
                td.num { (lag(&row.stats, now)) }
                td { @if let Some(next) = row.stats.next_due { (relative(next, now)) } @else { "-" } }
                td.num { (row.hour.done()) }
                td.num.bad[row.hour.failed() > 0] { (row.hour.failed()) }
                td { (view::chart(&row.hour)) }
                td {
                    @if row.stats.paused { span.badge.paused { "paused" } } @else { "running" }
                    @if viewer.can_act {
                        " "
                        @if row.stats.paused {
                            (button(&format!("{link}/resume"), &web.csrf, "Resume", "small"))
                        } @else {
                            (button(&format!("{link}/pause"), &web.csrf, "Pause", "small"))
                        }
                    }
                }
            }
        }
        @if rows.is_empty() {
            tr { td colspan="11" { "No topics yet: nothing was ever pushed in this namespace." } }
        }
    }
}

/// How long the oldest ready job has waited past its due time.
fn lag(stats: &TopicStats, now: SystemTime) -> String {
    match stats.oldest_ready_due {
        Some(due) => view::span(now.duration_since(due).unwrap_or(Duration::ZERO)),
        None => "-".to_owned(),
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
    let body = html! {
        h1 { "Topics" }
        @if total > rows.len() {
            p.hint { "The first " (rows.len()) " of " (total) " topics; the others by URL: /topics/<name>." }
        }
        table.topics {
            thead { tr {
                th { "Topic" } th.num { "Delayed" } th.num { "Ready" } th.num { "Running" } th.num { "Dead" }
                th.num title="How long the oldest ready job has waited past its due time" { "Lag" }
                th { "Next due" } th.num { "Done (1h)" } th.num { "Failed (1h)" }
                th { "Last hour, per minute" } th { "State" }
            } }
            tbody #topics data-refresh={ (viewer.base) "/fragments/topics" } {
                (topic_table_rows(&web, &viewer, &rows, now))
            }
        }
        p.hint { "Times by the store's clock; numbers refresh every " (view::span(web.options.refresh)) "." }
    };
    page(
        &viewer,
        "Topics",
        web.options.refresh,
        note(&web, &q).as_deref(),
        body,
    )
    .into_response()
}

/// The overview's rows alone, for the live refresh.
pub(crate) async fn topics_fragment(
    State(web): State<Shared>,
    Extension(viewer): Extension<Viewer>,
) -> Response {
    match topic_rows(&web).await {
        Ok((rows, _, now)) => {
            axum::response::Html(topic_table_rows(&web, &viewer, &rows, now).into_string())
                .into_response()
        }
        Err(e) => store_error(&viewer, "read the topics", &e),
    }
}

/// What a topic page lists: a state, a cursor and the filters.
struct Listing {
    state: JobState,
    at: Cursor,
    id_prefix: Option<String>,
    due_after: Option<SystemTime>,
    due_before: Option<SystemTime>,
    error: Option<String>,
}

impl Listing {
    fn filtered(&self) -> bool {
        self.id_prefix.is_some()
            || self.due_after.is_some()
            || self.due_before.is_some()
            || self.error.is_some()
    }

    fn matches(&self, job: &JobInfo) -> bool {
        self.id_prefix
            .as_ref()
            .is_none_or(|p| job.id.as_str().starts_with(p.as_str()))
            && self.due_after.is_none_or(|t| job.due >= t)
            && self.due_before.is_none_or(|t| job.due < t)
            && self.error.as_ref().is_none_or(|text| {
                job.last_error
                    .as_ref()
                    .is_some_and(|e| e.to_lowercase().contains(&text.to_lowercase()))
            })
    }
}

pub(crate) async fn topic(
    State(web): State<Shared>,
    Extension(viewer): Extension<Viewer>,
    Path(topic): Path<String>,
    uri: Uri,
) -> Response {
    let q = query(&uri);
    let client = &web.client;
    let (stats, now) = match tokio::try_join!(client.stats(&topic), client.store_time()) {
        Ok(found) => found,
        Err(e) => return store_error(&viewer, &format!("read topic {topic:?}"), &e),
    };
    let c = stats.counts;
    if c.delayed == 0 && c.ready == 0 && c.running == 0 && c.dead == 0 && !stats.paused {
        // Nothing counted: a topic whose jobs all ran, or a name nothing was ever pushed to.
        match client.topics().await {
            Ok(all) if !all.iter().any(|t| t.as_str() == topic) => {
                let message = format!(
                    "No topic {topic:?}: nothing was ever pushed to it in this namespace. The overview lists every topic."
                );
                return view::error(StatusCode::NOT_FOUND, Some(&viewer), &message);
            }
            Ok(_) => {}
            Err(e) => return store_error(&viewer, &format!("read topic {topic:?}"), &e),
        }
    }
    let default_state = [
        (JobState::Ready, c.ready),
        (JobState::Delayed, c.delayed),
        (JobState::Running, c.running),
        (JobState::Dead, c.dead),
    ]
    .into_iter()
    .find(|(_, n)| *n > 0)
    .map_or(JobState::Delayed, |(s, _)| s);
    let time_filter = |key: &str| q.get(key).map(|t| parse_utc(t));
    let (due_after, due_before) = match (time_filter("due_after"), time_filter("due_before")) {
        (Some(Err(message)), _) | (_, Some(Err(message))) => {
            return view::error(StatusCode::BAD_REQUEST, Some(&viewer), &message);
        }
        (a, b) => (a.and_then(Result::ok), b.and_then(Result::ok)),
    };
    let listing = Listing {
        state: q
            .get("state")
            .and_then(|s| s.parse().ok())
            .unwrap_or(default_state),
        at: q
            .get("cursor")
            .and_then(|c| c.parse().ok())
            .unwrap_or(Cursor::START),
        id_prefix: q.get("id").cloned(),
        due_after,
        due_before,
        error: q.get("error").cloned(),
    };
    let limit = if listing.filtered() {
        FILTER_WINDOW
    } else {
        PAGE
    };
    let page_of_jobs = match client.jobs(&topic, listing.state, listing.at, limit).await {
        Ok(p) => p,
        Err(e) => return store_error(&viewer, &format!("list topic {topic:?}"), &e),
    };
    let body = topic_body(
        &web,
        &viewer,
        &topic,
        &stats,
        now,
        &listing,
        &page_of_jobs,
        &q,
        &uri,
    );
    page(
        &viewer,
        &topic,
        web.options.refresh,
        note(&web, &q).as_deref(),
        body,
    )
    .into_response()
}

#[allow(clippy::too_many_arguments)]
fn topic_body(
    web: &Shared,
    viewer: &Viewer,
    topic: &str,
    stats: &TopicStats,
    now: SystemTime,
    listing: &Listing,
    found: &Page,
    q: &HashMap<String, String>,
    uri: &Uri,
) -> Markup {
    let base = &viewer.base;
    let link = format!("{base}/topics/{}", seg(topic));
    let c = stats.counts;
    let jobs: Vec<&JobInfo> = found.jobs.iter().filter(|j| listing.matches(j)).collect();
    let here = match uri.query() {
        Some(query) => format!("{link}?{query}"),
        None => link.clone(),
    };
    let next_link = found.next.map(|cursor| {
        let mut params: Vec<(String, String)> = q
            .iter()
            .filter(|(k, _)| k.as_str() != "cursor" && k.as_str() != "note")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        params.push(("state".into(), listing.state.as_str().into()));
        params.push(("cursor".into(), cursor.to_string()));
        params.sort();
        params.dedup_by(|a, b| a.0 == b.0);
        let encoded: String = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(params)
            .finish();
        format!("{link}?{encoded}")
    });
    let state = listing.state;
    let jobs_table = html! {
        table.jobs {
            thead { tr {
                @if viewer.can_act && state != JobState::Running {
                    th { input type="checkbox" data-select-all title="Select all on this page"; }
                }
                th { "Id" } th { "Due" } th.num { "Attempts" }
                @match state {
                    JobState::Running => { th { "Lease until" } }
                    JobState::Dead => { th { "Died" } }
                    _ => {}
                }
                th { "Last error" } th { "Payload" }
            } }
            tbody {
                @for job in &jobs {
                    tr data-id=(job.id.as_str()) {
                        @if viewer.can_act && state != JobState::Running {
                            td { input type="checkbox" name="id" value=(job.id.as_str()); }
                        }
                        td { a href={ (link) "/jobs/" (seg(job.id.as_str())) } { code { (job.id.as_str()) } } }
                        td title=(utc(job.due)) { (relative(job.due, now)) }
                        td.num { (job.attempt) " / " (job.max_attempts) }
                        @match (state, job.state_since_or_until) {
                            (JobState::Running | JobState::Dead, Some(t)) => { td title=(utc(t)) { (relative(t, now)) } }
                            (JobState::Running | JobState::Dead, None) => { td { "-" } }
                            _ => {}
                        }
                        td.error { (clip(job.last_error.as_deref().unwrap_or(""), 80)) }
                        td.payload { code { (clip(&String::from_utf8_lossy(&job.payload), 60)) } }
                    }
                }
                @if jobs.is_empty() {
                    tr { td colspan="7" {
                        @if listing.filtered() { "No job on this page matches the filters." }
                        @else { "No " (state.as_str()) " jobs." }
                    } }
                }
            }
        }
        @if viewer.can_act && !jobs.is_empty() {
            div.actions {
                "Selected: "
                @match state {
                    JobState::Delayed => {
                        button type="submit" name="action" value="run" { "Run now" } " "
                        button.danger type="submit" name="action" value="cancel" { "Cancel" }
                    }
                    JobState::Ready => {
                        button.danger type="submit" name="action" value="cancel" { "Cancel" }
                        span.hint { " Ready jobs run in turn, in the order they became ready." }
                    }
                    JobState::Dead => {
                        button type="submit" name="action" value="retry" { "Retry" } " "
                        button.danger type="submit" name="action" value="delete" { "Delete" }
                    }
                    _ => { "running jobs cannot be changed until they end" }
                }
            }
        }
    };
    let tab = |s: JobState, n: u64| {
        html! {
            a.tab.current[s == state] href={ (link) "?state=" (s.as_str()) } data-state=(s.as_str()) {
                (view::state_name(s)) " " span.count { (n) }
            }
        }
    };
    html! {
        h1 { "Topic " code { (topic) } }
        div.summary {
            @if stats.paused { span.badge.paused { "paused" } " " }
            "Lag " strong { (lag(stats, now)) } " · next due "
            strong { @if let Some(t) = stats.next_due { (relative(t, now)) } @else { "-" } }
            @if viewer.can_act {
                " "
                @if stats.paused {
                    (button(&format!("{link}/resume"), &web.csrf, "Resume", "small"))
                } @else {
                    (button(&format!("{link}/pause"), &web.csrf, "Pause", "small"))
                }
            }
        }
        nav.tabs {
            (tab(JobState::Delayed, c.delayed)) (tab(JobState::Ready, c.ready))
            (tab(JobState::Running, c.running)) (tab(JobState::Dead, c.dead))
        }
        form.filters method="get" action=(link) {
            input type="hidden" name="state" value=(state.as_str());
            label { "Id starts with " input type="text" name="id" value=[q.get("id")]; }
            label { "Due from " input type="text" name="due_after" placeholder="2026-11-24 09:00" value=[q.get("due_after")]; }
            label { "to " input type="text" name="due_before" placeholder="2026-11-24 18:00" value=[q.get("due_before")]; }
            label { "Error contains " input type="text" name="error" value=[q.get("error")]; }
            button type="submit" { "Filter" }
            @if listing.filtered() { " " a href={ (link) "?state=" (state.as_str()) } { "Clear" } }
            span.hint { " Times in UTC." }
        }
        @if state == JobState::Dead && viewer.can_act && c.dead > 0 {
            div.actions {
                (button(&format!("{link}/dead/retry"), &web.csrf, "Retry every dead letter", ""))
                " "
                (view::confirm_button(
                    &format!("{link}/dead/purge"),
                    &web.csrf,
                    "Delete every dead letter",
                    &format!("Delete all {} dead letters of {topic}? This cannot be undone.", c.dead),
                ))
            }
        }
        @if viewer.can_act {
            form #jobs method="post" action={ (link) "/bulk" } {
                input type="hidden" name="csrf" value=(web.csrf);
                input type="hidden" name="return" value=(here);
                (jobs_table)
            }
        } @else {
            (jobs_table)
        }
        p.pager {
            @if listing.filtered() {
                "Looked at " (found.jobs.len()) " jobs, " (jobs.len()) " match. "
            }
            @if listing.at != Cursor::START {
                a href={ (link) "?state=" (state.as_str()) } { "First page" } " "
            }
            @if let Some(next) = next_link { a.next href=(next) { "Next page →" } }
        }
    }
}

pub(crate) async fn job(
    State(web): State<Shared>,
    Extension(viewer): Extension<Viewer>,
    Path((topic, id)): Path<(String, String)>,
    uri: Uri,
) -> Response {
    let q = query(&uri);
    let client = &web.client;
    let (info, now) = match tokio::try_join!(client.status_in(&topic, &id), client.store_time()) {
        Ok(found) => found,
        Err(e) => return store_error(&viewer, &format!("read job {id:?} of {topic:?}"), &e),
    };
    let base = &viewer.base;
    let link = format!("{base}/topics/{}/jobs/{}", seg(&topic), seg(&id));
    let Some(job) = info else {
        let message = format!(
            "No job {id:?} in topic {topic:?}: it finished, was cancelled or deleted, or never existed (dq keeps no finished jobs)."
        );
        return view::error(StatusCode::NOT_FOUND, Some(&viewer), &message);
    };
    let body = html! {
        p.crumbs { a href={ (base) "/topics/" (seg(&topic)) } { (topic) } " / " code { (id) } }
        h1 { "Job " code { (id) } " " span class={ "badge " (job.state.as_str()) } data-state=(job.state.as_str()) { (job.state.as_str()) } }
        table.fields {
            tr { th { "State" } td { (job.state.as_str()) } }
            tr { th { "Attempts" } td { (job.attempt) " of " (job.max_attempts) } }
            tr { th { "Due" } td { (utc(job.due)) " UTC (" (relative(job.due, now)) ")" } }
            tr { th { "Enqueued" } td { (utc(job.created)) " UTC (" (relative(job.created, now)) ")" } }
            @if let Some(t) = job.state_since_or_until {
                tr {
                    th { @if job.state == JobState::Dead { "Died" } @else { "Lease until" } }
                    td { (utc(t)) " UTC (" (relative(t, now)) ")" }
                }
            }
            tr { th { "Last error" } td.error { pre { (job.last_error.as_deref().unwrap_or("-")) } } }
        }
        h2 { "Payload" }
        pre.payload { (view::pretty_payload(&job.payload)) }
        @if viewer.can_act {
            h2 { "Actions" }
            @match job.state {
                JobState::Delayed | JobState::Ready => {
                    div.actions {
                        @if job.state == JobState::Delayed {
                            (button(&format!("{link}/run"), &web.csrf, "Run now", ""))
                            " "
                        }
                        (button(&format!("{link}/cancel"), &web.csrf, "Cancel", "danger"))
                        @if job.state == JobState::Ready {
                            span.hint { " Ready: it runs in turn, after the jobs queued before it." }
                        }
                    }
                    form.reschedule method="post" action={ (link) "/reschedule" } {
                        input type="hidden" name="csrf" value=(web.csrf);
                        label { "Reschedule: in " input type="text" name="delay" placeholder="10m"; }
                        label { " or at " input type="text" name="at" placeholder="2026-11-24 18:00"; " UTC" }
                        " " button type="submit" { "Reschedule" }
                        span.hint { " A time more than a minute ago is refused." }
                    }
                }
                JobState::Dead => {
                    div.actions {
                        (button(&format!("{link}/retry"), &web.csrf, "Retry", ""))
                        " "
                        (view::confirm_button(
                            &format!("{link}/delete"),
                            &web.csrf,
                            "Delete",
                            &format!("Delete dead letter {id}? This cannot be undone."),
                        ))
                    }
                }
                _ => {
                    p.hint { "A running job cannot be changed until its run ends." }
                }
            }
        }
    };
    page(
        &viewer,
        &format!("{topic} / {id}"),
        Duration::ZERO,
        note(&web, &q).as_deref(),
        body,
    )
    .into_response()
}

pub(crate) async fn workers(
    State(web): State<Shared>,
    Extension(viewer): Extension<Viewer>,
) -> Response {
    let client = &web.client;
    let (workers, now) = match tokio::try_join!(client.workers(), client.store_time()) {
        Ok(found) => found,
        Err(e) => return store_error(&viewer, "read the workers", &e),
    };
    let ms = |ms: u64| SystemTime::UNIX_EPOCH + Duration::from_millis(ms);
    let body = html! {
        h1 { "Workers" }
        table.workers {
            thead { tr {
                th { "Worker" } th { "Host" } th.num { "Pid" } th { "Topics" }
                th.num { "Running jobs" } th { "Started" } th { "Last heartbeat" }
            } }
            tbody {
                @for w in &workers {
                    tr data-worker=(w.id) {
                        td { code { (w.id) } } td { (w.host) } td.num { (w.pid) }
                        td { (w.topics.join(", ")) } td.num { (w.running) }
                        td title=(utc(ms(w.started_ms))) { (relative(ms(w.started_ms), now)) }
                        td title=(utc(ms(w.last_seen_ms))) { (relative(ms(w.last_seen_ms), now)) }
                    }
                }
                @if workers.is_empty() {
                    tr { td colspan="7" { "No worker heard from in the last minute." } }
                }
            }
        }
    };
    page(&viewer, "Workers", Duration::ZERO, None, body).into_response()
}

pub(crate) async fn schedules(
    State(web): State<Shared>,
    Extension(viewer): Extension<Viewer>,
    uri: Uri,
) -> Response {
    let q = query(&uri);
    let client = &web.client;
    let (all, now) = match tokio::try_join!(client.schedules(), client.store_time()) {
        Ok(found) => found,
        Err(e) => return store_error(&viewer, "read the schedules", &e),
    };
    let base = &viewer.base;
    let body = html! {
        h1 { "Schedules" }
        table.schedules {
            thead { tr {
                th { "Schedule" } th { "Repeats" } th { "Topic" } th { "Next tick" }
                th { "Last tick" } th { "Missed ticks" } th { "State" }
            } }
            tbody {
                @for s in &all {
                    @let link = format!("{base}/schedules/{}", seg(&s.id));
                    tr data-schedule=(s.id) {
                        td { code { (s.id) } }
                        td { (s.spec.repeat.describe()) }
                        td { a href={ (base) "/topics/" (s.spec.topic) } { (s.spec.topic) } }
                        td { @if let Some(t) = s.next { span title=(utc(t)) { (relative(t, now)) } } @else { "-" } }
                        td { @if let Some(t) = s.last { span title=(utc(t)) { (relative(t, now)) } } @else { "-" } }
                        td { (format!("{:?}", s.spec.missed)) }
                        td {
                            @if s.next.is_none() { span.badge.paused { "paused" } } @else { "ticking" }
                            @if viewer.can_act {
                                " "
                                @if s.next.is_none() {
                                    (button(&format!("{link}/resume"), &web.csrf, "Resume", "small"))
                                } @else {
                                    (button(&format!("{link}/pause"), &web.csrf, "Pause", "small"))
                                }
                                " "
                                (button(&format!("{link}/run"), &web.csrf, "Run now", "small"))
                                " "
                                (view::confirm_button(
                                    &format!("{link}/remove"),
                                    &web.csrf,
                                    "Remove",
                                    &format!("Remove schedule {}? Its coming ticks' jobs are cancelled; jobs it made before stay.", s.id),
                                ))
                            }
                        }
                    }
                }
                @if all.is_empty() {
                    tr { td colspan="7" { "No schedules: declare one with client.schedule(id)…upsert()." } }
                }
            }
        }
        p.hint { "Each tick is one job, created a few seconds ahead and due at the tick. Times by the store's clock." }
    };
    page(
        &viewer,
        "Schedules",
        Duration::ZERO,
        note(&web, &q).as_deref(),
        body,
    )
    .into_response()
}
