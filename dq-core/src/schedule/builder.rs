//! Declaring a periodic schedule: the builder [`Client::schedule`] returns, what a schedule
//! looks like when listed, and the ids and payloads of its ticks' jobs.

use std::time::{Duration, SystemTime};

use serde::Serialize;

use super::spec::{Missed, Repeat, ScheduleSpec, Tick};
use crate::client::{Client, PushBuilder};
use crate::error::{Error, Result};
use crate::job::{from_us, to_us};
use crate::message::Message;
use crate::name::{JobId, Topic};
use crate::store::ScheduleEntry;

/// Longest schedule id: its jobs' ids are the schedule id, `@` and the tick in milliseconds.
pub const MAX_SCHEDULE_ID_LEN: usize = 200;

/// A schedule as [`Client::schedules`] lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ScheduleInfo {
    /// Its id.
    pub id: String,
    /// How it repeats and what its jobs carry.
    pub spec: ScheduleSpec,
    /// Its next tick; `None` while it is paused (or when its expression never matches again).
    pub next: Option<SystemTime>,
    /// The last tick fired.
    pub last: Option<SystemTime>,
}

impl ScheduleInfo {
    pub(super) fn from_entry(entry: ScheduleEntry) -> Result<ScheduleInfo> {
        let spec = serde_json::from_str(&entry.spec_json).map_err(|e| Error::Malformed {
            location: format!("schedule {:?}", entry.id),
            reason: format!(
                "{e}; remove it with `dq schedules remove {}` and declare it again",
                entry.id
            ),
        })?;
        Ok(ScheduleInfo {
            id: entry.id,
            spec,
            next: entry.next_us.map(from_us),
            last: entry.last_us.map(from_us),
        })
    }
}

/// A schedule being declared; [`upsert`](ScheduleBuilder::upsert) stores it.
#[must_use = "a schedule is stored by .upsert().await"]
#[derive(Debug)]
pub struct ScheduleBuilder {
    client: Client,
    id: String,
    cron: Option<String>,
    every: Option<Duration>,
    tz: String,
    topic: Option<String>,
    payload: Option<Result<String>>,
    /// The group `.group(..)` gave.
    group: Option<String>,
    missed: Missed,
    max_retries: u32,
}

impl ScheduleBuilder {
    /// The builder of schedule `id`, with the defaults: UTC, missed ticks skipped, two retries.
    pub(super) fn new(client: Client, id: &str) -> ScheduleBuilder {
        ScheduleBuilder {
            client,
            id: id.to_owned(),
            cron: None,
            every: None,
            tz: "UTC".to_owned(),
            topic: None,
            payload: None,
            group: None,
            missed: Missed::Skip,
            max_retries: crate::job::DEFAULT_RETRIES,
        }
    }

    /// Ticks when the cron expression matches: five fields (`0 9 * * MON-FRI`) or six with
    /// seconds first (`*/10 * * * * *`), read in the schedule's time zone ([`tz`](Self::tz)).
    pub fn cron(mut self, expr: impl Into<String>) -> Self {
        self.cron = Some(expr.into());
        self
    }

    /// Ticks every `every` (at least a second), at its multiples since 1970-01-01 UTC.
    pub fn every(mut self, every: Duration) -> Self {
        self.every = Some(every);
        self
    }

    /// The IANA time zone the cron expression is read in (default `UTC`).
    pub fn tz(mut self, tz: impl Into<String>) -> Self {
        self.tz = tz.into();
        self
    }

    /// Each tick's job carries this message, to its type's topic. Its jobs are not grouped by
    /// the message's group field (`#[message(group = "account")]`) unless [`group`](Self::group)
    /// says so: `.message(&m).group(m.account.clone())` (a schedule declared before groups keeps
    /// its jobs and its place when the new version declares it again).
    pub fn message<M: Message>(self, message: &M) -> Self {
        self.message_to(M::TOPIC, message)
    }

    /// Each tick's job carries this value (as JSON), to `topic`.
    pub fn message_to<T: Serialize + ?Sized>(mut self, topic: &str, message: &T) -> Self {
        self.topic = Some(topic.to_owned());
        self.payload = Some(
            serde_json::to_string(message).map_err(|source| Error::Serialize {
                topic: topic.to_owned(),
                source,
            }),
        );
        self
    }

    /// Each tick's job goes to `topic` carrying a [`Tick`] (the schedule's id and the tick).
    pub fn topic(mut self, topic: impl Into<String>) -> Self {
        self.topic = Some(topic.into());
        self.payload = None;
        self
    }

