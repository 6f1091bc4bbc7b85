//! Managing periodic schedules through the client: declare, list, pause, resume, remove and
//! run now.

use std::time::{Duration, SystemTime};

use super::builder::{
    job_payload, placed, tick_job_id_in, ScheduleBuilder, ScheduleInfo, MAX_TICKS_PER_LOOK,
};
use super::spec::ScheduleSpec;
use crate::admin::ChangeOutcome;
use crate::client::{Client, Pushed};
use crate::error::Result;
use crate::job::{from_us, to_us};
use crate::store::ScheduleEntry;

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
        ScheduleBuilder::new(self.clone(), id)
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
    pub(super) async fn cancel_ahead(
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
                    && new.group == info.spec.group
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
                    .cancel_in(
                        &info.spec.topic,
                        &tick_job_id_in(id, &info.spec, t, self.store.shards()),
                    )
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
        let push = self.push_json(&info.spec.topic, payload);
        let job = format!("{id}@now-{}", to_us(now));
        let push =
            placed(push, job, &info.spec, self.store.shards()).max_retries(info.spec.max_retries);
        Ok(Some(push.send().await?))
    }
}
