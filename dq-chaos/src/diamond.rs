//! The diamond workflows (`diamond`, `diamond-cluster`): each of N workflows `d<i>` has four
//! steps, a first, b and c after a, d after both b and c, each a job of its own topic
//! (`d<i>.a` on `chaos-a`, ...), pushed while workers are killed with SIGKILL. The store step
//! that acks the last of b and c releases d, once. From the store and the ledgers: every
//! workflow succeeded; every start of a d (runs a kill cut included) came after its b's and its
//! c's runs had ended, and each of b and c after its a's; each d read both values; each d was
//! released once and completed once, or again only after a kill came between its run and its
//! ack (at least once, as every job).

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{json, Value};

use crate::harness::{Harness, PushPlan, Pushes};
use crate::ledger::{Ledger, Run};
use crate::scenario::load_with_kills;
use crate::setup::{figures, plan, worker, Outcome, PLAIN};
use crate::worker::WorkerArgs;
use crate::Job;

/// The steps of a diamond, in order, and their topics.
pub(crate) const STEPS: [(&str, &str); 4] = [
    ("a", "chaos-a"),
    ("b", "chaos-b"),
    ("c", "chaos-c"),
    ("d", "chaos-d"),
];

/// The topics of the steps, in order: a harness drains them in this order (the drain reads
/// their counts one after the other, and a workflow's pending step only moves on to a topic read
/// after its own, so a workflow that has not ended is never missed between two reads).
pub(crate) fn step_topics() -> Vec<String> {
    STEPS.iter().map(|(_, topic)| (*topic).to_owned()).collect()
}

/// The id of the `i`th diamond.
pub(crate) fn workflow_id(i: usize) -> String {
    format!("d{i}")
}

/// The job ids of the steps of diamond `workflow`, in the order of [`STEPS`].
pub(crate) fn step_ids(workflow: &str) -> Vec<String> {
    STEPS
        .iter()
        .map(|(step, _)| dq::workflow::NewWorkflow::job_id(workflow, step))
        .collect()
}

/// Pushes diamond `workflow`, each step with `job`, its first step due after `delay`.
pub(crate) async fn push(
    client: &dq::Client,
    workflow: &str,
    job: &Job,
    delay: Duration,
) -> dq::Result<dq::workflow::WorkflowOutcome> {
    let [(a, topic_a), (b, topic_b), (c, topic_c), (d, topic_d)] = STEPS;
    let mut flow = client.workflow(workflow);
    flow.step_to(a, topic_a, job).delay(delay);
    flow.step_to(b, topic_b, job).after(a);
    flow.step_to(c, topic_c, job).after(a);
    flow.step_to(d, topic_d, job).after(b).after(c);
    flow.push().await
}

/// What is wrong with the dependencies step d of diamond `workflow` read, or `None`: they must
/// be b and c, in that order, both succeeded, each with its job's id as its value (what their
/// handlers return).
pub(crate) fn dependency_problem(
    workflow: &str,
    deps: &dq::workflow::Dependencies,
) -> Option<String> {
    if deps.workflow() != Some(workflow) {
        return Some(format!(
            "d read the dependencies of workflow {:?}, not {workflow:?}",
            deps.workflow()
        ));
    }
    let names: Vec<&str> = deps.iter().map(|d| d.name.as_str()).collect();
    if names != ["b", "c"] {
        return Some(format!("d read the dependencies {names:?}, not b and c"));
    }
    for dep in deps.iter() {
        let want = dq::workflow::NewWorkflow::job_id(workflow, &dep.name);
        if !dep.succeeded() {
            return Some(format!(
                "d ran with {} {} ({:?})",
                dep.name,
                dep.state.as_str(),
                dep.error
            ));
        }
        match dep.value::<String>() {
            Ok(value) if value == want => {}
            Ok(value) => return Some(format!("{} returned {value:?}, not {want:?}", dep.name)),
            Err(e) => return Some(format!("d could not read the value of {}: {e}", dep.name)),
        }
    }
    None
}

