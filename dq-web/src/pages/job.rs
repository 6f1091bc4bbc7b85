//! One job's page: its fields, its payload (and a done job's result, a running job's progress),
//! its history (its events still kept, with each failed run's error), the workflow it is a
//! step of, if any, and what can be done to it in its state.

use std::time::{Duration, SystemTime};

use axum::extract::{Path, State};
use axum::http::{StatusCode, Uri};
use axum::response::Response;
use axum::Extension;
use dq_core::events::{EventKind, JobEvent};
use dq_core::workflow::StepRef;
use dq_core::{JobInfo, JobState};
use maud::{html, Markup};

use super::{query, store_error, with_note};
use crate::clock::{relative, utc};
use crate::view::{self, button, confirm_button, job_page, pretty_payload, seg, workflow_page};
use crate::{Shared, Viewer};

pub(crate) async fn job(
    State(web): State<Shared>,
    Extension(viewer): Extension<Viewer>,
    Path((topic, id)): Path<(String, String)>,
    uri: Uri,
) -> Response {
    let q = query(&uri);
    let client = &web.client;
    let read = tokio::join!(
        client.status_in(&topic, &id),
        client.store_time(),
        client.job_history(&topic, &id),
        client.workflow_step(&topic, &id)
    );
    let (info, now, history, step) = match read {
        (Ok(info), Ok(now), history, step) => (info, now, history, step),
        (Err(e), _, _, _) | (_, Err(e), _, _) => {
            return store_error(&viewer, &format!("read job {id:?} of {topic:?}"), &e)
        }
    };
    let base = &viewer.base;
    let link = job_page(&viewer, &topic, &id);
    let Some(job) = info else {
        // What its topic kept of it: a mark that it was cancelled, or nothing.
        let end = client.result_in::<serde_json::Value>(&topic, &id).await;
        let message = match end {
            Ok(dq_core::JobResult::Cancelled) => format!(
                "Job {id:?} of topic {topic:?} was cancelled: its topic keeps a mark of it within its retention, nothing else."
            ),
            _ => format!(
                "No job {id:?} in topic {topic:?}: it finished, was cancelled or deleted, or never existed (dq keeps finished jobs only while their topic's retention lasts, and only when it has one)."
            ),
        };
        return view::error(StatusCode::NOT_FOUND, Some(&viewer), &message);
    };
    let body = html! {
        p.crumbs { a href={ (base) "/topics/" (seg(&topic)) } { (topic) } " / " code { (id) } }
        h1 { "Job " code { (id) } " " span class={ "badge " (job.state.as_str()) } data-state=(job.state.as_str()) { (job.state.as_str()) } }
        (workflow_of(&viewer, &step))
        (fields(&job, now))
        h2 { "Payload" }
        pre.payload { (pretty_payload(&job.payload)) }
        @if job.state == JobState::Running {
            h2 { "Progress" }
            @if let Some(progress) = &job.progress {
                pre.payload.progress { (pretty_payload(progress)) }
            } @else {
                p.hint { "None reported: its handler has not called ctx.progress in this run." }
            }
        }
        @if job.state == JobState::Done {
            h2 { "Result" }
            @if let Some(result) = &job.result {
                pre.payload.result { (pretty_payload(result)) }
            } @else {
                p.hint { "No value: its handler returned nothing." }
            }
        }
        h2 { "History" }
        (history_of(&history, now))
        @if viewer.can_act {
            h2 { "Actions" }
            (actions(&job, &id, &link, &web.csrf))
        }
    };
    let title = format!("{topic} / {id}");
    with_note(&web, &viewer, &q, &title, Duration::ZERO, body)
}

/// The workflow the job is a step of, linked to its page, while the step has not ended; a
/// hint when that could not be read (the rest of the page stands).
fn workflow_of(viewer: &Viewer, step: &dq_core::Result<Option<StepRef>>) -> Markup {
    html! {
        @match step {
            Ok(Some(step)) => p.workflow data-workflow=(step.workflow) {
                "Step " code { (step.step) } " of workflow "
                a href=(workflow_page(viewer, &step.workflow)) { code { (step.workflow) } }
                ": the workflow's page draws its steps, each after the steps it comes after."
            }
            Ok(None) => {}
            Err(e) => p.hint.error {
                "Whether it is a step of a workflow could not be read: " (e.to_string())
            }
        }
    }
}

