//! Periodic schedules in memory, as the Redis store keeps them in shard 0.

use async_trait::async_trait;

use super::{lock, MemoryStore};
use crate::error::Result;
use crate::store::{FiredTick, ScheduleEntry, Schedules};

impl MemoryStore {
    /// The earliest next tick of any schedule (us), for `dq::testing` to stop at.
    pub fn next_schedule_us(&self) -> Option<u64> {
        lock(&self.state).schedule_next.values().min().copied()
    }
}

#[async_trait]
impl Schedules for MemoryStore {
    async fn put_schedule(&self, id: &str, spec_json: &str, next_us: Option<u64>) -> Result<()> {
        let now = self.now_us();
        let mut s = lock(&self.state);
        s.new_generation(id, now);
        s.schedules.insert(id.to_owned(), spec_json.to_owned());
        match next_us {
            Some(next) => s.schedule_next.insert(id.to_owned(), next),
            None => s.schedule_next.remove(id),
        };
        Ok(())
    }

    async fn remove_schedule(&self, id: &str) -> Result<bool> {
        let mut s = lock(&self.state);
        s.schedule_next.remove(id);
        s.schedule_last.remove(id);
        s.schedule_gen.remove(id);
        s.tick_fence.remove(id);
        Ok(s.schedules.remove(id).is_some())
    }

    async fn schedule(&self, id: &str) -> Result<Option<ScheduleEntry>> {
        let s = lock(&self.state);
        Ok(s.schedules.get(id).map(|spec| {
            let next = s.schedule_next.get(id).copied();
            let last = s.schedule_last.get(id).copied();
            let generation = s.schedule_gen.get(id).copied().unwrap_or(0);
            ScheduleEntry::new(id.to_owned(), spec.clone(), next, last).with_generation(generation)
        }))
    }

    async fn schedules(&self) -> Result<Vec<ScheduleEntry>> {
        let s = lock(&self.state);
        Ok(s.schedules
            .iter()
            .map(|(id, spec)| {
                let next = s.schedule_next.get(id).copied();
                let last = s.schedule_last.get(id).copied();
                let generation = s.schedule_gen.get(id).copied().unwrap_or(0);
                ScheduleEntry::new(id.clone(), spec.clone(), next, last).with_generation(generation)
            })
            .collect())
    }

    async fn due_schedules(&self, until_us: u64, limit: usize) -> Result<Vec<(String, u64)>> {
        let s = lock(&self.state);
        let mut due: Vec<(String, u64)> = s
            .schedule_next
            .iter()
            .filter(|(_, &tick)| tick <= until_us)
            .map(|(id, &tick)| (id.clone(), tick))
            .collect();
        due.sort_by(|a, b| (a.1, &a.0).cmp(&(b.1, &b.0)));
        due.truncate(limit);
        Ok(due)
    }

    async fn advance_schedule(&self, fired: &FiredTick, to_us: Option<u64>) -> Result<bool> {
        let mut s = lock(&self.state);
        let id = fired.schedule.as_str();
        let same_generation = s.schedule_gen.get(id).copied().unwrap_or(0) == fired.generation;
        if s.schedule_next.get(id) != Some(&fired.tick_us) || !same_generation {
            return Ok(false);
        }
        s.schedule_last.insert(id.to_owned(), fired.tick_us);
        match to_us {
            Some(next) => s.schedule_next.insert(id.to_owned(), next),
            None => s.schedule_next.remove(id),
        };
        Ok(true)
    }

    async fn set_schedule_next(&self, id: &str, next_us: Option<u64>) -> Result<bool> {
        let now = self.now_us();
        let mut s = lock(&self.state);
        if !s.schedules.contains_key(id) {
            return Ok(false);
        }
        match next_us {
            Some(next) => {
                s.new_generation(id, now);
                s.schedule_next.insert(id.to_owned(), next)
            }
            None => s.schedule_next.remove(id),
        };
        Ok(true)
    }

    async fn raise_schedule_generation(&self, id: &str, above: u64) -> Result<Option<u64>> {
        let now = self.now_us();
        let mut s = lock(&self.state);
        if !s.schedules.contains_key(id) {
            return Ok(None);
        }
        s.new_generation(id, now.max(above.saturating_add(1)));
        Ok(s.schedule_gen.get(id).copied())
    }
}
