//! The topic page's markup, part by part: the summary, the last hour's chart, the state tabs,
//! the filters, the dead-letter actions, the jobs (in the bulk form when the viewer may act)
//! and the pager.
//! The done tab lists the succeeded jobs a topic keeps, with their results; no bulk action
//! applies to them.

use dq_core::{Cursor, JobInfo, JobState, Throughput};
use maud::{html, Markup};

use super::lag;
use super::listing::TopicView;
use crate::chart::{hour_chart, Scope};
use crate::clock::{relative, utc};
use crate::view::{button, clip, confirm_button, pause_or_resume, result_line, seg, state_name};

/// The topic page's body.
pub(super) fn topic_body(v: &TopicView<'_>) -> Markup {
    html! {
        h1 { "Topic " code { (v.topic) } }
        (summary(v))
        figure.hour {
            (hour_chart(v.hour, Scope::Topic))
            figcaption.hint { "Runs done and failed per minute over the last hour." }
        }
        (busiest_groups(v))
        (tabs(v))
        (filters(v))
        (dead_letter_actions(v))
        @if v.viewer.can_act {
            form #jobs method="post" action={ (v.link) "/bulk" } {
                input type="hidden" name="csrf" value=(v.csrf);
                input type="hidden" name="return" value=(v.here);
                (jobs_table(v))
            }
        } @else {
            (jobs_table(v))
        }
        (pager(v))
    }
}

/// Paused or not, the lag and the next due time, and Pause or Resume.
fn summary(v: &TopicView<'_>) -> Markup {
    let (stats, now) = (v.stats, v.now);
    html! {
        div.summary {
            @if stats.paused { span.badge.paused { "paused" } " " }
            "Lag " strong { (lag(stats, now)) } " · next due "
            strong { @if let Some(t) = stats.next_due { (relative(t, now)) } @else { "-" } }
            @if let Some(max) = stats.max_pending {
                @let c = stats.counts;
                @let pending = c.delayed + c.ready + c.running;
                " · pending " span.max-pending data-max=(max) {
                    strong { (pending) } " of at most " (max)
                    " (" (pending.saturating_mul(100) / max.max(1)) " %)"
                }
                @if pending >= max { " " span.badge.full { "full: pushes refused" } }
            }
            @if let Some(max) = stats.global_concurrency {
                " · running " span.global-concurrency title="jobs running at once, in all worker processes together" {
                    strong { (stats.counts.running) } " of at most " (max)
                }
            }
            @if let Some(end) = stats.held_until {
                " " span.badge.held title="a handler met its provider's rate limit (Outcome::RateLimited): no job of the topic starts before the hold ends" {
                    "held: starts again " (relative(end, now))
                }
            }
            @if let Some(rate) = stats.rate {
                " · rate " span.rate title="jobs started per period, in all worker processes together" {
                    strong { (rate) } " (one every " (format!("{:?}", rate.interval())) ")"
                }
                @if let (Some(used), Some(k)) = (v.hour.rate_used(rate), Throughput::rate_window(rate)) {
                    " " span.rate-used title="the runs that ended done or failed in the last full minutes against the starts the rate allows in them" {
                        (format!("{:.0}", used * 100.0)) " % used over the last "
                        @if k == 1 { "minute" } @else { (k) " minutes" }
                        " (" (v.hour.runs_in_last_minutes(k)) " runs)"
                    }
                }
            }
            @if v.viewer.can_act {
                " "
                (pause_or_resume(&v.link, stats.paused, v.csrf))
            }
        }
    }
}

/// The groups with the most jobs waiting for a slot (README "Groups"), when any job waits for
/// one: how many wait, how many slots each holds, and the topic's group concurrency and group
/// rate.
fn busiest_groups(v: &TopicView<'_>) -> Markup {
    let stats = v.stats;
    html! {
        @if !stats.busiest_groups.is_empty() {
            section.groups {
                h2 { "Busiest groups" }
                p.hint {
                    "Jobs waiting for a slot of their group (counted as ready); at most "
                    strong.group-concurrency { (stats.group_concurrency.unwrap_or(1)) }
                    " of one group's jobs run at once"
                    @if let Some(rate) = stats.group_rate {
                        ", and each group starts at most "
                        strong.group-rate title="jobs of one group started per period, in all worker processes together" {
                            (rate)
                        }
                        " (one every " (format!("{:?}", rate.interval())) ")"
                    }
                    "."
                }
                table {
                    tr { th { "Group" } th { "Waiting" } th { "Holding" } }
                    @for g in &stats.busiest_groups {
                        tr data-group=(g.group) {
                            td { code { (g.group) } }
                            td.num { (g.waiting) }
                            td.num { (g.holding) }
                        }
                    }
                }
            }
        } @else if let Some(rate) = stats.group_rate {
            // No job waits for a slot: the group rate is still worth seeing (a job it holds
            // back is delayed, not waiting).
            section.groups {
                p.hint {
                    "Each group starts at most "
                    strong.group-rate title="jobs of one group started per period, in all worker processes together" {
                        (rate)
                    }
                    " (one every " (format!("{:?}", rate.interval()))
                    "); the jobs it holds back wait as delayed jobs."
                }
            }
        }
    }
}