/// SIGKILL of a random worker every 1-3 s (short: 0.5-1.5 s), restarted at once, while 1,000
/// diamond workflows (short: 50) are pushed over the kills (issue: workflows under worker
/// kills). With `cluster`, on a 3-master Redis Cluster in a namespace of one shard (workflows
/// need one, as groups do).
pub(crate) async fn diamond(full: bool, seed: u64, cluster: bool) -> anyhow::Result<Outcome> {
    let (n, stops) = if full { (1_000, 30) } else { (50, 5) };
    let every = if full { (1_000, 3_000) } else { (500, 1_500) };
    let w = WorkerArgs {
        diamond: true,
        ..worker(full)
    };
    let mut h = if cluster {
        Harness::start_cluster_one_shard("diamond-cluster", 3, w, seed).await?
    } else {
        Harness::start("diamond", PLAIN, w, seed).await?
    };
    h.topics = step_topics();
    let window = Duration::from_millis(stops * (every.0 + every.1) / 2);
    let plan = PushPlan {
        diamonds: true,
        ..plan(n, window)
    };
    let (mut h, pushes, _) = load_with_kills(h, plan, stops, every, seed).await?;
    let extra = held(&mut h, &pushes, n).await?;
    Ok((h, pushes, extra))
}

/// What the store and the ledgers say of the `n` diamonds once drained (the workflows whose
/// push was acknowledged): the scenario's figures, and its failures under `failures`.
pub(crate) async fn held(
    h: &mut Harness,
    pushes: &Pushes,
    n: usize,
) -> anyhow::Result<serde_json::Map<String, Value>> {
    let _ = h.ledger.refresh(&h.dir);
    let mut starts = Ledger::default();
    starts.refresh_from(&h.dir, "starts")?;
    let violations = violations(h)?;
    let mut c = Count::default();
    let mut not_succeeded: Vec<String> = Vec::new();
    for i in 0..n {
        let workflow = workflow_id(i);
        let ids = step_ids(&workflow);
        if !pushes.acked.contains_key(&ids[0]) {
            continue;
        }
        c.workflows += 1;
        match h.client.workflow_status(&workflow).await? {
            Some(info) if info.state == dq::workflow::WorkflowState::Succeeded => {}
            Some(info) => {
                let steps: Vec<String> = info
                    .steps
                    .iter()
                    .map(|s| format!("{} {}", s.name, s.state.as_str()))
                    .collect();
                not_succeeded.push(format!(
                    "{workflow} {} ({})",
                    info.state.as_str(),
                    steps.join(", ")
                ));
            }
            None => not_succeeded.push(format!("{workflow} not in the store")),
        }
    }
    let (runs, started) = (h.ledger.by_id(), starts.by_id());
    for i in 0..n {
        let ids = step_ids(&workflow_id(i));
        if pushes.acked.contains_key(&ids[0]) {
            c.add(&ids, &runs, &started, &violations, &h.faults);
        }
    }

    let mut failures: Vec<String> = Vec::new();
    if !not_succeeded.is_empty() {
        failures.push(format!(
            "{} of {} workflows did not succeed: {:?}",
            not_succeeded.len(),
            c.workflows,
            &not_succeeded[..not_succeeded.len().min(5)]
        ));
    }
    if c.d_started_before_deps > 0 || c.bc_started_before_a > 0 {
        failures.push(format!(
            "{} starts of a d came before its b and c had ended, {} of a b or c before its a had",
            c.d_started_before_deps, c.bc_started_before_a
        ));
    }
    if c.d_released_twice > 0 {
        failures.push(format!(
            "{} d steps ran twice as attempt 1: released twice",
            c.d_released_twice
        ));
    }
    if c.d_reran_without_kill > 0 {
        failures.push(format!(
            "{} d steps completed again with no worker SIGKILL between the runs",
            c.d_reran_without_kill
        ));
    }
    if !violations.is_empty() {
        let lines: usize = violations.values().map(Vec::len).sum();
        let sample: Vec<&String> = violations.values().flatten().take(3).collect();
        failures.push(format!(
            "{lines} runs of a d read wrong dependencies: {sample:?}"
        ));
    }
    Ok(figures([
        ("workflows", json!(c.workflows)),
        ("workflows_not_succeeded", json!(not_succeeded.len())),
        ("d_completed_once", json!(c.d_completed_once)),
        ("d_reran_after_kill", json!(c.d_reran_after_kill)),
        ("d_reran_without_kill", json!(c.d_reran_without_kill)),
        ("d_released_twice", json!(c.d_released_twice)),
        ("d_runs_cut_by_kill", json!(c.d_runs_cut_by_kill)),
        ("d_started_before_deps", json!(c.d_started_before_deps)),
        ("bc_started_before_a", json!(c.bc_started_before_a)),
        (
            "d_dependency_violations",
            json!(violations.values().map(Vec::len).sum::<usize>()),
        ),
        ("failures", json!(failures)),
    ]))
}

