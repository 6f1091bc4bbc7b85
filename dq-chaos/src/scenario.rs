//! The scenarios of issue 7, each in a short size (run by `scripts/test`) and a full size
//! (`dq-chaos --full`). Each returns its report with `ok` and the reasons it is not.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::harness::{now_us, produce, Harness, PushPlan, Pushes};
use crate::ledger::Run;
use crate::setup::{
    drain_acked, figures, finish, load, load_until_fault, one_fault, plan, secs, sleep_until,
    worker, Outcome, PLAIN,
};
use crate::worker::WorkerArgs;

/// Every scenario, in the order `all` runs them. (`sabotage` is not among them: it deletes a
/// job behind dq's back to show that the oracle notices, and so must fail.)
pub(crate) const ALL: &[&str] = &[
    "worker-kill",
    "sigterm",
    "client-kill",
    "client-pause",
    "debug-sleep",
    "redis-kill-always",
    "redis-kill-everysec",
    "same-ms",
    "inflight-kill",
    "maxmemory",
    "blackhole",
    "cluster-failover",
    "shard-stall",
    "cluster-reshard",
    "groups-reshard",
    "diamond-reshard",
    "cluster-failover-wait",
    "cron-skew",
    "redis-empty-restart",
    "redis-stall",
    "maxmemory-long",
    "replica-demote",
    "flow-limits",
    "flow-limits-cluster",
    "flow-all",
    "flow-all-cluster",
    "groups",
    "groups-cluster",
    "groups-shards",
    "group-rate",
    "diamond",
    "diamond-cluster",
];

/// The longest acceptable wait, after a silent network is back, for the next job to finish.
const BLACKHOLE_RECOVERY_MS: f64 = 20_000.0;

const SLOWLOG: &[&str] = &[
    "--save",
    "",
    "--appendonly",
    "no",
    "--slowlog-log-slower-than",
    "0",
    "--slowlog-max-len",
    "1000000",
];

/// Runs one scenario and returns its JSON line.
pub(crate) async fn run(name: &str, full: bool, seed: u64, keep: bool) -> anyhow::Result<Value> {
    let started = Instant::now();
    let (mut h, pushes, mut extra) = run_until_drained(name, full, seed).await?;
    h.stop_workers().await;
    let mut report = h.report(&pushes).await?;
    let mut failures = common_failures(name, &report);
    own_failures(name, &report, &h, &pushes, &mut extra, &mut failures);
    let ok = failures.is_empty();
    h.cleanup(keep || (!ok && name != "sabotage"));
    let obj = report.as_object_mut().expect("the report is an object");
    obj.insert("scenario".into(), json!(name));
    obj.insert("size".into(), json!(if full { "full" } else { "short" }));
    obj.insert("seed".into(), json!(seed));
    obj.extend(extra);
    obj.insert("ok".into(), json!(ok));
    obj.insert("failures".into(), json!(failures));
    obj.insert("elapsed_s".into(), json!(started.elapsed().as_secs_f64()));
    Ok(report)
}

/// Runs the scenario `name` through its faults and the drain.
async fn run_until_drained(name: &str, full: bool, seed: u64) -> anyhow::Result<Outcome> {
    match name {
        "worker-kill" => worker_kill(full, seed).await,
        "sigterm" => sigterm(full, seed).await,
        "client-kill" => client_kill(full, seed).await,
        "client-pause" => client_pause(full, seed).await,
        "debug-sleep" => debug_sleep(full, seed).await,
        "redis-kill-always" => redis_kill(full, seed, "always").await,
        "redis-kill-everysec" => redis_kill(full, seed, "everysec").await,
        "same-ms" => same_ms(full, seed).await,
        "inflight-kill" => inflight_kill(full, seed).await,
        "maxmemory" => maxmemory(full, seed).await,
        "blackhole" => blackhole(full, seed).await,
        "shard-stall" => shard_stall(full, seed).await,
        "cluster-reshard" => cluster_reshard(full, seed, Reshard::Plain).await,
        "groups-reshard" => cluster_reshard(full, seed, Reshard::Groups).await,
        "diamond-reshard" => cluster_reshard(full, seed, Reshard::Diamonds).await,
        "sabotage" => sabotage(seed).await,
        "cluster-failover" => cluster_failover(full, seed, false).await,
        "cluster-failover-wait" => cluster_failover(full, seed, true).await,
        "cron-skew" => cron_skew(full, seed).await,
        "redis-empty-restart" => crate::bad_states::redis_empty_restart(full, seed).await,
        "redis-stall" => crate::bad_states::redis_stall(full, seed).await,
        "maxmemory-long" => crate::bad_states::maxmemory_long(full, seed).await,
        "replica-demote" => crate::bad_states::replica_demote(full, seed).await,
        "flow-limits" => flow_limits(full, seed, false).await,
        "flow-limits-cluster" => flow_limits(full, seed, true).await,
        "flow-all" => flow_all(full, seed, false).await,
        "flow-all-cluster" => flow_all(full, seed, true).await,
        "groups" => groups(full, seed, false).await,
        "groups-cluster" => groups(full, seed, true).await,
        "groups-shards" => groups_over_shards(full, seed).await,
        "group-rate" => group_rate(full, seed).await,
        "diamond" => crate::diamond::diamond(full, seed, false).await,
        "diamond-cluster" => crate::diamond::diamond(full, seed, true).await,
        other => anyhow::bail!("unknown scenario {other:?}; the scenarios are {ALL:?}"),
    }
}

/// What fails every scenario: acknowledged jobs lost, ids run as two jobs, Redis not clean
/// after the drain, a malformed ledger (each but where `name` allows it).
fn common_failures(name: &str, report: &Value) -> Vec<String> {
    let mut failures: Vec<String> = Vec::new();
    let n = |k: &str| report[k].as_u64().unwrap_or(u64::MAX);
    // Where Redis may lose acknowledged writes by design, the loss is measured, not failed.
    let everysec = matches!(name, "redis-kill-everysec" | "cluster-failover");
    if n("lost") > 0 && !everysec {
        failures.push(format!("{} acknowledged jobs were lost", n("lost")));
    }
    // A failover onto a lagging replica also rolls back fetches and acks: jobs that ran in the
    // lag run again, as attempt 1 (WAIT covers pushes only). Measured there, not failed.
    let rollback = name.starts_with("cluster-failover");
    if n("second_jobs") > 0 && !rollback {
        failures.push(format!(
            "{} ids ran as two jobs (a retried push made a second one)",
            n("second_jobs")
        ));
    }
    if report["redis_after"]["clean"] != json!(true) && !everysec {
        failures.push(format!(
            "Redis is not clean after the drain: {}",
            report["redis_after"]
        ));
    }
    if n("ledger_malformed") > 0 {
        failures.push("malformed ledger lines".into());
    }
    failures
}

