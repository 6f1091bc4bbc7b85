//! Firing schedules: what every runtime does every second. Each due tick becomes one job,
//! whatever the number of processes, their clocks and their stalls: the job's id is the same in
//! every process, its push is fenced by the schedule's generation and the tick (a tick created
//! once is never created again, even long after its job ran), and the schedule moves on by
//! compare-and-set.

use std::collections::VecDeque;
use std::time::{Duration, SystemTime};

use tracing::Instrument;

use super::builder::MAX_TICKS_PER_LOOK;
use super::builder::{job_payload, placed, tick_job_id, tick_job_id_in, ScheduleInfo};
use super::spec::{Missed, ScheduleSpec};
use crate::client::{Client, Pushed};
use crate::error::Result;
use crate::job::{from_us, to_us, PushOutcome};
use crate::store::{FiredTick, ScheduleEntry};

/// Creates the jobs of every schedule tick due within `lookahead` of the store's clock (each
/// due at its tick), applies the missed-tick policy to ticks no process fired in time, and
/// moves each schedule on. Every runtime's ticker calls this every second; any number may at
/// once: a tick's job has the same id in every process and is kept reserved for a while after
/// it ran, so it is created once. Returns how many jobs it created.
pub async fn fire_due(client: &Client, lookahead: Duration) -> Result<usize> {
    client.fire_schedules(lookahead).await
}

impl Client {
    async fn fire_schedules(&self, lookahead: Duration) -> Result<usize> {
        let now_us = self.store.time_us().await?;
        let until = now_us.saturating_add(u64::try_from(lookahead.as_micros()).unwrap_or(u64::MAX));
        let mut created = 0;
        let mut looked: std::collections::HashSet<String> = Default::default();
        // Page through every due schedule, each once: one fired is moved past `until`, so the
        // next page holds others; one that failed (or another process holds) is passed over.
        loop {
            let due = self
                .store
                .due_schedules(until, DUE_PAGE + looked.len())
                .await?;
            let page: Vec<(String, u64)> = due
                .into_iter()
                .filter(|(id, _)| !looked.contains(id))
                .collect();
            if page.is_empty() {
                break;
            }
            for (id, tick_us) in page {
                looked.insert(id.clone());
                match self.fire_one(&id, tick_us, now_us, until).await {
                    Ok(n) => created += n,
                    Err(e) if e.kind() == crate::ErrorKind::Unavailable => return Err(e),
                    Err(e) if e.kind() == crate::ErrorKind::TopicFull => {
                        // Nothing lost: the tick stays due and is fired once there is room.
                        tracing::warn!(schedule = %id, error = %e, "a schedule's tick waits: its topic is at its max_pending; it is tried again at the next look");
                    }
                    Err(e) => {
                        // One schedule that cannot fire must not hold up the others.
                        tracing::error!(schedule = %id, error = %e, "a schedule's tick could not be fired; the others go on, and it is tried again at the next look");
                    }
                }
            }
        }
        Ok(created)
    }

    /// Fires schedule `id` from its stored next tick `tick_us` through every tick up to
    /// `until_us`, so a schedule shorter than the lookahead (every second) has its jobs in
    /// place ahead of time too. Stops when another process moved the schedule first.
    async fn fire_one(&self, id: &str, tick_us: u64, now_us: u64, until_us: u64) -> Result<usize> {
        let Some((info, generation)) = self.due_schedule(id, tick_us).await? else {
            return Ok(0);
        };
        let spec = &info.spec;
        let now = from_us(now_us);
        let walk = Walk::over(spec, from_us(tick_us), now);
        walk.report(
            id,
            spec,
            now.duration_since(from_us(tick_us)).unwrap_or_default(),
        );
        let fire = Firing {
            id,
            spec,
            generation,
        };
        let mut created = 0;
        for tick in walk.missed {
            match self.fire_tick(&fire, tick, now, now).await? {
                Some(made) => created += made,
                None => return Ok(created),
            }
        }
        let ahead = self
            .fire_ahead(&fire, (walk.current, tick_us), now, until_us)
            .await?;
        Ok(created + ahead)
    }

    /// Schedule `id` and its generation, when its next tick is still `tick_us` and this
    /// version can read it.
    async fn due_schedule(&self, id: &str, tick_us: u64) -> Result<Option<(ScheduleInfo, u64)>> {
        let Some(entry) = self.store.schedule(id).await? else {
            return Ok(None);
        };
        if entry.next_us != Some(tick_us) {
            return Ok(None); // moved on (or paused) since it was listed as due: not ours to fire
        }
        let generation = entry.generation;
        match ScheduleInfo::from_entry(entry) {
            Ok(info) => Ok(Some((info, generation))),
            Err(e) => {
                // Written by a newer version (a kind of repeat or missed-tick policy this one
                // does not know, during a rolling upgrade), or damaged. Left as it is for the
                // processes that can read it; said once per process.
                self.unreadable_schedule(id, &e);
                Ok(None)
            }
        }
    }