/// One tab per state, with its count (done: the records of succeeded jobs the topic keeps);
/// the listed state's is the current one.
fn tabs(v: &TopicView<'_>) -> Markup {
    let c = v.stats.counts;
    let tab = |s: JobState, n: u64| {
        html! {
            a.tab.current[s == v.listing.state] href={ (v.link) "?state=" (s.as_str()) } data-state=(s.as_str()) {
                (state_name(s)) " " span.count { (n) }
            }
        }
    };
    html! {
        nav.tabs {
            (tab(JobState::Delayed, c.delayed)) (tab(JobState::Ready, c.ready))
            (tab(JobState::Running, c.running)) (tab(JobState::Dead, c.dead))
            (tab(JobState::Done, c.done))
        }
    }
}

/// The filters, as typed (times in UTC), and Clear when any is set.
fn filters(v: &TopicView<'_>) -> Markup {
    let (q, state) = (v.query, v.listing.state);
    html! {
        form.filters method="get" action=(v.link) {
            input type="hidden" name="state" value=(state.as_str());
            label { "Id starts with " input type="text" name="id" value=[q.get("id")]; }
            label { "Due from " input type="text" name="due_after" placeholder="2026-11-24 09:00" value=[q.get("due_after")]; }
            label { "to " input type="text" name="due_before" placeholder="2026-11-24 18:00" value=[q.get("due_before")]; }
            label { "Error contains " input type="text" name="error" value=[q.get("error")]; }
            button type="submit" { "Filter" }
            @if v.listing.filtered() { " " a href={ (v.link) "?state=" (state.as_str()) } { "Clear" } }
            span.hint { " Times in UTC." }
        }
    }
}

/// On the dead letters' tab: retry them all, or delete them all (asking first).
fn dead_letter_actions(v: &TopicView<'_>) -> Markup {
    let (link, dead) = (&v.link, v.stats.counts.dead);
    html! {
        @if v.listing.state == JobState::Dead && v.viewer.can_act && dead > 0 {
            div.actions {
                (button(&format!("{link}/dead/retry"), v.csrf, "Retry every dead letter", ""))
                " "
                (confirm_button(
                    &format!("{link}/dead/purge"),
                    v.csrf,
                    "Delete every dead letter",
                    &format!("Delete all {dead} dead letters of {}? This cannot be undone.", v.topic),
                ))
            }
        }
    }
}

/// Whether the jobs of the listed state can be selected: running ones cannot be changed, and
/// no bulk action applies to done ones.
fn selectable(v: &TopicView<'_>) -> bool {
    v.viewer.can_act && !matches!(v.listing.state, JobState::Running | JobState::Done)
}

/// The jobs looked at that match, then the actions on the selected ones.
fn jobs_table(v: &TopicView<'_>) -> Markup {
    let state = v.listing.state;
    html! {
        table.jobs {
            thead { tr {
                @if selectable(v) {
                    th { input type="checkbox" data-select-all title="Select all on this page"; }
                }
                th { "Id" } th { "Due" } th.num { "Attempts" }
                @match state {
                    JobState::Running => { th { "Lease until" } }
                    JobState::Dead => { th { "Died" } }
                    JobState::Done => { th { "Succeeded" } }
                    _ => {}
                }
                th { "Errors" } th { "Payload" }
                @if state == JobState::Done { th { "Result" } }
            } }
            tbody {
                @for job in &v.jobs {
                    (job_row(v, job))
                }
                @if v.jobs.is_empty() {
                    tr { td colspan="7" { (nothing_listed(v)) } }
                }
            }
        }
        @if v.viewer.can_act && !v.jobs.is_empty() && state != JobState::Done {
            (bulk_buttons(state))
        }
    }
}

