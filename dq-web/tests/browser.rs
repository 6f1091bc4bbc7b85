//! The dashboard in a real browser: Debian's `chromium`, headless, driven through `chromedriver`
//! (WebDriver) by fantoccini, against a real redis-server holding jobs in every state. Each
//! test loads pages, clicks what a person would click, and checks Redis afterwards. Screenshots
//! of every page go to `target/dq-web-screenshots/` for a person to look at.

#![allow(clippy::unwrap_used, unreachable_pub, missing_docs)] // test code: a panic is the report

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dq_core::store::{Leases, Registry};
use dq_core::{Client, Config, JobState, Topic};
use dq_redis::RedisStore;
use dq_testkit::RedisServer;
use dq_web::{Access, Options};
use fantoccini::{ClientBuilder, Locator};
use serde_json::json;

const TOPIC: &str = "order-cancel";
const XSS: &str = "<script>window.__dq_xss = 1</script><img src=x onerror=\"window.__dq_xss = 2\">";

/// A redis-server with jobs in every state, and the dashboard mounted under `/dq` of an axum
/// server on a loopback port.
struct Dashboard {
    _redis: RedisServer,
    client: Client,
    url: String,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for Dashboard {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl Dashboard {
    async fn start(options: Options) -> Dashboard {
        let redis = RedisServer::start();
        let config = Config::builder()
            .redis_url(redis.url())
            .namespace("web")
            .build()
            .unwrap();
        let store = Arc::new(RedisStore::connect(&config).await.unwrap());
        let client = Client::new(store.clone(), config);
        // Delayed: two jobs due in ten minutes, one of them with a payload that is an attack.
        let later = Some(Duration::from_secs(600));
        push(&client, "later-1", json!({ "order_id": 1 }), later).await;
        push(&client, "xss", json!({ "order_id": 2, "note": XSS }), later).await;
        // Running, done, dead, then ready (pushed last so that the fetches take the others).
        let topic = Topic::new(TOPIC).unwrap();
        for id in ["running", "done", "dead"] {
            push(&client, id, json!({ "order_id": id }), None).await;
        }
        let leased = store
            .fetch(0, &topic, 3, Duration::from_secs(600))
            .await
            .unwrap();
        let lease = |id: &str| {
            leased
                .jobs
                .iter()
                .find(|j| j.lease.id.as_str() == id)
                .unwrap()
                .lease
                .clone()
        };
        store.ack(&[lease("done")]).await.unwrap();
        store
            .dead_letter(&lease("dead"), "payment service answered 503")
            .await
            .unwrap();
        push(&client, "ready-1", json!({ "order_id": 4 }), None).await;
        // A worker process as the runtime registers it at each heartbeat.
        let mut worker = dq_core::WorkerInfo::for_this_process(vec![TOPIC.to_owned()]);
        worker.running = 1;
        store.register_worker(&worker).await.unwrap();
        client
            .push_to("reminder", &serde_json::json!({ "ride": 7 }))
            .delay(Duration::from_secs(1800))
            .await
            .unwrap();

        let app = axum::Router::new().nest("/dq", dq_web::router(client.clone(), options));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Dashboard {
            _redis: redis,
            client,
            url: format!("http://{addr}/dq"),
            server,
        }
    }

    /// The address of the dashboard's page `path` (`""`: the overview).
    fn page(&self, path: &str) -> String {
        format!("{}{path}", self.url)
    }

    async fn state_of(&self, id: &str) -> Option<JobState> {
        self.client
            .status_in(TOPIC, id)
            .await
            .unwrap()
            .map(|j| j.state)
    }
}

/// Job `id` of [`TOPIC`] carrying `payload`, due after `delay` (`None`: ready now).
async fn push(client: &Client, id: &str, payload: serde_json::Value, delay: Option<Duration>) {
    let push = client.push_to(TOPIC, &payload).id(id);
    let pushed = match delay {
        Some(delay) => push.delay(delay).await,
        None => push.await,
    };
    pushed.unwrap();
}

/// A dashboard with `options`, and a browser on its page `path` (`""`: the overview).
async fn browse(options: Options, path: &str) -> (Dashboard, Browser) {
    let dash = Dashboard::start(options).await;
    let b = Browser::start().await;
    b.open(&dash.page(path)).await;
    (dash, b)
}

/// Headless chromium driven by a chromedriver of the test's own; both end with the test.
struct Browser {
    driver: Child,
    web: fantoccini::Client,
    _profile: TempDir,
}

struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const INSTALL: &str = "the browser tests need Debian's chromium and chromedriver: apt-get install -y chromium chromium-driver (scripts/test does this for you)";

impl Browser {
    async fn start() -> Browser {
        for binary in ["chromium", "chromedriver"] {
            let found = Command::new(binary)
                .arg("--version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            assert!(
                found.is_ok_and(|s| s.success()),
                "{binary} is missing: {INSTALL}"
            );
        }
        let port = dq_testkit::unused_port();
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start chromedriver: {e}; {INSTALL}"));
        let profile = TempDir(
            std::env::temp_dir().join(format!("dq-web-chromium-{}-{port}", std::process::id())),
        );
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            serde_json::json!({
                "binary": "/usr/bin/chromium",
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                         "--window-size=1400,900", format!("--user-data-dir={}", profile.0.display())],
            }),
        );
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        let web = loop {
            match ClientBuilder::new(connector.clone())
                .capabilities(caps.clone())
                .connect(&format!("http://127.0.0.1:{port}"))
                .await
            {
                Ok(web) => break web,
                Err(e) if Instant::now() > deadline => {
                    panic!("chromedriver did not start a browser: {e}; {INSTALL}")
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        };
        Browser {
            driver,
            web,
            _profile: profile,
        }
    }

    /// The text of the first element `css` selects, read in one step (the live refresh may
    /// replace elements between a find and a read).
    async fn text(&self, css: &str) -> String {
        let found = self
            .web
            .execute(
                "const e = document.querySelector(arguments[0]); return e ? e.innerText.trim() : null;",
                vec![serde_json::json!(css)],
            )
            .await
            .unwrap();
        match found {
            serde_json::Value::String(text) => text,
            _ => panic!(
                "no {css} on the page {:?}",
                self.web.current_url().await.map(|u| u.to_string())
            ),
        }
    }

    /// Loads `url` (a page of the dashboard: `dash.url` and a path).
    async fn open(&self, url: &str) {
        self.web
            .goto(url)
            .await
            .unwrap_or_else(|e| panic!("cannot load {url}: {e}"));
    }

    /// The note of the action just taken, once the page it went back to has loaded.
    async fn note(&self) -> String {
        let web = &self.web;
        eventually("the note says what was done", || async move {
            web.find(Locator::Css("p.note")).await.is_ok()
        })
        .await;
        self.text("p.note").await
    }

    async fn click(&self, css: &str) {
        self.web
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("no {css} on the page: {e}"))
            .click()
            .await
            .unwrap();
    }

    async fn screenshot(&self, name: &str) {
        let png = self.web.screenshot().await.unwrap();
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/dq-web-screenshots");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("{name}.png")), &png).unwrap();
        // `DQ_UPDATE_SCREENSHOT=1` refreshes the picture README shows.
        if name == "overview" && std::env::var_os("DQ_UPDATE_SCREENSHOT").is_some() {
            let docs = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs");
            std::fs::create_dir_all(&docs).unwrap();
            std::fs::write(docs.join("dashboard.png"), &png).unwrap();
        }
    }

    async fn close(mut self) {
        let _ = self.web.clone().close().await;
        dq_testkit::process::kill(&mut self.driver);
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// Waits up to 10 s for `check` to hold (a page load or an action's redirect).
async fn eventually<F: std::future::Future<Output = bool>>(
    what: &str,
    mut check: impl FnMut() -> F,
) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn every_page_shows_the_right_counts_and_is_saved_as_a_screenshot() {
    let dash = Dashboard::start(Options::new()).await;
    let b = Browser::start().await;

    b.open(&dash.url).await;
    let row = format!("tr[data-topic='{TOPIC}']");
    let count = |state: &str| format!("{row} td[data-count='{state}']");
    assert_eq!(b.text(&count("delayed")).await, "2");
    assert_eq!(b.text(&count("ready")).await, "1");
    assert_eq!(b.text(&count("running")).await, "1");
    assert_eq!(b.text(&count("dead")).await, "1");
    let chart = b
        .web
        .find(Locator::Css(&format!("{row} svg.chart")))
        .await
        .unwrap();
    assert_eq!(
        chart.attr("aria-label").await.unwrap().as_deref(),
        Some("last hour: 1 done, 1 failed")
    );
    assert_eq!(
        b.text("tr[data-topic='reminder'] td[data-count='delayed']")
            .await,
        "1"
    );
    b.screenshot("overview").await;

    b.open(&dash.page(&format!("/topics/{TOPIC}?state=dead")))
        .await;
    assert_eq!(
        b.text("tr[data-id='dead'] td.error").await,
        "payment service answered 503"
    );
    b.screenshot("topic-dead").await;

    b.open(&dash.page(&format!("/topics/{TOPIC}?state=delayed")))
        .await;
    let ids: Vec<String> = futures_ids(&b).await;
    assert_eq!(ids, ["later-1", "xss"]);
    b.screenshot("topic-delayed").await;

    b.click("tr[data-id='later-1'] a").await;
    eventually("the job page loads", || async {
        b.web.find(Locator::Css("pre.payload")).await.is_ok()
    })
    .await;
    assert!(b.text("pre.payload").await.contains("\"order_id\": 1"));
    assert_eq!(b.text("h1 .badge").await, "delayed");
    b.screenshot("job").await;

    dash.client
        .schedule("weekday-report")
        .cron("0 9 * * MON-FRI")
        .tz("Europe/Paris")
        .topic("daily-report")
        .upsert()
        .await
        .unwrap();
    b.open(&dash.page("/schedules")).await;
    let row = "tr[data-schedule='weekday-report']";
    assert!(b.text(row).await.contains("Europe/Paris"));
    b.screenshot("schedules").await;

    b.open(&dash.page("/workers")).await;
    let worker = "table.workers tbody tr[data-worker]";
    assert!(b.text(worker).await.contains(TOPIC), "its topics");
    assert_eq!(
        b.text(&format!("{worker} td:nth-child(5)")).await,
        "1",
        "its running jobs"
    );
    let heartbeat = b.text(&format!("{worker} td:nth-child(7)")).await;
    let recent = heartbeat == "now"
        || heartbeat
            .strip_suffix("s ago")
            .and_then(|n| n.parse::<u64>().ok())
            .is_some_and(|n| n < 30);
    assert!(recent, "its last heartbeat, seconds ago: {heartbeat}");
    b.screenshot("workers").await;
    b.close().await;
}

async fn futures_ids(b: &Browser) -> Vec<String> {
    let mut ids = Vec::new();
    for row in b
        .web
        .find_all(Locator::Css("table.jobs tbody tr[data-id]"))
        .await
        .unwrap()
    {
        ids.push(row.attr("data-id").await.unwrap().unwrap());
    }
    ids.sort();
    ids
}

#[tokio::test]
async fn a_payload_holding_a_script_is_shown_as_text_and_never_runs() {
    let dash = Dashboard::start(Options::new()).await;
    let b = Browser::start().await;
    for page in [
        format!("{}/topics/{TOPIC}?state=delayed", dash.url),
        format!("{}/topics/{TOPIC}/jobs/xss", dash.url),
    ] {
        b.open(&page).await;
        let ran = b
            .web
            .execute(
                "return window.__dq_xss === undefined ? null : window.__dq_xss;",
                vec![],
            )
            .await
            .unwrap();
        assert_eq!(
            ran,
            serde_json::Value::Null,
            "the payload's script ran on {page}"
        );
    }
    assert!(
        b.text("pre.payload")
            .await
            .contains("<script>window.__dq_xss = 1</script>"),
        "shown as text"
    );
    b.screenshot("job-xss").await;
    b.close().await;
}

#[tokio::test]
async fn run_now_on_the_job_page_makes_a_delayed_job_ready_in_redis() {
    let (dash, b) = browse(Options::new(), &format!("/topics/{TOPIC}/jobs/later-1")).await;
    assert_eq!(dash.state_of("later-1").await, Some(JobState::Delayed));
    b.click("form[action$='/later-1/run'] button").await;
    assert_eq!(b.note().await, "later-1 is due now.");
    // Due now: the next promotion makes it ready; in the store it is due, not ten minutes out.
    let job = dash
        .client
        .status_in(TOPIC, "later-1")
        .await
        .unwrap()
        .unwrap();
    assert!(
        job.due <= std::time::SystemTime::now() + Duration::from_secs(1),
        "due now, was {:?}",
        job.due
    );
    b.close().await;
}

#[tokio::test]
async fn cancel_of_the_selected_jobs_on_the_topic_page_deletes_them() {
    let (dash, b) = browse(Options::new(), &format!("/topics/{TOPIC}?state=delayed")).await;
    b.click("input[data-select-all]").await;
    b.click("button[name='action'][value='cancel']").await;
    assert_eq!(b.note().await, "2 of 2 selected jobs cancelled.");
    assert_eq!(dash.state_of("later-1").await, None);
    assert_eq!(dash.state_of("xss").await, None);
    assert_eq!(
        dash.state_of("ready-1").await,
        Some(JobState::Ready),
        "other states untouched"
    );
    b.close().await;
}

#[tokio::test]
async fn retry_of_a_dead_letter_makes_it_ready_with_fresh_attempts() {
    let (dash, b) = browse(Options::new(), &format!("/topics/{TOPIC}/jobs/dead")).await;
    assert_eq!(b.text("h1 .badge").await, "dead");
    b.click("form[action$='/dead/retry'] button").await;
    eventually("the job page shows it ready", || async {
        b.web
            .find(Locator::Css("h1 .badge[data-state='ready']"))
            .await
            .is_ok()
    })
    .await;
    let job = dash.client.status_in(TOPIC, "dead").await.unwrap().unwrap();
    assert_eq!((job.state, job.attempt), (JobState::Ready, 0));
    b.close().await;
}

#[tokio::test]
async fn pause_on_the_overview_pauses_the_topic_for_every_worker() {
    let (dash, b) = browse(Options::new(), "").await;
    b.click(&format!(
        "tr[data-topic='{TOPIC}'] form[action$='/pause'] button"
    ))
    .await;
    b.note().await;
    assert!(dash.client.stats(TOPIC).await.unwrap().paused);
    assert_eq!(
        b.text(&format!("tr[data-topic='{TOPIC}'] .badge.paused"))
            .await,
        "paused"
    );
    b.close().await;
}

#[tokio::test]
async fn read_only_mode_shows_no_action_and_refuses_a_posted_one() {
    let dash = Dashboard::start(Options::new().read_only(true)).await;
    let b = Browser::start().await;
    for page in [
        "".to_owned(),
        format!("/topics/{TOPIC}?state=delayed"),
        format!("/topics/{TOPIC}/jobs/later-1"),
    ] {
        b.open(&dash.page(&page)).await;
        assert!(
            b.web
                .find_all(Locator::Css("form[method='post']"))
                .await
                .unwrap()
                .is_empty(),
            "an action on {page}"
        );
        assert_eq!(b.text("header .badge.readonly").await, "read-only");
    }
    b.screenshot("read-only").await;
    // A request forged from the page itself (same origin): refused, and the job stays.
    let status = b.web.execute(
        "return fetch(arguments[0], {method: 'POST', body: new URLSearchParams({csrf: 'x'})}).then(r => r.status);",
        vec![serde_json::json!(format!("{}/topics/{TOPIC}/jobs/later-1/cancel", dash.url))],
    ).await.unwrap();
    assert_eq!(status, serde_json::json!(403));
    assert_eq!(dash.state_of("later-1").await, Some(JobState::Delayed));
    b.close().await;
}

#[tokio::test]
async fn the_numbers_update_live_without_a_reload() {
    let (dash, b) = browse(Options::new().refresh(Duration::from_millis(300)), "").await;
    let cell = format!("tr[data-topic='{TOPIC}'] td[data-count='delayed']");
    assert_eq!(b.text(&cell).await, "2");
    dash.client
        .push_to(TOPIC, &1)
        .delay(Duration::from_secs(60))
        .await
        .unwrap();
    eventually("the delayed count shows the new job", || async {
        b.text(&cell).await == "3"
    })
    .await;
    b.close().await;
}

#[tokio::test]
async fn the_authorize_hook_decides_per_request() {
    let dash = Dashboard::start(
        Options::new().authorize(|request| match request.uri.query() {
            Some(q) if q.contains("who=viewer") => Access::ReadOnly,
            Some(q) if q.contains("who=admin") => Access::Full,
            _ => Access::Denied,
        }),
    )
    .await;
    let b = Browser::start().await;
    b.open(&dash.page("?who=nobody")).await;
    assert!(b.web.source().await.unwrap().contains("403"));
    b.open(&dash.page("?who=viewer")).await;
    assert_eq!(b.text("header .badge.readonly").await, "read-only");
    b.open(&dash.page("?who=admin")).await;
    assert!(!b
        .web
        .find_all(Locator::Css("form[method='post']"))
        .await
        .unwrap()
        .is_empty());
    b.close().await;
}

#[tokio::test]
async fn delete_every_dead_letter_asks_first_and_deletes_only_when_confirmed() {
    let (dash, b) = browse(Options::new(), &format!("/topics/{TOPIC}?state=dead")).await;
    let purge = "form[action$='/dead/purge'] button";
    b.click(purge).await;
    b.web.dismiss_alert().await.unwrap();
    assert_eq!(
        dash.state_of("dead").await,
        Some(JobState::Dead),
        "kept when dismissed"
    );
    b.click(purge).await;
    b.web.accept_alert().await.unwrap();
    assert_eq!(b.note().await, "1 dead letter deleted.");
    assert_eq!(dash.state_of("dead").await, None);
    b.close().await;
}
