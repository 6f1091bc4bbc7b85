//! Workflows on Redis: one workflow's record in `workflow:<id>` of shard 0, beside its steps' jobs
//! (workflows need a namespace of one shard), written by `workflow_push.lua` and settled by the
//! scripts that end jobs (lib.lua's workflows).

use std::collections::HashMap;

use async_trait::async_trait;
use redis::Value;

use super::reply::read;
use super::{micros, RedisStore};
use crate::keys::member;
use dq_core::store::{Sharded, Workflows};
use dq_core::workflow::{
    NewWorkflow, OnFailure, StepInfo, StepRef, StepState, WorkflowInfo, WorkflowOutcome,
};
use dq_core::{Error, JobId, Result, Topic};

impl RedisStore {
    /// Workflows live in shard 0 of a namespace of one shard.
    fn one_shard(&self, what: &str) -> Result<()> {
        if self.shards() > 1 {
            return Err(Error::InvalidPush {
                topic: String::new(),
                reason: format!(
                    "{what}: workflows need a namespace of one shard, and this one has {} (give workflows a namespace of their own with shards(1))",
                    self.shards()
                ),
            });
        }
        Ok(())
    }
}

/// `name|policy,...`, as lib.lua's `workflow_edges` reads it.
fn edges(list: &[(String, OnFailure)]) -> String {
    let parts: Vec<String> = list
        .iter()
        .map(|(name, p)| format!("{name}|{}", p.code()))
        .collect();
    parts.join(",")
}

fn read_edges(text: &str) -> Vec<(String, OnFailure)> {
    text.split(',')
        .filter_map(|e| e.split_once('|'))
        .map(|(name, p)| {
            (
                name.to_owned(),
                OnFailure::from_code(p.chars().next().unwrap_or('c')),
            )
        })
        .collect()
}

#[async_trait]
impl Workflows for RedisStore {
    async fn push_workflow(&self, flow: &NewWorkflow) -> Result<WorkflowOutcome> {
        flow.check()?;
        self.one_shard(&format!("workflow {:?}", flow.id))?;
        for step in &flow.steps {
            dq_core::store::check_priority(&step.job)?;
        }
        let k = self.keys(0);
        let dependents = flow.dependents();
        let mut topics: Vec<&Topic> = Vec::new();
        for step in &flow.steps {
            if !topics.contains(&&step.job.topic) {
                topics.push(&step.job.topic);
            }
        }
        let mut inv = self.scripts().workflow_push.prepare_invoke();
        inv.key(k.jobs())
            .key(k.delayed())
            .key(k.counts())
            .key(k.topics())
            .key(k.workflow_steps())
            .key(k.workflow(&flow.id));
        for t in &topics {
            inv.key(k.ready(t)).key(k.ranked(t)).key(k.ready_gen(t));
        }
        inv.key(self.named_keys(k, topics.iter().copied()));
        // (a step's id may be a far job's: its index hash, lib.lua's `need`)
        let members: Vec<String> = flow
            .steps
            .iter()
            .map(|s| crate::keys::member(&s.job.topic, &s.job.id))
            .collect();
        inv.key(self.far_indexes(k, members.iter().map(String::as_str)));
        let names: Vec<&str> = flow.steps.iter().map(|s| s.name.as_str()).collect();
        inv.arg(k.prefix())
            .arg(&flow.id)
            .arg(micros(flow.keep).max(1))
            .arg(flow.steps.len())
            .arg(names.join(","));
        for (step, after) in flow.steps.iter().zip(&dependents) {
            inv.arg(&step.name)
                .arg(step.job.topic.as_str())
                .arg(step.job.id.as_str())
                .arg(step.delay_us())
                .arg(step.job.max_attempts)
                .arg(i64::from(step.job.priority))
                .arg(step.job.trace.as_deref().unwrap_or(""))
                .arg(edges(&step.after))
                .arg(edges(after))
                .arg(&step.job.payload);
        }
        inv.arg(self.far());
        let reply: Value = self.run("push workflow", &mut inv).await?;
        let items: Vec<Value> = read("push workflow", reply)?;
        let code: i64 = read(
            "push workflow",
            items.first().cloned().unwrap_or(Value::Nil),
        )?;
        let taken: Option<String> =
            read("push workflow", items.get(1).cloned().unwrap_or(Value::Nil))?;
        match code {
            1 => {
                self.learn(topics);
                Ok(WorkflowOutcome::Created)
            }
            0 => Ok(WorkflowOutcome::AlreadyExists),
            _ => {
                let taken = taken.unwrap_or_default();
                Err(Error::InvalidPush {
                    topic: taken.split(':').next().unwrap_or_default().to_owned(),
                    reason: format!(
                        "workflow {:?}: job {taken} exists already (pending, dead-lettered or kept as succeeded), and a step's job id is <workflow id>.<step>; nothing was stored (use a new workflow id)",
                        flow.id
                    ),
                })
            }
        }
    }

