//! The schedule ticker: every second, each runtime creates the jobs of the schedule ticks due
//! in the next few seconds (each due exactly at its tick, so the mover starts it as precisely
//! as any delayed job). Any number of runtimes do this at once; a tick is one job (see
//! `dq_core::schedule::fire_due`). Also the schedules `#[dq::listener(cron = ..)]` declares, stored
//! at start.

use std::sync::Arc;
use std::time::Duration;

use dq_core::schedule::Repeat;
use dq_core::store::{Leases, Registry};
use dq_core::{Client, Rate, Result, Retention, Topic};

use crate::health::Health;
use crate::listener::ListenerSchedule;
use crate::shared::Shared;

/// How often the ticker looks.
pub(crate) const EVERY: Duration = Duration::from_secs(1);
/// How far ahead of its tick a job is created: a process that stalls or dies just before a
/// tick has left the job in place already, and the others have several looks to do it.
pub(crate) const LOOKAHEAD: Duration = Duration::from_secs(5);

/// Longest wait between two looks after failures: when Redis comes back, the schedules tick
/// (and what Redis lost is declared again) within this.
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// Fires the schedules through the runtime's client every [`EVERY`], and keeps the listeners'
/// declarations (the namespace's epoch read from the registry, the retries and retentions
/// written with the lease role) until shutdown.
pub(crate) async fn ticker(
    shared: Arc<Shared>,
    registry: Arc<dyn Registry>,
    leases: Arc<dyn Leases>,
    mut declared: Declared,
) {
    let mut health = Health::new("schedule ticker".to_owned());
    loop {
        // Each on its own: a shard that refuses the retries must not stop the schedules.
        let look = async {
            let kept = declared
                .keep(&shared.client, registry.as_ref(), leases.as_ref())
                .await;
            let fired = dq_core::schedule::fire_due(&shared.client, LOOKAHEAD).await;
            kept.and(fired)
        };
        // After a failure, the backoff Health chose (it says so in the log).
        let wait = match look.await {
            Ok(_) => {
                health.ok();
                EVERY
            }
            Err(e) => health.failed(&e).clamp(EVERY, MAX_BACKOFF),
        };
        tokio::select! {
            _ = shared.stop.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

/// What a runtime declares in the store for its listeners, and keeps declared: their
/// schedules (`cron`, `every`), retries (the most runs the reclaimer allows a job of theirs
/// whose worker died), retentions (how long, and how many, records of their succeeded jobs
/// are kept; `None` turns it off) and job events (on, with how many each shard keeps, or off).
///
/// Declared at start when the store answers, else as soon as it does (a master down or a full
/// Redis does not keep workers from starting). Then checked at every look of the ticker: when
/// the namespace's epoch changed, the store lost what was declared (Redis restarted without
/// persistence, `FLUSHALL`, a failover to a replica that never had it), and it is declared
/// again, in every process, within a couple of looks. A schedule an operator removed while the
/// store kept the rest stays removed until a runtime with that listener starts again.
#[derive(Debug)]
pub(crate) struct Declared {
    schedules: Vec<(Topic, ListenerSchedule)>,
    limits: Vec<(Topic, Option<u32>)>,
    retentions: Vec<(Topic, Option<Retention>)>,
    /// Each topic's job events: how many each shard keeps, `None` for off.
    events: Vec<(Topic, Option<u64>)>,
    /// The bounds on pending jobs the listeners give (a listener without one declares none).
    max_pending: Vec<(Topic, u64)>,
    /// The rate limits the listeners give (a listener without one declares none).
    rates: Vec<(Topic, Rate)>,
    /// The global concurrencies the listeners give (a listener without one declares none).
    global_concurrency: Vec<(Topic, u32)>,
    /// The group concurrencies the listeners give (a listener without one declares none).
    group_concurrency: Vec<(Topic, u32)>,
    /// The group rates the listeners give (a listener without one declares none).
    group_rates: Vec<(Topic, Rate)>,
    /// The namespace's epoch when everything was last declared; `None` until it was.
    epoch: Option<String>,
}

impl Declared {
    pub(crate) fn new(
        schedules: Vec<(Topic, ListenerSchedule)>,
        limits: Vec<(Topic, Option<u32>)>,
        retentions: Vec<(Topic, Option<Retention>)>,
        events: Vec<(Topic, Option<u64>)>,
    ) -> Declared {
        Declared {
            schedules,
            limits,
            retentions,
            events,
            max_pending: Vec::new(),
            rates: Vec::new(),
            global_concurrency: Vec::new(),
            group_concurrency: Vec::new(),
            group_rates: Vec::new(),
            epoch: None,
        }
    }

    /// With the listeners' flow control: bounds on pending jobs (`max_pending`), rates and
    /// global concurrencies.
    pub(crate) fn with_flow(
        mut self,
        max_pending: Vec<(Topic, u64)>,
        rates: Vec<(Topic, Rate)>,
        global_concurrency: Vec<(Topic, u32)>,
    ) -> Declared {
        self.max_pending = max_pending;
        self.rates = rates;
        self.global_concurrency = global_concurrency;
        self
    }

    /// With the listeners' group concurrencies and group rates.
    pub(crate) fn with_groups(
        mut self,
        group_concurrency: Vec<(Topic, u32)>,
        group_rates: Vec<(Topic, Rate)>,
    ) -> Declared {
        self.group_concurrency = group_concurrency;
        self.group_rates = group_rates;
        self
    }

    /// Declares everything unless the store still holds it (the epoch is the one declared
    /// under). Errors of input (a schedule that never ticks again) are returned at once; a
    /// store that fails leaves it to the next call. The epoch is the registry's; the retries
    /// and retentions are written through the lease role, which the reclaimer judges by and
    /// the acks keep records by.
    pub(crate) async fn keep(
        &mut self,
        client: &Client,
        registry: &dyn Registry,
        leases: &dyn Leases,
    ) -> Result<()> {
        // Read before declaring: a loss between the two shows as a new epoch next time.
        let epoch = registry.namespace_epoch().await?;
        if self.epoch.as_ref() == Some(&epoch) {
            return Ok(());
        }
        let again = self.epoch.is_some();
        if again {
            tracing::warn!(
                schedules = ?self.schedules.iter().map(|(t, _)| t.as_str()).collect::<Vec<_>>(),
                retries = ?self.limits.iter().map(|(t, _)| t.as_str()).collect::<Vec<_>>(),
                "Redis no longer holds what this runtime declared (it restarted without persistence, was flushed, or failed over to a replica that never had it); declaring the listeners' schedules, retries and retentions again. Jobs pushed before the loss are gone with it unless Redis persisted them"
            );
        }
        for (topic, schedule) in &self.schedules {
            declare_schedule(client, topic, schedule).await?;
        }
        for (topic, max_attempts) in &self.limits {
            leases.set_attempt_limit(topic, *max_attempts).await?;
        }
        for (topic, retention) in &self.retentions {
            leases.set_retention(topic, *retention).await?;
        }
        for (topic, cap) in &self.events {
            leases.set_events(topic, *cap).await?;
        }
        for (topic, max) in &self.max_pending {
            leases.set_max_pending(topic, Some(*max)).await?;
        }
        for (topic, rate) in &self.rates {
            leases.set_rate(topic, Some(*rate)).await?;
        }
        for (topic, max) in &self.global_concurrency {
            leases.set_global_concurrency(topic, Some(*max)).await?;
        }
        for (topic, max) in &self.group_concurrency {
            leases.set_group_concurrency(topic, Some(*max)).await?;
        }
        for (topic, rate) in &self.group_rates {
            leases.set_group_rate(topic, Some(*rate)).await?;
        }
        if again {
            tracing::info!("the listeners' schedules, retries and retentions are declared again");
        }
        self.epoch = Some(epoch);
        Ok(())
    }
}

/// Whether a listener's schedule can be stored: one of cron and every, a valid expression and
/// zone, a payload that serializes.
pub(crate) fn check_schedule(s: &ListenerSchedule) -> std::result::Result<(), String> {
    match (s.cron, s.every, s.tz) {
        (Some(expr), None, tz) => Repeat::cron(expr, tz.unwrap_or("UTC"))
            .map(drop)
            .map_err(|e| e.to_string())?,
        (None, Some(every), None) => Repeat::every(every).map(drop).map_err(|e| e.to_string())?,
        (None, Some(_), Some(_)) => return Err("`tz` goes with `cron`, not `every` (an interval ticks at its multiples since 1970-01-01 UTC)".into()),
        _ => return Err("give one of `cron` and `every`".into()),
    }
    (s.payload)().map(drop)
}

/// Stores a listener's schedule under its topic's name, sending its jobs to that topic. An
/// unchanged schedule keeps its place, so every process declaring it at every start neither
/// skips nor repeats a tick; a paused one stays paused.
pub(crate) async fn declare_schedule(
    client: &Client,
    topic: &Topic,
    s: &ListenerSchedule,
) -> Result<()> {
    let mut b = client.schedule(topic.as_str()).missed(s.missed);
    if let Some(expr) = s.cron {
        b = b.cron(expr).tz(s.tz.unwrap_or("UTC"));
    }
    if let Some(every) = s.every {
        b = b.every(every);
    }
    b = match (s.payload)() {
        Ok(Some(message)) => b.message_to(topic.as_str(), &message),
        Ok(None) | Err(_) => b.topic(topic.as_str()),
    };
    b.upsert().await.map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use dq_core::schedule::Missed;

    fn tick() -> std::result::Result<Option<serde_json::Value>, String> {
        Ok(None)
    }

    fn schedule(cron: Option<&'static str>, tz: Option<&'static str>) -> ListenerSchedule {
        ListenerSchedule {
            cron,
            every: None,
            tz,
            missed: Missed::Skip,
            payload: tick,
        }
    }

    #[test]
    fn a_listener_schedule_with_a_bad_expression_or_zone_is_refused_with_the_reason() {
        let bad_cron = check_schedule(&schedule(Some("0 25 * * *"), None)).unwrap_err();
        assert!(bad_cron.contains("0 25 * * *"), "{bad_cron}");
        let bad_zone =
            check_schedule(&schedule(Some("0 9 * * *"), Some("Europe/Pariss"))).unwrap_err();
        assert!(bad_zone.contains("Europe/Pariss"), "{bad_zone}");
        assert!(check_schedule(&schedule(Some("0 9 * * *"), Some("Europe/Paris"))).is_ok());
    }
}
