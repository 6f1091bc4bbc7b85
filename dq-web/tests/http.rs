//! The dashboard's safety rules over plain HTTP (no browser needed): CSRF, cross-site posts,
//! the Origin and Host checks, notes, the token, a store that does not answer, the in-memory
//! store, and actions that do exactly what they say (issue 30, findings 5 and 6); what the
//! pages show of results, progress and runs: the charts of the last hour, the done counts,
//! the search for a job by id, a job's attempt and last error (issue 32); a workflow's page,
//! its graph and its cancel, and a step's job page.

#![allow(clippy::unwrap_used, missing_docs)] // test code: a panic is the failure report

use std::io::{Read, Write};
use std::sync::Arc;
use std::time::Duration;

use dq_core::schedule::ScheduleBuilder;
use dq_core::store::{Leases, MemoryStore, Retention, Succeeded};
use dq_core::workflow::{OnFailure, StepState, WorkflowState};
use dq_core::{Client, Config, Cursor, JobInfo, JobState, Topic};
use dq_testkit::RedisServer;
use dq_web::Options;

/// The topic every test's jobs are in.
const TOPIC: &str = "order-cancel";

/// The dashboard at the root of a server on a loopback port.
async fn serve(client: Client, options: Options) -> String {
    let app = dq_web::router(client, options);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr.to_string()
}

/// The dashboard with its default options, and the CSRF token its forms carry.
async fn dashboard(client: &Client) -> (String, String) {
    let addr = serve(client.clone(), Options::new()).await;
    let token = csrf(&addr).await;
    (addr, token)
}

/// The dashboard with its default options, and the body of a form that carries its CSRF
/// token and nothing else.
async fn dashboard_and_form(client: &Client) -> (String, String) {
    let (addr, token) = dashboard(client).await;
    (addr, format!("csrf={token}"))
}

/// One HTTP/1.1 request to `addr`, with `Host: <addr>` unless `headers` give a `Host`;
/// returns the status and the whole response text.
async fn http(addr: &str, method: &str, path: &str, headers: &[&str], body: &str) -> (u16, String) {
    let mut request = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    if !headers
        .iter()
        .any(|h| h.to_ascii_lowercase().starts_with("host:"))
    {
        request.push_str(&format!("Host: {addr}\r\n"));
    }
    for h in headers {
        request.push_str(h);
        request.push_str("\r\n");
    }
    if !body.is_empty() {
        request.push_str("Content-Type: application/x-www-form-urlencoded\r\n");
    }
    request.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    let addr = addr.to_owned();
    tokio::task::spawn_blocking(move || {
        let mut stream = std::net::TcpStream::connect(&addr).unwrap();
        stream.write_all(request.as_bytes()).unwrap();
        let mut text = String::new();
        stream.read_to_string(&mut text).unwrap();
        let status = text.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
        (status, text)
    })
    .await
    .unwrap()
}

/// A plain GET of `path`.
async fn get(addr: &str, path: &str) -> (u16, String) {
    http(addr, "GET", path, &[], "").await
}

/// Asserts that each of `paths` answers `200`.
async fn all_answer(addr: &str, paths: &[&str]) {
    for path in paths {
        let (status, text) = get(addr, path).await;
        assert_eq!(status, 200, "{path}: {text}");
    }
}

/// A GET of `path` with `headers`: its status alone.
async fn status_of(addr: &str, path: &str, headers: &[&str]) -> u16 {
    http(addr, "GET", path, headers, "").await.0
}

/// A form posted to `path`, as curl would send it (no `Origin`, no `Referer`).
async fn post(addr: &str, path: &str, body: &str) -> (u16, String) {
    http(addr, "POST", path, &[], body).await
}

/// A form posted to `path` that must go through: the redirect (`303`) it is answered with.
async fn act(addr: &str, path: &str, body: &str) -> String {
    let (status, text) = post(addr, path, body).await;
    assert_eq!(status, 303, "{path}: {text}");
    text
}

async fn memory_client() -> Client {
    memory_client_and_store().await.0
}

/// A client on an in-memory store holding job `o1`, delayed ten minutes, and the store (to
/// lease and dead-letter jobs as a worker would).
async fn memory_client_and_store() -> (Client, Arc<MemoryStore>) {
    let store = Arc::new(MemoryStore::new());
    let client = Client::new(store.clone(), Config::builder().build().unwrap());
    push_o1(&client).await;
    (client, store)
}

/// Job `o1` of [`TOPIC`], delayed ten minutes.
async fn push_o1(client: &Client) {
    client
        .push_to(TOPIC, &serde_json::json!({ "order_id": 1 }))
        .id("o1")
        .delay(Duration::from_secs(600))
        .await
        .unwrap();
}

/// Job `id` of [`TOPIC`] carrying `{"order_id": order}`, ready now.
async fn push(client: &Client, id: &str, order: u32) {
    client
        .push_to(TOPIC, &serde_json::json!({ "order_id": order }))
        .id(id)
        .await
        .unwrap();
}

/// Leases up to `max` ready jobs of [`TOPIC`] as a worker would, and makes dead letters of
/// those named in `ids` (each must be among them).
async fn dead_letter(store: &MemoryStore, max: usize, ids: &[&str]) {
    let topic = Topic::new(TOPIC).unwrap();
    let leased = store
        .fetch(0, &topic, max, Duration::from_secs(60))
        .await
        .unwrap();
    for id in ids {
        let job = leased.jobs.iter().find(|j| j.lease.id.as_str() == *id);
        let job = job.unwrap_or_else(|| panic!("{id} was not leased"));
        assert!(store.dead_letter(&job.lease, "boom").await.unwrap(), "{id}");
    }
}

/// Job `id` of [`TOPIC`], pushed, leased and acked as a worker whose handler returned
/// `result` would, the topic keeping its done jobs for an hour.
async fn succeed(client: &Client, store: &MemoryStore, id: &str, result: &[u8]) {
    let topic = Topic::new(TOPIC).unwrap();
    let keep = Retention::for_age(Duration::from_secs(3600));
    store.set_retention(&topic, Some(keep)).await.unwrap();
    push(client, id, 7).await;
    let leased = store
        .fetch(0, &topic, 1, Duration::from_secs(60))
        .await
        .unwrap();
    let job = leased.jobs.iter().find(|j| j.lease.id.as_str() == id);
    let job = job.unwrap_or_else(|| panic!("{id} was not leased"));
    let done = [Succeeded {
        lease: job.lease.clone(),
        result: Some(result.to_vec()),
        run: 1,
    }];
    assert_eq!(store.ack_succeeded(&done).await.unwrap().acked, 1, "{id}");
}

/// Schedule `nightly`: at 3:00 every day, to topic `cleanup`.
fn nightly(client: &Client) -> ScheduleBuilder {
    client
        .schedule("nightly")
        .cron("0 3 * * *")
        .topic("cleanup")
}

/// Job `id` of [`TOPIC`], which must exist.
async fn job(client: &Client, id: &str) -> JobInfo {
    let found = client.status_in(TOPIC, id).await.unwrap();
    found.unwrap_or_else(|| panic!("no job {id}"))
}

/// Whether [`TOPIC`] holds job `id`.
async fn has(client: &Client, id: &str) -> bool {
    client.status_in(TOPIC, id).await.unwrap().is_some()
}

/// Whether [`TOPIC`] is paused.
async fn paused(client: &Client) -> bool {
    client.stats(TOPIC).await.unwrap().paused
}

/// Posts job `o1`'s reschedule form with `field` (`at=...` or `delay=...`).
async fn reschedule_o1(addr: &str, token: &str, field: &str) -> (u16, String) {
    let body = format!("csrf={token}&{field}");
    post(addr, "/topics/order-cancel/jobs/o1/reschedule", &body).await
}

/// Where a redirect goes (its `location`).
fn location(response: &str) -> String {
    response
        .lines()
        .find_map(|l| l.strip_prefix("location: "))
        .unwrap_or_default()
        .to_owned()
}

/// Follows a redirect: the page it leads to.
async fn follow(addr: &str, response: &str) -> (u16, String) {
    let to = location(response);
    assert!(to.starts_with('/'), "no redirect: {response}");
    get(addr, &to).await
}

/// The ids of a topic's ready jobs, in the order they run.
async fn ready_ids(client: &Client, topic: &str) -> Vec<String> {
    let page = client
        .jobs(topic, JobState::Ready, Cursor::START, 50)
        .await
        .unwrap();
    page.jobs.iter().map(|j| j.id.as_str().to_owned()).collect()
}

/// A form value, URL-encoded.
fn encode(value: &str) -> String {
    form_urlencoded::byte_serialize(value.as_bytes()).collect()
}

