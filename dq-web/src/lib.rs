//! dq's web dashboard: every topic and job in a browser, live, with the actions an on-call
//! person needs (pause, run now, reschedule, cancel, retry from dead, purge).
//!
//! [`router`] is an axum [`Router`] to mount under any path prefix of an application's own web
//! server; `dq web --listen 127.0.0.1:8080` serves it on its own. Pages are rendered on the
//! server; the stylesheet and a small script (live numbers, select-all) are compiled into the
//! binary, so nothing is loaded from the internet and there is no build step.
//!
//! ```no_run
//! # async fn demo(client: dq_core::Client) -> std::io::Result<()> {
//! use dq_web::{Access, Options};
//!
//! let dashboard = dq_web::router(
//!     client.clone(),
//!     Options::new().authorize(|request| {
//!         // Your own auth: a session cookie, a header set by your proxy, ...
//!         match request.headers.get("x-user-role").map(|v| v.as_bytes()) {
//!             Some(b"admin") => Access::Full,
//!             Some(b"viewer") => Access::ReadOnly,
//!             _ => Access::Denied,
//!         }
//!     }),
//! );
//! let app = axum::Router::new().nest("/dq", dashboard);
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! axum::serve(listener, app).await
//! # }
//! ```
//!
//! # What the pages show
//!
//! - The **overview** charts the last hour of every topic summed (runs done and failed per
//!   minute, with a time axis, the peak minutes labelled and a legend), then lists each topic
//!   with its counts (the done jobs it keeps among them, linking to its done tab), lag, next due
//!   time and a sparkline of its hour. A **topic's page** has the same larger chart for the
//!   topic, and a tab per state with its count. Charts are inline SVG drawn from numbers only,
//!   without a script.
//! - The **search** box in every page's header finds a job by id in every topic (the first
//!   200, as the overview lists them): `GET <base>/search?id=<id>` looks the id up in all of
//!   them at once, and as a workflow's id. One match goes straight to its job's page (a `303`:
//!   the job is what was asked for), a workflow with the id and no job to its workflow's page;
//!   several are listed with their topic and state, each linked; none says so.
//! - A **job's page** shows its state, which attempt of how many it is on (or was on: the one
//!   that succeeded, the one that dead-lettered it), its times, its payload, a running job's
//!   latest progress and a done job's result. Its last error says which run it came from, and
//!   a table lists each failed run's error the job keeps (its latest ten, each its first KiB,
//!   oldest first; its events, when its topic has them on, show them again in its history). A
//!   topic's tabs show each row's last error and, when more than one run failed, every kept
//!   run's error folded under it; the error filter matches any of them. A step of
//!   a workflow says so, linking to its workflow's page; a blocked one (a step waiting for the
//!   steps it comes after) says what it waits for.
//! - A **workflow's page** (`<base>/workflows/<id>`) shows its state, when it was pushed and
//!   ended, and its graph as inline SVG: its steps in layers from left to right (a step's
//!   layer is one more than the deepest step it comes after), each a box with its name, topic
//!   and state (for a pending step, its job's: delayed, ready or running) and its value or
//!   error, clipped, linking to its job's page while the job is kept, and an arrow from each
//!   step it comes after, marked with the policy when it is not the default (`cancel`). A table
//!   below lists each step's job, state, dependencies and error or value (clipped as a topic's
//!   listing clips them, whole on hover). Each step's job is read with one status call (a
//!   workflow has at most 1000 steps).
//!
//! # Safety
//!
//! - Every action is a `POST` carrying a CSRF token (random per router, compared in constant
//!   time); a cross-site `POST` is refused whatever it carries.
//! - A `POST` whose `Origin` header names another site is refused with `403`, token or not.
//!   The dashboard's own origin is the host and port the request was addressed to (its `Host`
//!   header: the scheme is not compared, as TLS usually ends at a proxy in front), or one of
//!   [`Options::allowed_hosts`] (for a proxy that passes another `Host` on). `Origin: null` is
//!   refused; a request without `Origin` (curl, scripts) is judged by the token alone.
//! - The dashboard answers only requests addressed to one of its names, against DNS rebinding
//!   (a page of another site whose name is pointed at 127.0.0.1 would otherwise read and act on
//!   a dashboard without a token): by default `localhost` (and `*.localhost`) and any IP
//!   address, on any port; an IP address cannot be rebound, so the address the dashboard is
//!   bound to and every loopback address are in. Other names answer `421 Misdirected Request`
//!   until [`Options::allowed_hosts`] (`dq web --allowed-host`) lists them.
//! - The note a page shows after an action ("o1 was deleted.") is kept by the router and the
//!   redirect carries only a random key to it (`?note=<key>`, the last 256 notes are kept): a
//!   link made elsewhere cannot put text of its own on a page.
//! - [`Options::read_only`] hides every action and refuses them with `403`.
//! - [`Options::authorize`] decides, per request, between [`Access::Full`],
//!   [`Access::ReadOnly`] and [`Access::Denied`]; [`Options::token`] asks for a bearer token
//!   (or HTTP Basic with the token as password, so a browser can log in).
//! - Payloads, results, ids, errors and topic names are HTML-escaped.
//! - Every page does bounded work on Redis whatever the queue size: counts are kept by the
//!   scripts, listings are pages of at most 50 jobs (filters look at 500), throughput is a
//!   ring of 60 one-minute slots, a search is one status call per topic (200 at most), and a
//!   workflow's page one per step (1000 at most).
//!
//! # What the actions do
//!
//! - **Run now** is shown for delayed jobs and makes one due now (BullMQ's `promote`). A job
//!   that is already ready keeps its place in line: the action says so and changes nothing
//!   (moving it would put it behind every job queued before it).
//! - **Reschedule** takes a delay (`10m`) or a UTC time; an impossible date
//!   (`2026-02-31 10:00`) is refused, not rolled over, and so is a time more than a minute
//!   before the store's clock (use Run now to run it at once).
//! - **Delete** on a dead letter deletes it only while it is a dead letter
//!   ([`dq_core::Client::delete_dead`]): if its id was pushed again or retried meanwhile, the
//!   new job is left alone and the page says so.
//! - A topic's **done** tab lists the succeeded jobs it keeps (only with a retention:
//!   `#[dq::listener(retain = "1h")]`), newest first, with when each succeeded and its result;
//!   a done job's page shows its whole result. No bulk action applies to them; **Delete** on a
//!   done job's page deletes its record, only while it is one (an id pushed again since is left
//!   alone).
//! - A topic page for a name never pushed to (not among the topics, nothing counted, not
//!   paused) is `404`.
//! - Schedules can be paused, resumed, run now and removed (`dq schedules remove`; asks first).
//! - **Cancel workflow**, on a running workflow's page, cancels its blocked steps and the jobs
//!   of its waiting ones, asks its running ones to stop, and no step starts after it
//!   ([`dq_core::Client::cancel_workflow`]; asks first). A blocked step's job page has
//!   **Cancel** too: the step ends cancelled, and the steps after it follow as their policies
//!   say. A step's job, once cancelled, goes back to its workflow's page, not to its topic's.

