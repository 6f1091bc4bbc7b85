//! The header's search: a job by id in every topic (the first [`MAX_TOPICS`], as the overview
//! shows them), looked up in all of them at once, one status call per topic, and a workflow by
//! its id. A single job goes straight to its page (`303`: the job is what was asked for), and
//! so does a workflow when no job has its id; several are listed with their topic and state,
//! each linked to its page (and the workflow, if one has the id); none says so, and where else
//! to look.

use std::time::Duration;

use axum::extract::State;
use axum::http::{header, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use dq_core::{Error, JobId, JobInfo};
use maud::{html, Markup};

use super::overview::MAX_TOPICS;
use super::{query, store_error};
use crate::view::{self, job_page, page, seg, workflow_page};
use crate::{Shared, Viewer};

/// What a search found: the jobs with the id, by topic name, how many topics there are, and
/// whether a workflow has the id (or why that could not be read: a namespace of several shards
/// has no workflows).
struct Found {
    jobs: Vec<JobInfo>,
    topics: usize,
    workflow: Result<bool, Error>,
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
            p.hint {
                "Type a job's id in the box above: it is looked up in every topic, and as a "
                "workflow's id."
            }
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
    let to = match (found.jobs.as_slice(), &found.workflow) {
        ([job], Ok(false) | Err(_)) => Some(job_link(&viewer, job)),
        ([], Ok(true)) => Some(workflow_page(&viewer, id.as_str())),
        _ => None,
    };
    if let Some(to) = to {
        return (StatusCode::SEE_OTHER, [(header::LOCATION, to)]).into_response();
    }
    let body = results(&viewer, &id, &found);
    page(&viewer, "Find a job", Duration::ZERO, None, body).into_response()
}

/// Job `id` in each of the first [`MAX_TOPICS`] topics, looked up at once, and the workflow
/// `id`.
async fn find(web: &Shared, id: &JobId) -> Result<Found, Error> {
    let client = &web.client;
    let (topics, workflow) = tokio::join!(client.topics(), client.workflow_status(id.as_str()));
    let topics = topics?;
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
        workflow: workflow.map(|flow| flow.is_some()),
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
                @if matches!(found.workflow, Ok(false)) { " No workflow has this id either." }
            }
        } @else {
            @if found.jobs.len() == 1 {
                p { "One topic holds a job with this id." }
            } @else {
                p { (found.jobs.len()) " topics hold a job with this id." }
            }
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
        @match &found.workflow {
            Ok(true) => p.workflow {
                "Workflow " a href=(workflow_page(viewer, id.as_str())) { code { (id.as_str()) } }
                " has this id too."
            }
            Ok(false) => {}
            Err(e) => p.hint.error { "Workflows could not be looked up: " (e.to_string()) }
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
    job_page(viewer, job.topic.as_str(), job.id.as_str())
}
