//! Traces across processes (feature `otel`): a push made in a span records the span's W3C
//! trace context in the job, and the job's run, in another process, continues that trace: its
//! `job` span is the child of the pushing span on the first run, and a retry's run (or a
//! schedule tick's) links to it instead.
//!
//! The cross-process test runs this binary twice more, as the producer and as the worker, both
//! on one redis-server; each exports its spans with an in-memory exporter and writes them to a
//! file as JSON lines, which the test reads. The other tests run in one process, on the memory
//! store, with the tracing layer installed for the test's thread only.

#![cfg(feature = "otel")]
#![allow(clippy::unwrap_used, unreachable_pub)] // test code: a panic is the failure report

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dq::push::OnConflict;
use dq::schedule::Tick;
use dq::store::{MemoryStore, NewJob, Store};
use dq::{Backoff, Config, JobContext, Listener, Runtime};
use opentelemetry::trace::{SpanId, TracerProvider as _};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use serde_json::{json, Value};
use support::{id, lease_one, topic, RedisServer, TestClient};
use tracing::Instrument;
use tracing_subscriber::layer::SubscriberExt;

/// The topic of every job here.
const TOPIC: &str = "otel-orders";

/// The longest any wait here may take (a child's whole run takes a second or two).
const LIMIT: Duration = Duration::from_secs(15);

/// What a child process plays: `producer` or `worker` (unset: not a child).
const ROLE: &str = "DQ_OTEL_ROLE";

/// The file a child writes its finished spans to.
const SPANS: &str = "DQ_OTEL_SPANS";

/// A tracer provider that exports each finished span to memory, the exporter, and a subscriber
/// whose tracing-opentelemetry layer makes the spans with it.
fn tracing_to_memory() -> (
    SdkTracerProvider,
    InMemorySpanExporter,
    impl tracing::Subscriber + Send + Sync + 'static,
) {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("dq-test"));
    (
        provider,
        exporter,
        tracing_subscriber::registry().with(layer),
    )
}

