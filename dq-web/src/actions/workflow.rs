//! A workflow's action: cancel it.

use axum::extract::Path;
use axum::http::StatusCode;
use axum::response::Response;

use super::post::Post;
use crate::view::workflow_page;

/// Cancels workflow `id` (`Client::cancel_workflow`): its blocked steps and the jobs of its
/// waiting ones are cancelled, its running ones asked to stop, and no step starts after this.
pub(crate) async fn cancel_workflow(Path(id): Path<String>, post: Post) -> Response {
    match post.web.client.cancel_workflow(&id).await {
        Ok(Some(n)) => {
            tracing::info!(workflow = id, n, "dq dashboard: cancelled a workflow");
            let note = if n == 0 {
                format!("Workflow {id}: every step had ended already; nothing was cancelled.")
            } else {
                format!(
                    "Workflow {id} cancelled: {n} step{} cancelled or asked to stop; no step \
                     starts any more.",
                    if n == 1 { "" } else { "s" }
                )
            };
            post.back(&workflow_page(&post.viewer, &id), &note)
        }
        Ok(None) => {
            let message = format!(
                "No workflow {id:?}: it was never pushed, or it ended longer ago than it is \
                 kept. Nothing was cancelled."
            );
            post.error(StatusCode::NOT_FOUND, &message)
        }
        Err(e) => post.store_error(&format!("cancel workflow {id:?}"), &e),
    }
}
