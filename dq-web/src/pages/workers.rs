//! The workers heard from in the last minute.

use std::time::{Duration, SystemTime};

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Extension;
use maud::html;

use super::store_error;
use crate::clock::{relative, utc};
use crate::view::page;
use crate::{Shared, Viewer};

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
