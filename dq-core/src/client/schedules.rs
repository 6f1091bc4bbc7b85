//! Periodic schedules through the client: declare, list, pause, resume, remove, run now, and
//! fire the ticks that are due (what every runtime does every second).

use std::time::{Duration, SystemTime};

use serde::Serialize;

use super::{Client, Pushed};
use crate::admin::ChangeOutcome;
use crate::error::{Error, Result};
use crate::job::{from_us, to_us};
use crate::message::Message;
use crate::name::{JobId, Topic};
use crate::periodic::{Missed, Repeat, ScheduleSpec, Tick};
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
    missed: Missed,
    max_retries: u32,
}

impl ScheduleBuilder {
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

    /// Each tick's job carries this message, to its type's topic.
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
        let client = self.client;
        check_id(&self.id)?;
        let repeat = match (self.cron, self.every) {
            (Some(expr), None) => Repeat::cron(&expr, &self.tz)?,
            (None, Some(every)) => Repeat::every(every)?,
            _ => {
                return Err(Error::InvalidPeriodic {
                    reason: format!(
                        "schedule {:?}: give either .cron(..) or .every(..)",
                        self.id
                    ),
                })
            }
        };
        let topic = self.topic.ok_or_else(|| Error::InvalidPeriodic {
            reason: format!(
                "schedule {:?}: say where its jobs go with .message(..), .message_to(..) or .topic(..)",
                self.id
            ),
        })?;
        Topic::new(topic.as_str())?;
        if let Missed::All { max } = self.missed {
            if max > MAX_CATCH_UP {
                return Err(Error::InvalidPeriodic {
                    reason: format!(
                        "schedule {:?}: Missed::All {{ max: {max} }} is over {MAX_CATCH_UP} catch-up jobs",
                        self.id
                    ),
                });
            }
        }
        let spec = ScheduleSpec {
            repeat,
            topic,
            payload: self.payload.transpose()?,
            missed: self.missed,
            max_retries: self.max_retries,
        };
        let json = serde_json::to_string(&spec).map_err(|source| Error::Serialize {
            topic: spec.topic.clone(),
            source,
        })?;
        if let Some(payload) = &spec.payload {
            let limit = client.config.max_payload_bytes;
            if payload.len() > limit {
                return Err(Error::InvalidPeriodic {
                    reason: format!(
                        "schedule {:?}: its message is {} bytes, over the {limit}-byte payload limit",
                        self.id,
                        payload.len()
                    ),
                });
            }
        }
        let store = &client.store;
        let now = from_us(store.time_us().await?);
        if spec.repeat.next_after(now).is_none() {
            return Err(Error::InvalidPeriodic {
                reason: format!("schedule {:?} never ticks after now", self.id),
            });
        }
        let old = store.schedule(&self.id).await?;
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
                client.cancel_ahead(&self.id, old.clone(), None).await?;
                let next = old
                    .next_us
                    .and_then(|_| spec.repeat.next_after(now).map(to_us));
                store.put_schedule(&self.id, &json, next).await?;
                client
                    .cancel_ahead(&self.id, old.clone(), Some(&spec))
                    .await?;
            }
            None => {
                let next = spec.repeat.next_after(now).map(to_us);
                store.put_schedule(&self.id, &json, next).await?;
            }
        }
        let entry = store.schedule(&self.id).await?;
        let entry = entry.ok_or_else(|| Error::Internal {
            what: "schedule upsert",
            reason: format!(
                "schedule {:?} was removed right after it was stored",
                self.id
            ),
        })?;
        ScheduleInfo::from_entry(entry)
    }
}