/// The finished spans named `name`, once there are `n` of them (fails the test after [`LIMIT`]).
async fn finished(exporter: &InMemorySpanExporter, name: &str, n: usize) -> Vec<SpanData> {
    let deadline = Instant::now() + LIMIT;
    loop {
        let spans = exporter.get_finished_spans().unwrap();
        let named: Vec<SpanData> = spans.into_iter().filter(|s| s.name == name).collect();
        if named.len() >= n {
            return named;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {n} `{name}` spans finished",
            named.len()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A span context's ids, as the children write them.
fn ids(cx: &opentelemetry::trace::SpanContext) -> Value {
    json!({
        "trace_id": cx.trace_id().to_string(),
        "span_id": cx.span_id().to_string(),
    })
}

/// A span as the children write it and the test reads it.
fn span_json(span: &SpanData) -> Value {
    let attributes: serde_json::Map<String, Value> = span
        .attributes
        .iter()
        .map(|kv| (kv.key.to_string(), Value::String(kv.value.to_string())))
        .collect();
    json!({
        "name": span.name.to_string(),
        "trace_id": span.span_context.trace_id().to_string(),
        "span_id": span.span_context.span_id().to_string(),
        "parent_span_id": span.parent_span_id.to_string(),
        "links": span.links.iter().map(|l| ids(&l.span_context)).collect::<Vec<_>>(),
        "attributes": attributes,
    })
}

/// Writes the finished spans of `exporter` to `path`, one JSON object a line.
fn write_spans(exporter: &InMemorySpanExporter, path: &Path) {
    let spans = exporter.get_finished_spans().unwrap();
    let lines: Vec<String> = spans.iter().map(|s| span_json(s).to_string()).collect();
    std::fs::write(path, lines.join("\n")).unwrap();
}

/// The producer and the worker of the cross-process test: this binary run again with [`ROLE`]
/// set; does nothing in a normal run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otel_process() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let (provider, exporter, subscriber) = tracing_to_memory();
    tracing::subscriber::set_global_default(subscriber).unwrap();
    let config = Config::builder()
        .redis_url(std::env::var("DQ_REDIS_URL").unwrap())
        .namespace("otel")
        .build()
        .unwrap();
    match role.as_str() {
        "producer" => {
            let client = dq::Client::connect(config).await.unwrap();
            let push = client
                .push_to(TOPIC, &json!({ "order": 42 }))
                .id("order-42");
            let request = tracing::info_span!("http.request");
            push.send().instrument(request).await.unwrap();
        }
        "worker" => {
            // The first run fails and is retried 10 ms later; the second succeeds. Each makes
            // a span of its own inside the run's.
            let listener = Listener::new(TOPIC, |_: Value, ctx: JobContext| async move {
                tracing::info_span!("charge").in_scope(|| tracing::info!("charging"));
                match ctx.attempt() {
                    1 => Err("the payment service is down".to_owned()),
                    _ => Ok(()),
                }
            })
            .backoff(Backoff::exponential(Duration::from_millis(10)));
            let rt = Runtime::builder()
                .config(config)
                .without_registered_listeners()
                .listener(listener)
                .start()
                .await
                .unwrap();
            let runs = finished(&exporter, "job", 2).await;
            rt.shutdown().await.unwrap();
            assert_eq!(runs.len(), 2, "one job, two runs");
        }
        other => panic!("unknown role {other}"),
    }
    provider.force_flush().unwrap();
    write_spans(&exporter, Path::new(&std::env::var(SPANS).unwrap()));
}

/// A child process, killed (by its pid) when dropped if it has not ended.
struct ChildProcess(Child);

impl Drop for ChildProcess {
    fn drop(&mut self) {
        dq_testkit::process::kill(&mut self.0);
    }
}

/// Starts this binary as `role` on `redis`, writing its spans to `spans`.
fn start(role: &str, redis: &RedisServer, spans: &Path) -> ChildProcess {
    let mut cmd = dq_testkit::process::this_test("otel_process").unwrap();
    cmd.env(ROLE, role)
        .env("DQ_REDIS_URL", redis.url())
        .env(SPANS, spans)
        .stdout(Stdio::null());
    ChildProcess(cmd.spawn().unwrap())
}

/// Waits for `child` to exit successfully within [`LIMIT`], then reads the spans it wrote.
async fn spans_of(mut child: ChildProcess, role: &str, spans: &Path) -> Vec<Value> {
    let deadline = Instant::now() + LIMIT;
    let status = loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the {role} still runs after {LIMIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(status.success(), "the {role} failed: {status}");
    let text = std::fs::read_to_string(spans).unwrap();
    let _ = std::fs::remove_file(spans);
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The one span named `name` among `spans`.
fn named<'a>(spans: &'a [Value], name: &str) -> &'a Value {
    let mut found = spans.iter().filter(|s| s["name"] == name);
    let span = found
        .next()
        .unwrap_or_else(|| panic!("no `{name}` span in {spans:?}"));
    assert!(found.next().is_none(), "one `{name}` span in {spans:?}");
    span
}

/// The `job` span of run `attempt` among `spans`.
fn run<'a>(spans: &'a [Value], attempt: &str) -> &'a Value {
    let mut runs = spans
        .iter()
        .filter(|s| s["name"] == "job" && s["attributes"]["attempt"] == attempt);
    runs.next()
        .unwrap_or_else(|| panic!("no run {attempt} in {spans:?}"))
}

