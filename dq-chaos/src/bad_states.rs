//! Scenarios of Redis in bad states (issue 29): restarted empty, stalled, full. Each returns
//! what `scenario::run` reports, with its own figures and failures in `extra`.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::harness::{now_us, Harness, Pushes};
use crate::setup::{
    drain_acked, figures, finish, load_until_fault, one_fault, secs, worker, Outcome, PLAIN,
};
use crate::worker::BEAT;

/// The longest acceptable wait, after Redis is back empty, for the workers' schedule to tick.
const REDECLARED_WITHIN_MS: f64 = 5_000.0;

/// redis-server killed and started again empty (no persistence) while the workers run a
/// listener whose schedule (every second) and retries they declared themselves: each worker
/// must notice and declare them again, and the schedule tick again within 5 s of Redis' return.
pub(crate) async fn redis_empty_restart(full: bool, seed: u64) -> anyhow::Result<Outcome> {
    let (workers, between, restarts) = if full { (4, 10.0, 3) } else { (3, 5.0, 1) };
    let mut w = worker(full);
    w.beat = true;
    let mut h = Harness::start("redis-empty-restart", PLAIN, w, seed).await?;
    h.spawn_workers(workers).await?;
    let mut back_at = Vec::new();
    for _ in 0..restarts {
        tokio::time::sleep(secs(between)).await;
        h.kill_redis(Duration::from_secs(1)).await;
        back_at.push(now_us());
    }
    tokio::time::sleep(secs(between)).await;
    let mut conn = h.redis_conn().await?;
    let limit: Option<String> = redis::cmd("HGET")
        .arg("dq:{chaos:0}:attempts")
        .arg(BEAT)
        .query_async(&mut conn)
        .await?;
    // The harness' own connection broke with the restarts: its first calls may fail.
    let mut tries = 0;
    while let Err(e) = h.client.unschedule(BEAT).await {
        tries += 1;
        anyhow::ensure!(tries < 50, "could not remove the schedule: {e}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drain_acked(&mut h, &HashMap::new()).await;
    let _ = h.ledger.refresh(&h.dir);

    let mut failures: Vec<String> = Vec::new();
    // For each return: how long until the first tick due after it ran.
    let mut first_tick_ms = Vec::new();
    for &back in &back_at {
        let first = h
            .ledger
            .runs
            .iter()
            .filter(|r| r.id.starts_with(BEAT) && r.due_us >= back)
            .map(|r| r.start_us)
            .min();
        let ms = first.map(|s| s.saturating_sub(back) as f64 / 1000.0);
        match ms {
            Some(ms) if ms <= REDECLARED_WITHIN_MS => {}
            other => failures.push(format!(
                "the schedule did not tick within {REDECLARED_WITHIN_MS} ms of Redis' return (first tick after {other:?} ms)"
            )),
        }
        first_tick_ms.push(ms);
    }
    // Every worker said it declared again, once per restart.
    let said: Vec<usize> = (0..h.worker_slots())
        .map(|slot| {
            let log = std::fs::read_to_string(h.dir.join(format!("worker-{slot}.log")));
            log.unwrap_or_default()
                .matches("declaring the listeners' schedules, retries and retentions again")
                .count()
        })
        .collect();
    if said.iter().any(|&n| n < restarts) {
        failures.push(format!(
            "not every worker declared again after each of the {restarts} restarts: {said:?}"
        ));
    }
    if limit.as_deref() != Some("4") {
        failures.push(format!(
            "the listener's retries (3: 4 runs) are not recorded again: {limit:?}"
        ));
    }
    let tick_runs = h.ledger.runs.iter().filter(|r| r.id.starts_with(BEAT));
    let extra = figures([
        ("restarts", json!(restarts)),
        ("first_tick_after_return_ms", json!(first_tick_ms)),
        ("declared_again_by_worker", json!(said)),
        ("attempt_limit_after", json!(limit)),
        ("tick_runs", json!(tick_runs.count())),
        ("failures", json!(failures)),
    ]);
    Ok((h, Pushes::default(), extra))
}

/// redis-server stopped (SIGSTOP) for longer than both the lease and the client's reply limit
/// while workers fetch, then let go (SIGCONT): it runs the fetches still in its buffers, whose
/// clients gave up. Their jobs are taken back by the consumers' next fetches: no attempt is
/// charged to a job whose handler did not start, and nothing is lost.
pub(crate) async fn redis_stall(full: bool, seed: u64) -> anyhow::Result<Outcome> {
    // The stall is the fault itself, not a wait: it must outlast the client's 10 s reply limit
    // (or no reply is lost: the clients just wait), so even the short version stops Redis 12 s.
    let fault = one_fault(full, (25_000, 12_000));
    let stall_ms = fault.fault_ms;
    let mut h = Harness::start("redis-stall", PLAIN, worker(full), seed).await?;
    let producer = load_until_fault(&mut h, fault, seed).await?;
    let pid = h.single().lock().map(|r| r.pid()).unwrap_or(0);
    anyhow::ensure!(pid > 0, "no redis-server pid");
    let start = now_us();
    signal(pid, "-STOP")?;
    tokio::time::sleep(Duration::from_millis(stall_ms)).await;
    signal(pid, "-CONT")?;
    h.record_since(&format!("redis SIGSTOP {stall_ms} ms"), start);
    let pushes = finish(&mut h, producer).await?;
    let _ = h.ledger.refresh(&h.dir);

    // A run on attempt k > 1 needs a run of attempt k - 1 of the same job in the ledger: an
    // attempt charged otherwise went to a lease whose handler never started.
    let mut attempts: HashMap<&str, HashSet<u32>> = HashMap::new();
    for r in &h.ledger.runs {
        attempts.entry(r.id.as_str()).or_default().insert(r.attempt);
    }
    let charged_without_run = attempts
        .values()
        .filter(|seen| seen.iter().any(|&a| a > 1 && !seen.contains(&(a - 1))))
        .count();
    let taken_back = log_count(&h, "took back jobs leased by a fetch whose reply was lost");
    let mut failures = Vec::new();
    if charged_without_run > 0 {
        failures.push(json!(format!(
            "{charged_without_run} jobs were charged an attempt whose handler never started"
        )));
    }
    let extra = figures([
        ("stall_ms", json!(stall_ms)),
        ("charged_without_run", json!(charged_without_run)),
        ("take_backs_logged", json!(taken_back)),
        ("failures", json!(failures)),
    ]);
    Ok((h, pushes, extra))
}

/// Handlers two to three leases long while Redis is at `maxmemory` (noeviction) for three
/// leases: renewals and acks, also of `unique_for` jobs, go through, so no job runs twice and
/// none is lost.
pub(crate) async fn maxmemory_long(full: bool, seed: u64) -> anyhow::Result<Outcome> {
    let mut w = worker(full);
    (w.work_min_ms, w.work_max_ms, w.concurrency) = (w.lease_ms * 2, w.lease_ms * 3, 64);
    let n: u64 = if full { 600 } else { 240 };
    let args = [PLAIN, &["--maxmemory-policy", "noeviction"]].concat();
    let mut h = Harness::start("maxmemory-long", &args, w, seed).await?;
    h.spawn_workers(3).await?;
    let pushes = h
        .push_batch(n, |job, i| {
            job.id(format!("u{i}"))
                .unique_for(Duration::from_secs(3600))
        })
        .await?;
    // Full once the first handlers run, for three leases.
    let deadline = Instant::now() + Duration::from_secs(30);
    while h.client.counts(crate::TOPIC).await?.running == 0 {
        anyhow::ensure!(Instant::now() < deadline, "no job started within 30 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let full_ms = h.worker.lease_ms * 3;
    let start = now_us();
    h.redis_fault("CONFIG SET maxmemory", &["CONFIG", "SET", "maxmemory", "1"])
        .await;
    h.faults.pop();
    let refused = h.client.push_to(crate::TOPIC, &0).id("while-full").await;
    tokio::time::sleep(Duration::from_millis(full_ms)).await;
    h.redis_fault("CONFIG SET maxmemory", &["CONFIG", "SET", "maxmemory", "0"])
        .await;
    h.faults.pop();
    h.record_since(&format!("maxmemory reached for {full_ms} ms"), start);
    drain_acked(&mut h, &pushes.acked).await;
    let mut conn = h.redis_conn().await?;
    let reserved: u64 = redis::cmd("ZCARD")
        .arg("dq:{chaos:0}:unique")
        .query_async(&mut conn)
        .await?;
    let _ = h.ledger.refresh(&h.dir);
    let runs = h.ledger.runs_by_id();
    let ran_twice = runs.values().filter(|&&k| k > 1).count();
    let mut failures = Vec::new();
    if ran_twice > 0 {
        failures.push(json!(format!(
            "{ran_twice} jobs ran twice while Redis was full"
        )));
    }
    if reserved != n {
        failures.push(json!(format!(
            "{reserved} of {n} unique jobs keep their id reserved: acks did not go through"
        )));
    }
    if refused.is_ok() {
        failures.push(json!("a push went through while Redis was full"));
    }
    let push_while_full = refused.map_or_else(|e| e.to_string(), |id| id.to_string());
    let extra = figures([
        ("full_ms", json!(full_ms)),
        ("ran_twice", json!(ran_twice)),
        ("unique_reserved", json!(reserved)),
        ("push_while_full", json!(push_while_full)),
        ("failures", json!(failures)),
    ]);
    Ok((h, pushes, extra))
}

/// Sends `sig` (`-STOP`, `-CONT`) to `pid`, a redis-server this harness started.
fn signal(pid: u32, sig: &str) -> anyhow::Result<()> {
    let status = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()?;
    anyhow::ensure!(status.success(), "kill {sig} {pid} failed: {status}");
    Ok(())
}

/// Lines of every worker's log that contain `needle`.
fn log_count(h: &Harness, needle: &str) -> usize {
    (0..h.worker_slots())
        .map(|slot| {
            std::fs::read_to_string(h.dir.join(format!("worker-{slot}.log")))
                .unwrap_or_default()
                .matches(needle)
                .count()
        })
        .sum()
}

/// The longest acceptable wait, after the demoted Redis is a master again, for the next job to
/// finish.
const PROMOTED_RECOVERY_MS: f64 = 10_000.0;

/// The Redis the workers use becomes, with their sockets open, the replica of a second Redis
/// that holds the same data (a managed failover behind one address), then a master again
/// (issue 30, finding 2). The workers must say READONLY for what it is, keep trying, and run
/// jobs again within seconds of the promotion; nothing is lost. Runs repeated because a lease
/// lapsed while Redis refused writes are counted (`duplicated`).
pub(crate) async fn replica_demote(full: bool, seed: u64) -> anyhow::Result<Outcome> {
    let fault = one_fault(full, (15_000, 4_000));
    let demoted_ms = fault.fault_ms;
    let mut h = Harness::start("replica-demote", PLAIN, worker(full), seed).await?;
    let second = tokio::task::spawn_blocking(|| dq_testkit::RedisServer::start_with(PLAIN)).await?;
    let second = std::sync::Arc::new(second);
    let producer = load_until_fault(&mut h, fault, seed).await?;
    let start = now_us();
    let (first, other) = (h.single(), second.clone());
    tokio::task::spawn_blocking(move || demote(&first, &other)).await??;
    tokio::time::sleep(Duration::from_millis(demoted_ms)).await;
    let first = h.single();
    let reply = tokio::task::spawn_blocking(move || {
        first
            .lock()
            .map(|r| r.command(&["REPLICAOF", "NO", "ONE"]))
            .unwrap_or_default()
    })
    .await?;
    anyhow::ensure!(reply.starts_with("+OK"), "REPLICAOF NO ONE: {reply:?}");
    h.record_since(&format!("demoted to a replica for {demoted_ms} ms"), start);
    let pushes = finish(&mut h, producer).await?;
    // Said for what it is: a read-only replica, not an unreachable Redis.
    let readonly = log_count(&h, "read-only replica");
    let mut failures = Vec::new();
    if readonly == 0 {
        failures.push(json!(
            "the workers never said Redis was a read-only replica"
        ));
    }
    let extra = figures([
        ("demoted_ms", json!(demoted_ms)),
        ("readonly_logged", json!(readonly)),
        ("recovery_limit_ms", json!(PROMOTED_RECOVERY_MS)),
        ("failures", json!(failures)),
    ]);
    drop(second);
    Ok((h, pushes, extra))
}

/// Makes `second` a copy of `first`, then swaps their roles: `first`'s writes paused until
/// `second` has every one of them, `second` promoted, `first` made its replica (its clients'
/// sockets stay open, and their writes are now answered READONLY).
fn demote(
    first: &std::sync::Mutex<dq_testkit::RedisServer>,
    second: &dq_testkit::RedisServer,
) -> anyhow::Result<()> {
    let first = first
        .lock()
        .map_err(|_| anyhow::anyhow!("redis lock poisoned"))?;
    let (first_port, second_port) = (first.port().to_string(), second.port().to_string());
    second.command(&["REPLICAOF", "127.0.0.1", &first_port]);
    let field = |info: &str, name: &str| -> Option<u64> {
        info.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while !second
        .command(&["INFO", "replication"])
        .contains("master_link_status:up")
    {
        anyhow::ensure!(Instant::now() < deadline, "the second Redis never synced");
        std::thread::sleep(Duration::from_millis(20));
    }
    first.command(&["CLIENT", "PAUSE", "10000", "WRITE"]);
    loop {
        let sent = field(
            &first.command(&["INFO", "replication"]),
            "master_repl_offset:",
        );
        let got = field(
            &second.command(&["INFO", "replication"]),
            "slave_repl_offset:",
        );
        if sent.is_some() && got >= sent {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the second Redis never caught up"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    second.command(&["REPLICAOF", "NO", "ONE"]);
    first.command(&["REPLICAOF", "127.0.0.1", &second_port]);
    first.command(&["CLIENT", "UNPAUSE"]);
    Ok(())
}
