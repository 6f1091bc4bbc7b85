//! The metrics dq records, through the `metrics` facade: install any recorder (or the built-in
//! Prometheus exporter, feature `prometheus`) and they appear.
//!
//! | name | kind | labels | meaning |
//! | --- | --- | --- | --- |
//! | `dq_jobs_pushed_total` | counter | topic | jobs created or replaced by pushes of this process |
//! | `dq_pushes_refused_full_total` | counter | topic | jobs a push of this process refused because their topic was at its `max_pending` (nothing stored) |
//! | `dq_jobs_started_total` | counter | topic | handler runs started |
//! | `dq_jobs_succeeded_total` | counter | topic | runs that finished the job |
//! | `dq_jobs_failed_total` | counter | topic | runs that failed (error, panic, timeout) |
//! | `dq_jobs_timed_out_total` | counter | topic | runs cancelled by their timeout |
//! | `dq_jobs_retried_total` | counter | topic | failed jobs scheduled to run again |
//! | `dq_jobs_postponed_total` | counter | topic | jobs whose handler asked to run again later (`Outcome::RetryAfter`; no attempt spent) |
//! | `dq_jobs_rate_limited_total` | counter | topic | runs whose handler met its provider's rate limit (`Outcome::RateLimited`): the topic was held back in every process, the job went back to ready, no attempt spent |
//! | `dq_fetches_at_capacity_total` | counter | topic | fetches of this process that the topic's global concurrency cut short while jobs were ready; the consumer waited for a lease to end (over several shards, also a fetch that found no slot free, ready jobs or not: it asks its shard nothing) |
//! | `dq_fetches_throttled_total` | counter | topic | fetches of this process that the topic's rate limit (or a hold) cut short while jobs were ready; the consumer waited for the next start allowed |
//! | `dq_jobs_dead_lettered_total` | counter | topic | jobs moved to the dead letters (poison included) |
//! | `dq_jobs_held_by_group_rate_total` | counter | topic | ready jobs a fetch of this process found whose group had used its rate (`group_rate`): each went back to wait for its group's next turn |
//! | `dq_jobs_taken_back_total` | counter | topic | jobs of a fetch whose reply was lost, taken back by the consumer's next fetch (no run counted) |
//! | `dq_leases_lost_total` | counter | topic | runs whose lease was found lost while the handler ran (the job may run elsewhere too) |
//! | `dq_jobs_cancelled_total` | counter | topic | running jobs a cancel asked to stop whose run then ended without success: deleted, not retried (a run that succeeds anyway counts as succeeded) |
//! | `dq_progress_reports_total` | counter | topic | progress reports (`ctx.progress`) written to the store (those of a run that lost its lease are not) |
//! | `dq_results_kept_total` | counter | topic | succeeded jobs acked with their record kept: the listener has a retention (`retain`) |
//! | `dq_waits_total` | counter | topic, answer | waits for a job's end (`Client::wait`, any process that waits, not only workers), by answer: `finished` (succeeded), `dead`, `not_kept` (no retention), `cancelled`, `not_found`, `timed_out` |
//! | `dq_events_read_total` | counter | topic | job events this process' readers (`Client::events`) handed out |
//! | `dq_events_missed_total` | counter | topic | job events a reader of this process missed: trimmed past the topic's `events_cap` before it read them (`EventItem::Lagged`) |
//! | `dq_events_behind_seconds` | gauge | topic | how old the latest event a reader of this process handed out was when it did (set at each event handed out: a reader that stopped keeps its last value, and shows as `rate(dq_events_read_total)` at 0) |
//! | `dq_job_lateness_seconds` | histogram | topic | start of a run minus the job's due time |
//! | `dq_job_duration_seconds` | histogram | topic | how long handlers ran |
//! | `dq_queue_jobs` | gauge | topic, state | jobs delayed, ready, running, dead, and `done`: the records of succeeded jobs kept (every 5 s) |
//! | `dq_queue_lag_seconds` | gauge | topic | age of the oldest ready job: how far behind workers are |
//! | `dq_queue_group_waiting_max` | gauge | topic | the most jobs one group has waiting for a slot (its busiest group's, 0 when none waits; the group is named by `dq groups`, not a label) |
//! | `dq_topic_limit` | gauge | topic, limit | each flow limit, 0 when none: `max_pending`, `global_concurrency`, `rate_per_second`, `group_concurrency` (1 by default), `group_rate_per_second` (every 5 s) |
//! | `dq_topic_limit_used_ratio` | gauge | topic, limit | how much of a limit is used: pending jobs over `max_pending`, running jobs over `global_concurrency`, and for `rate_per_second` the runs that ended in the last full minute over the starts the rate allows in a minute (`Throughput::rate_used`: more minutes for a slow rate; 0 under two starts an hour; postponed, 429'd and cancelled runs not counted) (0 when the topic has no such limit) |
//! | `dq_topic_held_seconds` | gauge | topic | seconds left of a hold a handler asked for (`Outcome::RateLimited`), 0 when none |
//! | `dq_first_shard_calls_total` | counter | topic, limit, call, outcome | calls this process made to the namespace's first shard, which counts a `rate` or `global_concurrency` for every shard of a namespace of several (a cluster, or `DQ_SHARDS` above 1): `call` `take`, `give_back`, `free` or `renew`; `outcome` `ok`, `failed`, or `late` (a rate's give-back dropped after a later grant or a start in the first shard). Recorded by the Redis store, none on one shard |

use std::time::Duration;

use dq_core::metric;
use dq_core::{Client, TopicStats};
use tokio_util::sync::CancellationToken;

/// Buckets for the two histograms, in seconds: lateness matters at the millisecond.
pub const SECONDS_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0, 300.0,
];

