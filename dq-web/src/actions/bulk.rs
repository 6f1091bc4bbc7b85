//! The selected jobs of a topic page, changed at once: run now, cancel, retry, delete.

use std::time::Duration;

use axum::extract::Path;
use axum::http::StatusCode;
use axum::response::Response;
use dq_core::{ChangeOutcome, Client, Due, JobState};

use super::post::Post;
use super::topic_page;

/// Most jobs one bulk action takes (a filtered page shows at most 500).
const MAX_BULK: usize = 1000;

/// What a bulk action did so far (a store error stops it part-way, and the page says how far
/// it got).
#[derive(Default)]
struct Tally {
    /// Jobs changed.
    changed: usize,
    /// Ready jobs a Run now left in their place.
    in_turn: usize,
}

pub(crate) async fn bulk(Path(topic): Path<String>, post: Post) -> Response {
    let to = post.return_to(topic_page(&post.viewer, &topic));
    let ids = post.form.all("id");
    if ids.is_empty() {
        return post.back(&to, "Nothing selected.");
    }
    if ids.len() > MAX_BULK {
        let message = format!(
            "{} jobs selected; one action takes at most {MAX_BULK}.",
            ids.len()
        );
        return post.error(StatusCode::BAD_REQUEST, &message);
    }
    let action = post.form.get("action").unwrap_or("");
    let Some(verb) = past_tense(action) else {
        let message = format!("No bulk action {action:?}: run, cancel, retry or delete.");
        return post.error(StatusCode::BAD_REQUEST, &message);
    };
    let mut tally = Tally::default();
    let applied = apply(&post.web.client, &topic, action, &ids, &mut tally).await;
    if let Err(e) = applied {
        // Some may have been changed: say how many before the error.
        let changed = tally.changed;
        let what =
            format!("{action} the selected jobs of {topic:?} ({changed} done before the error)");
        return post.store_error(&what, &e);
    }
    let changed = tally.changed;
    tracing::info!(topic, action, changed, "dq dashboard: bulk action");
    post.back(&to, &note(action, verb, ids.len(), &tally))
}

/// What the note says was done to the selected jobs: "retried", "made due now", ...
fn past_tense(action: &str) -> Option<&'static str> {
    match action {
        "retry" => Some("retried"),
        "run" => Some("made due now"),
        "cancel" => Some("cancelled"),
        "delete" => Some("deleted"),
        _ => None,
    }
}

/// Does `action` to the jobs `ids` of `topic`, counting in `tally` as it goes.
async fn apply(
    client: &Client,
    topic: &str,
    action: &str,
    ids: &[&str],
    tally: &mut Tally,
) -> dq_core::Result<()> {
    match action {
        "retry" => tally.changed = client.retry_dead(topic, ids).await?,
        // Dead letters only: an id pushed again since the page was shown is left alone.
        "delete" => tally.changed = client.delete_dead(topic, ids).await?,
        "run" => {
            for id in ids {
                match client.status_in(topic, id).await?.map(|j| j.state) {
                    Some(JobState::Ready) => tally.in_turn += 1,
                    Some(JobState::Delayed) => {
                        let now = Due::After(Duration::ZERO);
                        if client.reschedule_in(topic, id, now).await? == ChangeOutcome::Done {
                            tally.changed += 1;
                        }
                    }
                    _ => {}
                }
            }
        }
        "cancel" => {
            for id in ids {
                if client.cancel_in(topic, id).await? == ChangeOutcome::Done {
                    tally.changed += 1;
                }
            }
        }
        _ => {}
    }
    Ok(())
}

/// "2 of 3 selected jobs cancelled. 1 had already moved on (...)."
fn note(action: &str, verb: &str, selected: usize, tally: &Tally) -> String {
    let Tally { changed, in_turn } = *tally;
    let skipped = selected.saturating_sub(changed + in_turn);
    let mut note = format!("{changed} of {selected} selected jobs {verb}.");
    if in_turn > 0 {
        note.push_str(&format!(
            " {in_turn} were ready already and keep their place in line."
        ));
    }
    if skipped > 0 {
        let why = match action {
            "delete" | "retry" => "were no longer dead letters (pushed again, retried or deleted meanwhile) and were left alone",
            _ => "had already moved on (ran, started or were deleted)",
        };
        note.push_str(&format!(" {skipped} {why}."));
    }
    note
}
