//! The actions: every one a POST with the CSRF token (and, when the browser sends one, an
//! `Origin` of the dashboard's own: `guard` checks it), refused in read-only mode, answered
//! with a redirect back to the page it came from and a note of what was done (kept by the
//! router; the redirect carries its key).

use std::time::{Duration, SystemTime};

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use dq_core::{ChangeOutcome, JobState, Schedule};

use crate::pages::store_error;
use crate::view::{self, parse_utc, seg, utc};
use crate::{constant_time_eq, Shared, Viewer};

/// Most jobs one bulk action takes (a filtered page shows at most 500).
const MAX_BULK: usize = 1000;

/// A posted form's fields, in order (`id` may come many times).
struct Form(Vec<(String, String)>);

impl Form {
    fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, v)| k == key && !v.is_empty())
            .map(|(_, v)| v.as_str())
    }

    fn all(&self, key: &str) -> Vec<&str> {
        self.0
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

/// Checks that the request may act: not read-only, same-site, with the form's CSRF token.
fn admit(
    web: &Shared,
    viewer: &Viewer,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Form, Box<Response>> {
    if !viewer.can_act {
        return Err(Box::new(view::error(
            StatusCode::FORBIDDEN,
            Some(viewer),
            "This dashboard is read-only for you: actions are refused. Ask for full access, or use the dq command-line tool.",
        )));
    }
    let cross_site = headers
        .get("sec-fetch-site")
        .is_some_and(|v| v.as_bytes() == b"cross-site");
    let form = Form(
        form_urlencoded::parse(body)
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect(),
    );
    let token_ok = form
        .get("csrf")
        .is_some_and(|t| constant_time_eq(t.as_bytes(), web.csrf.as_bytes()));
    if cross_site || !token_ok {
        return Err(Box::new(view::error(
            StatusCode::FORBIDDEN,
            Some(viewer),
            "The action was refused: it did not come from a page of this dashboard (missing or stale CSRF token; after a restart of the dashboard, reload the page and try again).",
        )));
    }
    Ok(form)
}

/// A redirect (303) to `to` with a note of what was done: the note is kept by the router and
/// the URL carries only its key, so that no link can put text of its own on a page.
fn back(web: &Shared, to: &str, note: &str) -> Response {
    let mut url = to.to_owned();
    // One note only: drop the previous one (a `note` parameter, not "note=" inside a job id).
    if let Some(i) = url.rfind("?note=").or_else(|| url.rfind("&note=")) {
        url.truncate(i);
    }
    if let Some(key) = web.notes.put(note.to_owned()) {
        let separator = if url.contains('?') { '&' } else { '?' };
        url = format!("{url}{separator}note={key}");
    }
    (StatusCode::SEE_OTHER, [(header::LOCATION, url)]).into_response()
}

/// Where to go back to: the form's `return`, else the referring page, when either is a page of
/// this dashboard; else `fallback`.
fn return_to(viewer: &Viewer, form: &Form, headers: &HeaderMap, fallback: String) -> String {
    let referer = headers
        .get(header::REFERER)
        .and_then(|v| v.to_str().ok())
        .and_then(|r| {
            let after_scheme = r.split_once("://")?.1;
            Some(&after_scheme[after_scheme.find('/')?..])
        });
    // A path under the dashboard's base and nothing a browser could read as another host:
    // no `//` start, and no backslash, whitespace or control character anywhere (browsers
    // read `\` as `/` and drop tabs and newlines, so `/\evil.example` is `//evil.example`).
    let ours = |path: &&str| {
        if path
            .bytes()
            .any(|b| b == b'\\' || b.is_ascii_whitespace() || b.is_ascii_control())
        {
            return false;
        }
        let Some(rest) = path.strip_prefix(viewer.base.as_str()) else {
            return false;
        };
        !path.starts_with("//")
            && ((rest.starts_with('/') && !rest.starts_with("//"))
                || rest.starts_with('?')
                || (rest.is_empty() && !path.is_empty()))
    };
    form.get("return")
        .filter(ours)
        .or(referer.filter(ours))
        .map_or(fallback, str::to_owned)
}

/// [`admit`], then where to go back to afterwards ([`return_to`], else `fallback`).
fn admit_to(
    web: &Shared,
    viewer: &Viewer,
    headers: &HeaderMap,
    body: &Bytes,
    fallback: String,
) -> Result<(Form, String), Box<Response>> {
    let form = admit(web, viewer, headers, body)?;
    let to = return_to(viewer, &form, headers, fallback);
    Ok((form, to))
}

/// The page of `topic`.
fn topic_page(viewer: &Viewer, topic: &str) -> String {
    format!("{}/topics/{}", viewer.base, seg(topic))
}

pub(crate) async fn pause(
    State(web): State<Shared>,
    Extension(viewer): Extension<Viewer>,
    Path(topic): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    set_paused(web, viewer, topic, headers, body, true).await
}

pub(crate) async fn resume(
    State(web): State<Shared>,
    Extension(viewer): Extension<Viewer>,
    Path(topic): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    set_paused(web, viewer, topic, headers, body, false).await
}

async fn set_paused(
    web: Shared,
    viewer: Viewer,
    topic: String,
    headers: HeaderMap,
    body: Bytes,
    pause: bool,
) -> Response {
    let (_, to) = match admit_to(&web, &viewer, &headers, &body, topic_page(&viewer, &topic)) {
        Ok(admitted) => admitted,
        Err(refused) => return *refused,
    };
    let done = if pause {
        web.client.pause(&topic).await
    } else {
        web.client.resume(&topic).await
    };
    if let Err(e) = done {
        return store_error(&viewer, &format!("pause or resume {topic:?}"), &e);
    }
    let verb = if pause { "Paused" } else { "Resumed" };
    tracing::info!(topic, "dq dashboard: {} topic", verb.to_lowercase());
    back(&web, &to, &format!("{verb} {topic}."))
}

pub(crate) async fn job(
    State(web): State<Shared>,
    Extension(viewer): Extension<Viewer>,
    Path((topic, id, action)): Path<(String, String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let form = match admit(&web, &viewer, &headers, &body) {
        Ok(form) => form,
        Err(refused) => return *refused,
    };
    let client = &web.client;
    let page = format!("{}/topics/{}/jobs/{}", viewer.base, seg(&topic), seg(&id));
    // What was done, and whether the job is gone (then back to its topic, not its page).
    let done: dq_core::Result<(String, bool)> = match action.as_str() {
        "run" => run_now(&web, &topic, &id).await.map(|note| (note, false)),
        "cancel" => client
            .cancel_in(&topic, &id)
            .await
            .map(|o| (describe(o, &id, "was deleted"), true)),
        // A dead letter's Delete: only while it is one. An id pushed again since it died is a
        // new job, pending now, which a cancel would delete.
        "delete" => client.delete_dead(&topic, &[&id]).await.map(|n| {
            if n == 1 {
                (format!("Dead letter {id} was deleted."), true)
            } else {
                let note = format!(
                    "{id} is not a dead letter any more (it was pushed again, retried or deleted meanwhile): nothing was deleted."
                );
                (note, false)
            }
        }),
        "retry" => client.retry_dead(&topic, &[&id]).await.map(|n| {
            let note = if n == 1 {
                format!("{id} runs again with fresh attempts.")
            } else {
                format!("{id} is not a dead letter (any more): nothing was retried.")
            };
            (note, false)
        }),
        "reschedule" => {
            let now = match client.store_time().await {
                Ok(now) => now,
                Err(e) => return store_error(&viewer, "read the store's clock", &e),
            };
            let when = match when(&form, now) {
                Ok(when) => when,
                Err(message) => {
                    return view::error(StatusCode::BAD_REQUEST, Some(&viewer), &message)
                }
            };
            client
                .reschedule_in(&topic, &id, when)
                .await
                .map(|o| (describe(o, &id, "was rescheduled"), false))
        }
        other => {
            let message =
                format!("No action {other:?}: run, cancel, delete, retry or reschedule.");
            return view::error(StatusCode::NOT_FOUND, Some(&viewer), &message);
        }
    };
    match done {
        Ok((note, gone)) => {
            tracing::info!(topic, id, action, "dq dashboard: {note}");
            let to = match (gone, action.as_str()) {
                (true, "delete") => format!("{}?state=dead", topic_page(&viewer, &topic)),
                (true, _) => topic_page(&viewer, &topic),
                (false, _) => page,
            };
            back(&web, &to, &note)
        }
        Err(e) => store_error(&viewer, &format!("{action} job {id:?} of {topic:?}"), &e),
    }
}

/// Run now: a delayed job is made due now (BullMQ's `promote`). A ready job keeps its place in
/// line: made due again it would go to the back, behind every job queued before it.
async fn run_now(web: &Shared, topic: &str, id: &str) -> dq_core::Result<String> {
    let client = &web.client;
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
        .reschedule_in(topic, id, Schedule::After(Duration::ZERO))
        .await
        .map(|o| describe(o, id, "is due now"))
}

/// "1 dead letter", "3 dead letters".
fn dead_letters(n: usize) -> String {
    format!("{n} dead letter{}", if n == 1 { "" } else { "s" })
}

fn describe(outcome: ChangeOutcome, id: &str, done: &str) -> String {
    match outcome {
        ChangeOutcome::Done => format!("{id} {done}."),
        ChangeOutcome::Running => format!("{id} is running: it was left alone."),
        ChangeOutcome::NotFound => format!("{id} is no longer pending: nothing was changed."),
        _ => format!("{id}: {outcome:?}."),
    }
}

/// How far before the store's clock a reschedule time may be: a time typed a few seconds ago
/// is "now"; one earlier than this is a mistake (a wrong year, a date written the other way).
const PAST_TOLERANCE: Duration = Duration::from_secs(60);

/// The reschedule form's time: `delay` (`10m`) or `at` (UTC), not more than a minute before
/// `now` (the store's clock).
fn when(form: &Form, now: SystemTime) -> Result<Schedule, String> {
    match (form.get("delay"), form.get("at")) {
        (Some(delay), None) => dq_core::parse_duration(delay)
            .map(Schedule::After)
            .map_err(|e| format!("{delay:?} is no delay: {e}")),
        (None, Some(at)) => {
            let t = parse_utc(at)?;
            if t + PAST_TOLERANCE < now {
                return Err(format!(
                    "{at} UTC is in the past (the store's clock says {} UTC): a time more than a minute ago is refused. To run the job at once, use Run now.",
                    utc(now)
                ));
            }
            Ok(Schedule::At(t))
        }
        _ => {
            Err("Give either a delay (10m, 2h) or a time (2026-11-24 18:00 UTC), not both.".into())
        }
    }
}

pub(crate) async fn bulk(
    State(web): State<Shared>,
    Extension(viewer): Extension<Viewer>,
    Path(topic): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (form, to) = match admit_to(&web, &viewer, &headers, &body, topic_page(&viewer, &topic)) {
        Ok(admitted) => admitted,
        Err(refused) => return *refused,
    };
    let ids = form.all("id");
    if ids.is_empty() {
        return back(&web, &to, "Nothing selected.");
    }
    if ids.len() > MAX_BULK {
        let message = format!(
            "{} jobs selected; one action takes at most {MAX_BULK}.",
            ids.len()
        );
        return view::error(StatusCode::BAD_REQUEST, Some(&viewer), &message);
    }
    let client = &web.client;
    let action = form.get("action").unwrap_or("");
    let mut changed = 0;
    // Ready jobs a bulk Run now left in their place.
    let mut in_turn = 0;
    let result: dq_core::Result<()> = async {
        match action {
            "retry" => changed = client.retry_dead(&topic, &ids).await?,
            // Dead letters only: an id pushed again since the page was shown is left alone.
            "delete" => changed = client.delete_dead(&topic, &ids).await?,
            "run" => {
                for id in &ids {
                    match client.status_in(&topic, id).await?.map(|j| j.state) {
                        Some(JobState::Ready) => in_turn += 1,
                        Some(JobState::Delayed) => {
                            let now = Schedule::After(Duration::ZERO);
                            if client.reschedule_in(&topic, id, now).await? == ChangeOutcome::Done {
                                changed += 1;
                            }
                        }
                        _ => {}
                    }
                }
            }
            "cancel" => {
                for id in &ids {
                    if client.cancel_in(&topic, id).await? == ChangeOutcome::Done {
                        changed += 1;
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }
    .await;
    if let Err(e) = result {
        // Some may have been changed: say how many before the error.
        let what =
            format!("{action} the selected jobs of {topic:?} ({changed} done before the error)");
        return store_error(&viewer, &what, &e);
    }
    let verb = match action {
        "retry" => "retried",
        "run" => "made due now",
        "cancel" => "cancelled",
        "delete" => "deleted",
        other => {
            let message = format!("No bulk action {other:?}: run, cancel, retry or delete.");
            return view::error(StatusCode::BAD_REQUEST, Some(&viewer), &message);
        }
    };
    tracing::info!(topic, action, changed, "dq dashboard: bulk action");
    let skipped = ids.len().saturating_sub(changed + in_turn);
    let mut note = format!("{changed} of {} selected jobs {verb}.", ids.len());
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
    back(&web, &to, &note)
}

pub(crate) async fn retry_all_dead(
    State(web): State<Shared>,
    Extension(viewer): Extension<Viewer>,
    Path(topic): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (_, to) = match admit_to(&web, &viewer, &headers, &body, topic_page(&viewer, &topic)) {
        Ok(admitted) => admitted,
        Err(refused) => return *refused,
    };
    match web.client.retry_dead(&topic, &[]).await {
        Ok(n) => {
            tracing::info!(topic, n, "dq dashboard: retried every dead letter");
            back(&web, &to, &format!("{} run again.", dead_letters(n)))
        }
        Err(e) => store_error(&viewer, &format!("retry the dead letters of {topic:?}"), &e),
    }
}

pub(crate) async fn purge_all_dead(
    State(web): State<Shared>,
    Extension(viewer): Extension<Viewer>,
    Path(topic): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (_, to) = match admit_to(&web, &viewer, &headers, &body, topic_page(&viewer, &topic)) {
        Ok(admitted) => admitted,
        Err(refused) => return *refused,
    };
    match web.client.purge_dead(&topic, Duration::ZERO).await {
        Ok(n) => {
            tracing::info!(topic, n, "dq dashboard: deleted every dead letter");
            back(&web, &to, &format!("{} deleted.", dead_letters(n)))
        }
        Err(e) => store_error(
            &viewer,
            &format!("delete the dead letters of {topic:?}"),
            &e,
        ),
    }
}

pub(crate) async fn schedule(
    State(web): State<Shared>,
    Extension(viewer): Extension<Viewer>,
    Path((id, action)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(refused) = admit(&web, &viewer, &headers, &body) {
        return *refused;
    }
    let client = &web.client;
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
            return view::error(StatusCode::NOT_FOUND, Some(&viewer), &message);
        }
    };
    match done {
        Ok(Some(note)) => {
            tracing::info!(schedule = id, action, "dq dashboard: {note}");
            back(&web, &format!("{}/schedules", viewer.base), &note)
        }
        Ok(None) => view::error(
            StatusCode::NOT_FOUND,
            Some(&viewer),
            &format!("No schedule {id:?}."),
        ),
        Err(e) => store_error(&viewer, &format!("{action} schedule {id:?}"), &e),
    }
}
