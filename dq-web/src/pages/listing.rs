//! What the topic page shows, and the listing its query string asks for.

use std::time::SystemTime;

use dq_core::{Cursor, JobInfo, JobState, Throughput, TopicStats};

use super::Query;
use crate::clock::parse_utc;
use crate::Viewer;

/// What a topic page lists: a state, a cursor and the filters.
pub(super) struct Listing {
    pub(super) state: JobState,
    pub(super) at: Cursor,
    id_prefix: Option<String>,
    due_after: Option<SystemTime>,
    due_before: Option<SystemTime>,
    error: Option<String>,
}

impl Listing {
    /// The listing the query string asks for (`state`, `cursor`, `id`, `due_after`,
    /// `due_before`, `error`); the error says which time is no time, or that blocked jobs are
    /// not listed with a topic's.
    pub(super) fn from_query(q: &Query, default_state: JobState) -> Result<Listing, String> {
        let time_filter = |key: &str| q.get(key).map(|t| parse_utc(t));
        let (due_after, due_before) = match (time_filter("due_after"), time_filter("due_before")) {
            (Some(Err(message)), _) | (_, Some(Err(message))) => return Err(message),
            (a, b) => (a.and_then(Result::ok), b.and_then(Result::ok)),
        };
        let state = q
            .get("state")
            .and_then(|s| s.parse().ok())
            .unwrap_or(default_state);
        if state == JobState::Blocked {
            return Err(
                "Blocked jobs are steps of workflows waiting for the steps they come \
                 after: their jobs are not pushed yet, so a topic does not list them. Their \
                 workflow's page shows them (/workflows/<id>), and so does each one's job page."
                    .to_owned(),
            );
        }
        Ok(Listing {
            state,
            at: q
                .get("cursor")
                .and_then(|c| c.parse().ok())
                .unwrap_or(Cursor::START),
            id_prefix: q.get("id").cloned(),
            due_after,
            due_before,
            error: q.get("error").cloned(),
        })
    }

    pub(super) fn filtered(&self) -> bool {
        self.id_prefix.is_some()
            || self.due_after.is_some()
            || self.due_before.is_some()
            || self.error.is_some()
    }

    pub(super) fn matches(&self, job: &JobInfo) -> bool {
        self.id_prefix
            .as_ref()
            .is_none_or(|p| job.id.as_str().starts_with(p.as_str()))
            && self.due_after.is_none_or(|t| job.due >= t)
            && self.due_before.is_none_or(|t| job.due < t)
            && self.error.as_ref().is_none_or(|text| {
                // The last error or any kept run's error.
                let text = text.to_lowercase();
                let has = |e: &str| e.to_lowercase().contains(&text);
                job.last_error.as_deref().is_some_and(has)
                    || job.errors.iter().any(|e| has(&e.error))
            })
    }
}

/// What the topic page shows.
pub(super) struct TopicView<'a> {
    pub(super) topic: &'a str,
    /// The topic page's address (`/dq/topics/order-cancel`).
    pub(super) link: String,
    /// This very page, query string and all: where the bulk form goes back to.
    pub(super) here: String,
    pub(super) viewer: &'a Viewer,
    /// The CSRF token the forms carry.
    pub(super) csrf: &'a str,
    /// Its counts, lag and limits (`max_pending`, `rate`).
    pub(super) stats: &'a TopicStats,
    /// Its runs done and failed in each of the last 60 minutes.
    pub(super) hour: &'a Throughput,
    /// The store's clock.
    pub(super) now: SystemTime,
    pub(super) listing: Listing,
    /// The query string, to show the filters as they were typed.
    pub(super) query: &'a Query,
    /// How many jobs were looked at (a page, or a filter's window).
    pub(super) looked_at: usize,
    /// The jobs looked at that match the filters.
    pub(super) jobs: Vec<&'a JobInfo>,
    /// The next page's address, when there is one.
    pub(super) next: Option<String>,
}
