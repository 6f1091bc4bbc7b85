//! A workflow's page: its state and times, its graph (each step a box in its layer, with its
//! state, and the arrows from the steps it comes after), each step's job, value or error, and
//! Cancel workflow while it runs.
//!
//! A pending step's state is its job's (delayed, ready or running): each step's job is read
//! with one status call, all at once (a workflow has at most 1000 steps).

use std::time::{Duration, SystemTime};

use axum::extract::{Path, State};
use axum::http::{StatusCode, Uri};
use axum::response::Response;
use axum::Extension;
use dq_core::workflow::{OnFailure, StepInfo, StepState, WorkflowInfo, WorkflowState};
use dq_core::{from_us, Client, JobInfo};
use maud::{html, Markup};

use super::{query, store_error, with_note};
use crate::clock::{relative, utc};
use crate::graph::{layers, workflow_graph, Node};
use crate::view::{self, clip, confirm_button, home, job_page, result_line, seg, workflow_page};
use crate::{Shared, Viewer};

pub(crate) async fn workflow(
    State(web): State<Shared>,
    Extension(viewer): Extension<Viewer>,
    Path(id): Path<String>,
    uri: Uri,
) -> Response {
    let q = query(&uri);
    let client = &web.client;
    let read = tokio::try_join!(client.workflow_status(&id), client.store_time());
    let (found, now) = match read {
        Ok(read) => read,
        Err(e) => return store_error(&viewer, &format!("read workflow {id:?}"), &e),
    };
    let Some(flow) = found else {
        let message = format!(
            "No workflow {id:?}: it was never pushed, or it ended longer ago than it is kept \
             (a day after its last step ended, unless its push said otherwise with \
             WorkflowBuilder::keep)."
        );
        return view::error(StatusCode::NOT_FOUND, Some(&viewer), &message);
    };
    let jobs = match step_jobs(client, &flow).await {
        Ok(jobs) => jobs,
        Err(e) => return store_error(&viewer, &format!("read the jobs of workflow {id:?}"), &e),
    };
    let nodes: Vec<Node<'_>> = flow
        .steps
        .iter()
        .zip(&jobs)
        .map(|(step, job)| Node {
            name: &step.name,
            topic: step.topic.as_str(),
            id: step.id.as_str(),
            state: shown_state(step, job.as_ref()),
            after: &step.after,
            error: step.error.as_deref(),
            value: step.value.as_deref().map(result_line),
            link: job
                .as_ref()
                .map(|_| job_page(&viewer, step.topic.as_str(), step.id.as_str())),
        })
        .collect();
    let layer = layers(&nodes);
    let body = html! {
        p.crumbs { a href=(home(&viewer)) { "Topics" } " / workflow " code { (flow.id) } }
        h1 {
            "Workflow " code { (flow.id) } " "
            span class={ "badge " (flow.state.as_str()) } data-state=(flow.state.as_str()) {
                (flow.state.as_str())
            }
        }
        (fields(&flow, now))
        h2 { "Graph" }
        figure.graph {
            div.graph { (workflow_graph(&nodes, &layer)) }
            figcaption.hint {
                "Each step runs once the steps it comes after have ended; an arrow goes from "
                "a step to each step that comes after it, marked "
                code { "run" } " or " code { "cancel-workflow" }
                " when a failure does not simply cancel the step after it. A box links to its "
                "job's page while the job is kept."
            }
        }
        h2 { "Steps" }
        (steps_table(&viewer, &flow, &jobs, &nodes, &layer))
        @if viewer.can_act {
            h2 { "Actions" }
            (actions(&flow, &workflow_page(&viewer, &flow.id), &web.csrf))
        }
    };
    let title = format!("Workflow {id}");
    with_note(&web, &viewer, &q, &title, Duration::ZERO, body)
}

/// Each step's job as its status says (`None` when it is not kept: a cancelled step's, a
/// succeeded one's in a topic that keeps no done jobs, a dead letter deleted since).
async fn step_jobs(client: &Client, flow: &WorkflowInfo) -> dq_core::Result<Vec<Option<JobInfo>>> {
    let looks = flow
        .steps
        .iter()
        .map(|s| client.status_in(s.topic.as_str(), s.id.as_str()));
    futures_util::future::try_join_all(looks).await
}

/// What a step's box and row say it is: its state, and for a pending step its job's (delayed,
/// ready or running).
fn shown_state(step: &StepInfo, job: Option<&JobInfo>) -> &'static str {
    match (step.state, job) {
        (StepState::Pending, Some(job)) => job.state.as_str(),
        (state, _) => state.as_str(),
    }
}

/// A step's state in words: a pending one's job's state, what a blocked one waits for.
fn state_words(step: &StepInfo, job: Option<&JobInfo>) -> String {
    match (step.state, job) {
        (StepState::Pending, Some(job)) => format!("pending: {}", job.state),
        (StepState::Blocked, _) => "blocked: waiting for the steps it comes after".to_owned(),
        (state, _) => state.as_str().to_owned(),
    }
}

