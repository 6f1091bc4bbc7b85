//! Periodic schedules as the store keeps them: the [`Schedules`] role and its entries.

use async_trait::async_trait;

use super::{FiredTick, Sharded};
use crate::error::Result;

/// A periodic schedule as the store keeps it, with where it stands.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ScheduleEntry {
    /// Its id.
    pub id: String,
    /// Its [`ScheduleSpec`](crate::schedule::ScheduleSpec) as JSON.
    pub spec_json: String,
    /// Its next tick (us since the epoch); `None` while it is paused.
    pub next_us: Option<u64>,
    /// The last tick that was fired (us since the epoch).
    pub last_us: Option<u64>,
    /// Grows whenever the schedule is stored with a changed spec or resumed; a look fires
    /// under the generation it read, and can move the schedule on only while it still holds.
    pub generation: u64,
}

impl ScheduleEntry {
    /// An entry (for stores of your own).
    pub fn new(id: String, spec_json: String, next_us: Option<u64>, last_us: Option<u64>) -> Self {
        ScheduleEntry {
            id,
            spec_json,
            next_us,
            last_us,
            generation: 0,
        }
    }

    /// The entry with this generation.
    pub fn with_generation(mut self, generation: u64) -> Self {
        self.generation = generation;
        self
    }
}

/// Periodic schedules, kept with the worker registry (on Redis, in shard 0) so that every
/// process sees and fires the same ones.
#[async_trait]
pub trait Schedules: Sharded {
    /// Stores a schedule, replacing one of the same id, ticking next at `next_us` (`None`:
    /// paused), in a new generation (above the old one and the store's clock in us).
    async fn put_schedule(&self, id: &str, spec_json: &str, next_us: Option<u64>) -> Result<()>;

    /// Deletes a schedule; false when there was none. Jobs it already made are left alone.
    async fn remove_schedule(&self, id: &str) -> Result<bool>;

    /// One schedule.
    async fn schedule(&self, id: &str) -> Result<Option<ScheduleEntry>>;

    /// Every schedule, by id.
    async fn schedules(&self) -> Result<Vec<ScheduleEntry>>;

    /// Up to `limit` schedules whose next tick is at or before `until_us`, earliest first,
    /// with that tick.
    async fn due_schedules(&self, until_us: u64, limit: usize) -> Result<Vec<(String, u64)>>;

    /// Moves the schedule of `fired` from its tick to `to_us` (`None`: it has no more) and
    /// records that tick as fired, but only while its next tick is still that one and its
    /// generation still the one fired under: false when another process moved it first (or it was
    /// paused, removed, changed or resumed meanwhile).
    async fn advance_schedule(&self, fired: &FiredTick, to_us: Option<u64>) -> Result<bool>;

    /// Sets a schedule's next tick (`None`: paused; `Some`: resumed, in a new generation);
    /// false when there is no such schedule. Atomic: a schedule removed meanwhile stays gone.
    async fn set_schedule_next(&self, id: &str, next_us: Option<u64>) -> Result<bool>;

    /// Moves a schedule to a new generation above `above` (and its last, and the store's clock
    /// in us); `None` when there is no such schedule. For a generation that went back below
    /// the one its ticks were made under in some shard (a failover lost its latest change, the
    /// clock stepped back): that shard's fence would refuse every tick of it.
    async fn raise_schedule_generation(&self, id: &str, above: u64) -> Result<Option<u64>>;
}