/// What the d steps wrote of their dependencies' problems, by job id (`<ledger>.violations`:
/// `id attempt problem` lines).
fn violations(h: &Harness) -> std::io::Result<HashMap<String, Vec<String>>> {
    let mut by_id: HashMap<String, Vec<String>> = HashMap::new();
    for entry in std::fs::read_dir(&h.dir)? {
        let path = entry?.path();
        if path.extension().is_none_or(|e| e != "violations") {
            continue;
        }
        for line in std::fs::read_to_string(&path)?.lines() {
            let id = line.split(' ').next().unwrap_or_default();
            by_id
                .entry(id.to_owned())
                .or_default()
                .push(line.to_owned());
        }
    }
    Ok(by_id)
}

/// The diamonds' tallies from the ledgers.
#[derive(Debug, Default)]
struct Count {
    /// Workflows whose push was acknowledged.
    workflows: usize,
    /// d steps that completed (a ledger line) exactly once.
    d_completed_once: usize,
    /// d steps that completed again because a worker was killed between a run's end and its
    /// ack (its lease lapsed and the job ran again, as any job: at least once).
    d_reran_after_kill: usize,
    /// d steps that completed more than once with no kill between the runs.
    d_reran_without_kill: usize,
    /// d steps run twice as attempt 1: two jobs, released twice.
    d_released_twice: usize,
    /// Starts of a d with no ledger line and no violation: runs a kill cut (or that failed to
    /// read the dependencies from the store, which the worker's log says).
    d_runs_cut_by_kill: usize,
    /// Starts of a d (runs cut by a kill included) before its b's and c's last runs ended, or
    /// while one of them had not completed.
    d_started_before_deps: usize,
    /// The same for the starts of b and c against their a.
    bc_started_before_a: usize,
}

impl Count {
    /// Adds the diamond of step jobs `ids` (a, b, c, d): its `runs` (the ledger), its
    /// `started` (the starts written as the handlers began), the `violations` its d wrote, and
    /// the `faults` of the scenario.
    fn add(
        &mut self,
        ids: &[String],
        runs: &HashMap<&str, Vec<&Run>>,
        started: &HashMap<&str, Vec<&Run>>,
        violations: &HashMap<String, Vec<String>>,
        faults: &[crate::harness::Fault],
    ) {
        let runs_of = |id: &String| runs.get(id.as_str()).map(Vec::as_slice).unwrap_or_default();
        let started_of = |id: &String| {
            started
                .get(id.as_str())
                .map(Vec::as_slice)
                .unwrap_or_default()
        };
        // When a step's last completed run ended: its ack, which releases what comes after
        // it, comes later (a run a kill cut never acks).
        let ended = |id: &String| runs_of(id).iter().map(|r| r.end_us).max();
        let before = |starts: &[&Run], end: Option<u64>| {
            starts
                .iter()
                .filter(|r| end.is_none_or(|end| r.start_us < end))
                .count()
        };
        // Each run writes its start before its ledger line: the starts are the runs and the
        // ones a kill cut (the ledger is read too, should a start be missing).
        let early = |id: &String, end: Option<u64>| {
            before(started_of(id), end).max(before(runs_of(id), end))
        };
        let (a, b, c, d) = (&ids[0], &ids[1], &ids[2], &ids[3]);
        self.bc_started_before_a += early(b, ended(a)) + early(c, ended(a));
        let deps_ended = ended(b).zip(ended(c)).map(|(b, c)| b.max(c));
        self.d_started_before_deps += early(d, deps_ended);

        let d_runs = runs_of(d);
        let violated = violations.get(d.as_str()).map_or(0, Vec::len);
        self.d_runs_cut_by_kill += started_of(d).len().saturating_sub(d_runs.len() + violated);
        if d_runs.iter().filter(|r| r.attempt == 1).count() > 1 {
            self.d_released_twice += 1;
        } else if d_runs.len() == 1 {
            self.d_completed_once += 1;
        } else if d_runs.len() > 1 {
            let mut by_start = d_runs.to_vec();
            by_start.sort_by_key(|r| r.start_us);
            let killed_between = by_start.windows(2).all(|pair| {
                faults.iter().any(|f| {
                    f.kind == "worker SIGKILL"
                        && f.start_us >= pair[0].end_us
                        && f.start_us <= pair[1].start_us
                })
            });
            if killed_between {
                self.d_reran_after_kill += 1;
            } else {
                self.d_reran_without_kill += 1;
            }
        }
    }
}
