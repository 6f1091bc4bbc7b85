//! The dashboard's safety rules over plain HTTP (no browser needed): CSRF, cross-site posts, the
//! token, a store that does not answer, and the in-memory store.

#![allow(clippy::unwrap_used, missing_docs)] // test code: a panic is the failure report

use std::io::{Read, Write};
use std::sync::Arc;
use std::time::Duration;

use dq_core::store::MemoryStore;
use dq_core::{Client, Config, JobState};
use dq_testkit::RedisServer;
use dq_web::Options;

/// The dashboard at the root of a server on a loopback port.
async fn serve(client: Client, options: Options) -> String {
    let app = dq_web::router(client, options);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr.to_string()
}

/// One HTTP/1.1 request; returns the status and the whole response text.
async fn http(addr: &str, method: &str, path: &str, headers: &[&str], body: &str) -> (u16, String) {
    let mut request = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
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

async fn memory_client() -> Client {
    let client = Client::new(
        Arc::new(MemoryStore::new()),
        Config::builder().build().unwrap(),
    );
    client
        .push_to("order-cancel", &serde_json::json!({ "order_id": 1 }))
        .id("o1")
        .delay(Duration::from_secs(600))
        .await
        .unwrap();
    client
}

/// The CSRF token the dashboard's forms carry.
async fn csrf(addr: &str) -> String {
    let (_, page) = http(addr, "GET", "/topics/order-cancel/jobs/o1", &[], "").await;
    let at = page.find(r#"name="csrf" value=""#).unwrap() + r#"name="csrf" value=""#.len();
    page[at..at + 32].to_owned()
}

#[tokio::test]
async fn an_action_without_the_csrf_token_is_refused_and_changes_nothing() {
    let client = memory_client().await;
    let addr = serve(client.clone(), Options::new()).await;
    for body in ["", "csrf=00000000000000000000000000000000"] {
        let (status, text) = http(
            &addr,
            "POST",
            "/topics/order-cancel/jobs/o1/cancel",
            &[],
            body,
        )
        .await;
        assert_eq!(status, 403, "{text}");
        assert!(
            text.contains("did not come from a page of this dashboard"),
            "{text}"
        );
    }
    let job = client
        .status_in("order-cancel", "o1")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(job.state, JobState::Delayed);
}

#[tokio::test]
async fn a_cross_site_post_is_refused_even_with_the_token() {
    let client = memory_client().await;
    let addr = serve(client.clone(), Options::new()).await;
    let token = csrf(&addr).await;
    let body = format!("csrf={token}");
    let (status, _) = http(
        &addr,
        "POST",
        "/topics/order-cancel/jobs/o1/cancel",
        &["Sec-Fetch-Site: cross-site"],
        &body,
    )
    .await;
    assert_eq!(status, 403);
    assert!(client
        .status_in("order-cancel", "o1")
        .await
        .unwrap()
        .is_some());
    // The same form from the dashboard's own page goes through.
    let (status, text) = http(
        &addr,
        "POST",
        "/topics/order-cancel/jobs/o1/cancel",
        &["Sec-Fetch-Site: same-origin"],
        &body,
    )
    .await;
    assert_eq!(status, 303, "{text}");
    assert!(
        text.contains("location: /topics/order-cancel?note=o1+was+deleted."),
        "{text}"
    );
    assert!(client
        .status_in("order-cancel", "o1")
        .await
        .unwrap()
        .is_none());
}

#[tokio::test]
async fn the_token_is_asked_for_as_bearer_or_basic_and_browsers_get_a_login_prompt() {
    let addr = serve(memory_client().await, Options::new().token("s3cret")).await;
    let (status, text) = http(&addr, "GET", "/", &[], "").await;
    assert_eq!(status, 401);
    assert!(
        text.contains(r#"www-authenticate: Basic realm="dq""#),
        "{text}"
    );
    assert_eq!(
        http(&addr, "GET", "/", &["Authorization: Bearer wrong"], "")
            .await
            .0,
        401
    );
    assert_eq!(
        http(&addr, "GET", "/", &["Authorization: Bearer s3cret"], "")
            .await
            .0,
        200
    );
    // "dq:s3cret" in base64: a browser's login prompt with any user name.
    assert_eq!(
        http(
            &addr,
            "GET",
            "/",
            &["Authorization: Basic ZHE6czNjcmV0"],
            ""
        )
        .await
        .0,
        200
    );
}

#[tokio::test]
async fn a_store_that_does_not_answer_gives_a_503_page_saying_so() {
    let mut redis = RedisServer::start();
    let config = Config::builder().redis_url(redis.url()).build().unwrap();
    let client = Client::connect(config).await.unwrap();
    let addr = serve(client, Options::new()).await;
    redis.kill();
    let (status, text) = http(&addr, "GET", "/", &[], "").await;
    assert_eq!(status, 503, "{text}");
    assert!(text.contains("Could not read the topics"), "{text}");
    assert!(text.contains("works again once it answers"), "{text}");
}

#[tokio::test]
async fn every_page_answers_on_the_in_memory_store() {
    let addr = serve(memory_client().await, Options::new()).await;
    for path in [
        "/",
        "/fragments/topics",
        "/workers",
        "/topics/order-cancel",
        "/topics/order-cancel/jobs/o1",
        "/assets/dq.css",
        "/assets/dq.js",
    ] {
        let (status, text) = http(&addr, "GET", path, &[], "").await;
        assert_eq!(status, 200, "{path}: {text}");
    }
    let (status, text) = http(&addr, "GET", "/topics/order-cancel/jobs/nope", &[], "").await;
    assert_eq!(status, 404);
    assert!(text.contains("dq keeps no finished jobs"), "{text}");
    let (status, _) = http(&addr, "GET", "/topics/bad%20topic", &[], "").await;
    assert_eq!(status, 400, "an invalid topic name is the caller's mistake");
}

#[tokio::test]
async fn the_schedules_page_lists_them_and_pauses_resumes_and_runs_one() {
    let client = memory_client().await;
    let nightly = client.schedule("nightly").cron("0 3 * * *");
    nightly
        .tz("Europe/Paris")
        .topic("cleanup")
        .upsert()
        .await
        .unwrap();
    let addr = serve(client.clone(), Options::new()).await;
    let (status, page) = http(&addr, "GET", "/schedules", &[], "").await;
    assert_eq!(status, 200);
    assert!(page.contains("data-schedule=\"nightly\""), "{page}");
    assert!(
        page.contains("cron &quot;0 3 * * *&quot; in Europe/Paris")
            || page.contains("cron \"0 3 * * *\" in Europe/Paris"),
        "{page}"
    );
    let token = csrf(&addr).await;
    let body = format!("csrf={token}");
    let (status, text) = http(&addr, "POST", "/schedules/nightly/pause", &[], &body).await;
    assert_eq!(status, 303, "{text}");
    assert_eq!(client.schedules().await.unwrap()[0].next, None, "paused");
    http(&addr, "POST", "/schedules/nightly/resume", &[], &body).await;
    assert!(
        client.schedules().await.unwrap()[0].next.is_some(),
        "ticking again"
    );
    let (status, text) = http(&addr, "POST", "/schedules/nightly/run", &[], &body).await;
    assert_eq!(status, 303, "{text}");
    assert_eq!(
        client.counts("cleanup").await.unwrap().ready,
        1,
        "one job now"
    );
    let (status, _) = http(&addr, "POST", "/schedules/nope/pause", &[], &body).await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn after_an_action_the_dashboard_redirects_only_to_its_own_pages() {
    let client = memory_client().await;
    let addr = serve(client.clone(), Options::new()).await;
    let token = csrf(&addr).await;
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
        let encoded: String = form_urlencoded::byte_serialize(to.as_bytes()).collect();
        let body = format!("csrf={token}&return={encoded}");
        let (status, text) = http(&addr, "POST", "/topics/order-cancel/pause", &[], &body).await;
        assert_eq!(status, 303, "{text}");
        let location = text
            .lines()
            .find_map(|l| l.strip_prefix("location: "))
            .unwrap_or_default();
        assert!(
            location.starts_with("/topics/order-cancel?note="),
            "return {to:?} redirected to {location:?}"
        );
        let referer = format!("Referer: http://{addr}{}", to.replace('\t', "%09"));
        let (_, text) = http(
            &addr,
            "POST",
            "/topics/order-cancel/resume",
            &[&referer],
            &format!("csrf={token}"),
        )
        .await;
        let location = text
            .lines()
            .find_map(|l| l.strip_prefix("location: "))
            .unwrap_or_default();
        // (A Referer carries the tab percent-encoded: `/%09/evil.example/` is a path here.)
        let on_site = location.starts_with('/')
            && !location.starts_with("//")
            && !location.contains('\\')
            && !location.contains(char::is_whitespace);
        assert!(on_site, "Referer {to:?} redirected to {location:?}");
    }
    // A page of the dashboard is where it goes back to.
    let body = format!("csrf={token}&return=%2Fworkers");
    let (_, text) = http(&addr, "POST", "/topics/order-cancel/pause", &[], &body).await;
    assert!(text.contains("location: /workers?note="), "{text}");
}