/// Adds to `failures` what fails scenario `name` by its own rules, then the failures it found
/// itself (`extra["failures"]`, taken out of `extra`).
fn own_failures(
    name: &str,
    report: &Value,
    h: &Harness,
    pushes: &Pushes,
    extra: &mut serde_json::Map<String, Value>,
    failures: &mut Vec<String>,
) {
    let n = |k: &str| report[k].as_u64().unwrap_or(u64::MAX);
    if name == "sigterm" {
        if n("duplicated") > 0 {
            failures.push(format!(
                "{} jobs ran twice across graceful shutdowns",
                n("duplicated")
            ));
        }
        let limit = h.worker.grace_ms + 1_000;
        if h.exit_ms.iter().any(|&ms| ms > limit) {
            failures.push(format!(
                "a worker took longer than grace + 1 s ({limit} ms) to exit: {:?}",
                h.exit_ms
            ));
        }
        extra.insert("exit_ms_max".into(), json!(h.exit_ms.iter().max()));
    }
    if name.starts_with("flow-") || name.starts_with("groups") || name == "group-rate" {
        // The limits are judged on every run that started: those a kill cut too, each until
        // its worker was killed (ledger.rs).
        let (runs, unended) = match h.ledger.with_cut_runs(&h.dir, &h.ended_us) {
            Ok(read) => read,
            Err(e) => {
                failures.push(format!("reading the runs' starts: {e}"));
                (h.ledger.runs.clone(), 0)
            }
        };
        extra.insert("runs_cut".into(), json!(runs.len() - h.ledger.runs.len()));
        extra.insert("starts_of_no_ended_worker".into(), json!(unended));
        if name.starts_with("flow-") {
            flow_limits_held(h, &runs, extra, failures);
        }
        if name.starts_with("groups") || name.starts_with("flow-all") {
            groups_held(&runs, pushes, extra, failures);
        }
        if name == "group-rate" {
            group_rate_held(&runs, extra, failures);
        }
    }
    if name == "replica-demote" {
        // Once a master again, the workers must run jobs within seconds.
        match report["recovery_ms"].as_f64() {
            Some(ms) if ms <= 10_000.0 => {}
            other => failures.push(format!(
                "no job finished within 10 s of the promotion (recovery_ms {other:?})"
            )),
        }
    }
    if name == "blackhole" {
        // After the network is back, the workers must notice their silent connections by
        // their own time limits and run jobs again within seconds, not hours.
        match report["recovery_ms"].as_f64() {
            Some(ms) if ms <= BLACKHOLE_RECOVERY_MS => {}
            other => failures.push(format!(
                "no job finished within {BLACKHOLE_RECOVERY_MS} ms of the network coming back (recovery_ms {other:?})"
            )),
        }
    }
    if matches!(name, "same-ms" | "inflight-kill") {
        let script_errors = report["redis_errors"]["worker script"]
            .as_u64()
            .unwrap_or(0);
        if script_errors > 0 {
            failures.push(format!("{script_errors} script errors in the worker logs"));
        }
    }
    for reason in extra
        .remove("failures")
        .and_then(|f| f.as_array().cloned())
        .unwrap_or_default()
    {
        failures.push(reason.as_str().unwrap_or_default().to_owned());
    }
}

/// SIGKILL of a random worker every 1-3 s (short: 0.5-1.5 s), restarted at once.
async fn worker_kill(full: bool, seed: u64) -> anyhow::Result<Outcome> {
    let size = if full {
        (100_000, 4, 200)
    } else {
        (2_000, 3, 8)
    };
    stop_and_restart("worker-kill", full, seed, size, Stop::Kill).await
}

/// SIGTERM to a random worker every 1-3 s (short: 0.5-1.5 s) under load, restarted after it
/// exits: nothing lost, nothing run twice, each exit within the grace period + 1 s.
async fn sigterm(full: bool, seed: u64) -> anyhow::Result<Outcome> {
    let size = if full { (20_000, 4, 60) } else { (2_000, 3, 8) };
    stop_and_restart("sigterm", full, seed, size, Stop::Terminate).await
}

/// How [`stop_and_restart`] stops a worker.
#[derive(Debug, Clone, Copy)]
enum Stop {
    /// SIGKILL, restarted at once.
    Kill,
    /// SIGTERM, restarted once it exited.
    Terminate,
}

/// `n` jobs on `workers` workers, one of them, at random, stopped `stops` times every 1-3 s
/// (short: 0.5-1.5 s) and restarted; the window of the pushes is as long as the stops.
async fn stop_and_restart(
    name: &str,
    full: bool,
    seed: u64,
    (n, workers, stops): (usize, usize, u64),
    stop: Stop,
) -> anyhow::Result<Outcome> {
    let every = if full { (1_000, 3_000) } else { (500, 1_500) };
    let window = Duration::from_millis(stops * (every.0 + every.1) / 2);
    let mut h = Harness::start(name, PLAIN, worker(full), seed).await?;
    let (_, producer) = load(&mut h, workers, plan(n, window), seed).await?;
    for _ in 0..stops {
        let wait = h.rng.range(every.0, every.1);
        tokio::time::sleep(Duration::from_millis(wait)).await;
        let slot = h.rng.range(0, workers as u64 - 1) as usize;
        match stop {
            Stop::Kill => h.kill_and_restart(slot)?,
            Stop::Terminate => h.terminate_and_restart(slot).await?,
        }
    }
    let pushes = finish(&mut h, producer).await?;
    Ok((h, pushes, Default::default()))
}

/// SIGKILL of one of the three workers, at random, `stops` times every `every` ms (a random
/// wait between the two), each restarted at once.
async fn kill_workers(h: &mut Harness, stops: u64, every: (u64, u64)) -> anyhow::Result<()> {
    for _ in 0..stops {
        let wait = h.rng.range(every.0, every.1);
        tokio::time::sleep(Duration::from_millis(wait)).await;
        let slot = h.rng.range(0, 2) as usize;
        h.kill_and_restart(slot)?;
    }
    Ok(())
}

/// The most of `runs` running at once: a sweep over their starts and ends, an end before a
/// start at the same instant (a slot handed on is not two at once).
fn most_at_once<'a>(runs: impl IntoIterator<Item = &'a Run>) -> i64 {
    let mut edges: Vec<(u64, i64)> = Vec::new();
    for r in runs {
        edges.push((r.start_us, 1));
        edges.push((r.end_us, -1));
    }
    edges.sort();
    let (mut now, mut most) = (0i64, 0i64);
    for (_, d) in &edges {
        now += d;
        most = most.max(now);
    }
    most
}

/// The flow-limits scenario's limits on the topic: at most this many running at once in all
/// workers together (on a cluster's 16 shards too: the first shard counts the slots of all),
/// and this rate.
fn flow_global(_shards: u16) -> u32 {
    8
}
const FLOW_RATE: &str = "100/1s";

/// SIGKILL of a random worker every 1-3 s (short: 0.5-1.5 s), restarted at once, while the
/// topic has a global concurrency of 8 and a rate of 100/1s (issue 33, item 6): from the
/// ledger (each run's start and end; a run a kill cut ends when its worker was killed), never
/// more than 8 handlers at once, never more starts in one second than the rate allows and one
/// burst, and nothing lost. With `cluster`, on a 3-master Redis Cluster and its 16 shards: the
/// same limits, the slots of the global concurrency and the rate's starts counted for every
/// shard in the namespace's first.
async fn flow_limits(full: bool, seed: u64, cluster: bool) -> anyhow::Result<Outcome> {
    let name = if cluster {
        "flow-limits-cluster"
    } else {
        "flow-limits"
    };
    limited_load_with_kills(name, full, seed, cluster, 0).await
}

/// Issue 33, item 6, whole: SIGKILL of a random worker every 1-3 s (short: 0.5-1.5 s),
/// restarted at once, while the topic has a rate of 100/1s and a global concurrency of 8 (on a
/// cluster's 16 shards too) and its jobs are spread over 50 groups of one slot each: from the
/// ledger and the starts (a run a kill cut counts until its worker was killed), never more
/// handlers at once than the global concurrency, never more starts in one second than the
/// rate allows and one burst, two runs of one group never at once, a group's jobs first
/// started in the order they went in line, and nothing lost. With `cluster`, on a 3-master
/// Redis Cluster and its 16 shards (each group lives in one).
async fn flow_all(full: bool, seed: u64, cluster: bool) -> anyhow::Result<Outcome> {
    let name = if cluster {
        "flow-all-cluster"
    } else {
        "flow-all"
    };
    limited_load_with_kills(name, full, seed, cluster, GROUPS).await
}

/// Scenario `name`: the topic limited to [`FLOW_RATE`] and a global concurrency of
/// [`flow_global`], its jobs spread over `groups` groups (0: none), 30 SIGKILLs of a worker (5
/// when short).
async fn limited_load_with_kills(
    name: &str,
    full: bool,
    seed: u64,
    cluster: bool,
    groups: u64,
) -> anyhow::Result<Outcome> {
    let (n, stops) = if full { (6_000, 30) } else { (500, 5) };
    let every = if full { (1_000, 3_000) } else { (500, 1_500) };
    // The job events say when each lease a kill left behind was taken back (its slot with it).
    let w = WorkerArgs {
        events: true,
        ..worker(full)
    };
    let h = if cluster {
        Harness::start_cluster(name, 3, 0, w, seed).await?
    } else {
        Harness::start(name, PLAIN, w, seed).await?
    };
    let rate: dq::Rate = FLOW_RATE.parse()?;
    h.client.set_rate(crate::TOPIC, Some(rate)).await?;
    let global = flow_global(h.client.config().shards);
    h.client
        .set_global_concurrency(crate::TOPIC, Some(global))
        .await?;
    // Pushed over the time the rate needs to run them, so that the limits bind throughout.
    let window = Duration::from_secs_f64(n as f64 / 100.0);
    let plan = PushPlan {
        groups,
        ..plan(n, window)
    };
    let (mut h, pushes, extra) = load_with_kills(h, plan, stops, every, seed).await?;
    h.taken_back_us = leases_taken_back(&h.client).await?;
    Ok((h, pushes, extra))
}