    /// Puts each tick's job in group `key` of its topic (README "Groups"), as
    /// [`PushBuilder::group`](crate::PushBuilder::group) does a push: with a group concurrency
    /// of one, a nightly sync per tenant never runs beside that tenant's other jobs. The key
    /// follows the rules of a job id (`Error::InvalidPeriodic` at `upsert` otherwise). Every
    /// process that fires schedules must know groups (this version or later: README
    /// "Periodic jobs").
    ///
    /// On a namespace of several shards, where every job of a group lives in its group's shard,
    /// a tick's job id gets a suffix that leads there when `<schedule>@<tick ms>` does not
    /// (`.1`, `.2`, ...: the same in every process, so a tick is still one job).
    pub fn group(mut self, key: impl Into<String>) -> Self {
        self.group = Some(key.into());
        self
    }

    /// What to do with ticks missed while every process was down (default [`Missed::Skip`]).
    pub fn missed(mut self, missed: Missed) -> Self {
        self.missed = missed;
        self
    }

    /// Retries of each tick's job (default 2).
    pub fn max_retries(mut self, retries: u32) -> Self {
        self.max_retries = retries;
        self
    }

    /// Stores the schedule, or changes the one of the same id; every process fires it from its
    /// next tick on. An unchanged schedule keeps its place (declaring it again at every start
    /// neither skips nor repeats a tick); a changed one ticks next from now; a paused one stays
    /// paused.
    pub async fn upsert(self) -> Result<ScheduleInfo> {
        let client = self.client.clone();
        let id = self.id.clone();
        let spec = self.into_spec(client.config().max_payload_bytes)?;
        store_spec(&client, &id, &spec).await
    }

    /// The spec this builder describes, checked: one way to repeat, a topic, a catch-up and a
    /// message within bounds.
    fn into_spec(self, max_payload_bytes: usize) -> Result<ScheduleSpec> {
        check_id(&self.id)?;
        let invalid = |what: String| Error::InvalidPeriodic {
            reason: format!("schedule {:?}: {what}", self.id),
        };
        let repeat = match (&self.cron, self.every) {
            (Some(expr), None) => Repeat::cron(expr, &self.tz)?,
            (None, Some(every)) => Repeat::every(every)?,
            _ => return Err(invalid("give either .cron(..) or .every(..)".into())),
        };
        let topic = self.topic.clone().ok_or_else(|| {
            invalid("say where its jobs go with .message(..), .message_to(..) or .topic(..)".into())
        })?;
        Topic::new(topic.as_str())?;
        if let Missed::All { max } = self.missed {
            if max > MAX_CATCH_UP {
                return Err(invalid(format!(
                    "Missed::All {{ max: {max} }} is over {MAX_CATCH_UP} catch-up jobs"
                )));
            }
        }
        let payload = match self.payload {
            Some(Ok(p)) if p.len() > max_payload_bytes => {
                return Err(invalid(format!(
                    "its message is {} bytes, over the {max_payload_bytes}-byte payload limit",
                    p.len()
                )))
            }
            other => other.transpose()?,
        };
        if let Some(problem) = self
            .group
            .as_deref()
            .and_then(crate::name::group_key_problem)
        {
            return Err(invalid(problem));
        }
        Ok(ScheduleSpec {
            repeat,
            topic,
            payload,
            missed: self.missed,
            max_retries: self.max_retries,
            group: self.group,
        })
    }
}

/// Stores `spec` as schedule `id`, or changes the stored one, and reads it back.
async fn store_spec(client: &Client, id: &str, spec: &ScheduleSpec) -> Result<ScheduleInfo> {
    let json = serde_json::to_string(spec).map_err(|source| Error::Serialize {
        topic: spec.topic.clone(),
        source,
    })?;
    let store = &client.store;
    let now = from_us(store.time_us().await?);
    if spec.repeat.next_after(now).is_none() {
        return Err(Error::InvalidPeriodic {
            reason: format!("schedule {id:?} never ticks after now"),
        });
    }
    let old = store.schedule(id).await?;
    match &old {
        // Unchanged (declared again at a start): nothing is written, so a pause or a look
        // moving it on meanwhile is not undone.
        Some(old) if old.spec_json == json => {}
        Some(old) => {
            // Changed: ticks from now, paused if it was. The jobs made ahead under the old
            // spec are cancelled before the new one is stored: once it is, looks make the
            // coming ticks' jobs under it, and a cancel would take those. What a look
            // under the old spec made in between is cancelled after, at the ticks the new
            // spec does not have (at one it has, the job stays: it is that tick's job).
            client.cancel_ahead(id, old.clone(), None).await?;
            let next = old
                .next_us
                .and_then(|_| spec.repeat.next_after(now).map(to_us));
            store.put_schedule(id, &json, next).await?;
            client.cancel_ahead(id, old.clone(), Some(spec)).await?;
        }
        None => {
            let next = spec.repeat.next_after(now).map(to_us);
            store.put_schedule(id, &json, next).await?;
        }
    }
    let entry = store.schedule(id).await?;
    let entry = entry.ok_or_else(|| Error::Internal {
        what: "schedule upsert",
        reason: format!("schedule {id:?} was removed right after it was stored"),
    })?;
    ScheduleInfo::from_entry(entry)
}