/// What the state of a step's box means, for its badge's title.
fn meaning(shown: &str) -> &'static str {
    match shown {
        "blocked" => "its job is not pushed yet: it is once every step it comes after has ended",
        "delayed" => "its job waits for its due time (a delay counts from the step's release)",
        "ready" => "its job waits for a worker",
        "running" => "its job is running",
        "succeeded" => "its job succeeded",
        "failed" => "its job failed past its retries and was dead-lettered",
        "cancelled" => {
            "cancelled: by a cancel of its job or of the workflow, or because a step it comes \
             after failed"
        }
        _ => "its job was pushed",
    }
}

/// The workflow's state, its steps by state, and when it was pushed and ended (UTC, and
/// relative to the store's clock).
fn fields(flow: &WorkflowInfo, now: SystemTime) -> Markup {
    let created = from_us(flow.created_us);
    html! {
        table.fields {
            tr {
                th { "State" }
                td {
                    (flow.state.as_str())
                    @if flow.cancelled && flow.state == WorkflowState::Running {
                        ": cancelled, its running steps asked to stop; no step starts any more"
                    } @else if flow.cancelled {
                        " (the workflow was cancelled as a whole)"
                    }
                }
            }
            tr { th { "Steps" } td data-steps=(flow.steps.len()) { (step_counts(flow)) } }
            tr { th { "Pushed" } td { (utc(created)) " UTC (" (relative(created, now)) ")" } }
            tr {
                th { "Ended" }
                td {
                    @if let Some(ended) = flow.ended_us.map(from_us) {
                        (utc(ended)) " UTC (" (relative(ended, now)) ")"
                    } @else {
                        "not yet: some step has not ended"
                    }
                }
            }
        }
    }
}

/// "4 steps: 1 succeeded, 2 pending, 1 blocked".
fn step_counts(flow: &WorkflowInfo) -> String {
    let states = [
        StepState::Succeeded,
        StepState::Pending,
        StepState::Blocked,
        StepState::Failed,
        StepState::Cancelled,
    ];
    let counts: Vec<String> = states
        .iter()
        .map(|&s| (s, flow.steps.iter().filter(|step| step.state == s).count()))
        .filter(|(_, n)| *n > 0)
        .map(|(s, n)| format!("{n} {}", s.as_str()))
        .collect();
    let n = flow.steps.len();
    let plural = if n == 1 { "" } else { "s" };
    format!("{n} step{plural}: {}", counts.join(", "))
}

/// Each step, layer by layer: its topic, its job (a link while it is kept), its state, the
/// steps it comes after (with the policy when it is not the default, cancel) and its error or
/// value, clipped as a topic's listing clips them.
fn steps_table(
    viewer: &Viewer,
    flow: &WorkflowInfo,
    jobs: &[Option<JobInfo>],
    nodes: &[Node<'_>],
    layer: &[usize],
) -> Markup {
    let mut order: Vec<usize> = (0..flow.steps.len()).collect();
    order.sort_by_key(|&i| layer[i]);
    html! {
        table.steps {
            thead { tr {
                th { "Step" } th.num { "Layer" } th { "Topic" } th { "Job" } th { "State" }
                th { "After" } th { "Error or value" }
            } }
            tbody {
                @for i in order {
                    @let step = &flow.steps[i];
                    @let job = jobs[i].as_ref();
                    @let node = &nodes[i];
                    tr id={ "step-" (step.name) } data-step=(step.name)
                        data-step-state=(step.state.as_str()) {
                        td { code { (step.name) } }
                        td.num { (layer[i] + 1) }
                        td {
                            a href={ (viewer.base) "/topics/" (seg(step.topic.as_str())) } {
                                (step.topic.as_str())
                            }
                        }
                        td {
                            @if let Some(link) = &node.link {
                                a href=(link) { code { (step.id.as_str()) } }
                            } @else {
                                code { (step.id.as_str()) } " " span.hint { "(not kept)" }
                            }
                        }
                        td {
                            span class={ "badge " (node.state) } data-state=(node.state)
                                title=(meaning(node.state)) {
                                (state_words(step, job))
                            }
                        }
                        td.after {
                            @for (dep, policy) in &step.after {
                                a href={ "#step-" (dep) } { code { (dep) } }
                                @if *policy != OnFailure::Cancel { " (" (policy.as_str()) ")" }
                                " "
                            }
                            @if step.after.is_empty() { "-" }
                        }
                        @if let Some(error) = &step.error {
                            td.error title=(error) { (clip(error, 80)) }
                        } @else if let Some(value) = &node.value {
                            td.payload.result title=(value) { code { (clip(value, 60)) } }
                        } @else {
                            td { "-" }
                        }
                    }
                }
            }
        }
    }
}

/// Cancel workflow while it runs (asking first): what has not run is cancelled, a running
/// step is asked to stop (`link` is the workflow's page).
fn actions(flow: &WorkflowInfo, link: &str, csrf: &str) -> Markup {
    html! {
        @if flow.state == WorkflowState::Running {
            div.actions {
                (confirm_button(
                    &format!("{link}/cancel"),
                    csrf,
                    "Cancel workflow",
                    &format!(
                        "Cancel workflow {}? Its steps that have not run are cancelled and its \
                         running ones asked to stop. This cannot be undone.",
                        flow.id
                    ),
                ))
                span.hint {
                    " Its blocked and waiting steps are cancelled; a running step is asked to "
                    "stop (its handler sees it when it checks ctx.is_cancelled); no step starts "
                    "after this."
                }
            }
        } @else {
            p.hint { "It has ended: there is nothing to cancel." }
        }
    }
}