pub(crate) fn started(topic: &str, lateness: Duration) {
    metrics::counter!(metric::JOBS_STARTED, "topic" => topic.to_owned()).increment(1);
    metrics::histogram!(metric::JOB_LATENESS, "topic" => topic.to_owned())
        .record(lateness.as_secs_f64());
}

pub(crate) fn finished(topic: &str, took: Duration) {
    metrics::histogram!(metric::JOB_DURATION, "topic" => topic.to_owned())
        .record(took.as_secs_f64());
}

pub(crate) fn count(name: &'static str, topic: &str) {
    count_n(name, topic, 1);
}

pub(crate) fn count_n(name: &'static str, topic: &str, n: usize) {
    let n = u64::try_from(n).unwrap_or(u64::MAX);
    metrics::counter!(name, "topic" => topic.to_owned()).increment(n);
}

/// Publishes the depth of each topic's queue and its flow limits every 5 s until `stop`
/// (shutdown), read through the client (`Client::stats`).
pub(crate) async fn queue_gauges(
    client: Client,
    stop: CancellationToken,
    topics: Vec<dq_core::Topic>,
) {
    loop {
        // Lag by the store's clock, as due times are stamped (this host's clock may be off).
        let now = client.store_time().await;
        for topic in &topics {
            if let (Ok(s), Ok(now)) = (client.stats(topic.as_str()).await, &now) {
                // The last hour's runs, read only for a topic with a rate (how much of it the
                // last full minute used).
                let hour = match s.rate {
                    Some(_) => Some(client.throughput(topic.as_str()).await),
                    None => None,
                };
                limit_gauges(topic.as_str(), &s, hour.as_ref(), *now);
                let t = topic.to_string();
                for (state, n) in [
                    ("delayed", s.counts.delayed),
                    ("ready", s.counts.ready),
                    ("running", s.counts.running),
                    ("dead", s.counts.dead),
                    ("done", s.counts.done),
                ] {
                    metrics::gauge!(metric::QUEUE_JOBS, "topic" => t.clone(), "state" => state)
                        .set(n as f64);
                }
                let lag = s
                    .oldest_ready_due
                    .and_then(|d| now.duration_since(d).ok())
                    .unwrap_or_default();
                metrics::gauge!(metric::QUEUE_LAG, "topic" => t.clone()).set(lag.as_secs_f64());
                let most = s.busiest_groups.first().map_or(0, |g| g.waiting);
                metrics::gauge!(metric::QUEUE_GROUP_WAITING_MAX, "topic" => t).set(most as f64);
            }
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(5)) => {}
        }
    }
}

/// The gauges of `topic`'s flow limits (`dq_topic_limit`, `dq_topic_limit_used_ratio`,
/// `dq_topic_held_seconds`) from its stats and its last hour's runs (`hour`, read for a topic
/// with a rate), at the store's time `now`.
fn limit_gauges(
    topic: &str,
    s: &TopicStats,
    hour: Option<&dq_core::Result<dq_core::Throughput>>,
    now: std::time::SystemTime,
) {
    let per_second =
        |r: Option<dq_core::Rate>| r.map_or(0.0, |r| r.count() as f64 / r.period().as_secs_f64());
    let c = &s.counts;
    let pending = c.delayed + c.ready + c.running;
    // How much of a limit is used; 0 once the limit is lifted: the ratio of a limit gone is
    // not left as it was.
    let over = |used: u64, limit: Option<f64>| limit.map_or(0.0, |l| used as f64 / l.max(1.0));
    for (limit, value, ratio) in [
        (
            "max_pending",
            s.max_pending.map(|m| m as f64),
            Some(over(pending, s.max_pending.map(|m| m as f64))),
        ),
        (
            "global_concurrency",
            s.global_concurrency.map(f64::from),
            Some(over(c.running, s.global_concurrency.map(f64::from))),
        ),
        // The share of the rate its window's runs used: 0 without a rate or for one too slow
        // to measure; the last value stands when the hour could not be read.
        (
            "rate_per_second",
            s.rate.map(|_| per_second(s.rate)),
            match (s.rate, hour) {
                (Some(r), Some(Ok(h))) => Some(h.rate_used(r).unwrap_or(0.0)),
                (Some(_), _) => None,
                (None, _) => Some(0.0),
            },
        ),
        (
            "group_concurrency",
            Some(f64::from(s.group_concurrency.unwrap_or(1))),
            None,
        ),
        (
            "group_rate_per_second",
            s.group_rate.map(|_| per_second(s.group_rate)),
            None,
        ),
    ] {
        let labels = [("topic", topic.to_owned()), ("limit", limit.to_owned())];
        metrics::gauge!(metric::TOPIC_LIMIT, &labels).set(value.unwrap_or(0.0));
        if let Some(ratio) = ratio {
            metrics::gauge!(metric::TOPIC_LIMIT_USED, &labels).set(ratio);
        }
    }
    let held = s
        .held_until
        .and_then(|end| end.duration_since(now).ok())
        .unwrap_or_default();
    metrics::gauge!(metric::TOPIC_HELD, "topic" => topic.to_owned()).set(held.as_secs_f64());
}

/// Installs the Prometheus exporter, serving `GET /metrics` (any path) on `addr`.
#[cfg(feature = "prometheus")]
pub(crate) fn install_prometheus(addr: std::net::SocketAddr) -> dq_core::Result<()> {
    use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
    PrometheusBuilder::new()
        .with_http_listener(addr)
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS_BUCKETS)
        .and_then(|b| b.install())
        .map_err(|e| dq_core::Error::Config {
            key: "metrics_addr",
            value: addr.to_string(),
            reason: format!("cannot serve Prometheus metrics there: {e}"),
        })
}