/// The job's state, attempt, times (UTC and relative to the store's clock) and last error.
fn fields(job: &JobInfo, now: SystemTime) -> Markup {
    html! {
        table.fields {
            tr {
                th { "State" }
                td {
                    (job.state.as_str())
                    @if job.state == JobState::Blocked {
                        ": waiting for the steps it comes after (it is a step of a workflow; "
                        "its job is pushed once they have ended)"
                    }
                    @if job.cancel_requested {
                        span.cancel-requested data-cancel="requested" {
                            ": cancel requested, its worker was asked to stop it (a handler "
                            "that listens stops, and the job ends cancelled; one that does not "
                            "runs to its end)"
                        }
                    }
                }
            }
            tr {
                th { "Priority" }
                td data-priority=(job.priority) {
                    (job.priority)
                    @if job.priority == 0 { " (the default)" } @else { " (higher runs first)" }
                }
            }
            tr {
                th { "Group" }
                td data-group=[job.group.as_deref()] {
                    @if let Some(group) = &job.group { code { (group) } } @else { "-" }
                }
            }
            tr { th { "Attempt" } td data-attempt=(job.attempt) { (attempt(job)) } }
            @if job.state == JobState::Blocked {
                tr {
                    th { "Due" }
                    td { "once the steps it comes after have ended (a delay counts from then)" }
                }
            } @else {
                tr { th { "Due" } td { (utc(job.due)) " UTC (" (relative(job.due, now)) ")" } }
            }
            tr { th { "Enqueued" } td { (utc(job.created)) " UTC (" (relative(job.created, now)) ")" } }
            @if let Some(t) = job.state_since_or_until {
                tr {
                    th { (state_time(job.state)) }
                    td { (utc(t)) " UTC (" (relative(t, now)) ")" }
                }
            }
            tr {
                th { "Last error" }
                td.error {
                    pre { (job.last_error.as_deref().unwrap_or("-")) }
                    @if let Some(whose) = whose_error(job) { p.hint { (whose) } }
                }
            }
            @if !job.errors.is_empty() {
                tr {
                    th { "Failed runs" }
                    td { (failed_runs(job, now)) }
                }
            }
        }
    }
}

/// The errors of the job's failed runs that it keeps (the latest ten, each its first KiB),
/// oldest first: which run, when, what.
fn failed_runs(job: &JobInfo, now: SystemTime) -> Markup {
    html! {
        table.runs {
            tr { th { "Run" } th { "When (UTC)" } th { "Error" } }
            @for e in &job.errors {
                @let at = dq_core::store::from_us(e.at_us);
                tr data-run=(e.run) {
                    td.num { (e.run) }
                    td { (utc(at)) " (" (relative(at, now)) ")" }
                    td.error { pre { (e.error) } }
                }
            }
        }
        @if job.errors.len() >= dq_core::RUN_ERRORS_KEPT {
            p.hint { "A job keeps the errors of its latest " (dq_core::RUN_ERRORS_KEPT) " failed runs." }
        }
    }
}

/// The job's events still kept, oldest first, with each failed run's error
/// (`Client::job_history`); a hint when there are none, and the error when they could not be
/// read (the rest of the page stands).
fn history_of(history: &dq_core::Result<Vec<JobEvent>>, now: SystemTime) -> Markup {
    html! {
        @match history {
            Err(e) => p.hint.error { "Its events could not be read: " (e.to_string()) }
            Ok(events) if events.is_empty() => p.hint {
                "No events kept for this job: its topic's events are off (a listener with "
                code { "events = true" } " keeps each step of its jobs, with each failed run's error), or they went past the topic's cap."
            }
            Ok(events) => table.history {
                tr { th { "When (UTC)" } th { "Event" } th { "Run" } th { "Detail" } }
                @for e in events {
                    tr data-event=(e.kind.name()) {
                        td { (utc(e.at)) " (" (relative(e.at, now)) ")" }
                        td { (e.kind.name()) }
                        td { (e.attempt) }
                        td.detail { (event_detail(&e.kind, now)) }
                    }
                }
            }
        }
    }
}

/// What an event says beyond its name: the error of a failed run or a dead letter, when a
/// job runs (again), the value or progress reported.
fn event_detail(kind: &EventKind, now: SystemTime) -> Markup {
    html! {
        @match kind {
            EventKind::Failed { error } | EventKind::Dead { error } => pre.error { (error) }
            EventKind::Retrying { due } | EventKind::Postponed { due } => {
                "runs again at " (utc(*due)) " (" (relative(*due, now)) ")"
            }
            EventKind::Pushed { due: Some(due) } => {
                "due at " (utc(*due)) " (" (relative(*due, now)) ")"
            }
            EventKind::Progress { value } => code { (String::from_utf8_lossy(value)) }
            EventKind::Succeeded { value: Some(value) } => code { (String::from_utf8_lossy(value)) }
            _ => {}
        }
    }
}