mod actions;
mod chart;
mod clock;
mod graph;
mod guard;
mod hosts;
mod notes;
mod options;
mod pages;
mod secret;
mod view;

use std::sync::Arc;

use axum::middleware;
use axum::routing::{get, post};
use axum::Router;
use dq_core::Client;

pub use options::{Access, Options};

use notes::Notes;

/// What every handler shares.
struct Web {
    client: Client,
    options: Options,
    /// The CSRF token every form carries.
    csrf: String,
    /// What the last actions did.
    notes: Notes,
}

type Shared = Arc<Web>;

/// Where the router is mounted ("" at the root, "/dq" under `nest("/dq", ..)`), and what the
/// request may do.
#[derive(Clone, Debug)]
struct Viewer {
    base: String,
    can_act: bool,
}

/// The dashboard as an axum [`Router`]: mount it with `Router::nest("/prefix", ..)` or serve it
/// as it is.
pub fn router(client: Client, options: Options) -> Router {
    let web = Arc::new(Web {
        client,
        options,
        csrf: secret::random_token(),
        notes: Notes::default(),
    });
    Router::new()
        .route("/", get(pages::overview))
        .route("/fragments/topics", get(pages::topics_fragment))
        .route("/workers", get(pages::workers))
        .route("/search", get(pages::search))
        .route("/schedules", get(pages::schedules))
        .route("/schedules/{id}/{action}", post(actions::schedule))
        .route("/topics/{topic}", get(pages::topic))
        .route("/topics/{topic}/jobs/{id}", get(pages::job))
        .route("/topics/{topic}/pause", post(actions::pause))
        .route("/topics/{topic}/resume", post(actions::resume))
        .route("/topics/{topic}/bulk", post(actions::bulk))
        .route("/topics/{topic}/dead/retry", post(actions::retry_all_dead))
        .route("/topics/{topic}/dead/purge", post(actions::purge_all_dead))
        .route("/topics/{topic}/jobs/{id}/{action}", post(actions::job))
        .route("/workflows/{id}", get(pages::workflow))
        .route("/workflows/{id}/cancel", post(actions::cancel_workflow))
        .route("/assets/dq.css", get(view::stylesheet))
        .route("/assets/dq.js", get(view::script))
        .layer(middleware::from_fn_with_state(web.clone(), guard::guard))
        .with_state(web)
}