/// What an empty listing says: that the filters match nothing, or that there is no job in
/// the state (for done, that a topic keeps them only with a retention).
fn nothing_listed(v: &TopicView<'_>) -> Markup {
    let state = v.listing.state;
    html! {
        @if v.listing.filtered() { "No job on this page matches the filters." }
        @else if state == JobState::Done {
            "No done jobs kept. A topic keeps its succeeded jobs and their results only when its listener has a retention: "
            code { "#[dq::listener(retain = \"1h\")]" } "."
        }
        @else { "No " (state.as_str()) " jobs." }
    }
}

/// One job's row: its id (a link to its page), due time, attempts, lease, death or success,
/// errors and payload, clipped, and a done job's result, clipped.
fn job_row(v: &TopicView<'_>, job: &JobInfo) -> Markup {
    let (state, now) = (v.listing.state, v.now);
    html! {
        tr data-id=(job.id.as_str()) {
            @if selectable(v) {
                td { input type="checkbox" name="id" value=(job.id.as_str()); }
            }
            td {
                a href={ (v.link) "/jobs/" (seg(job.id.as_str())) } { code { (job.id.as_str()) } }
                @if job.priority != 0 {
                    " " span.badge.priority title="its priority: higher runs first, 0 is the default" { "priority " (job.priority) }
                }
                @if let Some(group) = &job.group {
                    " " span.badge.group title="its group: at most the topic's group concurrency of one group's jobs run at once" { "group " (group) }
                }
            }
            td title=(utc(job.due)) { (relative(job.due, now)) }
            td.num { (job.attempt) " / " (job.max_attempts) }
            @match (state, job.state_since_or_until) {
                (JobState::Running | JobState::Dead | JobState::Done, Some(t)) => { td title=(utc(t)) { (relative(t, now)) } }
                (JobState::Running | JobState::Dead | JobState::Done, None) => { td { "-" } }
                _ => {}
            }
            td.error { (errors_cell(job)) }
            td.payload { code { (clip(&String::from_utf8_lossy(&job.payload), 60)) } }
            @if state == JobState::Done {
                @if let Some(result) = &job.result {
                    td.payload.result { code { (clip(&result_line(result), 60)) } }
                } @else {
                    td.result.hint { "no value" }
                }
            }
        }
    }
}

/// A row's errors: the last, clipped; when more than one run failed, each kept run's error
/// below it (oldest first, clipped, longer on hover, folded: "3 failed runs", or "last 10
/// failed runs" once the job keeps no more), so that a topic's dead and done jobs show every
/// attempt's error without opening each job (whose page has them whole).
fn errors_cell(job: &JobInfo) -> Markup {
    html! {
        (clip(job.last_error.as_deref().unwrap_or(""), 80))
        @if job.errors.len() > 1 {
            details.runs {
                summary {
                    @if job.errors.len() >= dq_core::RUN_ERRORS_KEPT { "last " }
                    (job.errors.len()) " failed runs"
                }
                ol {
                    @for e in &job.errors {
                        li data-run=(e.run) title=(clip(&e.error, 300)) { "run " (e.run) ": " (clip(&e.error, 80)) }
                    }
                }
            }
        }
    }
}

/// What can be done to the selected jobs of `state`.
fn bulk_buttons(state: JobState) -> Markup {
    html! {
        div.actions {
            "Selected: "
            @match state {
                JobState::Delayed => {
                    button type="submit" name="action" value="run" { "Run now" } " "
                    button.danger type="submit" name="action" value="cancel" { "Cancel" }
                }
                JobState::Ready => {
                    button.danger type="submit" name="action" value="cancel" { "Cancel" }
                    span.hint { " Ready jobs run in turn, in the order they became ready." }
                }
                JobState::Dead => {
                    button type="submit" name="action" value="retry" { "Retry" } " "
                    button.danger type="submit" name="action" value="delete" { "Delete" }
                }
                _ => { "to cancel a running job, open its page: its worker is asked to stop it" }
            }
        }
    }
}

/// How many jobs a filter looked at, the first page and the next one.
fn pager(v: &TopicView<'_>) -> Markup {
    html! {
        p.pager {
            @if v.listing.filtered() {
                "Looked at " (v.looked_at) " jobs, " (v.jobs.len()) " match. "
            }
            @if v.listing.at != Cursor::START {
                a href={ (v.link) "?state=" (v.listing.state.as_str()) } { "First page" } " "
            }
            @if let Some(next) = &v.next { a.next href=(next) { "Next page →" } }
        }
    }
}