    /// The current tick (`current`, with the stored tick `from_us` it moves on from), then
    /// each following one inside the lookahead: create its job, then move the schedule on by
    /// compare-and-set (a crash in between leaves the job in place, and whoever fires the tick
    /// again finds its id taken). Returns how many jobs it created.
    async fn fire_ahead(
        &self,
        fire: &Firing<'_>,
        (mut current, mut from): (SystemTime, u64),
        now: SystemTime,
        until_us: u64,
    ) -> Result<usize> {
        let mut created = 0;
        for _ in 0..MAX_TICKS_PER_LOOK {
            let Some(made) = self.fire_tick(fire, current, current, now).await? else {
                break; // refused by a later generation's fence: not moved on
            };
            created += made;
            let next = fire.spec.repeat.next_after(current);
            let next_us = next.map(to_us);
            let fired = FiredTick {
                schedule: fire.id.to_owned(),
                generation: fire.generation,
                tick_us: from,
            };
            if !self.store.advance_schedule(&fired, next_us).await? {
                // Another process moved it (theirs now), or it was paused, removed, changed or
                // resumed while this tick's job was being made: then that job goes, unless the
                // schedule as it is now has that tick too (its looks find the job in place).
                let now_entry = self.store.schedule(fire.id).await?;
                if made == 1 && !still_wanted(now_entry, fire, current) {
                    let job = tick_job_id_in(fire.id, fire.spec, current, self.store.shards());
                    self.cancel_in(&fire.spec.topic, &job).await?;
                    created -= 1;
                }
                break;
            }
            match (next, next_us) {
                (Some(n), Some(n_us)) if n_us <= until_us => {
                    current = n;
                    from = n_us;
                }
                _ => break,
            }
        }
        Ok(created)
    }

    /// Says once per process that schedule `id` cannot be read here, and what to do.
    pub(crate) fn unreadable_schedule(&self, id: &str, error: &crate::Error) {
        let mut reported = self
            .unreadable
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if reported.insert(id.to_owned()) {
            tracing::warn!(schedule = id, error = %error, "this process cannot read schedule {id:?} and leaves its ticks to the processes that can (declared by a newer version of dq during a rolling upgrade?); if no process fires it, upgrade them or `dq schedules remove {id}` and declare it again");
        }
    }

    /// Creates the job of one tick; 1 when it was created here, 0 when it already existed,
    /// `None` when a later generation's fence refused it (see `superseded`).
    async fn fire_tick(
        &self,
        fire: &Firing<'_>,
        tick: SystemTime,
        due: SystemTime,
        now: SystemTime,
    ) -> Result<Option<usize>> {
        let Firing { id, spec, .. } = *fire;
        let pushed = self.push_tick(fire, tick, due).await?;
        if let PushOutcome::Superseded { generation } = pushed.outcome {
            self.superseded(fire, generation).await?;
            return Ok(None);
        }
        if pushed.outcome != PushOutcome::Created {
            return Ok(Some(0));
        }
        let lateness = now.duration_since(tick).unwrap_or(Duration::ZERO);
        metrics::counter!(crate::metric::SCHEDULE_FIRED, "schedule" => id.to_owned(), "topic" => spec.topic.clone()).increment(1);
        metrics::histogram!(crate::metric::SCHEDULE_LATENESS, "schedule" => id.to_owned())
            .record(lateness.as_secs_f64());
        Ok(Some(1))
    }

    /// A tick's push was refused: the schedule's ticks in the job's shard were made under
    /// `theirs`, a later generation than this look's. When the schedule as stored now is still
    /// below it, its generation went back (a failover lost its latest change, Redis' clock
    /// stepped back), and that fence would refuse its ticks for good: raise it, so that the
    /// next look makes them again (ticks already made keep their ids, pending or reserved, so
    /// none runs twice). Otherwise this look read the schedule before a change, and stops.
    async fn superseded(&self, fire: &Firing<'_>, theirs: u64) -> Result<()> {
        let Some(entry) = self.store.schedule(fire.id).await? else {
            return Ok(());
        };
        if entry.generation >= theirs {
            return Ok(());
        }
        let raised = self
            .store
            .raise_schedule_generation(fire.id, theirs)
            .await?;
        tracing::warn!(
            schedule = fire.id,
            stored_generation = entry.generation,
            ticks_made_under = theirs,
            raised_to = ?raised,
            "a schedule's generation went back below the one its ticks were made under (a Redis failover lost its latest change, or Redis' clock stepped back): raised above it; its ticks are made again from the next look"
        );
        Ok(())
    }