fn check_id(id: &str) -> Result<()> {
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

/// The id of the job of `schedule`'s tick `tick`: the same in every process.
pub fn tick_job_id(schedule: &str, tick: SystemTime) -> String {
    format!("{schedule}@{}", to_us(tick) / 1000)
}

impl Client {
    /// Starts declaring the periodic schedule `id` (or changing it): one job per tick, created
    /// once however many processes run.
    ///
    /// ```no_run
    /// # async fn f(client: dq_core::Client) -> dq_core::Result<()> {
    /// client
    ///     .schedule("weekday-report")
    ///     .cron("0 9 * * MON-FRI")
    ///     .tz("Europe/Paris")
    ///     .topic("daily-report")          // each job carries a dq::Tick; or .message(&msg)
    ///     .upsert()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn schedule(&self, id: &str) -> ScheduleBuilder {
        ScheduleBuilder {
            client: self.clone(),
            id: id.to_owned(),
            cron: None,
            every: None,
            tz: "UTC".to_owned(),
            topic: None,
            payload: None,
            missed: Missed::Skip,
            max_retries: crate::job::DEFAULT_RETRIES,
        }
    }

    /// Every schedule this version of dq can read, by id. One it cannot (declared by a newer
    /// version during a rolling upgrade, or damaged) is left out and named in a warning.
    pub async fn schedules(&self) -> Result<Vec<ScheduleInfo>> {
        let mut infos = Vec::new();
        for entry in self.store.schedules().await? {
            let id = entry.id.clone();
            match ScheduleInfo::from_entry(entry) {
                Ok(info) => infos.push(info),
                Err(e) => self.unreadable_schedule(&id, &e),
            }
        }
        Ok(infos)
    }

    /// Deletes a schedule; false when there was none. The jobs of its ticks still to come
    /// (created a few seconds ahead) are cancelled; jobs of ticks that came stay.
    pub async fn unschedule(&self, id: &str) -> Result<bool> {
        let before = self.store.schedule(id).await?;
        let removed = self.store.remove_schedule(id).await?;
        if let Some(entry) = before.filter(|_| removed) {
            self.cancel_ahead(id, entry, None).await?;
        }
        Ok(removed)
    }

    /// Stops a schedule from ticking (in every process) until it is resumed. The jobs of its
    /// ticks still to come (created a few seconds ahead) are cancelled, so nothing of it runs
    /// after the pause, save a tick whose job a process was creating at that very instant.
    pub async fn pause_schedule(&self, id: &str) -> Result<bool> {
        let before = self.store.schedule(id).await?;
        let paused = self.store.set_schedule_next(id, None).await?;
        if let Some(entry) = before.filter(|_| paused) {
            self.cancel_ahead(id, entry, None).await?;
        }
        Ok(paused)
    }

    /// Cancels the jobs already created for the ticks of a schedule after now, up to and
    /// including the next tick it had stored (`entry`, read before it was paused, removed or
    /// changed): the ticker creates them up to a few seconds ahead. Ticks that `spare` (the
    /// schedule's new spec) has too, in the same topic, are left alone.
    async fn cancel_ahead(
        &self,
        id: &str,
        entry: ScheduleEntry,
        spare: Option<&ScheduleSpec>,
    ) -> Result<usize> {
        let last = entry.last_us;
        let info = match ScheduleInfo::from_entry(entry) {
            Ok(info) => info,
            Err(e) => {
                // Its ticks cannot be worked out here; the processes that read it made them.
                self.unreadable_schedule(id, &e);
                return Ok(0);
            }
        };
        let spared = |t: SystemTime| {
            spare.is_some_and(|new| {
                let before = t.checked_sub(Duration::from_micros(1));
                new.topic == info.spec.topic
                    && before.and_then(|b| new.repeat.next_after(b)) == Some(t)
            })
        };
        // A look may have moved it on between the read of `entry` and the pause: its ticks
        // reach the one after the last it recorded (pushed before its move failed).
        let after_last = match self.store.schedule(id).await? {
            Some(now) => now.last_us.or(last),
            None => last,
        }
        .and_then(|l| info.spec.repeat.next_after(from_us(l)));
        let Some(next) = info.next.into_iter().chain(after_last).max() else {
            return Ok(0); // paused already: nothing was created ahead since
        };
        let now = from_us(self.store.time_us().await?);
        let mut cancelled = 0;
        let mut tick = info.spec.repeat.next_after(now);
        for _ in 0..MAX_TICKS_PER_LOOK {
            let Some(t) = tick.filter(|t| *t <= next) else {
                break;
            };
            if !spared(t)
                && self
                    .cancel_in(&info.spec.topic, &tick_job_id(id, t))
                    .await?
                    == ChangeOutcome::Done
            {
                cancelled += 1;
            }
            tick = info.spec.repeat.next_after(t);
        }
        Ok(cancelled)
    }

    /// Lets a paused schedule tick again, from its next tick after now (the ticks it missed
    /// while paused are not made up).
    pub async fn resume_schedule(&self, id: &str) -> Result<bool> {
        let Some(entry) = self.store.schedule(id).await? else {
            return Ok(false);
        };
        if entry.next_us.is_some() {
            return Ok(true); // not paused: its place stays as it is
        }
        let info = ScheduleInfo::from_entry(entry)?;
        let now = from_us(self.store.time_us().await?);
        let next = info.spec.repeat.next_after(now).map(to_us);
        self.store.set_schedule_next(id, next).await
    }

    /// Creates one job of the schedule now, outside its ticks (its ticks go on as before).
    pub async fn run_schedule_now(&self, id: &str) -> Result<Option<Pushed>> {
        let Some(entry) = self.store.schedule(id).await? else {
            return Ok(None);
        };
        let info = ScheduleInfo::from_entry(entry)?;
        let now = from_us(self.store.time_us().await?);
        let payload = job_payload(&info.spec, id, now)?;
        let pushed = self
            .push_json(&info.spec.topic, payload)
            .id(format!("{id}@now-{}", to_us(now)))
            .max_retries(info.spec.max_retries)
            .send()
            .await?;
        Ok(Some(pushed))
    }
}

/// A guard on the ticks one look creates for one schedule (the shortest period is a second
/// and the lookahead a few, so a look needs a handful).
pub(super) const MAX_TICKS_PER_LOOK: usize = 100;

/// Most catch-up jobs `Missed::All` may ask for (they are created in one look).
pub(crate) const MAX_CATCH_UP: u32 = 1_000;

/// What the job of a tick carries: the schedule's message, or a [`Tick`].
pub(super) fn job_payload(spec: &ScheduleSpec, id: &str, tick: SystemTime) -> Result<String> {
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
