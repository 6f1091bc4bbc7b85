//! The header's search: a job by id in every topic (the first [`MAX_TOPICS`], as the overview
//! shows them), looked up in all of them at once, one status call per topic. A single match
//! goes straight to the job's page (`303`: the job is what was asked for); several are listed
//! with their topic and state, each linked to its page; none says so, and where else to look.

use std::time::Duration;

use axum::extract::State;
use axum::http::{header, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use dq_core::{Error, JobId, JobInfo};
use maud::{html, Markup};

use super::overview::MAX_TOPICS;
use super::{query, store_error};
use crate::view::{self, page, seg};
use crate::{Shared, Viewer};

/// What a search found: the jobs with the id, by topic name, and how many topics there are.
struct Found {
    jobs: Vec<JobInfo>,
    topics: usize,
}

pub(crate) async fn search(
    State(web): State<Shared>,
    Extension(viewer): Extension<Viewer>,
    uri: Uri,
) -> Response {
    let q = query(&uri);
    // Ids hold no whitespace: what a paste brought along around one is dropped.
    let typed = q.get("id").map_or("", |id| id.trim());
    if typed.is_empty() {
        let body = html! {
            h1 { "Find a job" }
            p.hint { "Type a job's id in the box above: it is looked up in every topic." }
        };
        return page(&viewer, "Find a job", Duration::ZERO, None, body).into_response();
    }
    let id = match JobId::new(typed) {
        Ok(id) => id,
        Err(e) => {
            let message = format!("No job can have this id: {e}");
            return view::error(StatusCode::BAD_REQUEST, Some(&viewer), &message);
        }
    };
    let found = match find(&web, &id).await {
        Ok(found) => found,
        Err(e) => return store_error(&viewer, &format!("look for job {typed:?}"), &e),
    };
    if let [job] = found.jobs.as_slice() {
        let to = job_link(&viewer, job);
        return (StatusCode::SEE_OTHER, [(header::LOCATION, to)]).into_response();
    }
    let body = results(&viewer, &id, &found);
    page(&viewer, "Find a job", Duration::ZERO, None, body).into_response()
}

/// Job `id` in each of the first [`MAX_TOPICS`] topics, looked up at once.
async fn find(web: &Shared, id: &JobId) -> Result<Found, Error> {
    let client = &web.client;
    let topics = client.topics().await?;
    let looks = topics
        .iter()
        .take(MAX_TOPICS)
        .map(|t| client.status_in(t.as_str(), id.as_str()));
    let found = futures_util::future::try_join_all(looks).await?;
    let mut jobs: Vec<JobInfo> = found.into_iter().flatten().collect();
    jobs.sort_by(|a, b| a.topic.cmp(&b.topic));
    Ok(Found {
        jobs,
        topics: topics.len(),
    })
}

/// The page of a search that found no job, or several.
fn results(viewer: &Viewer, id: &JobId, found: &Found) -> Markup {
    let looked_in = found.topics.min(MAX_TOPICS);
    html! {
        h1 { "Job " code { (id.as_str()) } }
        @if found.jobs.is_empty() {
            p.none {
                "No job " code { (id.as_str()) } " in any of the " (looked_in) " topics looked in: "
                "it finished, was cancelled or deleted, or never existed (finished jobs are kept only "
                "while their topic's retention lasts, and only when it has one)."
            }
        } @else {
            p { (found.jobs.len()) " topics hold a job with this id." }
            table.found {
                thead { tr { th { "Topic" } th { "State" } th.num { "Attempts" } th { "Job" } } }
                tbody {
                    @for job in &found.jobs {
                        tr data-topic=(job.topic.as_str()) {
                            td { a href={ (viewer.base) "/topics/" (seg(job.topic.as_str())) } { (job.topic.as_str()) } }
                            td { span class={ "badge " (job.state.as_str()) } data-state=(job.state.as_str()) { (job.state.as_str()) } }
                            td.num { (job.attempt) " / " (job.max_attempts) }
                            td { a href=(job_link(viewer, job)) { "Open " code { (id.as_str()) } } }
                        }
                    }
                }
            }
        }
        @if found.topics > MAX_TOPICS {
            p.hint {
                "Looked in the first " (MAX_TOPICS) " of " (found.topics) " topics; a job of another "
                "topic is at /topics/<topic>/jobs/<id>."
            }
        }
    }
}

/// The page of `job`.
fn job_link(viewer: &Viewer, job: &JobInfo) -> String {
    format!(
        "{}/topics/{}/jobs/{}",
        viewer.base,
        seg(job.topic.as_str()),
        seg(job.id.as_str())
    )
}