/// The CSRF token the dashboard's forms carry.
async fn csrf(addr: &str) -> String {
    let (_, page) = get(addr, "/topics/order-cancel/jobs/o1").await;
    let at = page.find(r#"name="csrf" value=""#).unwrap() + r#"name="csrf" value=""#.len();
    page[at..at + 32].to_owned()
}

#[tokio::test]
async fn an_action_without_the_csrf_token_is_refused_and_changes_nothing() {
    let client = memory_client().await;
    let addr = serve(client.clone(), Options::new()).await;
    for body in ["", "csrf=00000000000000000000000000000000"] {
        let (status, text) = post(&addr, "/topics/order-cancel/jobs/o1/cancel", body).await;
        assert_eq!(status, 403, "{text}");
        assert!(
            text.contains("did not come from a page of this dashboard"),
            "{text}"
        );
    }
    assert_eq!(job(&client, "o1").await.state, JobState::Delayed);
}

#[tokio::test]
async fn a_cross_site_post_is_refused_even_with_the_token() {
    let client = memory_client().await;
    let (addr, body) = dashboard_and_form(&client).await;
    let cancel = "/topics/order-cancel/jobs/o1/cancel";
    let (status, _) = http(
        &addr,
        "POST",
        cancel,
        &["Sec-Fetch-Site: cross-site"],
        &body,
    )
    .await;
    assert_eq!(status, 403);
    assert!(has(&client, "o1").await);
    // The same form from the dashboard's own page goes through.
    let same_origin = ["Sec-Fetch-Site: same-origin"];
    let (status, text) = http(&addr, "POST", cancel, &same_origin, &body).await;
    assert_eq!(status, 303, "{text}");
    assert!(
        location(&text).starts_with("/topics/order-cancel?note="),
        "{text}"
    );
    let (_, page) = follow(&addr, &text).await;
    assert!(page.contains("o1 was deleted."), "{page}");
    assert!(!has(&client, "o1").await);
}

#[tokio::test]
async fn the_token_is_asked_for_as_bearer_or_basic_and_browsers_get_a_login_prompt() {
    let addr = serve(memory_client().await, Options::new().token("s3cret")).await;
    let (status, text) = get(&addr, "/").await;
    assert_eq!(status, 401);
    assert!(
        text.contains(r#"www-authenticate: Basic realm="dq""#),
        "{text}"
    );
    let wrong = ["Authorization: Bearer wrong"];
    assert_eq!(status_of(&addr, "/", &wrong).await, 401);
    let bearer = ["Authorization: Bearer s3cret"];
    assert_eq!(status_of(&addr, "/", &bearer).await, 200);
    // "dq:s3cret" in base64: a browser's login prompt with any user name.
    let basic = ["Authorization: Basic ZHE6czNjcmV0"];
    assert_eq!(status_of(&addr, "/", &basic).await, 200);
}

#[tokio::test]
async fn a_store_that_does_not_answer_gives_a_503_page_saying_so() {
    let mut redis = RedisServer::start();
    let config = Config::builder().redis_url(redis.url()).build().unwrap();
    let client = Client::connect(config).await.unwrap();
    let addr = serve(client, Options::new()).await;
    redis.kill();
    let (status, text) = get(&addr, "/").await;
    assert_eq!(status, 503, "{text}");
    assert!(text.contains("Could not read the topics"), "{text}");
    assert!(text.contains("works again once it answers"), "{text}");
}

#[tokio::test]
async fn every_page_answers_on_the_in_memory_store() {
    let addr = serve(memory_client().await, Options::new()).await;
    let pages = [
        "/",
        "/fragments/topics",
        "/workers",
        "/topics/order-cancel",
        "/topics/order-cancel?state=done",
        "/topics/order-cancel/jobs/o1",
        "/search",
        "/assets/dq.css",
        "/assets/dq.js",
    ];
    all_answer(&addr, &pages).await;
    let (status, text) = get(&addr, "/topics/order-cancel/jobs/nope").await;
    assert_eq!(status, 404);
    assert!(text.contains("dq keeps finished jobs only while"), "{text}");
    let (status, _) = get(&addr, "/topics/bad%20topic").await;
    assert_eq!(status, 400, "an invalid topic name is the caller's mistake");
}

#[tokio::test]
async fn the_schedules_page_lists_them_and_pauses_resumes_and_runs_one() {
    let client = memory_client().await;
    nightly(&client).tz("Europe/Paris").upsert().await.unwrap();
    let (addr, body) = dashboard_and_form(&client).await;
    let (status, page) = get(&addr, "/schedules").await;
    assert_eq!(status, 200);
    assert!(page.contains("data-schedule=\"nightly\""), "{page}");
    assert!(
        page.contains("cron &quot;0 3 * * *&quot; in Europe/Paris")
            || page.contains("cron \"0 3 * * *\" in Europe/Paris"),
        "{page}"
    );
    act(&addr, "/schedules/nightly/pause", &body).await;
    assert_eq!(client.schedules().await.unwrap()[0].next, None, "paused");
    act(&addr, "/schedules/nightly/resume", &body).await;
    assert!(
        client.schedules().await.unwrap()[0].next.is_some(),
        "ticking again"
    );
    act(&addr, "/schedules/nightly/run", &body).await;
    assert_eq!(
        client.counts("cleanup").await.unwrap().ready,
        1,
        "one job now"
    );
    let (status, _) = post(&addr, "/schedules/nope/pause", &body).await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn after_an_action_the_dashboard_redirects_only_to_its_own_pages() {
    let client = memory_client().await;
    let (addr, token) = dashboard(&client).await;
    // `return` values and Referers a browser would follow off-site (a backslash or a tab reads
    // as a slash there), or that are not pages of this dashboard.
    let hostile = [
        "//evil.example/",
        "/\\evil.example/",
        "/\\/evil.example/",
        "/\t/evil.example/",
        "https://evil.example/",
        "evil.example",
    ];
    for to in hostile {
        let body = format!("csrf={token}&return={}", encode(to));
        let text = act(&addr, "/topics/order-cancel/pause", &body).await;
        let went = location(&text);
        assert!(
            went.starts_with("/topics/order-cancel?note="),
            "return {to:?} redirected to {went:?}"
        );
        let referer = format!("Referer: http://{addr}{}", to.replace('\t', "%09"));
        let body = format!("csrf={token}");
        let resume = "/topics/order-cancel/resume";
        let (_, text) = http(&addr, "POST", resume, &[&referer], &body).await;
        let went = location(&text);
        // (A Referer carries the tab percent-encoded: `/%09/evil.example/` is a path here.)
        let on_site = went.starts_with('/')
            && !went.starts_with("//")
            && !went.contains('\\')
            && !went.contains(char::is_whitespace);
        assert!(on_site, "Referer {to:?} redirected to {went:?}");
    }
    // A page of the dashboard is where it goes back to.
    let body = format!("csrf={token}&return=%2Fworkers");
    let (_, text) = post(&addr, "/topics/order-cancel/pause", &body).await;
    assert!(text.contains("location: /workers?note="), "{text}");
}

#[tokio::test]
async fn a_post_from_another_origin_is_refused_even_with_the_token() {
    let client = memory_client().await;
    let (addr, body) = dashboard_and_form(&client).await;
    let pause = "/topics/order-cancel/pause";
    let port = addr.rsplit_once(':').unwrap().1;
    let other_port = if port == "1" { "2" } else { "1" };
    for origin in [
        "http://evil.example".to_owned(),
        "null".to_owned(),
        format!("http://127.0.0.1:{other_port}"),
        format!("http://localhost:{port}"),
    ] {
        let header = format!("Origin: {origin}");
        let (status, text) = http(&addr, "POST", pause, &[&header], &body).await;
        assert_eq!(status, 403, "{origin}: {text}");
        assert!(text.contains("Origin header"), "{text}");
        assert!(!paused(&client).await, "paused from {origin}");
    }
    // From the dashboard's own page (the Origin a browser sends with its form): done.
    let own = format!("Origin: http://{addr}");
    let (status, text) = http(&addr, "POST", pause, &[&own], &body).await;
    assert_eq!(status, 303, "{text}");
    assert!(paused(&client).await);
    // Behind a proxy that passes its own Host on, the public name is allowed by the option.
    let proxied = serve(
        client.clone(),
        Options::new().allowed_hosts(["dq.internal.example"]),
    )
    .await;
    let body = format!("csrf={}", csrf(&proxied).await);
    let public = ["Origin: https://dq.internal.example"];
    let resume = "/topics/order-cancel/resume";
    let (status, text) = http(&proxied, "POST", resume, &public, &body).await;
    assert_eq!(status, 303, "{text}");
    assert!(!paused(&client).await);
}

#[tokio::test]
async fn a_request_for_another_host_is_refused() {
    let client = memory_client().await;
    let addr = serve(client.clone(), Options::new()).await;
    let port = addr.rsplit_once(':').unwrap().1;
    // A page of evil.example whose name now points at 127.0.0.1 (DNS rebinding) reads nothing.
    for host in ["evil.example".to_owned(), format!("evil.example:{port}")] {
        let header = format!("Host: {host}");
        let o1 = "/topics/order-cancel/jobs/o1";
        let (status, text) = http(&addr, "GET", o1, &[&header], "").await;
        assert_eq!(status, 421, "{host}: {text}");
        assert!(text.contains("Options::allowed_hosts"), "{text}");
        assert!(text.contains("--allowed-host"), "{text}");
        assert!(!text.contains("order_id"), "the payload leaked: {text}");
        assert!(!text.contains("name=\"csrf\""), "the token leaked: {text}");
    }
    // Nor acts, even with the token.
    let body = format!("csrf={}", csrf(&addr).await);
    let evil = ["Host: evil.example"];
    let (status, _) = http(&addr, "POST", "/topics/order-cancel/pause", &evil, &body).await;
    assert_eq!(status, 421);
    assert!(!paused(&client).await);
    // Loopback names and addresses, any port, answer.
    for host in [
        format!("localhost:{port}"),
        "LocalHost".to_owned(),
        format!("127.0.0.1:{port}"),
        format!("[::1]:{port}"),
    ] {
        let header = format!("Host: {host}");
        let (status, text) = http(&addr, "GET", "/", &[&header], "").await;
        assert_eq!(status, 200, "{host}: {text}");
    }
    // A name of the dashboard's own, given to the option, answers; others still do not.
    let named = serve(
        client,
        Options::new().allowed_hosts(["dq.internal.example"]),
    )
    .await;
    for (host, expected) in [
        ("dq.internal.example", 200),
        ("DQ.Internal.Example:8443", 200),
        ("evil.example", 421),
        ("dq.internal.example.evil.example", 421),
    ] {
        let header = format!("Host: {host}");
        let (status, text) = http(&named, "GET", "/", &[&header], "").await;
        assert_eq!(status, expected, "{host}: {text}");
    }
}

#[tokio::test]
async fn a_note_in_the_url_is_not_shown_as_a_banner() {
    let client = memory_client().await;
    let addr = serve(client, Options::new()).await;
    let crafted = "note=Session+expired%3A+log+in+again+at+https%3A%2F%2Fevil.example";
    for path in [
        "/",
        "/topics/order-cancel",
        "/topics/order-cancel/jobs/o1",
        "/schedules",
    ] {
        let sep = if path.contains('?') { '&' } else { '?' };
        let (status, page) = get(&addr, &format!("{path}{sep}{crafted}")).await;
        assert_eq!(status, 200, "{path}: {page}");
        assert!(!page.contains("Session expired"), "{path}: {page}");
        assert!(!page.contains("class=\"note\""), "{path}: {page}");
    }
    // The note of a real action is shown on the page it goes back to.
    let body = format!("csrf={}", csrf(&addr).await);
    let text = act(&addr, "/topics/order-cancel/pause", &body).await;
    assert!(
        !location(&text).contains("Paused"),
        "the text is not in the URL: {text}"
    );
    let (_, page) = follow(&addr, &text).await;
    assert!(page.contains("Paused order-cancel."), "{page}");
}

#[tokio::test]
async fn deleting_a_dead_letter_leaves_a_job_pushed_again_alone() {
    let (client, store) = memory_client_and_store().await;
    for (id, order) in [("d1", 2), ("d2", 3), ("d3", 4)] {
        push(&client, id, order).await;
    }
    dead_letter(&store, 3, &["d1", "d2", "d3"]).await;
    let (addr, body) = dashboard_and_form(&client).await;
    // The dead letter's page offers Delete, which asks first.
    let (status, page) = get(&addr, "/topics/order-cancel/jobs/d1").await;
    assert_eq!(status, 200);
    assert!(
        page.contains(r#"action="/topics/order-cancel/jobs/d1/delete" data-confirm="#),
        "{page}"
    );
    // While the page is open, d1 and d3 are pushed again: new jobs under the same ids.
    for id in ["d1", "d3"] {
        push(&client, id, 42).await;
    }
    let text = act(&addr, "/topics/order-cancel/jobs/d1/delete", &body).await;
    let (_, page) = follow(&addr, &text).await;
    assert!(page.contains("nothing was deleted"), "{page}");
    // The bulk Delete of the dead-letter tab, the same.
    let bulk = format!("{body}&action=delete&id=d3&id=d2");
    let text = act(&addr, "/topics/order-cancel/bulk", &bulk).await;
    let (_, page) = follow(&addr, &text).await;
    assert!(page.contains("1 of 2 selected jobs deleted."), "{page}");
    assert!(page.contains("1 were no longer dead letters"), "{page}");
    for id in ["d1", "d3"] {
        let job = job(&client, id).await;
        assert_eq!(job.state, JobState::Ready, "{id}");
        assert_eq!(job.payload, br#"{"order_id":42}"#, "{id}");
    }
    assert!(!has(&client, "d2").await);
    // A dead letter that still is one is deleted, and the page goes back to the dead letters.
    push(&client, "d4", 5).await;
    dead_letter(&store, 10, &["d4"]).await;
    let text = act(&addr, "/topics/order-cancel/jobs/d4/delete", &body).await;
    assert!(
        location(&text).starts_with("/topics/order-cancel?state=dead&note="),
        "{text}"
    );
    assert!(!has(&client, "d4").await);
}

#[tokio::test]
async fn a_done_job_shows_its_result_on_its_page_and_in_the_done_tab() {
    let (client, store) = memory_client_and_store().await;
    succeed(&client, &store, "s1", br#"{"receipt":"R-1"}"#).await;
    let (addr, body) = dashboard_and_form(&client).await;
    let (status, page) = get(&addr, "/topics/order-cancel/jobs/s1").await;
    assert_eq!(status, 200, "{page}");
    assert!(page.contains(r#"data-state="done""#), "{page}");
    assert!(
        page.contains("Succeeded at") && page.contains("R-1"),
        "{page}"
    );
    // Nothing is run, retried or rescheduled: the record is deleted only, asking first.
    for action in ["run", "cancel", "retry", "reschedule"] {
        let offered = format!("/jobs/s1/{action}\"");
        assert!(!page.contains(&offered), "{action}: {page}");
    }
    assert!(
        page.contains(r#"action="/topics/order-cancel/jobs/s1/delete-done" data-confirm="#),
        "{page}"
    );
    // The done tab: when it succeeded and its result, and nothing to select for bulk actions.
    let (status, tab) = get(&addr, "/topics/order-cancel?state=done").await;
    assert_eq!(status, 200, "{tab}");
    assert!(
        tab.contains(r#"data-id="s1""#) && tab.contains("R-1"),
        "{tab}"
    );
    assert!(tab.contains(">Succeeded<"), "{tab}");
    assert!(!tab.contains(r#"type="checkbox""#), "{tab}");
    assert!(!tab.contains(r#"name="action""#), "{tab}");
    let text = act(&addr, "/topics/order-cancel/jobs/s1/delete-done", &body).await;
    assert!(
        location(&text).starts_with("/topics/order-cancel?state=done&note="),
        "{text}"
    );
    let (_, tab) = follow(&addr, &text).await;
    assert!(
        tab.contains("The record of done job s1 was deleted."),
        "{tab}"
    );
    assert!(!has(&client, "s1").await);
}

#[tokio::test]
async fn a_running_job_shows_its_progress_on_its_page_escaped() {
    let (client, store) = memory_client_and_store().await;
    push(&client, "p1", 7).await;
    let topic = Topic::new(TOPIC).unwrap();
    let leased = store
        .fetch(0, &topic, 1, Duration::from_secs(60))
        .await
        .unwrap();
    let lease = &leased.jobs[0].lease;
    assert_eq!(lease.id.as_str(), "p1");
    let addr = serve(client.clone(), Options::new()).await;
    let (status, page) = get(&addr, "/topics/order-cancel/jobs/p1").await;
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("None reported"), "{page}");
    let progress = br#"{"step":"<b>copying</b>","done":3}"#;
    assert!(store.progress(lease, progress).await.unwrap());
    let (status, page) = get(&addr, "/topics/order-cancel/jobs/p1").await;
    assert_eq!(status, 200, "{page}");
    assert!(page.contains(r#"data-state="running""#), "{page}");
    assert!(page.contains(">Progress<"), "{page}");
    assert!(
        page.contains("&lt;b&gt;copying&lt;/b&gt;"),
        "escaped: {page}"
    );
    assert!(!page.contains("<b>copying</b>"), "{page}");
}

/// Issue 32, item 5 from the dashboard: a running job's page cancels it, which asks its worker
/// to stop it; the job stays (until the worker does) and the page says so.
#[tokio::test]
async fn a_running_jobs_page_asks_its_worker_to_stop_it() {
    let (client, store) = memory_client_and_store().await;
    push(&client, "p1", 7).await;
    let topic = Topic::new(TOPIC).unwrap();
    let leased = store
        .fetch(0, &topic, 1, Duration::from_secs(60))
        .await
        .unwrap();
    let lease = leased.jobs[0].lease.clone();
    let (addr, body) = dashboard_and_form(&client).await;
    let (_, page) = get(&addr, "/topics/order-cancel/jobs/p1").await;
    assert!(page.contains("/jobs/p1/cancel"), "{page}");
    assert!(!page.contains("cannot be changed"), "{page}");
    let text = act(&addr, "/topics/order-cancel/jobs/p1/cancel", &body).await;
    assert!(
        location(&text).starts_with("/topics/order-cancel/jobs/p1?"),
        "back to its page: {text}"
    );
    let (_, page) = follow(&addr, &text).await;
    assert!(
        page.contains("p1 is running: its worker was asked to stop it."),
        "{page}"
    );
    assert!(page.contains(r#"data-state="running""#), "{page}");
    assert!(page.contains("cancel requested"), "{page}");
    assert!(!page.contains("/jobs/p1/cancel"), "asked once: {page}");
    // A viewer who cannot act sees it too.
    let read_only = serve(client.clone(), Options::new().read_only(true)).await;
    let (_, page) = get(&read_only, "/topics/order-cancel/jobs/p1").await;
    assert!(page.contains(r#"data-cancel="requested""#), "{page}");
    let asked = store.cancel_requests(std::slice::from_ref(&lease)).await;
    assert_eq!(
        asked.unwrap(),
        std::slice::from_ref(&lease),
        "the cancel is recorded against its lease"
    );
    // Its handler listened: the run ends, cancelled; without a retention nothing is kept.
    assert!(store.cancel_running(&lease).await.unwrap());
    let (status, page) = get(&addr, "/topics/order-cancel/jobs/p1").await;
    assert_eq!(status, 404, "{page}");
    assert!(page.contains("No job"), "no retention, no mark: {page}");
}

/// A job cancelled in a topic that keeps its ends: its page says it was cancelled, not that
/// there is no such job.
#[tokio::test]
async fn a_cancelled_jobs_page_says_it_was_cancelled() {
    let (client, store) = memory_client_and_store().await;
    let topic = Topic::new(TOPIC).unwrap();
    let keep = Retention::for_age(Duration::from_secs(3600));
    store.set_retention(&topic, Some(keep)).await.unwrap();
    push(&client, "c1", 7).await;
    let cancelled = client.cancel_in(TOPIC, "c1").await.unwrap();
    assert_eq!(cancelled, dq_core::ChangeOutcome::Done);
    let addr = serve(client.clone(), Options::new()).await;
    let (status, page) = get(&addr, "/topics/order-cancel/jobs/c1").await;
    assert_eq!(status, 404, "{page}");
    assert!(page.contains("was cancelled"), "{page}");
}

#[tokio::test]
async fn run_now_on_a_ready_job_keeps_its_place() {
    let client = memory_client().await;
    for id in ["r1", "r2", "r3"] {
        client
            .push_to(TOPIC, &serde_json::json!({ "id": id }))
            .id(id)
            .await
            .unwrap();
    }
    let (addr, body) = dashboard_and_form(&client).await;
    // A ready job's page offers no Run now (BullMQ promotes delayed jobs only).
    let (_, page) = get(&addr, "/topics/order-cancel/jobs/r1").await;
    assert!(!page.contains("/jobs/r1/run"), "{page}");
    assert!(page.contains("/jobs/r1/cancel"), "{page}");
    // Posted anyway (from a page loaded while it was delayed): it keeps its place in line.
    let text = act(&addr, "/topics/order-cancel/jobs/r1/run", &body).await;
    let (_, page) = follow(&addr, &text).await;
    assert!(page.contains("r1 is already ready"), "{page}");
    assert_eq!(ready_ids(&client, TOPIC).await, ["r1", "r2", "r3"]);
    // In bulk: the delayed job is made due, the ready one stays where it is.
    let bulk = format!("{body}&action=run&id=r1&id=o1");
    let text = act(&addr, "/topics/order-cancel/bulk", &bulk).await;
    let (_, page) = follow(&addr, &text).await;
    assert!(
        page.contains("1 of 2 selected jobs made due now."),
        "{page}"
    );
    assert!(page.contains("1 were ready already"), "{page}");
    assert_eq!(ready_ids(&client, TOPIC).await, ["r1", "r2", "r3", "o1"]);
}

#[tokio::test]
async fn an_impossible_date_is_refused() {
    let client = memory_client().await;
    let due = job(&client, "o1").await.due;
    let (addr, token) = dashboard(&client).await;
    for (at, why) in [
        ("2026-02-31 10:00", "February 2026 has 28 days"),
        ("2099-02-31 10:00", "February 2099 has 28 days"),
        ("2099-02-29 10:00", "February 2099 has 28 days"),
        ("2099-04-31", "April 2099 has 30 days"),
    ] {
        let (status, text) = reschedule_o1(&addr, &token, &format!("at={}", encode(at))).await;
        assert_eq!(status, 400, "{at}: {text}");
        assert!(text.contains(&format!("is no date: {why}")), "{at}: {text}");
    }
    assert_eq!(job(&client, "o1").await.due, due, "left as it was");
    // The filters read dates the same way.
    let (status, text) = get(&addr, "/topics/order-cancel?due_after=2099-02-31").await;
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("is no date"), "{text}");
    // A date that exists is taken.
    let at = format!("at={}", encode("2099-03-01 10:00"));
    let (status, text) = reschedule_o1(&addr, &token, &at).await;
    assert_eq!(status, 303, "{text}");
    assert_eq!(
        job(&client, "o1").await.due,
        std::time::UNIX_EPOCH + Duration::from_secs(4_076_042_400),
        "2099-03-01 10:00 UTC"
    );
}

#[tokio::test]
async fn a_reschedule_into_the_past_is_refused() {
    let client = memory_client().await;
    let due = job(&client, "o1").await.due;
    let (addr, token) = dashboard(&client).await;
    let at = format!("at={}", encode("2020-01-01 00:00"));
    let (status, text) = reschedule_o1(&addr, &token, &at).await;
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("is in the past"), "{text}");
    assert!(text.contains("more than a minute ago is refused"), "{text}");
    let job_now = job(&client, "o1").await;
    assert_eq!(
        (job_now.state, job_now.due),
        (JobState::Delayed, due),
        "left as it was"
    );
    // The page says the rule where the time is typed.
    let (_, page) = get(&addr, "/topics/order-cancel/jobs/o1").await;
    assert!(
        page.contains("A time more than a minute ago is refused."),
        "{page}"
    );
    // A delay is never in the past.
    let (status, text) = reschedule_o1(&addr, &token, "delay=20m").await;
    assert_eq!(status, 303, "{text}");
    assert!(
        job(&client, "o1").await.due > due,
        "moved on by ten minutes"
    );
}

#[tokio::test]
async fn an_unknown_topic_is_not_found() {
    let client = memory_client().await;
    // A topic whose jobs have all gone is still a topic.
    client.push_to("emptied", &1).id("e1").await.unwrap();
    client.cancel_in("emptied", "e1").await.unwrap();
    let addr = serve(client, Options::new()).await;
    let (status, page) = get(&addr, "/topics/never-pushed").await;
    assert_eq!(status, 404, "{page}");
    assert!(page.contains("No topic"), "{page}");
    assert!(!page.contains("/pause"), "no Pause button: {page}");
    all_answer(&addr, &["/topics/order-cancel", "/topics/emptied"]).await;
}

#[tokio::test]
async fn a_schedule_can_be_removed_from_its_page() {
    let client = memory_client().await;
    nightly(&client).upsert().await.unwrap();
    let (addr, body) = dashboard_and_form(&client).await;
    let (status, page) = get(&addr, "/schedules").await;
    assert_eq!(status, 200);
    assert!(
        page.contains(r#"action="/schedules/nightly/remove" data-confirm="#),
        "Remove, asking first: {page}"
    );
    // Like every action: not without the token.
    let (status, _) = post(&addr, "/schedules/nightly/remove", "csrf=x").await;
    assert_eq!(status, 403);
    assert_eq!(client.schedules().await.unwrap().len(), 1);
    let text = act(&addr, "/schedules/nightly/remove", &body).await;
    assert!(client.schedules().await.unwrap().is_empty());
    let (_, page) = follow(&addr, &text).await;
    assert!(page.contains("nightly removed"), "{page}");
    let (status, _) = post(&addr, "/schedules/nightly/remove", &body).await;
    assert_eq!(status, 404, "gone already");
}

/// Issue 30, finding 3: the dashboard as the documented least-rights ACL user: every page and
/// the actions of a topic, a job and a schedule go through.
#[tokio::test]
async fn the_dashboard_works_as_the_documented_acl_user() {
    let redis = RedisServer::start();
    let mut args = vec!["ACL", "SETUSER", "dqweb", "on", ">s3cret"];
    args.extend(dq_redis::ACL_RULES.split_whitespace());
    assert_eq!(redis.command(&args).trim(), "+OK");
    let url = format!("redis://dqweb:s3cret@127.0.0.1:{}/", redis.port());
    let client = Client::connect(Config::builder().redis_url(url).build().unwrap())
        .await
        .unwrap();
    push_o1(&client).await;
    nightly(&client).upsert().await.unwrap();
    let addr = serve(client.clone(), Options::new()).await;
    let pages = [
        "/",
        "/fragments/topics",
        "/workers",
        "/schedules",
        "/topics/order-cancel",
        "/topics/order-cancel/jobs/o1",
    ];
    all_answer(&addr, &pages).await;
    let body = format!("csrf={}", csrf(&addr).await);
    for action in [
        "/topics/order-cancel/pause",
        "/topics/order-cancel/resume",
        "/topics/order-cancel/jobs/o1/run",
        "/schedules/nightly/pause",
        "/schedules/nightly/resume",
        "/schedules/nightly/run",
        "/schedules/nightly/remove",
    ] {
        let text = act(&addr, action, &body).await;
        let (_, page) = follow(&addr, &text).await;
        assert!(!page.to_lowercase().contains("noperm"), "{action}: {page}");
    }
    assert_eq!(ready_ids(&client, TOPIC).await, ["o1"]);
    assert!(client.schedules().await.unwrap().is_empty());
}

/// Job `id` of `topic`, pushed, leased and acked as a worker whose handler returned nothing
/// would.
async fn run_in(client: &Client, store: &MemoryStore, topic: &str, id: &str) {
    client.push_to(topic, &1).id(id).await.unwrap();
    let name = Topic::new(topic).unwrap();
    let leased = store
        .fetch(0, &name, 1, Duration::from_secs(60))
        .await
        .unwrap();
    let job = leased.jobs.iter().find(|j| j.lease.id.as_str() == id);
    let lease = job
        .unwrap_or_else(|| panic!("{id} was not leased"))
        .lease
        .clone();
    assert_eq!(store.ack(&[lease]).await.unwrap().acked, 1, "{id}");
}

/// Two done jobs kept and a dead letter in [`TOPIC`] (kept for an hour), a run done in
/// `mails` (which keeps nothing): 3 done and 1 failed in the hour, over two topics.
async fn an_hour_of_runs() -> (Client, Arc<MemoryStore>) {
    let (client, store) = memory_client_and_store().await;
    succeed(&client, &store, "s1", br#"{"receipt":"R-1"}"#).await;
    succeed(&client, &store, "s2", br#"{"receipt":"R-2"}"#).await;
    push(&client, "d1", 9).await;
    dead_letter(&store, 1, &["d1"]).await;
    run_in(&client, &store, "mails", "m1").await;
    (client, store)
}

#[tokio::test]
async fn the_overview_charts_every_topics_hour_summed_and_counts_kept_done_jobs() {
    let (client, _store) = an_hour_of_runs().await;
    let addr = serve(client, Options::new()).await;
    let (status, page) = get(&addr, "/").await;
    assert_eq!(status, 200, "{page}");
    assert!(page.contains(r#"class="chart hour overall""#), "{page}");
    assert!(
        page.contains("every topic, last hour: 3 done, 1 failed"),
        "both topics summed: {page}"
    );
    for axis in [">-60 min<", ">-30 min<", ">now<"] {
        assert!(page.contains(axis), "{axis}: {page}");
    }
    // Each topic's row: its kept done jobs, linking to its done tab, and its own sparkline.
    assert!(
        page.contains(
            r#"<td class="num" data-count="done"><a href="/topics/order-cancel?state=done">2</a>"#
        ),
        "{page}"
    );
    assert!(
        page.contains(
            r#"<td class="num" data-count="done"><a href="/topics/mails?state=done">0</a>"#
        ),
        "mails keeps nothing: {page}"
    );
    assert!(page.contains("last hour: 2 done, 1 failed"), "{page}");
    assert!(page.contains("last hour: 1 done, 0 failed"), "{page}");
}

#[tokio::test]
async fn a_topic_page_charts_its_hour_and_counts_its_kept_done_jobs() {
    let (client, _store) = an_hour_of_runs().await;
    let addr = serve(client, Options::new()).await;
    let (status, page) = get(&addr, "/topics/order-cancel").await;
    assert_eq!(status, 200, "{page}");
    assert!(page.contains(r#"class="chart hour topic""#), "{page}");
    assert!(
        page.contains("this topic, last hour: 2 done, 1 failed"),
        "its own runs only: {page}"
    );
    assert!(page.contains("done: 2 in the hour"), "the legend: {page}");
    assert!(
        page.contains(r#"data-state="done">done <span class="count">2</span>"#),
        "{page}"
    );
    // A topic whose only jobs are kept done ones is a topic, and opens on its done tab.
    let (client, store) = memory_client_and_store().await;
    client.cancel_in(TOPIC, "o1").await.unwrap();
    succeed(&client, &store, "s1", b"1").await;
    let addr = serve(client, Options::new()).await;
    let (status, page) = get(&addr, "/topics/order-cancel").await;
    assert_eq!(status, 200, "{page}");
    assert!(
        page.contains(r#"class="tab current" href="/topics/order-cancel?state=done""#),
        "{page}"
    );
    assert!(page.contains(r#"data-id="s1""#), "{page}");
}

#[tokio::test]
async fn every_page_has_the_search_box() {
    let addr = serve(memory_client().await, Options::new()).await;
    for path in [
        "/",
        "/topics/order-cancel",
        "/topics/order-cancel/jobs/o1",
        "/workers",
        "/search",
    ] {
        let (status, page) = get(&addr, path).await;
        assert_eq!(status, 200, "{path}: {page}");
        assert!(
            page.contains(r#"<form class="search" role="search" method="get" action="/search">"#),
            "{path}: {page}"
        );
        assert!(page.contains(r#"name="id""#), "{path}: {page}");
    }
}

#[tokio::test]
async fn a_job_found_in_one_topic_opens_its_page() {
    let client = memory_client().await;
    client.push_to("mails", &1).id("m1").await.unwrap();
    let addr = serve(client, Options::new()).await;
    let (status, text) = get(&addr, "/search?id=o1").await;
    assert_eq!(status, 303, "{text}");
    assert_eq!(location(&text), "/topics/order-cancel/jobs/o1");
    let (status, page) = follow(&addr, &text).await;
    assert_eq!(status, 200, "{page}");
    assert!(page.contains(r#"data-state="delayed""#), "{page}");
    // What a paste brings along around an id is dropped.
    let (status, text) = get(&addr, "/search?id=+m1+").await;
    assert_eq!(status, 303, "{text}");
    assert_eq!(location(&text), "/topics/mails/jobs/m1");
}

#[tokio::test]
async fn a_job_id_found_in_two_topics_is_listed_with_each_topic_and_state() {
    let client = memory_client().await;
    client.push_to("mails", &2).id("o1").await.unwrap();
    let addr = serve(client, Options::new()).await;
    let (status, page) = get(&addr, "/search?id=o1").await;
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("2 topics hold a job with this id."), "{page}");
    for (topic, state) in [("mails", "ready"), ("order-cancel", "delayed")] {
        let row = format!(r#"<tr data-topic="{topic}">"#);
        let at = page
            .find(&row)
            .unwrap_or_else(|| panic!("no row of {topic}: {page}"));
        let row = &page[at..at + page[at..].find("</tr>").unwrap()];
        assert!(row.contains(&format!(r#"data-state="{state}""#)), "{row}");
        assert!(
            row.contains(&format!(r#"href="/topics/{topic}/jobs/o1""#)),
            "{row}"
        );
    }
    assert!(
        page.find(r#"data-topic="mails""#) < page.find(r#"data-topic="order-cancel""#),
        "by topic name"
    );
}

#[tokio::test]
async fn a_job_id_no_topic_holds_is_not_found_and_an_impossible_one_is_refused() {
    let (client, store) = memory_client_and_store().await;
    run_in(&client, &store, "mails", "gone").await; // done, and its topic keeps nothing
    let addr = serve(client, Options::new()).await;
    for id in ["nope", "gone"] {
        let (status, page) = get(&addr, &format!("/search?id={id}")).await;
        assert_eq!(status, 200, "{id}: {page}");
        assert!(page.contains("No job"), "{id}: {page}");
        assert!(
            page.contains("in any of the 2 topics looked in"),
            "{id}: {page}"
        );
        assert!(!page.contains("<tr data-topic"), "{id}: {page}");
    }
    let (status, page) = get(&addr, &format!("/search?id={}", encode("a:b"))).await;
    assert_eq!(status, 400, "{page}");
    assert!(page.contains("No job can have this id"), "{page}");
}

#[tokio::test]
async fn a_job_id_with_slash_question_mark_and_angle_bracket_is_found_escaped() {
    const ID: &str = "a/b?c<d";
    let client = memory_client().await;
    client.push_to(TOPIC, &1).id(ID).await.unwrap();
    let addr = serve(client.clone(), Options::new()).await;
    let search = format!("/search?id={}", encode(ID));
    let (status, text) = get(&addr, &search).await;
    assert_eq!(status, 303, "{text}");
    assert_eq!(location(&text), "/topics/order-cancel/jobs/a%2Fb%3Fc%3Cd");
    let (status, page) = follow(&addr, &text).await;
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("a/b?c&lt;d"), "{page}");
    // In two topics: listed, escaped, each linked with the id as one path segment.
    client.push_to("mails", &2).id(ID).await.unwrap();
    let (status, page) = get(&addr, &search).await;
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("a/b?c&lt;d"), "{page}");
    assert!(!page.contains("a/b?c<d"), "unescaped: {page}");
    for topic in ["mails", "order-cancel"] {
        let link = format!(r#"href="/topics/{topic}/jobs/a%2Fb%3Fc%3Cd""#);
        assert!(page.contains(&link), "{link}: {page}");
    }
}

#[tokio::test]
async fn a_job_page_says_which_attempt_and_whose_the_last_error_is() {
    let (client, store) = memory_client_and_store().await;
    push(&client, "d1", 9).await;
    dead_letter(&store, 1, &["d1"]).await;
    let addr = serve(client, Options::new()).await;
    let (_, page) = get(&addr, "/topics/order-cancel/jobs/o1").await;
    assert!(page.contains("attempt 1 of 3, to come"), "{page}");
    assert!(
        !page.contains("only the latest is kept"),
        "no error: {page}"
    );
    let (_, page) = get(&addr, "/topics/order-cancel/jobs/d1").await;
    assert!(
        page.contains("attempt 1 of 3 failed; dead-lettered"),
        "{page}"
    );
    assert!(page.contains("boom"), "{page}");
    assert!(
        page.contains("The error of its last run, which dead-lettered it."),
        "{page}"
    );
}

/// A job's priority shows on its page and beside its id in its topic's listing, which lists
/// ready jobs in the order they run.
#[tokio::test]
async fn a_jobs_priority_shows_on_its_page_and_in_the_listing_in_run_order() {
    let (client, _store) = memory_client_and_store().await;
    push(&client, "plain", 1).await;
    client
        .push_to(TOPIC, &serde_json::json!({ "order_id": 2 }))
        .id("urgent")
        .priority(7)
        .await
        .unwrap();
    let addr = serve(client, Options::new()).await;
    let (_, page) = get(&addr, "/topics/order-cancel/jobs/urgent").await;
    assert!(page.contains(r#"data-priority="7""#), "{page}");
    let (_, page) = get(&addr, "/topics/order-cancel?state=ready").await;
    let (urgent, plain) = (page.find("urgent").unwrap(), page.find("plain").unwrap());
    assert!(urgent < plain, "listed in run order: {page}");
    assert!(page.contains("priority 7"), "{page}");
}

/// A topic whose grouped jobs wait for their group's slot shows its busiest groups (waiting,
/// holding), its group concurrency and its group rate; a grouped job's page and row show its
/// group.
#[tokio::test]
async fn the_topic_page_shows_the_busiest_groups_and_a_job_its_group() {
    let (client, _store) = memory_client_and_store().await;
    client
        .set_group_rate(TOPIC, Some("5/1s".parse().unwrap()))
        .await
        .unwrap();
    for (id, group) in [
        ("a1", "acct-1"),
        ("a2", "acct-1"),
        ("a3", "acct-1"),
        ("b1", "acct-2"),
    ] {
        client
            .push_to(TOPIC, &serde_json::json!({ "order_id": 1 }))
            .id(id)
            .group(group)
            .await
            .unwrap();
    }
    let addr = serve(client, Options::new()).await;
    let (_, page) = get(&addr, "/topics/order-cancel").await;
    let groups = &page[page.find("Busiest groups").expect("a groups section")..];
    assert!(groups.contains(r#"data-group="acct-1""#), "{page}");
    assert!(
        groups.contains("<td class=\"num\">2</td>"),
        "two of acct-1 wait: {page}"
    );
    assert!(
        !groups.contains(r#"data-group="acct-2""#),
        "acct-2 has none waiting: {page}"
    );
    assert!(
        groups.contains(r#"<strong class="group-concurrency">1</strong>"#),
        "{page}"
    );
    assert!(groups.contains("5/1s</strong> (one every 200ms)"), "{page}");
    let (_, page) = get(&addr, "/topics/order-cancel/jobs/a3").await;
    assert!(page.contains(r#"data-group="acct-1""#), "{page}");
    let (_, page) = get(&addr, "/topics/order-cancel?state=ready").await;
    assert!(page.contains("group acct-1"), "{page}");
}

/// A job whose runs failed twice then succeeded, on a topic with events on: its page lists
/// each run's error in its history.
#[tokio::test]
async fn the_job_page_shows_each_failed_runs_error_in_its_history() {
    let (client, store) = memory_client_and_store().await;
    let topic = Topic::new(TOPIC).unwrap();
    store.set_events(&topic, Some(100)).await.unwrap();
    push(&client, "o2", 2).await;
    for error in ["card declined", "gateway timeout"] {
        let leased = store.fetch(0, &topic, 1, Duration::from_secs(60)).await;
        let job = leased.unwrap().jobs.remove(0);
        assert_eq!(job.lease.id.as_str(), "o2");
        assert!(store
            .retry(&job.lease, Duration::ZERO, error)
            .await
            .unwrap());
    }
    let addr = serve(client, Options::new()).await;
    let (status, page) = get(&addr, "/topics/order-cancel/jobs/o2").await;
    assert_eq!(status, 200, "{page}");
    let history = &page[page.find("History").expect("a history section")..];
    let first = history
        .find("card declined")
        .expect("the first run's error");
    let second = history
        .find("gateway timeout")
        .expect("the second run's error");
    assert!(first < second, "oldest first");
    assert_eq!(history.matches(r#"data-event="failed""#).count(), 2);
    // o1 was pushed before the topic's events were on: its page says why it has none.
    let (_, page) = get(&addr, "/topics/order-cancel/jobs/o1").await;
    assert!(page.contains("No events kept for this job"), "{page}");
}

/// A job whose runs failed, its topic's events off, lists each failed run's error on its
/// page, oldest first.
#[tokio::test]
async fn the_job_page_lists_each_failed_runs_error_without_events() {
    let (client, store) = memory_client_and_store().await;
    let topic = Topic::new(TOPIC).unwrap();
    push(&client, "o2", 2).await;
    for error in ["card declined", "gateway timeout"] {
        let leased = store.fetch(0, &topic, 1, Duration::from_secs(60)).await;
        let mut jobs = leased.unwrap().jobs;
        let job = jobs.remove(
            jobs.iter()
                .position(|j| j.lease.id.as_str() == "o2")
                .unwrap(),
        );
        assert!(store
            .retry(&job.lease, Duration::ZERO, error)
            .await
            .unwrap());
        store
            .release(&jobs.into_iter().map(|j| j.lease).collect::<Vec<_>>())
            .await
            .unwrap();
    }
    let addr = serve(client, Options::new()).await;
    let (status, page) = get(&addr, "/topics/order-cancel/jobs/o2").await;
    assert_eq!(status, 200, "{page}");
    let runs = &page[page.find("Failed runs").expect("a failed runs row")..];
    let first = runs.find(r#"data-run="1""#).expect("run 1");
    let second = runs.find(r#"data-run="2""#).expect("run 2");
    assert!(first < second, "oldest first: {page}");
    assert!(runs[first..second].contains("card declined"), "{page}");
    assert!(runs[second..].contains("gateway timeout"), "{page}");
}

/// Issue 32, item 7: a topic's dead tab shows every kept run's error of each dead letter, not
/// only its last, and its error filter finds a job by the error of any of its runs.
#[tokio::test]
async fn the_dead_tab_shows_each_failed_runs_error_and_filters_by_any_of_them() {
    let (client, store) = memory_client_and_store().await;
    let topic = Topic::new(TOPIC).unwrap();
    push(&client, "o2", 2).await;
    for last in [false, true] {
        let leased = store.fetch(0, &topic, 2, Duration::from_secs(60)).await;
        let mut jobs = leased.unwrap().jobs;
        let at = jobs.iter().position(|j| j.lease.id.as_str() == "o2");
        let job = jobs.remove(at.expect("o2 leased"));
        if last {
            assert!(store
                .dead_letter(&job.lease, "gateway timeout")
                .await
                .unwrap());
        } else {
            assert!(store
                .retry(&job.lease, Duration::ZERO, "card declined")
                .await
                .unwrap());
        }
        let others: Vec<_> = jobs.into_iter().map(|j| j.lease).collect();
        store.release(&others).await.unwrap();
    }
    let addr = serve(client, Options::new()).await;
    let (status, page) = get(&addr, "/topics/order-cancel?state=dead").await;
    assert_eq!(status, 200, "{page}");
    let row = &page[page.find(r#"data-id="o2""#).expect("o2's row")..];
    let row = &row[..row.find("</tr>").unwrap()];
    assert!(row.contains("2 failed runs"), "{row}");
    let first = row.find("run 1: card declined").expect("run 1's error");
    let second = row.find("run 2: gateway timeout").expect("run 2's error");
    assert!(first < second, "oldest first: {row}");
    let (_, page) = get(&addr, "/topics/order-cancel?state=dead&error=CARD").await;
    assert!(
        page.contains(r#"data-id="o2""#),
        "found by its first run's error: {page}"
    );
    let (_, page) = get(&addr, "/topics/order-cancel?state=dead&error=refused").await;
    assert!(!page.contains(r#"data-id="o2""#), "{page}");
}

/// A job that succeeded on its third run shows both failed runs' errors on the done tab, as a
/// dead job does on the dead tab, and the error filter finds it by either (issue 32, item 7:
/// "the done/failed history of a topic with each attempt's error").
#[tokio::test]
async fn the_done_tab_shows_the_errors_of_a_jobs_failed_runs_before_its_success() {
    let (client, store) = memory_client_and_store().await;
    let topic = Topic::new(TOPIC).unwrap();
    let keep = Retention::for_age(Duration::from_secs(3600));
    store.set_retention(&topic, Some(keep)).await.unwrap();
    push(&client, "o2", 2).await;
    for run in 1..=3u32 {
        let leased = store.fetch(0, &topic, 2, Duration::from_secs(60)).await;
        let mut jobs = leased.unwrap().jobs;
        let at = jobs.iter().position(|j| j.lease.id.as_str() == "o2");
        let job = jobs.remove(at.expect("o2 leased"));
        match run {
            1 => assert!(store
                .retry(&job.lease, Duration::ZERO, "card declined")
                .await
                .unwrap()),
            2 => assert!(store
                .retry(&job.lease, Duration::ZERO, "gateway timeout")
                .await
                .unwrap()),
            _ => {
                let done = [Succeeded {
                    lease: job.lease.clone(),
                    result: Some(b"\"charged\"".to_vec()),
                    run,
                }];
                assert_eq!(store.ack_succeeded(&done).await.unwrap().acked, 1);
            }
        }
        let others: Vec<_> = jobs.into_iter().map(|j| j.lease).collect();
        store.release(&others).await.unwrap();
    }
    let addr = serve(client, Options::new()).await;
    let (status, page) = get(&addr, "/topics/order-cancel?state=done").await;
    assert_eq!(status, 200, "{page}");
    let row = &page[page.find(r#"data-id="o2""#).expect("o2's row")..];
    let row = &row[..row.find("</tr>").unwrap()];
    assert!(row.contains("2 failed runs"), "{row}");
    let first = row.find("run 1: card declined").expect("run 1's error");
    let second = row.find("run 2: gateway timeout").expect("run 2's error");
    assert!(first < second, "oldest first: {row}");
    assert!(row.contains("charged"), "its value: {row}");
    let (_, page) = get(&addr, "/topics/order-cancel?state=done&error=declined").await;
    assert!(
        page.contains(r#"data-id="o2""#),
        "found by run 1's error: {page}"
    );
    let (_, page) = get(&addr, "/topics/order-cancel?state=done&error=refused").await;
    assert!(!page.contains(r#"data-id="o2""#), "{page}");
}

/// A topic with a bound on its pending jobs shows how close it is, and says when it is full.
#[tokio::test]
async fn the_topic_page_shows_how_close_the_topic_is_to_its_max_pending() {
    let client = memory_client().await; // holds o1
    client.set_max_pending(TOPIC, Some(2)).await.unwrap();
    let addr = serve(client.clone(), Options::new()).await;
    let (status, page) = get(&addr, "/topics/order-cancel").await;
    assert_eq!(status, 200);
    assert!(page.contains("of at most 2"), "{page}");
    assert!(!page.contains("full: pushes refused"), "{page}");
    push(&client, "o2", 2).await;
    let (_, page) = get(&addr, "/topics/order-cancel").await;
    assert!(page.contains("full: pushes refused"), "{page}");
}

/// A topic a handler held (`Outcome::RateLimited`) says so on its page, with when its starts
/// come back, until the hold is lifted (issue 33, item 8).
#[tokio::test]
async fn the_topic_page_shows_a_hold_until_it_is_lifted() {
    let (client, store) = memory_client_and_store().await;
    let addr = serve(client.clone(), Options::new()).await;
    let (_, page) = get(&addr, "/topics/order-cancel").await;
    assert!(!page.contains("held: starts again"), "{page}");
    let topic = Topic::new(TOPIC).unwrap();
    store.hold(&topic, Duration::from_secs(90)).await.unwrap();
    let (status, page) = get(&addr, "/topics/order-cancel").await;
    assert_eq!(status, 200);
    assert!(page.contains("held: starts again"), "{page}");
    assert!(client.lift_hold(TOPIC).await.unwrap());
    let (_, page) = get(&addr, "/topics/order-cancel").await;
    assert!(!page.contains("held: starts again"), "{page}");
}

/// A topic with a rate limit shows it on its page (issue 33, item 8).
#[tokio::test]
async fn the_topic_page_shows_the_topics_rate_limit() {
    let client = memory_client().await; // holds o1
    let addr = serve(client.clone(), Options::new()).await;
    let (_, page) = get(&addr, "/topics/order-cancel").await;
    assert!(!page.contains("class=\"rate\""), "{page}");
    client
        .set_rate(TOPIC, Some("100/1s".parse().unwrap()))
        .await
        .unwrap();
    let (status, page) = get(&addr, "/topics/order-cancel").await;
    assert_eq!(status, 200);
    assert!(page.contains("100/1s"), "{page}");
    assert!(page.contains("one every 10ms"), "{page}");
}

/// How much of its rate a topic used shows on its page: the runs that ended in the last full
/// minute against the starts its rate allows in a minute (issue 33, item 8; helper-69,
/// finding 7).
#[tokio::test]
async fn the_topic_page_shows_how_much_of_its_rate_the_last_minute_used() {
    let start = std::time::UNIX_EPOCH + Duration::from_secs(60 * 29_000_000);
    let store = Arc::new(MemoryStore::with_manual_clock(start));
    let client = Client::new(store.clone(), Config::builder().build().unwrap());
    for i in 0..30 {
        push(&client, &format!("r{i}"), i).await;
    }
    let topic = Topic::new(TOPIC).unwrap();
    let leased = store.fetch(0, &topic, 30, Duration::from_secs(60)).await;
    let done: Vec<_> = leased
        .unwrap()
        .jobs
        .iter()
        .map(|j| Succeeded {
            lease: j.lease.clone(),
            result: None,
            run: 1,
        })
        .collect();
    assert_eq!(store.ack_succeeded(&done).await.unwrap().acked, 30);
    // 60 starts a minute allowed; the minute of the 30 runs is over.
    client
        .set_rate(TOPIC, Some("1/1s".parse().unwrap()))
        .await
        .unwrap();
    store.advance(Duration::from_secs(60));
    let addr = serve(client, Options::new()).await;
    let (status, page) = get(&addr, "/topics/order-cancel").await;
    assert_eq!(status, 200);
    assert!(
        page.contains("50 % used over the last minute (30 runs)"),
        "{page}"
    );
}

/// A topic with a global concurrency shows its running jobs against it (issue 33, item 8).
#[tokio::test]
async fn the_topic_page_shows_the_running_jobs_against_the_global_concurrency() {
    let client = memory_client().await; // holds o1
    client.set_global_concurrency(TOPIC, Some(4)).await.unwrap();
    let addr = serve(client.clone(), Options::new()).await;
    let (status, page) = get(&addr, "/topics/order-cancel").await;
    assert_eq!(status, 200);
    assert!(page.contains("0</strong> of at most 4"), "{page}");
}

/// A topic with a group rate and no job waiting for a slot still shows its group rate (a job
/// the rate holds back is delayed, not waiting: the busiest groups table has nothing to show).
#[tokio::test]
async fn the_topic_page_shows_a_group_rate_while_no_job_waits_for_a_slot() {
    let (client, _store) = memory_client_and_store().await;
    client
        .set_group_rate(TOPIC, Some("5/1s".parse().unwrap()))
        .await
        .unwrap();
    push(&client, "plain", 1).await;
    let addr = serve(client, Options::new()).await;
    let (_, page) = get(&addr, "/topics/order-cancel").await;
    assert!(!page.contains("Busiest groups"), "no job waits: {page}");
    assert!(page.contains("5/1s</strong> (one every 200ms)"), "{page}");
}

/// Workflow `checkout-1`, the diamond of the issue: `a`, then `b` and `c`, then `d` (after `b`,
/// and after `c` whatever becomes of it), each step to a topic of its own; `a` is leased and
/// acked as a worker would, so `b` and `c` are pending (ready) and `d` blocked.
async fn checkout_with_a_done(client: &Client, store: &MemoryStore) {
    let mut flow = client.workflow("checkout-1");
    flow.step_to("a", "wf-a", &1);
    flow.step_to("b", "wf-b", &2).after("a");
    flow.step_to("c", "wf-c", &3).after("a");
    flow.step_to("d", "wf-d", &4)
        .after("b")
        .after_with("c", OnFailure::Run);
    flow.push().await.unwrap();
    store.promote(0, 100).await.unwrap();
    let topic = Topic::new("wf-a").unwrap();
    let leased = store
        .fetch(0, &topic, 10, Duration::from_secs(60))
        .await
        .unwrap();
    let a = leased
        .jobs
        .iter()
        .find(|j| j.lease.id.as_str() == "checkout-1.a")
        .expect("a was not leased");
    let done = [Succeeded {
        lease: a.lease.clone(),
        result: Some(br#"{"paid":true}"#.to_vec()),
        run: 1,
    }];
    assert_eq!(store.ack_succeeded(&done).await.unwrap().acked, 1);
}

/// The row of step `step` in a workflow page's table of steps.
fn step_row<'a>(page: &'a str, step: &str) -> &'a str {
    let at = page
        .find(&format!(r#"<tr id="step-{step}""#))
        .unwrap_or_else(|| panic!("no row of {step}: {page}"));
    &page[at..at + page[at..].find("</tr>").unwrap()]
}

/// The opening tag of step `step`'s box in a workflow page's graph.
fn step_box<'a>(page: &'a str, step: &str) -> &'a str {
    let at = page
        .find(&format!(r#"<g class="step" data-step="{step}""#))
        .unwrap_or_else(|| panic!("no box of {step}: {page}"));
    &page[at..at + page[at..].find('>').unwrap()]
}

/// A workflow's page draws its steps in layers, each with its state (a pending step's, its
/// job's), a succeeded step's value, and an arrow from each step it comes after, marked with
/// the policy when it is not the default.
#[tokio::test]
async fn a_workflows_page_draws_its_steps_in_layers_with_each_ones_state() {
    let (client, store) = memory_client_and_store().await;
    checkout_with_a_done(&client, &store).await;
    let addr = serve(client, Options::new()).await;
    let (status, page) = get(&addr, "/workflows/checkout-1").await;
    assert_eq!(status, 200, "{page}");
    assert!(page.contains(r#"data-state="running""#), "{page}");
    assert!(
        page.contains("4 steps: 1 succeeded, 2 pending, 1 blocked"),
        "{page}"
    );
    for (step, state, words, drawn, layer) in [
        ("a", "succeeded", "succeeded", "succeeded", 1),
        ("b", "pending", "pending: ready", "ready", 2),
        ("c", "pending", "pending: ready", "ready", 2),
        (
            "d",
            "blocked",
            "blocked: waiting for the steps it comes after",
            "blocked",
            3,
        ),
    ] {
        let row = step_row(&page, step);
        assert!(
            row.contains(&format!(r#"data-step-state="{state}""#)),
            "{row}"
        );
        assert!(row.contains(words), "{row}");
        let tag = step_box(&page, step);
        assert!(tag.contains(&format!(r#"data-state="{drawn}""#)), "{tag}");
        assert!(tag.contains(&format!(r#"data-layer="{layer}""#)), "{tag}");
    }
    // A pending step's box links to its job's page; a's value is shown, escaped.
    assert!(
        page.contains(r#"<a href="/topics/wf-b/jobs/checkout-1.b"><g class="step""#),
        "{page}"
    );
    assert!(page.contains("{&quot;paid&quot;:true}"), "{page}");
    // The arrows: d comes after b (the default, cancel) and after c (run, marked).
    for (from, to, policy) in [
        ("a", "b", "cancel"),
        ("b", "d", "cancel"),
        ("c", "d", "run"),
    ] {
        let arrow = format!(r#"class="edge {policy}" data-from="{from}" data-to="{to}""#);
        assert!(page.contains(&arrow), "{arrow}: {page}");
    }
    assert!(page.contains(r#"<text class="policy""#), "{page}");
    assert!(step_row(&page, "d").contains("(run)"), "{page}");
    assert!(page.contains("Cancel workflow"), "{page}");
}

/// A workflow that does not exist (or is no longer kept) is not found, and cannot be
/// cancelled.
#[tokio::test]
async fn an_unknown_workflow_is_not_found() {
    let client = memory_client().await;
    let (addr, body) = dashboard_and_form(&client).await;
    let (status, page) = get(&addr, "/workflows/never-pushed").await;
    assert_eq!(status, 404, "{page}");
    assert!(page.contains("No workflow"), "{page}");
    assert!(!page.contains("Cancel workflow"), "{page}");
    let (status, text) = post(&addr, "/workflows/never-pushed/cancel", &body).await;
    assert_eq!(status, 404, "{text}");
    assert!(text.contains("Nothing was cancelled"), "{text}");
}

/// Cancel workflow cancels what has not run (the blocked step among them), and is refused as
/// every action is: without the token, from another site, in a read-only dashboard.
#[tokio::test]
async fn cancel_workflow_cancels_its_blocked_steps_and_is_refused_as_every_action_is() {
    let (client, store) = memory_client_and_store().await;
    checkout_with_a_done(&client, &store).await;
    let (addr, body) = dashboard_and_form(&client).await;
    let cancel = "/workflows/checkout-1/cancel";
    let (_, page) = get(&addr, "/workflows/checkout-1").await;
    assert!(
        page.contains(r#"action="/workflows/checkout-1/cancel" data-confirm="#),
        "Cancel workflow, asking first: {page}"
    );
    let (status, text) = post(&addr, cancel, "csrf=x").await;
    assert_eq!(status, 403, "{text}");
    assert!(
        text.contains("did not come from a page of this dashboard"),
        "{text}"
    );
    let elsewhere = ["Origin: http://evil.example"];
    let (status, text) = http(&addr, "POST", cancel, &elsewhere, &body).await;
    assert_eq!(status, 403, "{text}");
    assert!(text.contains("Origin header"), "{text}");
    let cross_site = ["Sec-Fetch-Site: cross-site"];
    let (status, _) = http(&addr, "POST", cancel, &cross_site, &body).await;
    assert_eq!(status, 403);
    let read_only = serve(client.clone(), Options::new().read_only(true)).await;
    let (status, text) = post(&read_only, cancel, &body).await;
    assert_eq!(status, 403, "{text}");
    let flow = client.workflow_status("checkout-1").await.unwrap().unwrap();
    assert_eq!(flow.state, WorkflowState::Running);
    assert!(!flow.cancelled);
    assert_eq!(flow.step("d").unwrap().state, StepState::Blocked);
    // From the dashboard's own page: done.
    let own = format!("Origin: http://{addr}");
    let (status, text) = http(&addr, "POST", cancel, &[&own], &body).await;
    assert_eq!(status, 303, "{text}");
    assert!(
        location(&text).starts_with("/workflows/checkout-1?note="),
        "{text}"
    );
    let (_, page) = follow(&addr, &text).await;
    assert!(page.contains("Workflow checkout-1 cancelled"), "{page}");
    let flow = client.workflow_status("checkout-1").await.unwrap().unwrap();
    assert!(flow.cancelled);
    assert_eq!(flow.step("a").unwrap().state, StepState::Succeeded);
    assert_eq!(flow.step("d").unwrap().state, StepState::Cancelled);
    assert!(
        step_row(&page, "d").contains(r#"data-step-state="cancelled""#),
        "{page}"
    );
}

/// A step's job page says which workflow it is a step of, linking to its page; a blocked
/// step's says what it waits for and can be cancelled (back to its workflow's page); a topic
/// does not list blocked jobs.
#[tokio::test]
async fn a_steps_job_page_links_to_its_workflow_and_a_blocked_one_says_what_it_waits_for() {
    let (client, store) = memory_client_and_store().await;
    checkout_with_a_done(&client, &store).await;
    let addr = serve(client, Options::new()).await;
    let (status, page) = get(&addr, "/topics/wf-b/jobs/checkout-1.b").await;
    assert_eq!(status, 200, "{page}");
    assert!(
        page.contains(r#"Step <code>b</code> of workflow <a href="/workflows/checkout-1">"#),
        "{page}"
    );
    let (status, page) = get(&addr, "/topics/wf-d/jobs/checkout-1.d").await;
    assert_eq!(status, 200, "{page}");
    assert!(page.contains(r#"data-state="blocked""#), "{page}");
    assert!(
        page.contains("blocked: waiting for the steps it comes after"),
        "{page}"
    );
    assert!(page.contains(r#"href="/workflows/checkout-1""#), "{page}");
    assert!(
        page.contains(r#"action="/topics/wf-d/jobs/checkout-1.d/cancel" data-confirm="#),
        "Cancel, asking first: {page}"
    );
    let (status, page) = get(&addr, "/topics/wf-b?state=blocked").await;
    assert_eq!(status, 400, "{page}");
    assert!(page.contains("workflow's page shows them"), "{page}");
    // Cancelled from its page, a step goes back to its workflow's page (its topic has no job).
    let body = format!("csrf={}", csrf(&addr).await);
    let text = act(&addr, "/topics/wf-d/jobs/checkout-1.d/cancel", &body).await;
    assert!(
        location(&text).starts_with("/workflows/checkout-1?note="),
        "{text}"
    );
    let (status, page) = follow(&addr, &text).await;
    assert_eq!(status, 200, "{page}");
    assert!(
        step_row(&page, "d").contains(r#"data-step-state="cancelled""#),
        "{page}"
    );
}

/// The search box finds a workflow by its id, and a step's job by its own.
#[tokio::test]
async fn a_workflow_id_typed_in_the_search_opens_its_page() {
    let (client, store) = memory_client_and_store().await;
    checkout_with_a_done(&client, &store).await;
    let addr = serve(client, Options::new()).await;
    let (status, text) = get(&addr, "/search?id=checkout-1").await;
    assert_eq!(status, 303, "{text}");
    assert_eq!(location(&text), "/workflows/checkout-1");
    let (status, page) = follow(&addr, &text).await;
    assert_eq!(status, 200, "{page}");
    let (status, text) = get(&addr, "/search?id=checkout-1.b").await;
    assert_eq!(status, 303, "{text}");
    assert_eq!(location(&text), "/topics/wf-b/jobs/checkout-1.b");
}
