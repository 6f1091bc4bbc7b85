//! The schedule ticker: every second, each runtime creates the jobs of the schedule ticks due
//! in the next few seconds (each due exactly at its tick, so the mover starts it as precisely
//! as any delayed job). Any number of runtimes do this at once; a tick is one job (see
//! `Client::fire_schedules`).

use std::sync::Arc;
use std::time::Duration;

use crate::health::Health;
use crate::shared::Shared;

/// How often the ticker looks.
pub(crate) const EVERY: Duration = Duration::from_secs(1);
/// How far ahead of its tick a job is created: a process that stalls or dies just before a
/// tick has left the job in place already, and the others have several looks to do it.
pub(crate) const LOOKAHEAD: Duration = Duration::from_secs(5);

pub(crate) async fn ticker(shared: Arc<Shared>) {
    let mut health = Health::new("schedule ticker".to_owned());
    loop {
        // After a failure, the backoff Health chose (it says so in the log).
        let wait = match shared.client.fire_schedules(LOOKAHEAD).await {
            Ok(_) => {
                health.ok();
                EVERY
            }
            Err(e) => health.failed(&e).max(EVERY),
        };
        tokio::select! {
            _ = shared.stop.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
    }
}