/// Where the child `role` of this test writes its spans.
fn spans_file(role: &str) -> PathBuf {
    std::env::temp_dir().join(format!("dq-otel-{}-{role}.jsonl", std::process::id()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_trace_goes_from_a_push_in_one_process_to_its_handler_in_another() {
    let redis = RedisServer::start();
    let (worker_spans, producer_spans) = (spans_file("worker"), spans_file("producer"));
    let worker = start("worker", &redis, &worker_spans);
    let producer = start("producer", &redis, &producer_spans);
    let produced = spans_of(producer, "producer", &producer_spans).await;
    let worked = spans_of(worker, "worker", &worker_spans).await;

    let request = named(&produced, "http.request");
    // The first run: in the request's trace, the child of the span the push was made in.
    let first = run(&worked, "1");
    assert_eq!(first["trace_id"], request["trace_id"], "one trace: {first}");
    assert_eq!(first["parent_span_id"], request["span_id"], "{first}");
    assert_eq!(first["links"], json!([]), "{first}");
    assert_eq!(first["attributes"]["messaging.system"], "dq", "{first}");
    assert_eq!(first["attributes"]["messaging.message.id"], "order-42");
    // The handler's own span is inside its run's.
    let charge = worked
        .iter()
        .find(|s| s["name"] == "charge" && s["trace_id"] == request["trace_id"])
        .unwrap_or_else(|| panic!("the first run's handler span: {worked:?}"));
    assert_eq!(charge["parent_span_id"], first["span_id"]);
    // The retry: a trace of its own, linked to the span the push was made in.
    let second = run(&worked, "2");
    assert_ne!(second["trace_id"], request["trace_id"], "{second}");
    assert_eq!(
        second["parent_span_id"],
        SpanId::INVALID.to_string(),
        "a root"
    );
    let pushed_in = json!([{ "trace_id": request["trace_id"], "span_id": request["span_id"] }]);
    assert_eq!(second["links"], pushed_in, "{second}");
}

/// A client on a fresh memory store, with its store.
fn memory_client() -> TestClient {
    TestClient::new(
        Arc::new(MemoryStore::new()),
        Config::builder().build().unwrap(),
    )
}

#[tokio::test]
async fn a_job_pushed_outside_any_span_carries_no_trace_context() {
    let (_provider, _exporter, subscriber) = tracing_to_memory();
    let _traced = tracing::subscriber::set_default(subscriber);
    let c = memory_client();
    c.push_to(TOPIC, &1).id("plain").await.unwrap();
    let job = lease_one(c.store(), TOPIC).await;
    assert_eq!(job.envelope.trace, None);
}

#[tokio::test]
async fn a_job_pushed_in_a_span_carries_the_spans_traceparent() {
    let (provider, exporter, subscriber) = tracing_to_memory();
    let _traced = tracing::subscriber::set_default(subscriber);
    let c = memory_client();
    let push = c.push_to(TOPIC, &1).id("traced");
    let request = tracing::info_span!("http.request");
    push.send().instrument(request).await.unwrap();
    provider.force_flush().unwrap();
    let request = finished(&exporter, "http.request", 1).await.remove(0);
    let cx = &request.span_context;
    let expected = format!("00-{}-{}-01", cx.trace_id(), cx.span_id());
    let job = lease_one(c.store(), TOPIC).await;
    assert_eq!(job.envelope.trace, Some(expected));
}

#[tokio::test]
async fn a_job_whose_trace_context_is_garbage_runs_as_a_trace_of_its_own() {
    let (provider, exporter, subscriber) = tracing_to_memory();
    let _traced = tracing::subscriber::set_default(subscriber);
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let ran = Arc::new(AtomicU32::new(0));
    let counter = ran.clone();
    let listener = Listener::new(TOPIC, move |_: Value, _: JobContext| {
        let counter = counter.clone();
        async move {
            counter.fetch_add(1, Ordering::SeqCst);
        }
    });
    let rt = Runtime::builder()
        .store(store.clone())
        .without_registered_listeners()
        .listener(listener)
        .start()
        .await
        .unwrap();
    let job = NewJob {
        topic: topic(TOPIC),
        id: id("garbled"),
        due: dq::Due::After(Duration::ZERO),
        max_attempts: 1,
        unique_for: None,
        fence: None,
        trace: Some("00-not-a-traceparent".to_owned()),
        priority: 0,
        group: None,
        id_drawn: false,
        payload: b"{}".to_vec(),
    };
    store.push(vec![job], OnConflict::Keep).await.unwrap();
    let run = finished(&exporter, "job", 1).await.remove(0);
    rt.shutdown().await.unwrap();
    provider.force_flush().unwrap();
    assert_eq!(ran.load(Ordering::SeqCst), 1, "the handler ran");
    assert_eq!(run.parent_span_id, SpanId::INVALID, "a root");
    assert!(run.links.is_empty());
    let logged = run
        .events
        .iter()
        .any(|e| e.name.contains("does not read as W3C"));
    assert!(
        logged,
        "the bad context is logged in the run's span: {:?}",
        run.events
    );
}

#[tokio::test]
async fn a_ticks_run_links_to_the_span_that_fired_the_tick() {
    let (_provider, exporter, subscriber) = tracing_to_memory();
    let _traced = tracing::subscriber::set_default(subscriber);
    let listener = Listener::new(TOPIC, |_: Tick| async {}).every(Duration::from_secs(1));
    let rt = Runtime::builder()
        .store(Arc::new(MemoryStore::new()))
        .without_registered_listeners()
        .listener(listener)
        .start()
        .await
        .unwrap();
    let run = finished(&exporter, "job", 1).await.remove(0);
    rt.shutdown().await.unwrap();
    let ticks = finished(&exporter, "tick", 1).await;
    assert_eq!(
        run.parent_span_id,
        SpanId::INVALID,
        "a root, not the tick's child"
    );
    let [link] = &run.links.links[..] else {
        panic!("one link: {:?}", run.links);
    };
    let fired = ticks
        .iter()
        .find(|t| t.span_context.span_id() == link.span_context.span_id())
        .unwrap_or_else(|| panic!("the link is to a tick span: {link:?} {ticks:?}"));
    assert_eq!(link.span_context.trace_id(), fired.span_context.trace_id());
    assert_ne!(run.span_context.trace_id(), fired.span_context.trace_id());
}