/// When each job's expired leases were taken back (us, by id), from its topic's job events:
/// `stalled` (ready again) and `dead` (dead-lettered, from a run cut on its last attempt, or
/// by its handler's last failure, which a kill's run never is). Read from the start until no
/// event came for two seconds (the drain is over).
async fn leases_taken_back(client: &dq::Client) -> anyhow::Result<HashMap<String, Vec<u64>>> {
    use dq::events::{EventCursor, EventItem, EventKind};
    let mut events = client
        .events_from(crate::TOPIC, EventCursor::start())
        .await?;
    let mut taken: HashMap<String, Vec<u64>> = HashMap::new();
    while let Ok(Some(item)) = tokio::time::timeout(Duration::from_secs(2), events.recv()).await {
        match item? {
            EventItem::Event { event, .. } => {
                if matches!(event.kind, EventKind::Stalled | EventKind::Dead { .. }) {
                    taken
                        .entry(event.id.as_str().to_owned())
                        .or_default()
                        .push(dq::store::to_us(event.at));
                }
            }
            EventItem::Lagged { shard, missed } => anyhow::bail!(
                "the job events of shard {shard} were trimmed ({missed} missed) before the harness read them"
            ),
            other => anyhow::bail!("an event item the harness does not know: {other:?}"),
        }
    }
    Ok(taken)
}

/// What the ledger of flow-limits says of its limits: the most handlers running at once (a
/// sweep over the runs' starts and ends), and the most starts in any one second, against what
/// the rate allows there and one burst (the starts are read in the handlers, a little after
/// their leases, on which the rate is enforced). One shard counts the starts of all
/// (`Rate::most_in_one_period` in a period), on a cluster too.
fn flow_limits_held(
    h: &Harness,
    runs: &[Run],
    extra: &mut serde_json::Map<String, Value>,
    failures: &mut Vec<String>,
) {
    let most_running = most_at_once(runs);
    let mut starts: Vec<u64> = runs.iter().map(|r| r.start_us).collect();
    starts.sort_unstable();
    let (mut lo, mut most_started) = (0, 0);
    for hi in 0..starts.len() {
        while starts[hi] - starts[lo] >= 1_000_000 {
            lo += 1;
        }
        most_started = most_started.max(hi - lo + 1);
    }
    let rate: dq::Rate = FLOW_RATE.parse().unwrap_or_else(|_| unreachable!());
    let shards = h.client.config().shards;
    let global = flow_global(shards);
    let allowed = rate.most_in_one_period() + rate.burst();
    if most_running > i64::from(global) {
        failures.push(format!(
            "{most_running} handlers ran at once, over the global concurrency of {global}"
        ));
    }
    if most_started as u64 > allowed {
        failures.push(format!(
            "{most_started} jobs started within one second, over the {allowed} the rate {FLOW_RATE} allows with one burst"
        ));
    }
    slots_came_back(h, runs, extra, failures);
    extra.insert("most_running".into(), json!(most_running));
    extra.insert("global_concurrency".into(), json!(global));
    extra.insert("shards".into(), json!(shards));
    extra.insert("most_started_in_1s".into(), json!(most_started));
    extra.insert("rate_allows_in_1s".into(), json!(allowed));
}

/// How much later than its lease a slot may come back: the reclaimer looks when the lease runs
/// out; this is its wake-up and the reclaim's round trip on two busy cores.
const SLOT_BACK_SLACK_MS: u64 = 250;

/// Whether the slot (of the global concurrency, and of its group) that each run cut by a kill
/// held came back within a lease of the kill (issue 33, item 6): the run's lease was renewed
/// last before the kill, so it ran out at most a lease after it, and the store took it back
/// (its `stalled` or `dead` event, `Harness::taken_back_us`) within [`SLOT_BACK_SLACK_MS`]
/// of that. `runs` are `Ledger::with_cut_runs`'s: the ledger's, then the cut ones, each
/// ending when its worker was killed (or at its start when the harness did not end it).
fn slots_came_back(
    h: &Harness,
    runs: &[Run],
    extra: &mut serde_json::Map<String, Value>,
    failures: &mut Vec<String>,
) {
    let cut = runs
        .get(h.ledger.runs.len()..)
        .unwrap_or_default()
        .iter()
        .filter(|r| r.end_us > r.start_us);
    let (mut most_ms, mut checked, mut late, mut never) = (0u64, 0usize, Vec::new(), Vec::new());
    let bound = h.worker.lease_ms + SLOT_BACK_SLACK_MS;
    for r in cut {
        checked += 1;
        // Taken back after the run started: after the kill, or before it when the worker had
        // stalled past its lease (then the slot was back before the kill).
        let back = h
            .taken_back_us
            .get(&r.id)
            .and_then(|times| times.iter().copied().filter(|&t| t > r.start_us).min());
        match back {
            Some(t) => {
                let ms = t.saturating_sub(r.end_us) / 1000;
                most_ms = most_ms.max(ms);
                if ms > bound && late.len() < 3 {
                    late.push(format!("{} (run {}): {ms} ms", r.id, r.attempt));
                }
            }
            None if never.len() < 3 => never.push(format!("{} (run {})", r.id, r.attempt)),
            None => {}
        }
    }
    if most_ms > bound {
        failures.push(format!(
            "a slot held by a killed worker's job came back {most_ms} ms after the kill, over its lease of {} ms and {SLOT_BACK_SLACK_MS} ms: {late:?}",
            h.worker.lease_ms
        ));
    }
    if !never.is_empty() {
        failures.push(format!(
            "the leases of runs cut by a kill were never taken back (no stalled or dead event after the kill): {never:?}"
        ));
    }
    extra.insert("runs_cut_checked".into(), json!(checked));
    extra.insert("slot_back_ms_max".into(), json!(most_ms));
    extra.insert("lease_ms".into(), json!(h.worker.lease_ms));
}

/// How many groups the groups scenario spreads its jobs over.
const GROUPS: u64 = 50;

/// SIGKILL of a random worker every 1-3 s (short: 0.5-1.5 s), restarted at once, while the
/// jobs are spread over 50 groups of one slot each (issue 33, item 6): from the ledger, two
/// runs of one group never overlap, a group's jobs first start in the order they went in line
/// (their due times: the mover lets them in in that order), and nothing is lost. A run cut by a
/// kill counts from its start until its worker was killed; it held its group's slot until its
/// lease was reclaimed, then ran again before the group's next job. With `cluster`, on a 3-master Redis Cluster in a
/// namespace of one shard (as measured before groups could spread over shards: README
/// "Groups").
async fn groups(full: bool, seed: u64, cluster: bool) -> anyhow::Result<Outcome> {
    let (n, stops) = if full { (20_000, 30) } else { (1_000, 5) };
    let every = if full { (1_000, 3_000) } else { (500, 1_500) };
    let h = if cluster {
        Harness::start_cluster_one_shard("groups-cluster", 3, worker(full), seed).await?
    } else {
        Harness::start("groups", PLAIN, worker(full), seed).await?
    };
    let window = Duration::from_millis(stops * (every.0 + every.1) / 2);
    grouped_load_with_kills(h, n, window, stops, every, seed).await
}

/// The groups scenario on a 3-master Redis Cluster with its default 16 shards: every job of a
/// group lives in its group's shard (README "Groups"), so the groups spread over the masters
/// and each is counted on its own.
async fn groups_over_shards(full: bool, seed: u64) -> anyhow::Result<Outcome> {
    let (n, stops) = if full { (20_000, 30) } else { (1_000, 5) };
    let every = if full { (1_000, 3_000) } else { (500, 1_500) };
    let h = Harness::start_cluster("groups-shards", 3, 0, worker(full), seed).await?;
    let window = Duration::from_millis(stops * (every.0 + every.1) / 2);
    grouped_load_with_kills(h, n, window, stops, every, seed).await
}