    async fn workflow(&self, id: &str) -> Result<Option<WorkflowInfo>> {
        self.one_shard(&format!("workflow {id:?}"))?;
        let k = self.keys(0);
        let key = k.workflow(id);
        let cmd = redis::cmd("HGETALL").arg(&key).clone();
        let fields: HashMap<String, Vec<u8>> = self.query("read workflow", &cmd).await?;
        if fields.is_empty() {
            return Ok(None);
        }
        decode_flow(id, &key, &fields).map(Some)
    }

    async fn cancel_workflow(&self, id: &str) -> Result<Option<usize>> {
        self.one_shard(&format!("workflow {id:?}"))?;
        let k = self.keys(0);
        let mut inv = self.scripts().workflow_cancel.prepare_invoke();
        inv.key(k.workflow(id))
            .key(k.workflow_steps())
            .key(k.jobs())
            .key(k.delayed())
            .key(k.counts())
            .key(k.cancels())
            .key(k.leases())
            .arg(k.prefix())
            .arg(id);
        inv.key(self.named_keys(k, []));
        let n: i64 = self.call("cancel workflow", &mut inv).await?;
        Ok(usize::try_from(n).ok())
    }

    async fn step_of(&self, topic: &Topic, id: &JobId) -> Result<Option<StepRef>> {
        let k = self.keys_of(topic, id);
        let cmd = redis::cmd("HGET")
            .arg(k.workflow_steps())
            .arg(member(topic, id))
            .clone();
        let found: Option<String> = self.query("read workflow step", &cmd).await?;
        Ok(found.as_deref().and_then(StepRef::parse))
    }
}

/// A workflow's record as `HGETALL` returns it (see lib.lua's workflows).
fn decode_flow(id: &str, key: &str, fields: &HashMap<String, Vec<u8>>) -> Result<WorkflowInfo> {
    let text = |name: &str| {
        fields
            .get(name)
            .map(|v| String::from_utf8_lossy(v).into_owned())
    };
    let number = |name: &str| text(name).and_then(|t| t.parse::<u64>().ok());
    let malformed = |reason: String| Error::Malformed {
        location: key.to_owned(),
        reason,
    };
    let names = text("steps").ok_or_else(|| malformed("no `steps` field".into()))?;
    let mut steps = Vec::new();
    for name in names.split(',').filter(|n| !n.is_empty()) {
        let m = text(&format!("m:{name}"))
            .ok_or_else(|| malformed(format!("step {name:?} has no `m:` field")))?;
        let (topic, job) = m
            .split_once(':')
            .ok_or_else(|| malformed(format!("step {name:?}: member {m:?} has no ':'")))?;
        let state = text(&format!("s:{name}"))
            .as_deref()
            .and_then(StepState::from_code)
            .ok_or_else(|| malformed(format!("step {name:?} has no known state")))?;
        steps.push(StepInfo::new(
            name.to_owned(),
            Topic::new(topic)?,
            JobId::new(job)?,
            state,
            read_edges(&text(&format!("a:{name}")).unwrap_or_default()),
            fields.get(&format!("v:{name}")).cloned(),
            text(&format!("e:{name}")),
        ));
    }
    let cancelled = text("cancelled").as_deref() == Some("1");
    Ok(WorkflowInfo::new(
        id.to_owned(),
        number("created").unwrap_or(0),
        number("ended"),
        cancelled,
        steps,
    ))
}
