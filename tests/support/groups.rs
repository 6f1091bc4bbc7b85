//! Groups on a namespace of several shards (README "Groups"), on one Redis or a cluster.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dq::store::{shard_of, shard_of_group};
use dq::{JobContext, Listener, Topic};

#[derive(serde::Serialize, serde::Deserialize)]
struct Step {
    group: u32,
    seq: u32,
}

/// One run of a job: its group, its place in the group's pushes, when it started and ended.
type Runs = Arc<Mutex<Vec<(u32, u32, String, Instant, Instant)>>>;

/// Pushes 6 jobs to each of 8 groups of one slot (ids drawn by dq) on the namespace of
/// `config` (several shards), runs them with a listener of concurrency 16, and checks that the
/// groups sit in more than one shard, that each job's id leads to its group's shard, that
/// every job ran once, and that a group's jobs ran one at a time in push order.
pub async fn groups_of_one_slot_run_in_order_one_at_a_time_over_several_shards(config: dq::Config) {
    const GROUPS: u32 = 8;
    const EACH: u32 = 6;
    let shards = config.shards;
    assert!(shards > 1, "a namespace of several shards");
    let topic = Topic::new("g").unwrap();
    let homes: HashSet<u16> = (0..GROUPS)
        .map(|g| shard_of_group(&topic, &format!("acct-{g}"), shards))
        .collect();
    assert!(homes.len() > 1, "the groups sit in one shard: {homes:?}");

    let runs: Runs = Arc::default();
    let r = runs.clone();
    let listener = Listener::new("g", move |step: Step, ctx: JobContext| {
        let r = r.clone();
        async move {
            let started = Instant::now();
            tokio::time::sleep(Duration::from_millis(5)).await;
            r.lock().unwrap().push((
                step.group,
                step.seq,
                ctx.id().to_string(),
                started,
                Instant::now(),
            ));
        }
    })
    .concurrency(16);
    let rt = super::start_on(config, None, listener).await;
    let c = rt.client().clone();
    for seq in 0..EACH {
        for group in 0..GROUPS {
            let id = c
                .push_to("g", &Step { group, seq })
                .group(format!("acct-{group}"))
                .send()
                .await
                .unwrap()
                .id;
            let home = shard_of_group(&topic, &format!("acct-{group}"), shards);
            assert_eq!(shard_of(&topic, &id, shards), home, "job {id}");
        }
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while runs.lock().unwrap().len() < (GROUPS * EACH) as usize {
        assert!(
            Instant::now() < deadline,
            "{:?}",
            runs.lock().unwrap().len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    rt.shutdown().await.unwrap();
    let runs = runs.lock().unwrap().clone();
    let ids: HashSet<&String> = runs.iter().map(|r| &r.2).collect();
    assert_eq!(ids.len(), runs.len(), "a job ran twice");
    let mut by_group: HashMap<u32, Vec<(u32, Instant, Instant)>> = HashMap::new();
    for (group, seq, _, start, end) in &runs {
        by_group
            .entry(*group)
            .or_default()
            .push((*seq, *start, *end));
    }
    for (group, mut runs) in by_group {
        runs.sort_by_key(|r| r.1);
        let order: Vec<u32> = runs.iter().map(|r| r.0).collect();
        assert_eq!(
            order,
            (0..EACH).collect::<Vec<_>>(),
            "group {group} out of order"
        );
        for pair in runs.windows(2) {
            assert!(pair[1].1 >= pair[0].2, "group {group}: two jobs at once");
        }
    }
}
