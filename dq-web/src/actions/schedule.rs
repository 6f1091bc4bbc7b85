//! A schedule's actions: pause, resume, run now, remove.

use axum::extract::Path;
use axum::http::StatusCode;
use axum::response::Response;

use super::post::Post;

pub(crate) async fn schedule(Path((id, action)): Path<(String, String)>, post: Post) -> Response {
    let client = &post.web.client;
    // The note of what was done, `None` when there is no such schedule.
    let done = match action.as_str() {
        "pause" => client
            .pause_schedule(&id)
            .await
            .map(|found| found.then(|| format!("{id} paused."))),
        "resume" => client
            .resume_schedule(&id)
            .await
            .map(|found| found.then(|| format!("{id} resumed."))),
        "run" => client
            .run_schedule_now(&id)
            .await
            .map(|pushed| pushed.map(|p| format!("{id}: job {} created.", p.id))),
        // As `dq schedules remove`: the jobs of its coming ticks go too.
        "remove" => client.unschedule(&id).await.map(|found| {
            found.then(|| {
                format!("{id} removed: the jobs of its coming ticks were cancelled; jobs of ticks that came stay.")
            })
        }),
        other => {
            let message = format!("No schedule action {other:?}: pause, resume, run or remove.");
            return post.error(StatusCode::NOT_FOUND, &message);
        }
    };
    match done {
        Ok(Some(note)) => {
            tracing::info!(schedule = id, action, "dq dashboard: {note}");
            post.back(&format!("{}/schedules", post.viewer.base), &note)
        }
        Ok(None) => post.error(StatusCode::NOT_FOUND, &format!("No schedule {id:?}.")),
        Err(e) => post.store_error(&format!("{action} schedule {id:?}"), &e),
    }
}
