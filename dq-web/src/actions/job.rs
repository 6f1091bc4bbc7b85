//! One job's actions: run now, cancel, delete or retry a dead letter, reschedule, delete a
//! done job's record.

use std::time::{Duration, SystemTime};

use axum::extract::Path;
use axum::http::StatusCode;
use axum::response::Response;
use dq_core::{ChangeOutcome, Due, JobState};

use super::post::{Form, Post};
use super::topic_page;
use crate::clock::{parse_utc, utc};
use crate::view::{seg, workflow_page};

/// What an action on one job did: the note to show, and whether the job is gone (then the
/// redirect goes to its topic, or to its workflow for a step of one, not to its page).
type Done = (String, bool);

pub(crate) async fn job(
    Path((topic, id, action)): Path<(String, String, String)>,
    post: Post,
) -> Response {
    let client = &post.web.client;
    // A step of a workflow, once cancelled, goes back to its workflow's page: the topic of a
    // blocked step may hold no other job, and have no page. (Only where to go back depends on
    // it: a store that cannot say goes back to the topic.)
    let step = match action.as_str() {
        "cancel" => client.workflow_step(&topic, &id).await.ok().flatten(),
        _ => None,
    };
    let done: dq_core::Result<Done> = match action.as_str() {
        "run" => run_now(&post, &topic, &id).await.map(|note| (note, false)),
        // A running job stays until its worker stops it: back to its page.
        "cancel" => client.cancel_in(&topic, &id).await.map(|o| {
            let gone = !matches!(o, ChangeOutcome::CancelRequested | ChangeOutcome::Running);
            (describe(o, &id, "was deleted"), gone)
        }),
        "delete" => delete_dead_letter(&post, &topic, &id).await,
        "delete-done" => delete_done(&post, &topic, &id).await,
        "retry" => client.retry_dead(&topic, &[&id]).await.map(|n| {
            let note = if n == 1 {
                format!("{id} runs again with fresh attempts.")
            } else {
                format!("{id} is not a dead letter (any more): nothing was retried.")
            };
            (note, false)
        }),
        "reschedule" => match reschedule(&post, &topic, &id).await {
            Ok(done) => done,
            Err(refused) => return *refused,
        },
        other => {
            let message = format!(
                "No action {other:?}: run, cancel, delete, retry, reschedule or delete-done."
            );
            return post.error(StatusCode::NOT_FOUND, &message);
        }
    };
    match done {
        Ok((note, gone)) => {
            tracing::info!(topic, id, action, "dq dashboard: {note}");
            let to = match (&step, gone, action.as_str()) {
                (Some(step), true, _) => workflow_page(&post.viewer, &step.workflow),
                (_, true, "delete") => format!("{}?state=dead", topic_page(&post.viewer, &topic)),
                (_, true, "delete-done") => {
                    format!("{}?state=done", topic_page(&post.viewer, &topic))
                }
                (_, true, _) => topic_page(&post.viewer, &topic),
                (_, false, _) => {
                    format!("{}/jobs/{}", topic_page(&post.viewer, &topic), seg(&id))
                }
            };
            post.back(&to, &note)
        }
        Err(e) => post.store_error(&format!("{action} job {id:?} of {topic:?}"), &e),
    }
}

/// Run now: a delayed job is made due now (BullMQ's `promote`). A ready job keeps its place in
/// line: made due again it would go to the back, behind every job queued before it.
async fn run_now(post: &Post, topic: &str, id: &str) -> dq_core::Result<String> {
    let client = &post.web.client;
    if let Some(job) = client.status_in(topic, id).await? {
        if job.state == JobState::Ready {
            return Ok(format!(
                "{id} is already ready: it runs in turn, after the jobs queued before it. Run now moves delayed jobs only; nothing was changed."
            ));
        }
    }
    // (A delayed job made ready by the mover between the two calls goes to the back of the
    // line here, as the mover had just put it: only jobs queued in that instant pass it.)
    client
        .reschedule_in(topic, id, Due::After(Duration::ZERO))
        .await
        .map(|o| describe(o, id, "is due now"))
}

