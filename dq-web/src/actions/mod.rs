//! The actions: every one a POST with the CSRF token (and, when the browser sends one, an
//! `Origin` of the dashboard's own: `guard` checks it), refused in read-only mode, answered
//! with a redirect back to the page it came from and a note of what was done (kept by the
//! router; the redirect carries its key).
//!
//! The checks every action shares are the [`Post`](post::Post) extractor's: a handler gets
//! one only for a request that may act.

mod bulk;
mod job;
mod post;
mod schedule;
mod topic;
mod workflow;

pub(crate) use bulk::bulk;
pub(crate) use job::job;
pub(crate) use schedule::schedule;
pub(crate) use topic::{pause, purge_all_dead, resume, retry_all_dead};
pub(crate) use workflow::cancel_workflow;

use crate::view::seg;
use crate::Viewer;

/// The page of `topic`.
fn topic_page(viewer: &Viewer, topic: &str) -> String {
    format!("{}/topics/{}", viewer.base, seg(topic))
}