/// Pushes `n` jobs over `window`, spread over [`GROUPS`] groups, while `stops` SIGKILLs of a
/// worker come `every` (ms, a range) apart; then drains.
async fn grouped_load_with_kills(
    h: Harness,
    n: usize,
    window: Duration,
    stops: u64,
    every: (u64, u64),
    seed: u64,
) -> anyhow::Result<Outcome> {
    let plan = PushPlan {
        groups: GROUPS,
        ..plan(n, window)
    };
    load_with_kills(h, plan, stops, every, seed).await
}

/// Pushes `plan` to three workers while `stops` SIGKILLs of one of them come `every` (ms, a
/// range) apart, each restarted at once; then drains.
pub(crate) async fn load_with_kills(
    mut h: Harness,
    plan: PushPlan,
    stops: u64,
    every: (u64, u64),
    seed: u64,
) -> anyhow::Result<Outcome> {
    let (_, producer) = load(&mut h, 3, plan, seed).await?;
    kill_workers(&mut h, stops, every).await?;
    let pushes = finish(&mut h, producer).await?;
    Ok((h, pushes, Default::default()))
}

/// The ledger's runs by group: job `j<i>` (or `j<i>-<s>`: `harness::grouped_id`) is in group
/// `i mod GROUPS` (the push plan's groups).
fn runs_by_group(runs: &[Run]) -> HashMap<u64, Vec<&Run>> {
    let mut by_group: HashMap<u64, Vec<&Run>> = HashMap::new();
    for r in runs {
        let number = r.id.strip_prefix('j').and_then(|n| n.split('-').next());
        if let Some(i) = number.and_then(|n| n.parse::<u64>().ok()) {
            by_group.entry(i % GROUPS).or_default().push(r);
        }
    }
    by_group
}

/// What the ledger of the groups scenario says: per group, the most runs at once (a sweep over
/// their starts and ends, an end before a start at the same instant), and whether its jobs'
/// first runs started in the order they went in line. A job goes in line at its due time, or
/// when its push reaches Redis if that is later (a push held up by a fault, as a reshard holds
/// them, arrives after its due time): an order violation is a job that started before one that
/// surely went in line earlier, whose due time and push acknowledgement both came before the
/// due time of one that started before it.
fn groups_held(
    runs: &[Run],
    pushes: &Pushes,
    extra: &mut serde_json::Map<String, Value>,
    failures: &mut Vec<String>,
) {
    let by_group = runs_by_group(runs);
    let (mut overlapping, mut out_of_order, mut most) = (0u64, 0u64, 0i64);
    let mut samples = Vec::new();
    for (g, runs) in &by_group {
        let at_once = most_at_once(runs.iter().copied());
        if at_once > 1 {
            overlapping += 1;
        }
        most = most.max(at_once);
        // Each job's first run (the retries of a cut run come later and are not its order).
        let mut first: HashMap<&str, &Run> = HashMap::new();
        for r in runs {
            let e = first.entry(r.id.as_str()).or_insert(r);
            if r.start_us < e.start_us {
                *e = r;
            }
        }
        let mut firsts: Vec<&&Run> = first.values().collect();
        firsts.sort_by_key(|r| r.start_us);
        // Each job against the one due latest of those that started before it: a job that
        // surely went in line before that one fell due, yet started after it, is out of order.
        let mut latest: Option<&Run> = None;
        for r in firsts.into_iter().copied() {
            let acked = pushes.acked.get(&r.id).copied().unwrap_or(u64::MAX);
            if let Some(earlier) = latest.filter(|e| r.due_us.max(acked) < e.due_us) {
                out_of_order += 1;
                if samples.len() < 3 {
                    let pushed = |r: &Run| pushes.acked.get(&r.id).copied().unwrap_or_default();
                    samples.push(format!(
                        "group g{g}: {} (due {}, push acknowledged {}) started before {} (due {}, push acknowledged {})",
                        earlier.id, earlier.due_us, pushed(earlier), r.id, r.due_us, pushed(r)
                    ));
                }
            }
            if latest.is_none_or(|e| r.due_us > e.due_us) {
                latest = Some(r);
            }
        }
    }
    if overlapping > 0 {
        failures.push(format!(
            "runs of one group overlapped in {overlapping} groups (at most {most} at once)"
        ));
    }
    if out_of_order > 0 {
        failures.push(format!(
            "{out_of_order} jobs of a group started before one due earlier: {samples:?}"
        ));
    }
    extra.insert("groups".into(), json!(GROUPS));
    extra.insert("most_of_a_group_at_once".into(), json!(most));
    extra.insert("group_order_violations".into(), json!(out_of_order));
}

/// Each group's rate in the group-rate scenario.
const GROUP_RATE: &str = "10/1s";

/// SIGKILL of a random worker every 1-3 s (short: 0.5-1.5 s), restarted at once, while the
/// jobs are spread over 50 groups of one slot each and each group may start 10 jobs a second
/// (README "Groups", a rate per group): from the ledger, no group starts more of its jobs in
/// any one second than its rate allows and one burst, two runs of one group never overlap, and
/// nothing is lost. Jobs held back by their group's rate wait as delayed jobs, so this also
/// shows that none of them is lost through the kills.
async fn group_rate(full: bool, seed: u64) -> anyhow::Result<Outcome> {
    let (n, stops) = if full { (10_000, 30) } else { (1_000, 5) };
    let every = if full { (1_000, 3_000) } else { (500, 1_500) };
    let h = Harness::start("group-rate", PLAIN, worker(full), seed).await?;
    let rate: dq::Rate = GROUP_RATE.parse()?;
    h.client.set_group_rate(crate::TOPIC, Some(rate)).await?;
    // Pushed over the time the groups' rates need to run them, so that the rate binds.
    let window = Duration::from_secs_f64(n as f64 / (GROUPS as f64 * 10.0));
    grouped_load_with_kills(h, n, window, stops, every, seed).await
}

/// What the ledger of group-rate says: per group, the most runs at once and the most starts in
/// any one second, against what the group rate allows there and one burst (the starts are read
/// in the handlers, a little after their leases, on which the rate is enforced; the runs cut by
/// a kill are not in the ledger).
fn group_rate_held(
    runs: &[Run],
    extra: &mut serde_json::Map<String, Value>,
    failures: &mut Vec<String>,
) {
    let by_group = runs_by_group(runs);
    let rate: dq::Rate = GROUP_RATE.parse().unwrap_or_else(|_| unreachable!());
    let allowed = rate.most_in_one_period() + rate.burst();
    let (mut most_started, mut most_at_once_seen, mut over) = (0usize, 0i64, Vec::new());
    for (g, runs) in &by_group {
        most_at_once_seen = most_at_once_seen.max(most_at_once(runs.iter().copied()));
        let mut starts: Vec<u64> = runs.iter().map(|r| r.start_us).collect();
        starts.sort_unstable();
        let mut lo = 0;
        for hi in 0..starts.len() {
            while starts[hi] - starts[lo] >= 1_000_000 {
                lo += 1;
            }
            let in_window = hi - lo + 1;
            most_started = most_started.max(in_window);
            if in_window as u64 > allowed && over.len() < 3 {
                over.push(format!(
                    "group g{g}: {in_window} starts from {}",
                    starts[lo]
                ));
            }
        }
    }
    if most_started as u64 > allowed {
        failures.push(format!(
            "a group started {most_started} jobs within one second, over the {allowed} its rate {GROUP_RATE} allows with one burst: {over:?}"
        ));
    }
    if most_at_once_seen > 1 {
        failures.push(format!(
            "runs of one group overlapped (at most {most_at_once_seen} at once)"
        ));
    }
    extra.insert("groups".into(), json!(GROUPS));
    extra.insert("group_rate".into(), json!(GROUP_RATE));
    extra.insert("most_of_a_group_started_in_1s".into(), json!(most_started));
    extra.insert("group_rate_allows_in_1s".into(), json!(allowed));
    extra.insert("most_of_a_group_at_once".into(), json!(most_at_once_seen));
}

