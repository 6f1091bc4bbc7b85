//! The steps of `RuntimeBuilder::start` before any task runs: the configuration, the
//! listeners checked, the store opened, the listeners' schedules, retries and retentions
//! declared.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use dq_core::store::{Leases, Registry};
use dq_core::{Client, Config, Error, ErrorKind, MemoryStore, Result, Store, Topic};
use dq_redis::RedisStore;

use crate::listener::{self, Listener};
use crate::states::States;
use crate::ticker::{check_schedule, Declared};

/// How long `start` tries to declare its listeners' schedules, retries and retentions in the
/// store (all of them) before it starts anyway and leaves them to the ticker.
const DECLARE_AT_START: Duration = Duration::from_secs(5);

/// The configuration given to the builder (validated), else the environment's. Refused when a
/// state type was registered twice (`twice`).
pub(crate) fn config(given: Option<Config>, twice: &[&'static str]) -> Result<Config> {
    let config = match given {
        Some(c) => c.validate()?,
        None => Config::from_env()?,
    };
    if let Some(name) = twice.first() {
        return Err(Error::Config {
            key: "state",
            value: (*name).to_owned(),
            reason: format!("`{name}` is registered twice with `Runtime::builder().state(..)`: one value per type; wrap the second in a type of its own (`struct ReadReplica(Pool)`) and ask for `State<ReadReplica>`"),
        });
    }
    Ok(config)
}

/// The store given to the builder, else Redis when the configuration names it (its settings
/// that put jobs at risk are said in the log), else the in-memory store.
pub(crate) async fn open_store(
    config: &Config,
    given: Option<Arc<dyn Store>>,
) -> Result<Arc<dyn Store>> {
    if let Some(store) = given {
        return Ok(store);
    }
    if config.redis_url.is_none() && config.redis_cluster.is_empty() {
        tracing::warn!("DQ_REDIS_URL is not set: running on the in-memory store, inside this process only; jobs will not survive a restart (set DQ_REDIS_URL=redis://host:6379/ to use Redis)");
        return Ok(Arc::new(MemoryStore::new()));
    }
    let redis = RedisStore::connect(config).await?;
    match redis.server_warnings().await {
        Ok(warnings) => {
            for w in warnings {
                tracing::warn!("{w}");
            }
        }
        Err(e) => tracing::warn!(error = %e, "could not read Redis' settings"),
    }
    Ok(Arc::new(redis))
}

/// Declares the listeners' schedules, retries and retentions now when the store answers; else
/// the ticker declares them as soon as it does: a master down or a full Redis must not keep
/// workers from starting. Bounded as a whole, so that a stalled Redis does not delay the start
/// either. Only a schedule that can never be stored stops the start.
pub(crate) async fn declare(
    declared: &mut Declared,
    client: &Client,
    store: &Arc<dyn Store>,
) -> Result<()> {
    let registry: &dyn Registry = &**store;
    let leases: &dyn Leases = &**store;
    let keep = declared.keep(client, registry, leases);
    match tokio::time::timeout(DECLARE_AT_START, keep).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) if e.kind() == ErrorKind::InvalidInput => {
            tracing::error!(error = %e, "a listener's schedule cannot be stored; the runtime does not start");
            Err(e)
        }
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "could not declare the listeners' schedules, retries and retentions in the store yet; the runtime starts anyway and declares them as soon as the store answers (until then a job of theirs whose worker dies is judged by the retries given at push, their schedules do not tick unless another process declared them, and their succeeded jobs are kept as the retention declared before says)");
            Ok(())
        }
        Err(_) => {
            tracing::warn!(after = ?DECLARE_AT_START, "the store did not answer while the listeners' schedules, retries and retentions were declared; the runtime starts anyway and declares them as soon as it does");
            Ok(())
        }
    }
}

/// What the runtime declares for its listeners: their schedules, the most runs each allows a
/// job whose worker died, how long the records of their succeeded jobs are kept (none for a
/// listener without `retain`, which turns a retention declared before off), and whether their
/// topics' job events are on (off for a listener without `events`). The last runtime to
/// declare decides, should two disagree.
pub(crate) fn declarations(listeners: &[(Topic, Listener)]) -> Declared {
    let schedules = listeners
        .iter()
        .filter_map(|(t, l)| l.schedule.map(|s| (t.clone(), s)))
        .collect();
    let limits = listeners
        .iter()
        .map(|(t, l)| (t.clone(), l.retries.map(|r| r.saturating_add(1))))
        .collect();
    let retentions = listeners
        .iter()
        .map(|(t, l)| (t.clone(), l.retention()))
        .collect();
    let events = listeners
        .iter()
        .map(|(t, l)| (t.clone(), l.event_cap()))
        .collect();
    let max_pending = listeners
        .iter()
        .filter_map(|(t, l)| l.max_pending.map(|max| (t.clone(), max)))
        .collect();
    let rates = listeners
        .iter()
        .filter_map(|(t, l)| l.rate.map(|rate| (t.clone(), rate)))
        .collect();
    let global = listeners
        .iter()
        .filter_map(|(t, l)| l.global_concurrency.map(|max| (t.clone(), max)))
        .collect();
    let groups = listeners
        .iter()
        .filter_map(|(t, l)| l.group_concurrency.map(|max| (t.clone(), max)))
        .collect();
    let group_rates = listeners
        .iter()
        .filter_map(|(t, l)| l.group_rate.map(|rate| (t.clone(), rate)))
        .collect();
    Declared::new(schedules, limits, retentions, events)
        .with_flow(max_pending, rates, global)
        .with_groups(groups, group_rates)
}