pub(crate) fn check_id(id: &str) -> Result<()> {
    JobId::new(id)?;
    if id.len() > MAX_SCHEDULE_ID_LEN || id.contains('@') {
        return Err(Error::InvalidPeriodic {
            reason: format!(
                "schedule id {id:?}: at most {MAX_SCHEDULE_ID_LEN} bytes and no '@' (its jobs are named <id>@<tick>)"
            ),
        });
    }
    Ok(())
}

/// The id of the job of `schedule`'s tick `tick`: the same in every process. (A schedule with
/// a group on a namespace of several shards may add a suffix to it: [`ScheduleBuilder::group`].)
pub fn tick_job_id(schedule: &str, tick: SystemTime) -> String {
    format!("{schedule}@{}", to_us(tick) / 1000)
}

/// `push` of one of `spec`'s jobs with id `id`, in `spec`'s group when it has one, the id led
/// to the group's shard ([`in_group_shard`]).
pub(crate) fn placed(
    push: PushBuilder,
    id: String,
    spec: &ScheduleSpec,
    shards: u16,
) -> PushBuilder {
    let push = push.id(in_group_shard(id, spec, shards));
    match &spec.group {
        Some(group) => push.group(group.as_str()),
        None => push,
    }
}

/// The id of the job of tick `tick` of schedule `schedule` (`spec`) in a namespace of `shards`
/// shards: [`tick_job_id`], led to its group's shard ([`in_group_shard`]).
pub(crate) fn tick_job_id_in(
    schedule: &str,
    spec: &ScheduleSpec,
    tick: SystemTime,
    shards: u16,
) -> String {
    in_group_shard(tick_job_id(schedule, tick), spec, shards)
}

/// `id`, or when `spec` has a group and `id` leads to another shard than the group's (a
/// grouped job lives in its group's shard), `id` with the first suffix `.<k>` that leads there:
/// the same in every process.
pub(crate) fn in_group_shard(id: String, spec: &ScheduleSpec, shards: u16) -> String {
    let (Some(group), Ok(topic)) = (&spec.group, Topic::new(spec.topic.as_str())) else {
        return id;
    };
    let home = crate::store::shard_of_group(&topic, group, shards);
    let leads_home = |candidate: &str| {
        JobId::new(candidate).is_ok_and(|j| crate::store::shard_of(&topic, &j, shards) == home)
    };
    if leads_home(&id) {
        return id;
    }
    // Each suffix leads to a shard at random: some of the first few thousand lead home.
    (1..=u32::from(shards).saturating_mul(64))
        .map(|k| format!("{id}.{k}"))
        .find(|candidate| leads_home(candidate))
        .unwrap_or(id)
}

/// A guard on the ticks one look creates for one schedule (the shortest period is a second
/// and the lookahead a few, so a look needs a handful).
pub(crate) const MAX_TICKS_PER_LOOK: usize = 100;

/// Most catch-up jobs `Missed::All` may ask for (they are created in one look).
pub(crate) const MAX_CATCH_UP: u32 = 1_000;

/// What the job of a tick carries: the schedule's message, or a [`Tick`].
pub(crate) fn job_payload(spec: &ScheduleSpec, id: &str, tick: SystemTime) -> Result<String> {
    match &spec.payload {
        Some(json) => Ok(json.clone()),
        None => serde_json::to_string(&Tick {
            schedule: id.to_owned(),
            at: tick,
        })
        .map_err(|source| Error::Serialize {
            topic: spec.topic.clone(),
            source,
        }),
    }
}