    /// The job of one tick, due at `due` (the tick itself, or now for a catch-up).
    async fn push_tick(
        &self,
        fire: &Firing<'_>,
        tick: SystemTime,
        due: SystemTime,
    ) -> Result<Pushed> {
        let Firing {
            id,
            spec,
            generation,
        } = *fire;
        // The fence makes the tick one job for good; the reservation keeps `dq push` or a
        // caller reusing the id from making a second one for a while, and answers such a
        // push with the time left.
        let period = spec.repeat.period_after(tick);
        let window = (period * 10).clamp(Duration::from_secs(600), Duration::from_secs(7 * 86_400));
        // Pushed in a span of its own: with the `otel` feature the tick's job records it, and
        // its runs link to it (a tick's run is no part of whatever trace was current here).
        let span = tracing::info_span!("tick", schedule = id, tick_us = to_us(tick));
        let push = self.push_json(&spec.topic, job_payload(spec, id, tick)?);
        placed(push, tick_job_id(id, tick), spec, self.store.shards())
            .at(due)
            .max_retries(spec.max_retries)
            .unique_for(window)
            .fence(FiredTick {
                schedule: id.to_owned(),
                generation,
                tick_us: to_us(tick),
            })
            .send()
            .instrument(span)
            .await
    }
}

/// The schedule a look is firing, as it read it.
#[derive(Clone, Copy)]
struct Firing<'a> {
    id: &'a str,
    spec: &'a ScheduleSpec,
    generation: u64,
}

/// The ticks of a schedule whose successor has come too: they were missed (no process fired
/// them in time).
struct Walk {
    /// The latest tick not missed: the one to fire now.
    current: SystemTime,
    /// The missed ticks the policy runs, oldest first.
    missed: VecDeque<SystemTime>,
    /// How many ticks were walked over.
    steps: u64,
    /// Whether the walk jumped ahead after [`CATCH_UP_WALK`] steps.
    jumped: bool,
}

impl Walk {
    /// Walks `spec`'s ticks from the stored `tick` to the last one at or before `now`.
    fn over(spec: &ScheduleSpec, tick: SystemTime, now: SystemTime) -> Walk {
        let keep = match spec.missed {
            Missed::Skip => 0,
            Missed::RunOnce => 1,
            Missed::All { max } => usize::try_from(max).unwrap_or(usize::MAX),
        };
        let mut walk = Walk {
            current: tick,
            missed: VecDeque::new(),
            steps: 0,
            jumped: false,
        };
        while let Some(next) = spec.repeat.next_after(walk.current).filter(|n| *n <= now) {
            walk.missed.push_back(walk.current);
            if walk.missed.len() > keep {
                walk.missed.pop_front();
            }
            walk.current = next;
            walk.steps += 1;
            if walk.steps.is_multiple_of(CATCH_UP_WALK) {
                // Down for a very long time: go on from just far enough before the present for
                // the policy's last `keep` missed ticks (those walked so far are older).
                let period = spec.repeat.period_after(walk.current);
                let span = period.saturating_mul(u32::try_from(keep + 2).unwrap_or(u32::MAX));
                let from = now.checked_sub(span).unwrap_or(now).max(walk.current);
                if let Some(near) = spec.repeat.next_after(from).filter(|n| *n <= now) {
                    walk.missed.clear();
                    walk.current = near;
                    walk.jumped = true;
                }
            }
        }
        walk
    }

    /// Says that ticks were missed, `late` after the first of them, and what the policy does.
    fn report(&self, id: &str, spec: &ScheduleSpec, late: Duration) {
        if self.steps == 0 {
            return;
        }
        let steps = self.steps;
        tracing::warn!(
            schedule = id,
            missed = %if self.jumped { format!("over {steps}") } else { steps.to_string() },
            first_missed_ago = ?late,
            policy = ?spec.missed,
            "schedule ticks were missed: their time came and went before a look of this process or any other fired them (every process was down, stalled or cut off from Redis, or this schedule's next tick was behind); the policy decides what runs now"
        );
    }
}

/// Whether the job a look made for `tick` under `generation`, which then could not move the
/// schedule on, should stay: yes when another process moved it (same generation: the tick was
/// theirs to make too), or when the schedule changed or was resumed but still has that tick
/// after the change; no when it was paused, removed, or no longer ticks then.
fn still_wanted(now: Option<ScheduleEntry>, fire: &Firing<'_>, tick: SystemTime) -> bool {
    let Some(entry) = now.filter(|e| e.next_us.is_some()) else {
        return false;
    };
    if entry.generation == fire.generation {
        return true;
    }
    // A new generation starts at (about) the store's clock when it began, in us.
    let after_change = to_us(tick) > entry.generation;
    // Its job is the new spec's job of that tick only where the new spec puts it: the same
    // topic and group (a grouped tick's id leads to its group's shard).
    let ticks_then = ScheduleInfo::from_entry(entry).is_ok_and(|info| {
        let before = tick.checked_sub(Duration::from_micros(1));
        info.spec.topic == fire.spec.topic
            && info.spec.group == fire.spec.group
            && before.and_then(|b| info.spec.repeat.next_after(b)) == Some(tick)
    });
    after_change && ticks_then
}

/// Due schedules read per call of a look.
const DUE_PAGE: usize = 100;

/// Ticks a catch-up walks one by one before it jumps to just before the present.
const CATCH_UP_WALK: u64 = 100_000;