/// `CLIENT KILL TYPE normal` every second: every connection of the workers and the producer
/// is cut; pushes are retried with the same id.
async fn client_kill(full: bool, seed: u64) -> anyhow::Result<Outcome> {
    let (n, kills) = if full { (20_000, 120) } else { (2_000, 6) };
    let mut h = Harness::start("client-kill", PLAIN, worker(full), seed).await?;
    let (_, producer) = load(&mut h, 3, plan(n, Duration::from_secs(kills)), seed).await?;
    let mut killed = 0u64;
    for _ in 0..kills {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let reply = h
            .redis_fault("CLIENT KILL", &["CLIENT", "KILL", "TYPE", "normal"])
            .await;
        killed += reply
            .trim_start_matches(':')
            .parse::<u64>()
            .unwrap_or_default();
    }
    let pushes = finish(&mut h, producer).await?;
    let extra = figures([("connections_killed", json!(killed))]);
    Ok((h, pushes, extra))
}

/// A fault twice under load, as `(at s, ms)`: first for `first_ms` (full, short) at 10 s
/// (short: 2 s), then for longer than the lease of `w` at 30 s (short: `second_at_short`);
/// with the plan of 20,000 jobs (short: 2,000) pushed until 2 s after the second.
fn twice(
    full: bool,
    w: &WorkerArgs,
    first_ms: (u64, u64),
    second_at_short: f64,
) -> ([(f64, u64); 2], PushPlan) {
    let faults = if full {
        [(10.0, first_ms.0), (30.0, w.lease_ms + 3_000)]
    } else {
        [(2.0, first_ms.1), (second_at_short, w.lease_ms + 1_000)]
    };
    let window = secs(faults[1].0 + faults[1].1 as f64 / 1000.0 + 2.0);
    let n = if full { 20_000 } else { 2_000 };
    (faults, plan(n, window))
}

/// `CLIENT PAUSE <ms> WRITE` twice: once shorter than the lease, once longer.
async fn client_pause(full: bool, seed: u64) -> anyhow::Result<Outcome> {
    let w = worker(full);
    let (pauses, pushing) = twice(full, &w, (5_000, 2_000), 6.0);
    let mut h = Harness::start("client-pause", PLAIN, w, seed).await?;
    let (t0, producer) = load(&mut h, 3, pushing, seed).await?;
    for (at, ms) in pauses {
        sleep_until(t0, at).await;
        let start = now_us();
        let ms_text = ms.to_string();
        h.redis_fault("CLIENT PAUSE", &["CLIENT", "PAUSE", &ms_text, "WRITE"])
            .await;
        h.faults.pop();
        h.record(
            &format!("CLIENT PAUSE {ms} WRITE"),
            start,
            start + ms * 1000,
        );
    }
    let pushes = finish(&mut h, producer).await?;
    Ok((h, pushes, Default::default()))
}

/// `DEBUG SLEEP 3` and a sleep longer than the lease: Redis answers nobody meanwhile.
async fn debug_sleep(full: bool, seed: u64) -> anyhow::Result<Outcome> {
    let w = worker(full);
    let (sleeps, pushing) = twice(full, &w, (3_000, 3_000), 8.0);
    let args = [PLAIN, &["--enable-debug-command", "yes"]].concat();
    let mut h = Harness::start("debug-sleep", &args, w, seed).await?;
    let (t0, producer) = load(&mut h, 3, pushing, seed).await?;
    for (at, ms) in sleeps {
        sleep_until(t0, at).await;
        let s = format!("{:.3}", ms as f64 / 1000.0);
        let reply = h
            .redis_fault(&format!("DEBUG SLEEP {s}"), &["DEBUG", "SLEEP", &s])
            .await;
        anyhow::ensure!(reply == "+OK", "DEBUG SLEEP answered {reply:?}");
    }
    let pushes = finish(&mut h, producer).await?;
    Ok((h, pushes, Default::default()))
}

/// The network between the workers and Redis goes silent without closing anything (a peer
/// that lost power, a partition): a proxy stops forwarding and keeps every socket open. After
/// it is restored (to new connections only: the old ones stay silent, their peer is gone),
/// the workers must notice by their own time limits and pings, reconnect, and run jobs again
/// within seconds. The producer talks to Redis directly and keeps pushing meanwhile.
async fn blackhole(full: bool, seed: u64) -> anyhow::Result<Outcome> {
    let fault = one_fault(full, (30_000, 8_000));
    let dark_ms = fault.fault_ms;
    let mut h = Harness::start("blackhole", PLAIN, worker(full), seed).await?;
    let port = h.single().lock().map(|r| r.port()).unwrap_or(0);
    let proxy = crate::proxy::Blackhole::start(([127, 0, 0, 1], port).into()).await?;
    h.worker.url = proxy.url();
    let producer = load_until_fault(&mut h, fault, seed).await?;
    let start = now_us();
    let cut = proxy.cut();
    tokio::time::sleep(Duration::from_millis(dark_ms)).await;
    proxy.restore();
    h.record_since(&format!("network silent {dark_ms} ms"), start);
    h.proxy = Some(proxy);
    let pushes = finish(&mut h, producer).await?;
    Ok((h, pushes, figures([("connections_cut", json!(cut))])))
}

/// kill -9 of redis-server under load, restarted after a second, with `appendonly yes` and
/// `appendfsync` as given. With `always` nothing acknowledged may be lost; with `everysec`
/// the loss window is measured: how long before the kill the oldest lost push was acked.
async fn redis_kill(full: bool, seed: u64, fsync: &str) -> anyhow::Result<Outcome> {
    let (n, window, kills_at) = if full {
        (20_000, 40.0, vec![10.0, 25.0])
    } else {
        (3_000, 6.0, vec![3.0])
    };
    let args = ["--save", "", "--appendonly", "yes", "--appendfsync", fsync];
    let name = format!("redis-kill-{fsync}");
    let mut h = Harness::start(&name, &args, worker(full), seed).await?;
    let (t0, producer) = load(&mut h, 3, plan(n, secs(window)), seed).await?;
    let mut kill_times = Vec::new();
    let mut orphans = 0;
    for at in kills_at {
        sleep_until(t0, at).await;
        kill_times.push(h.kill_redis(Duration::from_secs(1)).await);
        // Right after the restart: every job Redis still has must be in a queue, so none is
        // left without a lease or a place.
        orphans += h.orphans().await?;
    }
    let pushes = finish(&mut h, producer).await?;
    let mut extra = figures([("orphans_after_restart", json!(orphans))]);
    let mut failures = Vec::new();
    if orphans > 0 {
        failures.push(json!(format!(
            "{orphans} jobs were in no queue after the restart"
        )));
    }
    if fsync == "everysec" {
        // The loss window: the oldest acknowledgement of a lost job, before the kill after it.
        let _ = h.ledger.refresh(&h.dir);
        let ran = h.ledger.ids();
        let window_ms = pushes
            .acked
            .iter()
            .filter(|(id, _)| !ran.contains(id.as_str()))
            .filter_map(|(_, &acked)| {
                kill_times
                    .iter()
                    .filter(|&&k| k >= acked)
                    .min()
                    .map(|k| (k - acked) as f64 / 1000.0)
            })
            .fold(0.0f64, f64::max);
        extra.insert("loss_window_ms".into(), json!(window_ms));
        if window_ms > 2_000.0 {
            failures.push(json!(format!(
                "acknowledged pushes were lost {window_ms} ms before the kill (everysec should lose about 1 s at most)"
            )));
        }
    }
    extra.insert("failures".into(), json!(failures));
    Ok((h, pushes, extra))
}