/// This runtime's listeners, each with its topic checked once here; refused with an error naming
/// the listener when a topic is invalid, taken twice, a concurrency is zero, its retries are
/// over `MAX_RETRIES`, its retention is zero or a count without an age, or an argument cannot be
/// provided (a `State<T>` nobody registered).
pub(crate) fn collect_listeners(
    registered: bool,
    extra: Vec<Listener>,
    states: &States,
) -> Result<Vec<(Topic, Listener)>> {
    let mut all = if registered {
        listener::registered()
    } else {
        Vec::new()
    };
    all.extend(extra);
    let mut seen: HashMap<String, String> = HashMap::new();
    let mut checked = Vec::with_capacity(all.len());
    for l in all {
        let topic = check_listener(&l, states)?;
        if let Some(first) = seen.insert(l.topic.clone(), l.name.clone()) {
            return Err(Error::DuplicateListener {
                topic: l.topic.clone(),
                first,
                second: l.name.clone(),
            });
        }
        checked.push((topic, l));
    }
    Ok(checked)
}

/// One listener's topic, once its settings are checked.
fn check_listener(l: &Listener, states: &States) -> Result<Topic> {
    let topic = Topic::new(l.topic.clone())?;
    let invalid = |reason: String| Error::InvalidListener {
        topic: l.topic.clone(),
        name: l.name.clone(),
        reason,
    };
    if l.concurrency == 0 {
        return Err(invalid("concurrency must be at least 1".into()));
    }
    if let Some(retries) = l.retries.filter(|r| *r > dq_core::MAX_RETRIES) {
        return Err(invalid(format!(
            "retries = {retries} is over the limit of {} (dq::limits::MAX_RETRIES); a job that failed that often needs a person (or a longer backoff between runs)",
            dq_core::MAX_RETRIES
        )));
    }
    check_retention(l).map_err(invalid)?;
    crate::events::check_events(l).map_err(invalid)?;
    crate::flow::check_max_pending(l).map_err(invalid)?;
    crate::flow::check_global_concurrency(l).map_err(invalid)?;
    crate::flow::check_group_concurrency(l).map_err(invalid)?;
    (l.check)(states).map_err(invalid)?;
    if let Some(schedule) = &l.schedule {
        check_schedule(schedule).map_err(invalid)?;
    }
    Ok(topic)
}

/// Whether a listener's retention can be recorded: `retain_count` goes with `retain`, and
/// neither is zero (as the macro checks).
fn check_retention(l: &Listener) -> std::result::Result<(), String> {
    if l.retain_count.is_some() && l.retain.is_none() {
        return Err("`retain_count` goes with `retain`, which says how long the records of succeeded jobs are kept: add `.retain(Duration::from_secs(3600))` (`retain = \"1h\"`)".into());
    }
    if l.retain.is_some_and(|age| age.is_zero()) {
        return Err("`retain` must be positive: leave it out to keep no records".into());
    }
    if l.retain_count == Some(0) {
        return Err(
            "`retain_count` must be at least 1: leave `retain` out to keep no records".into(),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use dq_core::Retention;

    const HOUR: Duration = Duration::from_secs(3600);

    fn listener() -> Listener {
        Listener::new("t", |_: u64| async {})
    }

    #[test]
    fn a_listener_keeps_no_records_unless_it_retains_them_with_the_default_count_unless_given() {
        assert_eq!(listener().retention(), None);
        assert_eq!(
            listener().retain(HOUR).retention(),
            Some(Retention::for_age(HOUR))
        );
        assert_eq!(
            listener().retain(HOUR).retain_count(5).retention(),
            Some(Retention {
                age: HOUR,
                count: 5
            })
        );
    }

    #[test]
    fn a_retain_count_without_retain_or_a_zero_retention_fails_the_start_naming_it() {
        let refused = [
            (
                listener().retain_count(5),
                "`retain_count` goes with `retain`",
            ),
            (
                listener().retain(Duration::ZERO),
                "`retain` must be positive",
            ),
            (listener().retain(HOUR).retain_count(0), "at least 1"),
        ];
        for (l, why) in refused {
            let e = collect_listeners(false, vec![l], &States::default()).unwrap_err();
            assert!(e.to_string().contains(why), "{e}");
        }
        let kept = collect_listeners(false, vec![listener().retain(HOUR)], &States::default());
        assert!(kept.is_ok(), "{kept:?}");
    }
}