/// Which run of how many the job is on, was on, or comes to, in its state: `attempt` counts
/// the runs that failed, and the run under way when it is running.
fn attempt(job: &JobInfo) -> String {
    let (n, max) = (job.attempt, job.max_attempts);
    let next = n.saturating_add(1);
    match job.state {
        JobState::Delayed | JobState::Ready if n == 0 => format!("attempt 1 of {max}, to come"),
        JobState::Delayed | JobState::Ready => {
            format!("attempt {next} of {max}, to come ({n} failed)")
        }
        JobState::Running => format!("attempt {n} of {max}, running"),
        JobState::Dead => format!("attempt {n} of {max} failed; dead-lettered"),
        JobState::Done => format!("attempt {next} of {max} succeeded"),
        JobState::Blocked => {
            format!("attempt 1 of {max}, to come once the steps it comes after have ended")
        }
        _ => format!("attempt {n} of {max}"),
    }
}

/// Which run the last error is of, when there is one (kept whole; each failed run's error,
/// its first KiB, is under "Failed runs").
fn whose_error(job: &JobInfo) -> Option<&'static str> {
    let whose = match job.state {
        JobState::Dead => "The error of its last run, which dead-lettered it.",
        JobState::Done => "The error of the last run that failed before it succeeded.",
        JobState::Running => "The error of the last run that failed before this one.",
        _ => "The error of its latest failed run.",
    };
    job.last_error.as_ref().map(|_| whose)
}

/// What `state_since_or_until` is in `state`.
fn state_time(state: JobState) -> &'static str {
    match state {
        JobState::Dead => "Died",
        JobState::Done => "Succeeded at",
        _ => "Lease until",
    }
}

/// What can be done to job `id` in its state (`link` is its page's address): a pending job is
/// run now (delayed only), cancelled or rescheduled; a running job cancelled (its worker is
/// asked to stop it); a blocked step cancelled; a dead letter retried or deleted; a done job's
/// record deleted.
fn actions(job: &JobInfo, id: &str, link: &str, csrf: &str) -> Markup {
    html! {
        @match job.state {
            JobState::Delayed | JobState::Ready => {
                div.actions {
                    @if job.state == JobState::Delayed {
                        (button(&format!("{link}/run"), csrf, "Run now", ""))
                        " "
                    }
                    (button(&format!("{link}/cancel"), csrf, "Cancel", "danger"))
                    @if job.state == JobState::Ready {
                        span.hint { " Ready: it runs in turn, after the jobs queued before it." }
                    }
                }
                form.reschedule method="post" action={ (link) "/reschedule" } {
                    input type="hidden" name="csrf" value=(csrf);
                    label { "Reschedule: in " input type="text" name="delay" placeholder="10m"; }
                    label { " or at " input type="text" name="at" placeholder="2026-11-24 18:00"; " UTC" }
                    " " button type="submit" { "Reschedule" }
                    span.hint { " A time more than a minute ago is refused." }
                }
            }
            JobState::Dead => {
                div.actions {
                    (button(&format!("{link}/retry"), csrf, "Retry", ""))
                    " "
                    (confirm_button(
                        &format!("{link}/delete"),
                        csrf,
                        "Delete",
                        &format!("Delete dead letter {id}? This cannot be undone."),
                    ))
                }
            }
            JobState::Blocked => {
                div.actions {
                    (confirm_button(
                        &format!("{link}/cancel"),
                        csrf,
                        "Cancel",
                        &format!(
                            "Cancel step {id}? The steps after it follow as their policies say \
                             (by default they are cancelled too). This cannot be undone."
                        ),
                    ))
                    span.hint {
                        " Blocked: waiting for the steps it comes after, so it cannot be run "
                        "now or rescheduled. Cancel ends this step, cancelled; to stop the "
                        "whole workflow, cancel it on its page."
                    }
                }
            }
            JobState::Done => {
                div.actions {
                    (confirm_button(
                        &format!("{link}/delete-done"),
                        csrf,
                        "Delete",
                        &format!("Delete the record of done job {id} and its result? This cannot be undone."),
                    ))
                }
            }
            JobState::Running if job.cancel_requested => {
                p.hint { "Its cancel was requested (see its state above)." }
            }
            JobState::Running => {
                div.actions {
                    (confirm_button(
                        &format!("{link}/cancel"),
                        csrf,
                        "Cancel",
                        &format!("Ask the worker running {id} to stop it?"),
                    ))
                    span.hint {
                        " Its worker, in whatever process, is asked to stop it: a handler that "
                        "listens for the cancel (JobContext::cancelled) stops, and the job ends "
                        "cancelled, not retried; one that does not runs to its end. It cannot "
                        "be rescheduled while it runs."
                    }
                }
            }
            _ => {}
        }
    }
}
