//! Periodic jobs, in one place: what a schedule is and when it ticks (`spec`), declaring one
//! (`builder`) and managing it through the client (`manage`), and firing the ticks that are
//! due (`firing`), which the runtime's ticker drives every second.

mod builder;
mod firing;
mod manage;
mod spec;

pub use self::builder::{tick_job_id, ScheduleBuilder, ScheduleInfo, MAX_SCHEDULE_ID_LEN};
pub use self::firing::fire_due;
pub use self::spec::{Missed, Repeat, ScheduleSpec, Tick, TickPayload, MIN_INTERVAL};