/// 20,000 jobs due in the same millisecond: bounded batches, no script error, and the
/// scripts' latency from SLOWLOG.
async fn same_ms(_full: bool, seed: u64) -> anyhow::Result<Outcome> {
    let n = 20_000;
    let mut w = worker(false);
    (w.concurrency, w.work_max_ms) = (256, 0);
    let mut h = Harness::start("same-ms", SLOWLOG, w, seed).await?;
    h.spawn_workers(2).await?;
    let due = std::time::SystemTime::now() + Duration::from_secs(3);
    let pushes = h
        .push_batch(n, |job, i| job.id(format!("j{i}")).at(due))
        .await?;
    h.drain(&pushes.acked, Duration::from_secs(120)).await;
    let mut extra = serde_json::Map::new();
    extra.insert("script_us".into(), h.script_latency().await?);
    Ok((h, pushes, extra))
}

/// 10,000 jobs running on one worker that is killed: reclaimed in bounded batches and run
/// by two fresh workers.
async fn inflight_kill(_full: bool, seed: u64) -> anyhow::Result<Outcome> {
    let n = 10_000u64;
    let mut w = worker(false);
    (w.concurrency, w.work_max_ms) = (256, 0);
    let mut h = Harness::start("inflight-kill", SLOWLOG, w.clone(), seed).await?;
    let holder = WorkerArgs {
        url: h.worker.url.clone(),
        concurrency: n as usize,
        hold_ms: Some(600_000),
        ..w
    };
    let slot = h.spawn_extra(&holder)?;
    let pushes = h.push_batch(n, |job, i| job.id(format!("j{i}"))).await?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let running = h.client.counts(crate::TOPIC).await?.running;
        if running == n {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "only {running} of {n} jobs were running on the holding worker after 60 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let killed_at = now_us();
    h.kill(slot);
    h.record(
        "SIGKILL of the worker holding every job",
        killed_at,
        killed_at,
    );
    h.spawn_workers(2).await?;
    h.drain(&pushes.acked, Duration::from_secs(120)).await;
    let _ = h.ledger.refresh(&h.dir);
    let last = h
        .ledger
        .runs
        .iter()
        .map(|r| r.end_us)
        .max()
        .unwrap_or(killed_at);
    let mut extra = serde_json::Map::new();
    extra.insert(
        "all_done_after_kill_ms".into(),
        json!((last.saturating_sub(killed_at)) as f64 / 1000.0),
    );
    extra.insert("script_us".into(), h.script_latency().await?);
    Ok((h, pushes, extra))
}

/// Redis at its `maxmemory` with `noeviction`: pushes fail with an error the caller sees
/// (never retried into a loop), and every push that was acknowledged still runs.
async fn maxmemory(full: bool, seed: u64) -> anyhow::Result<Outcome> {
    let n = if full { 40_000 } else { 12_000 };
    let args = [
        PLAIN,
        &["--maxmemory", "16mb", "--maxmemory-policy", "noeviction"],
    ]
    .concat();
    let mut h = Harness::start("maxmemory", &args, worker(full), seed).await?;
    h.spawn_workers(2).await?;
    let p = PushPlan {
        n,
        window: Duration::from_secs(2),
        delay_ms: (1_000, 3_000),
        payload_bytes: 2_048,
        concurrency: 64,
        retry_for: Duration::from_secs(10),
        groups: 0,
        diamonds: false,
    };
    let pushes = produce(h.client.clone(), p, seed).await;
    drain_acked(&mut h, &pushes.acked).await;
    let mut extra = serde_json::Map::new();
    let oom = pushes.errors.get("push oom").copied().unwrap_or(0);
    if oom == 0 {
        extra.insert(
            "failures".into(),
            json!(["no push was refused: the scenario never reached maxmemory"]),
        );
    }
    Ok((h, pushes, extra))
}

/// Deletes one delayed job from Redis behind dq's back, as a lossy Redis would: the oracle
/// must report it lost (the check that the other scenarios' `lost = 0` can fail).
async fn sabotage(seed: u64) -> anyhow::Result<Outcome> {
    let mut h = Harness::start("sabotage", PLAIN, worker(false), seed).await?;
    h.spawn_workers(1).await?;
    let mut p = plan(200, Duration::from_millis(200));
    p.delay_ms = (1_500, 2_000);
    let pushes = produce(h.client.clone(), p, seed).await;
    let keys = dq::store::ShardKeys::new(crate::NAMESPACE, 0);
    let member = format!("{}:j7", crate::TOPIC);
    let mut c = h.redis_conn().await?;
    let (removed, _, _): (u64, u64, i64) = redis::pipe()
        .cmd("ZREM")
        .arg(keys.delayed())
        .arg(&member)
        .cmd("HDEL")
        .arg(keys.jobs())
        .arg(&member)
        .cmd("HINCRBY")
        .arg(keys.counts())
        .arg(format!("{}:delayed", crate::TOPIC))
        .arg(-1)
        .query_async(&mut c)
        .await?;
    anyhow::ensure!(removed == 1, "j7 was not delayed when the sabotage came");
    h.drain(&pushes.acked, Duration::from_secs(30)).await;
    Ok((h, pushes, Default::default()))
}

/// One master of a 3-master cluster stops answering clients for longer than the lease
/// (`CLIENT PAUSE ... ALL` on the master of shard 0) while long handlers (longer than the lease:
/// they keep their jobs only through renewals) run on every shard. Jobs on the other masters
/// must not lose their leases: none of them may run twice (`duplicated_elsewhere` = 0). Jobs of
/// the paused master may (their leases cannot be renewed while it is paused).
///
/// Why not `DEBUG SLEEP`: it stops the node's cluster bus as well, so after `cluster-node-timeout`
/// the other masters mark it failed and, with `cluster-require-full-coverage yes` (the default),
/// refuse every command: the whole cluster stops, whatever the client does. `CLIENT PAUSE ALL`
/// freezes the master's clients only, as a long command or a saturated master does.
async fn shard_stall(full: bool, seed: u64) -> anyhow::Result<Outcome> {
    let lease_ms = if full { 10_000 } else { 2_000 };
    let w = WorkerArgs {
        concurrency: 200,
        work_min_ms: lease_ms / 2,
        work_max_ms: lease_ms * 2,
        lease_ms,
        ..worker(full)
    };
    let (n, window, at, pause_ms) = if full {
        (3_000, 30.0, 10.0, 15_000)
    } else {
        (600, 8.0, 2.0, 6_000)
    };
    let mut h = Harness::start_cluster("shard-stall", 3, 0, w, seed).await?;
    h.spawn_workers(3).await?;
    let paused = h.master_of_shard(0).await?;
    let t0 = Instant::now();
    let producer = tokio::spawn(produce(h.client.clone(), plan(n, secs(window)), seed));
    sleep_until(t0, at).await;
    let start = now_us();
    let ms = pause_ms.to_string();
    let reply = h
        .node_command(paused, &["CLIENT", "PAUSE", &ms, "ALL"])
        .await;
    anyhow::ensure!(reply == "+OK", "CLIENT PAUSE answered {reply:?}");
    h.record(
        &format!("CLIENT PAUSE {pause_ms} ALL on one master"),
        start,
        start + pause_ms * 1000,
    );
    let pushes = finish(&mut h, producer).await?;
    let _ = h.ledger.refresh(&h.dir);
    let on_paused = h.shards_of_master(paused).await?;
    let shards = h.client.config().shards;
    let runs = h.ledger.runs_by_id();
    let topic = dq::Topic::new(crate::TOPIC)?;
    let (mut twice_paused, mut twice_elsewhere) = (0u64, 0u64);
    for (id, _) in runs.into_iter().filter(|&(_, n)| n > 1) {
        let shard = dq::store::shard_of(&topic, &dq::JobId::new(id)?, shards);
        if on_paused.contains(&shard) {
            twice_paused += 1;
        } else {
            twice_elsewhere += 1;
        }
    }
    let mut extra = figures([
        ("paused_master_shards", json!(on_paused.len())),
        ("duplicated_on_paused_master", json!(twice_paused)),
        ("duplicated_elsewhere", json!(twice_elsewhere)),
    ]);
    if twice_elsewhere > 0 {
        extra.insert(
            "failures".into(),
            json!([format!(
                "{twice_elsewhere} jobs on healthy masters ran twice"
            )]),
        );
    }
    Ok((h, pushes, extra))
}

/// What `cluster_reshard` pushes while the slots move.
#[derive(Clone, Copy, PartialEq)]
enum Reshard {
    /// Plain jobs (`cluster-reshard`).
    Plain,
    /// Jobs spread over [`GROUPS`] groups of one slot each, in 16 shards (`groups-reshard`):
    /// a group's list of parked jobs is a key its scripts name from what they read.
    Groups,
    /// Diamond workflows in a namespace of one shard (`diamond-reshard`): a workflow and its
    /// steps' lists are keys the scripts name from what they read.
    Diamonds,
}

/// A live reshard under load: the slots of dq's shards move to the next master, one shard at a
/// time (short: 4 shards once; full: all 16, twice), while jobs are pushed, promoted, fetched
/// and acked. Each slot's keys move one per `MIGRATE`, 20 ms apart, and the ready and dead
/// lists last, 1.5 s after the others (longer than the cluster client's first wait before it
/// retries a refused call, so that calls land in the split): dq's scripts meet the slot with
/// its keys split between two nodes. Nothing may be lost, and no key may be found already on
/// the new node (`busy_keys`: a script that ran there wrote a second copy, which the reshard
/// refuses; moved with REPLACE it overwrites jobs). The workers run fewer jobs per second than
/// arrive, so that the lists being moved are not empty. With groups, the groups' checks hold
/// too (one run of a group at a time, in order); with diamonds, the workflows' (each d once,
/// after its b and c), and the one shard moves round after round (short: 4 times; full: 8).
async fn cluster_reshard(full: bool, seed: u64, load_of: Reshard) -> anyhow::Result<Outcome> {
    let (mut n, window, mut shards, mut rounds) = if full {
        (20_000, 75.0, 16, 2)
    } else {
        (2_000, 10.0_f64, 4, 1)
    };
    // Fewer handlers than jobs arriving: the ready lists hold a backlog while they move.
    // (A diamond worker runs four topics, each with this concurrency.)
    let diamonds = load_of == Reshard::Diamonds;
    let w = WorkerArgs {
        concurrency: match (full, diamonds) {
            (true, false) => 8,
            (false, false) => 4,
            (true, true) => 2,
            (false, true) => 1,
        },
        work_min_ms: 50,
        work_max_ms: 150,
        diamond: diamonds,
        // No worker is killed here: a lease long enough to outlast a slot's move (hundreds of
        // workflow keys) keeps a run whose ack waits for the move from running again, which
        // the workflows' checks would count against it (a d run again without a kill).
        lease_ms: if diamonds {
            10_000
        } else {
            worker(full).lease_ms
        },
        ..worker(full)
    };
    let mut push_plan = plan(n, secs(window));
    let mut h = match load_of {
        Reshard::Plain => Harness::start_cluster("cluster-reshard", 3, 0, w, seed).await?,
        Reshard::Groups => {
            push_plan.groups = GROUPS;
            Harness::start_cluster("groups-reshard", 3, 0, w, seed).await?
        }
        Reshard::Diamonds => {
            // Four jobs a diamond: 500 (short) or 1,000 (full, as `diamond`). One shard, moved
            // 4 or 8 times: a workflow is a key of its own, kept after it ends, so the slot
            // holds hundreds of keys, each moved on its own (`key_every`) while calls wait.
            n = if full { 1_000 } else { n / 4 };
            push_plan.n = n;
            push_plan.diamonds = true;
            (rounds, shards) = (if full { 8 } else { 4 }, 1);
            let mut h = Harness::start_cluster_one_shard("diamond-reshard", 3, w, seed).await?;
            h.topics = crate::diamond::step_topics();
            h
        }
    };
    let (t0, producer) = load(&mut h, 3, push_plan, seed).await?;
    // Each key of a slot moves on its own, this long after the one before; the workflows'
    // slot holds hundreds of keys (a workflow's is kept after it ends, as its results are).
    let key_every = Duration::from_millis(if diamonds { 5 } else { 20 });
    let masters = h.master_ports().await?;
    let (mut slots, mut keys, mut busy) = (0u64, 0u64, 0u64);
    let start = now_us();
    for round in 0..rounds {
        // Once a backlog has built up (the lists exist), then again later (spread over the
        // second half of the window when the one shard moves round after round).
        let at = if rounds > 2 {
            0.4 + 0.5 * f64::from(round) / f64::from(rounds)
        } else {
            0.4 + 0.3 * f64::from(round)
        };
        sleep_until(t0, window * at).await;
        for shard in 0..shards {
            let from = h.master_of_shard(shard).await?;
            let next = masters.iter().position(|&p| p == from).unwrap_or(0) + 1;
            let to = masters[next % masters.len()];
            let (k, b) = h
                .move_shard(
                    shard,
                    from,
                    to,
                    &masters,
                    key_every,
                    Duration::from_millis(1_500),
                )
                .await?;
            slots += 1;
            keys += k;
            busy += b;
        }
    }
    h.record_since(&format!("{slots} shard slots moved between masters"), start);
    let pushes = finish(&mut h, producer).await?;
    let mut extra = if load_of == Reshard::Diamonds {
        crate::diamond::held(&mut h, &pushes, n).await?
    } else {
        serde_json::Map::new()
    };
    extra.extend(figures([
        ("slots_moved", json!(slots)),
        ("keys_moved", json!(keys)),
        ("busy_keys", json!(busy)),
    ]));
    if busy > 0 {
        let failures = extra.entry("failures").or_insert_with(|| json!([]));
        if let Some(list) = failures.as_array_mut() {
            list.push(json!(format!(
                "{busy} keys were already on the new master (a script ran there with the slot split) and were overwritten"
            )));
        }
    }
    Ok((h, pushes, extra))
}

/// The master of a 3-master cluster (with a replica each) killed with SIGKILL under load while
/// its replica lags 300 ms behind (its link cut); the replica takes over (the killed node then rejoins as a
/// replica). Replication is asynchronous, so pushes acknowledged in the lag are lost: measured
/// as the loss window. With `wait`, every push waits for a replica (`DQ_WAIT_REPLICAS=1`) and
/// nothing acknowledged may be lost.
async fn cluster_failover(full: bool, seed: u64, wait: bool) -> anyhow::Result<Outcome> {
    let (n, window, kill_at) = if full {
        (20_000, 40.0, 15.0)
    } else {
        (2_000, 6.0, 2.5)
    };
    let name = if wait {
        "cluster-failover-wait"
    } else {
        "cluster-failover"
    };
    let mut h = Harness::start_cluster(name, 3, 1, worker(full), seed).await?;
    h.spawn_workers(3).await?;
    let mut producer_config = crate::config(&h.url)?;
    if wait {
        producer_config = producer_config.wait_replicas(1, Duration::from_secs(1));
    }
    let producer_client = dq::Client::connect(producer_config.build()?).await?;
    let t0 = Instant::now();
    let producer = tokio::spawn(produce(producer_client, plan(n, secs(window)), seed));
    sleep_until(t0, kill_at).await;
    // The replica lags 300 ms behind when its master dies: what asynchronous replication can
    // lose, and what WAIT saves.
    let killed = h
        .kill_cluster_master(Some(Duration::from_millis(300)))
        .await?;
    let pushes = finish(&mut h, producer).await?;
    let _ = h.ledger.refresh(&h.dir);
    let ran = h.ledger.ids();
    let lost_before_kill: Vec<u64> = pushes
        .acked
        .iter()
        .filter(|(id, &acked)| !ran.contains(id.as_str()) && acked <= killed)
        .map(|(_, &acked)| killed - acked)
        .collect();
    let window_ms = lost_before_kill
        .iter()
        .max()
        .map_or(0.0, |&us| us as f64 / 1000.0);
    let mut extra = serde_json::Map::new();
    extra.insert("loss_window_ms".into(), json!(window_ms));
    extra.insert("wait_replicas".into(), json!(wait.then_some(1)));
    let takeover = h
        .faults
        .last()
        .map(|f| (f.end_us - f.start_us) as f64 / 1000.0);
    extra.insert("takeover_ms".into(), json!(takeover));
    let mut failures = Vec::new();
    if wait && !lost_before_kill.is_empty() {
        failures.push(json!(format!(
            "{} pushes confirmed by a replica were lost in the failover",
            lost_before_kill.len()
        )));
    }
    extra.insert("failures".into(), json!(failures));
    Ok((h, pushes, extra))
}

/// The schedule of `cron-skew`.
const SCHEDULE: &str = "chaos-every-second";

/// A 1-second cron schedule fired by five worker processes whose clocks disagree by up to 8 s
/// (libfaketime offsets of -4, -1.5, 0, +1.5 and +4 s), with a SIGKILL of a random one every
/// 2-4 s (full: 3-6 s), restarted with the same offset: every tick of the window is exactly one
/// job (one id, due at its tick), and none starts before its tick.
async fn cron_skew(full: bool, seed: u64) -> anyhow::Result<Outcome> {
    let (ticks, every) = if full {
        (60u64, (3_000, 6_000))
    } else {
        (15u64, (2_000, 4_000))
    };
    let offsets_ms = vec![-4_000, -1_500, 0, 1_500, 4_000];
    let mut h = Harness::start("cron-skew", PLAIN, worker(full), seed).await?;
    h.clock_offsets_ms = offsets_ms.clone();
    h.spawn_workers(offsets_ms.len()).await?;
    let skews = measured_skews(&h).await;
    let (first_us, last_us) = tick_under_kills(&mut h, ticks, every, offsets_ms.len()).await?;
    drain_acked(&mut h, &Default::default()).await;
    let _ = h.ledger.refresh(&h.dir);

    let mut failures = skew_failures(&offsets_ms, &skews);
    let t = TickRuns::of(&h.ledger.runs, first_us, last_us, ticks);
    if t.jobs as u64 != ticks || !t.missing.is_empty() || t.two_jobs > 0 || t.off_tick > 0 {
        failures.push(format!(
            "{} jobs for {ticks} ticks: {} missing ({:?}), {} ticks with two jobs, {} jobs not of a tick",
            t.jobs,
            t.missing.len(),
            t.missing,
            t.two_jobs,
            t.off_tick
        ));
    }
    if t.wrong_due > 0 {
        failures.push(format!("{} jobs not due at their tick", t.wrong_due));
    }
    if t.early > 0 {
        failures.push(format!("{} jobs started before their tick", t.early));
    }
    let mut lateness = t.lateness;
    let extra = figures([
        ("ticks", json!(ticks)),
        ("tick_jobs", json!(t.jobs)),
        ("ticks_missing", json!(t.missing.len())),
        ("ticks_with_two_jobs", json!(t.two_jobs)),
        ("early", json!(t.early)),
        ("jobs_after_window", json!(t.after_window)),
        ("ticks_run_twice", json!(t.ran_twice)),
        ("clock_offsets_ms", json!(offsets_ms)),
        ("measured_skew_ms", json!(skews)),
        ("tick_lateness_ms", crate::harness::summary(&mut lateness)),
        ("failures", json!(failures)),
    ]);
    Ok((h, Pushes::default(), extra))
}

/// The skew each worker measured against Redis' clock, once every one has written it (or
/// after 10 s).
async fn measured_skews(h: &Harness) -> Vec<Option<i64>> {
    // Each worker writes the skew it sees once it has started: proof the offset took.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let skews = h.measured_skews_ms();
        if skews.iter().all(Option::is_some) || Instant::now() > deadline {
            return skews;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Declares [`SCHEDULE`], lets it tick `ticks` times while a random one of the `workers` is
/// killed and restarted every `every` ms, then removes it: the first and the last tick of
/// the window (us).
async fn tick_under_kills(
    h: &mut Harness,
    ticks: u64,
    every: (u64, u64),
    workers: usize,
) -> anyhow::Result<(u64, u64)> {
    let start_us = dq::store::to_us(h.client.store_time().await?);
    h.client
        .schedule(SCHEDULE)
        .cron("* * * * * *")
        .message_to(
            crate::TOPIC,
            &crate::Job {
                n: 0,
                pad: String::new(),
            },
        )
        .upsert()
        .await?;
    // The window: the `ticks` whole seconds after the schedule was declared.
    let first_us = (start_us / 1_000_000 + 1) * 1_000_000;
    let last_us = first_us + (ticks - 1) * 1_000_000;
    let until = Instant::now() + Duration::from_micros(last_us - start_us) + secs(1.5);
    while Instant::now() < until {
        let wait = h.rng.range(every.0, every.1);
        tokio::time::sleep(Duration::from_millis(wait).min(until - Instant::now())).await;
        if Instant::now() >= until {
            break;
        }
        let slot = h.rng.range(0, workers as u64 - 1) as usize;
        h.kill_and_restart(slot)?;
    }
    h.client.unschedule(SCHEDULE).await?;
    Ok((first_us, last_us))
}

/// A failure for each worker whose measured skew is not within 500 ms of its offset.
fn skew_failures(offsets_ms: &[i64], skews: &[Option<i64>]) -> Vec<String> {
    let mut failures: Vec<String> = Vec::new();
    for (slot, (want, got)) in offsets_ms.iter().zip(skews).enumerate() {
        match got {
            Some(got) if (got - want).abs() <= 500 => {}
            other => failures.push(format!(
                "worker {slot} was to run {want} ms off Redis' clock but measured {other:?} (is libfaketime working?)"
            )),
        }
    }
    failures
}

/// What the ledger says of the ticks of the window `first_us..=last_us`.
#[derive(Debug)]
struct TickRuns {
    /// Ticks of the window that have a job.
    jobs: usize,
    /// Ticks of the window without one (us).
    missing: Vec<u64>,
    /// Ticks with two jobs (two runs as attempt 1).
    two_jobs: usize,
    /// Jobs that belong to no tick of the window, or not to a whole second.
    off_tick: usize,
    /// Ticks whose job was not due at the tick.
    wrong_due: usize,
    /// Ticks whose job started before the tick.
    early: usize,
    /// Jobs of ticks after the window.
    after_window: usize,
    /// Ticks whose job ran more than once.
    ran_twice: usize,
    /// How late each tick's first run started (ms).
    lateness: Vec<f64>,
}

impl TickRuns {
    /// Reads `runs` for the `ticks` ticks of the window `first_us..=last_us`.
    fn of(runs: &[Run], first_us: u64, last_us: u64, ticks: u64) -> TickRuns {
        // Per tick of the window (read from the job's id, `<schedule>@<tick in ms>`): its runs.
        // A second job for one tick would have the same id and run again as attempt 1, which
        // the report counts as `second_jobs` (and fails).
        let mut by_tick: std::collections::BTreeMap<u64, Vec<&Run>> = Default::default();
        let mut foreign = 0;
        let mut after_window = 0;
        for run in runs {
            let tick_us = run
                .id
                .strip_prefix(SCHEDULE)
                .and_then(|rest| rest.strip_prefix('@'))
                .and_then(|ms| ms.parse::<u64>().ok())
                .map(|ms| ms * 1000);
            match tick_us {
                None => foreign += 1,
                Some(t) if t > last_us => after_window += 1,
                Some(t) if t < first_us => foreign += 1,
                Some(t) => by_tick.entry(t).or_default().push(run),
            }
        }
        let missing: Vec<u64> = (0..ticks)
            .map(|i| first_us + i * 1_000_000)
            .filter(|t| !by_tick.contains_key(t))
            .collect();
        let off_tick = by_tick.keys().filter(|t| *t % 1_000_000 != 0).count() + foreign;
        let two_jobs = by_tick
            .values()
            .filter(|runs| runs.iter().filter(|r| r.attempt == 1).count() > 1)
            .count();
        let mut wrong_due = 0;
        let mut early = 0;
        let mut lateness: Vec<f64> = Vec::new();
        for (tick, runs) in &by_tick {
            let Some(first) = runs.iter().min_by_key(|r| r.start_us) else {
                continue;
            };
            if runs.iter().any(|r| r.attempt == 1 && r.due_us != *tick) {
                wrong_due += 1;
            }
            if first.start_us < *tick {
                early += 1;
            }
            lateness.push((first.start_us as f64 - *tick as f64) / 1000.0);
        }
        TickRuns {
            jobs: by_tick.len(),
            missing,
            two_jobs,
            off_tick,
            wrong_due,
            early,
            after_window,
            ran_twice: by_tick.values().filter(|runs| runs.len() > 1).count(),
            lateness,
        }
    }
}
