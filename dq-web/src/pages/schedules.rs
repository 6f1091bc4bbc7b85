//! The schedules: how each repeats, its next and last tick, and its actions.

use std::time::{Duration, SystemTime};

use axum::extract::State;
use axum::http::Uri;
use axum::response::Response;
use axum::Extension;
use dq_core::schedule::ScheduleInfo;
use maud::{html, Markup};

use super::{query, store_error, with_note};
use crate::clock::{relative, utc};
use crate::view::{button, confirm_button, pause_or_resume, seg};
use crate::{Shared, Viewer};

pub(crate) async fn schedules(
    State(web): State<Shared>,
    Extension(viewer): Extension<Viewer>,
    uri: Uri,
) -> Response {
    let q = query(&uri);
    let client = &web.client;
    let (all, now) = match tokio::try_join!(client.schedules(), client.store_time()) {
        Ok(found) => found,
        Err(e) => return store_error(&viewer, "read the schedules", &e),
    };
    let base = &viewer.base;
    let body = html! {
        h1 { "Schedules" }
        table.schedules {
            thead { tr {
                th { "Schedule" } th { "Repeats" } th { "Topic" } th { "Next tick" }
                th { "Last tick" } th { "Missed ticks" } th { "State" }
            } }
            tbody {
                @for s in &all {
                    tr data-schedule=(s.id) {
                        td { code { (s.id) } }
                        td { (s.spec.repeat.describe()) }
                        td {
                            a href={ (base) "/topics/" (s.spec.topic) } { (s.spec.topic) }
                            @if let Some(g) = &s.spec.group { " group " code { (g) } }
                        }
                        td { (tick(s.next, now)) }
                        td { (tick(s.last, now)) }
                        td { (format!("{:?}", s.spec.missed)) }
                        td { (state(s, &viewer, &web.csrf)) }
                    }
                }
                @if all.is_empty() {
                    tr { td colspan="7" { "No schedules: declare one with client.schedule(id)…upsert()." } }
                }
            }
        }
        p.hint { "Each tick is one job, created a few seconds ahead and due at the tick. Times by the store's clock." }
    };
    with_note(&web, &viewer, &q, "Schedules", Duration::ZERO, body)
}

/// A tick's time relative to the store's clock, UTC on hover; `-` for none.
fn tick(at: Option<SystemTime>, now: SystemTime) -> Markup {
    html! {
        @if let Some(t) = at { span title=(utc(t)) { (relative(t, now)) } } @else { "-" }
    }
}

/// Paused or ticking, and the schedule's actions when the viewer may act.
fn state(s: &ScheduleInfo, viewer: &Viewer, csrf: &str) -> Markup {
    let link = format!("{}/schedules/{}", viewer.base, seg(&s.id));
    html! {
        @if s.next.is_none() { span.badge.paused { "paused" } } @else { "ticking" }
        @if viewer.can_act {
            " "
            (pause_or_resume(&link, s.next.is_none(), csrf))
            " "
            (button(&format!("{link}/run"), csrf, "Run now", "small"))
            " "
            (confirm_button(
                &format!("{link}/remove"),
                csrf,
                "Remove",
                &format!("Remove schedule {}? Its coming ticks' jobs are cancelled; jobs it made before stay.", s.id),
            ))
        }
    }
}