/// A dead letter's Delete: only while it is one. An id pushed again since it died is a new
/// job, pending now, which a cancel would delete.
async fn delete_dead_letter(post: &Post, topic: &str, id: &str) -> dq_core::Result<Done> {
    let n = post.web.client.delete_dead(topic, &[id]).await?;
    Ok(if n == 1 {
        (format!("Dead letter {id} was deleted."), true)
    } else {
        let note = format!(
            "{id} is not a dead letter any more (it was pushed again, retried or deleted meanwhile): nothing was deleted."
        );
        (note, false)
    })
}

/// A done job's Delete: its record goes (a cancel removes it), only while it is one. An id
/// pushed again since it succeeded is a new job, pending now, which a cancel would delete.
async fn delete_done(post: &Post, topic: &str, id: &str) -> dq_core::Result<Done> {
    let client = &post.web.client;
    let Some(job) = client.status_in(topic, id).await? else {
        let note = format!(
            "{id} is gone already (its topic's retention ended its record, or it was deleted)."
        );
        return Ok((note, true));
    };
    if job.state == JobState::Done && client.cancel_in(topic, id).await? == ChangeOutcome::Done {
        return Ok((format!("The record of done job {id} was deleted."), true));
    }
    let note = format!(
        "{id} is not a done job any more (it was pushed again meanwhile): nothing was deleted."
    );
    Ok((note, false))
}

/// Reschedule to the form's time. The outer error is a refusal to show as it is (the store's
/// clock unread, a time that is no time or in the past); the inner result is the store's.
async fn reschedule(
    post: &Post,
    topic: &str,
    id: &str,
) -> Result<dq_core::Result<Done>, Box<Response>> {
    let client = &post.web.client;
    let now = match client.store_time().await {
        Ok(now) => now,
        Err(e) => return Err(Box::new(post.store_error("read the store's clock", &e))),
    };
    let when = when(&post.form, now)
        .map_err(|message| Box::new(post.error(StatusCode::BAD_REQUEST, &message)))?;
    Ok(client
        .reschedule_in(topic, id, when)
        .await
        .map(|o| (describe(o, id, "was rescheduled"), false)))
}

fn describe(outcome: ChangeOutcome, id: &str, done: &str) -> String {
    match outcome {
        ChangeOutcome::Done => format!("{id} {done}."),
        ChangeOutcome::Running => format!("{id} is running: it was left alone."),
        ChangeOutcome::CancelRequested => {
            format!("{id} is running: its worker was asked to stop it.")
        }
        ChangeOutcome::NotFound => format!("{id} is no longer pending: nothing was changed."),
        _ => format!("{id}: {outcome:?}."),
    }
}

/// How far before the store's clock a reschedule time may be: a time typed a few seconds ago
/// is "now"; one earlier than this is a mistake (a wrong year, a date written the other way).
const PAST_TOLERANCE: Duration = Duration::from_secs(60);

/// The reschedule form's time: `delay` (`10m`) or `at` (UTC), not more than a minute before
/// `now` (the store's clock).
fn when(form: &Form, now: SystemTime) -> Result<Due, String> {
    match (form.get("delay"), form.get("at")) {
        (Some(delay), None) => dq_core::parse_duration(delay)
            .map(Due::After)
            .map_err(|e| format!("{delay:?} is no delay: {e}")),
        (None, Some(at)) => {
            let t = parse_utc(at)?;
            if t + PAST_TOLERANCE < now {
                return Err(format!(
                    "{at} UTC is in the past (the store's clock says {} UTC): a time more than a minute ago is refused. To run the job at once, use Run now.",
                    utc(now)
                ));
            }
            Ok(Due::At(t))
        }
        _ => {
            Err("Give either a delay (10m, 2h) or a time (2026-11-24 18:00 UTC), not both.".into())
        }
    }
}
