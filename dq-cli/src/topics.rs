//! Topics as a whole: their counts (`dq stats`, `dq watch`), pausing and resuming them.

use std::time::{Duration, SystemTime};

use dq::admin::{Throughput, TopicStats};
use dq::Client;
use serde_json::json;

use crate::output::{print_table, report, stats_json, until};
use crate::Exit;

/// Refuses a topic nothing was ever pushed to (exit 3), naming the known ones: a typo, most
/// often, which would otherwise read as an empty queue.
pub(crate) async fn known_topic(client: &Client, topic: &str) -> Result<(), Exit> {
    dq::Topic::new(topic)?;
    let topics = client.topics().await?;
    if topics.iter().any(|t| t.as_str() == topic) {
        return Ok(());
    }
    let names: Vec<&str> = topics.iter().map(|t| t.as_str()).collect();
    Err(Exit(
        3,
        format!(
            "unknown topic {topic:?}: nothing was ever pushed to it in this namespace (known topics: {})",
            if names.is_empty() { "none".to_owned() } else { names.join(", ") }
        ),
    ))
}

/// `dq stats`: one row per topic (DONE: the records of succeeded jobs it keeps, with a
/// retention; MAX PENDING: its bound, `(full)` once its delayed, ready and running jobs reach
/// it; RATE: its rate limit and how much of it the runs of the last full minute used (of the
/// last few minutes, for a rate of under two starts a minute: `Throughput::rate_window`);
/// RUNNING/GLOBAL: its running jobs against its global concurrency; GROUPS: for a topic with a
/// group setting or a job waiting for a group's slot, the most of one group's jobs at once,
/// its group rate, and the group with the most jobs waiting for a slot (`dq groups TOPIC`
/// lists the busiest ten, with the slots they hold);
/// DONE 1H and FAILED 1H: the runs of the last hour).
pub(crate) async fn stats(client: &Client, json: bool) -> Result<(), Exit> {
    let topics = client.topics().await?;
    let mut all = Vec::new();
    for t in &topics {
        let (stats, hour) =
            tokio::try_join!(client.stats(t.as_str()), client.throughput(t.as_str()))?;
        all.push((t.to_string(), stats, hour));
    }
    if json {
        let list: Vec<_> = all.iter().map(|(t, s, h)| stats_json(t, s, h)).collect();
        println!("{}", serde_json::Value::Array(list));
        return Ok(());
    }
    // Lag by the store's clock, as the due times were stamped (this host's may be off).
    let now = client.store_time().await?;
    let rows = all
        .iter()
        .map(|(t, s, hour)| stats_row(t, s, hour, now))
        .collect();
    print_table(
        &[
            "TOPIC",
            "DELAYED",
            "READY",
            "RUNNING",
            "DEAD",
            "DONE",
            "MAX PENDING",
            "RATE",
            "RUNNING/GLOBAL",
            "GROUPS",
            "LAG",
            "NEXT DUE",
            "DONE 1H",
            "FAILED 1H",
        ],
        rows,
    );
    Ok(())
}

/// One topic's row of `dq stats`; `now` is the store's time.
fn stats_row(topic: &str, s: &TopicStats, hour: &Throughput, now: SystemTime) -> Vec<String> {
    let pending = s.counts.delayed + s.counts.ready + s.counts.running;
    let bound = s.max_pending.map_or("-".into(), |max| {
        format!("{max}{}", if pending >= max { " (full)" } else { "" })
    });
    vec![
        format!("{topic}{}", if s.paused { " (paused)" } else { "" }),
        s.counts.delayed.to_string(),
        s.counts.ready.to_string(),
        s.counts.running.to_string(),
        s.counts.dead.to_string(),
        s.counts.done.to_string(),
        bound,
        match (s.rate, s.held_until) {
            (rate, Some(end)) => format!(
                "{} (held {})",
                rate.map_or("-".into(), |r| r.to_string()),
                until(end)
            ),
            (Some(r), None) => match (hour.rate_used(r), Throughput::rate_window(r)) {
                (Some(used), Some(1)) => format!("{r} ({:.0}% last min)", used * 100.0),
                (Some(used), Some(k)) => format!("{r} ({:.0}% last {k} min)", used * 100.0),
                _ => r.to_string(),
            },
            (None, None) => "-".into(),
        },
        s.global_concurrency
            .map_or("-".into(), |max| format!("{}/{max}", s.counts.running)),
        groups_cell(s),
        s.oldest_ready_due
            .and_then(|d| now.duration_since(d).ok())
            .map_or("-".into(), |d| format!("{:.1}s", d.as_secs_f64())),
        s.next_due.map_or("-".into(), until),
        hour.done().to_string(),
        hour.failed().to_string(),
    ]
}

/// The GROUPS cell of `dq stats`: "at most 2 at once, 10/1s each, busiest acct-7 (9 waiting)",
/// the parts a topic has; "-" for a topic with no group setting and no job waiting for a slot
/// (the group concurrency's default of 1 is shown only beside a group rate or a busy group).
/// A group key longer than [`GROUP_KEY_SHOWN`] characters is cut there, ending in "…".
fn groups_cell(s: &TopicStats) -> String {
    let busiest = s.busiest_groups.first();
    if s.group_concurrency.is_none() && s.group_rate.is_none() && busiest.is_none() {
        return "-".into();
    }
    let mut parts = vec![format!(
        "at most {} at once",
        s.group_concurrency.unwrap_or(1)
    )];
    if let Some(r) = s.group_rate {
        parts.push(format!("{r} each"));
    }
    if let Some(b) = busiest {
        let key: String = if b.group.chars().count() > GROUP_KEY_SHOWN {
            let head: String = b.group.chars().take(GROUP_KEY_SHOWN - 1).collect();
            format!("{head}…")
        } else {
            b.group.clone()
        };
        parts.push(format!("busiest {key} ({} waiting)", b.waiting));
    }
    parts.join(", ")
}

/// The most characters of a group key `dq stats`' table shows (a key may take 256 bytes).
const GROUP_KEY_SHOWN: usize = 24;

/// `dq watch`: `dq stats` on a cleared screen every second, until Ctrl-C or `iterations`.
pub(crate) async fn watch(
    client: &Client,
    namespace: &str,
    iterations: Option<u64>,
    json: bool,
) -> Result<(), Exit> {
    let mut n = 0;
    loop {
        if !json {
            print!("\x1b[2J\x1b[H");
            println!("dq watch: {namespace} (Ctrl-C to stop)\n");
        }
        stats(client, json).await?;
        n += 1;
        if iterations.is_some_and(|max| n >= max) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// `dq pause`: an unknown topic is refused unless `force`, since it is most often a typo.
pub(crate) async fn pause(
    client: &Client,
    topic: &str,
    force: bool,
    json: bool,
) -> Result<(), Exit> {
    if !force {
        known_topic(client, topic)
            .await
            .map_err(|Exit(code, said)| match code {
                3 => Exit(
                    code,
                    format!("{said}; to pause it before its first push, pass --force"),
                ),
                _ => Exit(code, said),
            })?;
    }
    client.pause(topic).await?;
    let said = format!("{topic} paused: workers finish what they run and fetch nothing more");
    report(json, json!({ "paused": topic }), &said);
    Ok(())
}

/// `dq max-pending`: prints the topic's bound, sets it, or lifts it (`off`).
pub(crate) async fn max_pending(
    client: &Client,
    topic: &str,
    bound: Option<&str>,
    json: bool,
) -> Result<(), Exit> {
    let set = match bound {
        None => {
            let max = client.max_pending(topic).await?;
            let said = match max {
                Some(max) => format!("{topic}: at most {max} jobs pending"),
                None => format!("{topic}: no bound on pending jobs"),
            };
            report(json, json!({ "topic": topic, "max_pending": max }), &said);
            return Ok(());
        }
        Some(text) => at_least_one_or_off("max-pending", text)?,
    };
    client.set_max_pending(topic, set).await?;
    let said = match set {
        Some(max) => format!("{topic}: at most {max} jobs pending; a push past it is refused"),
        None => format!("{topic}: no bound on pending jobs"),
    };
    report(json, json!({ "topic": topic, "max_pending": set }), &said);
    Ok(())
}

/// `dq rate`: prints the topic's rate limit, sets it (`100/1s`), or lifts it (`off`).
pub(crate) async fn rate(
    client: &Client,
    topic: &str,
    rate: Option<&str>,
    json: bool,
) -> Result<(), Exit> {
    let said = |rate: Option<dq::Rate>| match rate {
        Some(r) => format!(
            "{topic}: at most {r} in all processes together (one start every {:?}, bursts of {})",
            r.interval(),
            r.burst()
        ),
        None => format!("{topic}: no rate limit"),
    };
    let set = match rate {
        None => {
            let rate = client.rate(topic).await?;
            let text = rate.map(|r| r.to_string());
            report(json, json!({ "topic": topic, "rate": text }), &said(rate));
            return Ok(());
        }
        Some("off") => None,
        Some(text) => Some(
            text.parse::<dq::Rate>()
                .map_err(|e| Exit(2, format!("{e}; `dq rate TOPIC off` lifts the limit")))?,
        ),
    };
    client.set_rate(topic, set).await?;
    let text = set.map(|r| r.to_string());
    report(json, json!({ "topic": topic, "rate": text }), &said(set));
    Ok(())
}

/// `dq rate TOPIC --lift-hold`: ends a handler's hold on the topic now, and says whether one
/// was in force.
pub(crate) async fn lift_hold(client: &Client, topic: &str, json: bool) -> Result<(), Exit> {
    let lifted = client.lift_hold(topic).await?;
    let said = if lifted {
        format!("{topic}: hold lifted; its jobs start again, as its rate allows")
    } else {
        format!("{topic}: no hold was in force")
    };
    report(json, json!({ "topic": topic, "lifted": lifted }), &said);
    Ok(())
}

/// `dq global-concurrency`: prints the topic's limit on jobs running at once in all
/// processes, sets it, or lifts it (`off`).
pub(crate) async fn global_concurrency(
    client: &Client,
    topic: &str,
    max: Option<&str>,
    json: bool,
) -> Result<(), Exit> {
    let said = |max: Option<u32>| match max {
        Some(max) => format!("{topic}: at most {max} running at once in all processes together"),
        None => format!("{topic}: no global concurrency limit"),
    };
    let set = match max {
        None => {
            let max = client.global_concurrency(topic).await?;
            report(
                json,
                json!({ "topic": topic, "global_concurrency": max }),
                &said(max),
            );
            return Ok(());
        }
        Some(text) => at_least_one_or_off("global-concurrency", text)?,
    };
    client.set_global_concurrency(topic, set).await?;
    report(
        json,
        json!({ "topic": topic, "global_concurrency": set }),
        &said(set),
    );
    Ok(())
}

/// `dq groups`: prints a topic's group concurrency, its group rate and its busiest groups, or
/// sets the concurrency (`off`: the default of 1) and the rate (`off`: none). Both flags are
/// read before either is written, so a mistake in one changes nothing.
pub(crate) async fn groups(
    client: &Client,
    topic: &str,
    concurrency: Option<&str>,
    rate: Option<&str>,
    json: bool,
) -> Result<(), Exit> {
    let limit = |max: Option<u32>| match max {
        Some(max) => format!("at most {max} of one group's jobs at once"),
        None => "one of a group's jobs at a time (the default)".to_owned(),
    };
    let pace = |rate: Option<dq::Rate>| match rate {
        Some(r) => format!(
            "group rate: {r} for each group (one start of a group every {:?}, bursts of {})",
            r.interval(),
            r.burst()
        ),
        None => "group rate: none".to_owned(),
    };
    if concurrency.is_some() || rate.is_some() {
        let new_concurrency = concurrency
            .map(|text| at_least_one_or_off::<u32>("groups --concurrency", text))
            .transpose()?;
        let new_rate = rate.map(group_rate_or_off).transpose()?;
        let mut shown = json!({ "topic": topic });
        let mut said = Vec::new();
        if let Some(set) = new_concurrency {
            client.set_group_concurrency(topic, set).await?;
            shown["group_concurrency"] = json!(set);
            said.push(limit(set));
        }
        if let Some(set) = new_rate {
            client.set_group_rate(topic, set).await?;
            shown["group_rate"] = json!(set.map(|r| r.to_string()));
            said.push(pace(set));
        }
        report(json, shown, &format!("{topic}: {}", said.join("; ")));
        return Ok(());
    }
    let s = client.stats(topic).await?;
    if json {
        println!(
            "{}",
            json!({
                "topic": topic,
                "group_concurrency": s.group_concurrency,
                "group_rate": s.group_rate.map(|r| r.to_string()),
                "busiest_groups": s.busiest_groups,
            })
        );
        return Ok(());
    }
    println!("{topic}: {}", limit(s.group_concurrency));
    println!("{topic}: {}", pace(s.group_rate));
    if s.busiest_groups.is_empty() {
        println!("no job waits for a slot of its group");
        return Ok(());
    }
    let rows = s
        .busiest_groups
        .iter()
        .map(|g| {
            vec![
                g.group.clone(),
                g.waiting.to_string(),
                g.holding.to_string(),
            ]
        })
        .collect();
    print_table(&["GROUP", "WAITING", "HOLDING"], rows);
    Ok(())
}

/// The rate of `dq groups --rate`: `<count>/<period>`, or `off` (`None`); exit 2 for anything
/// else.
fn group_rate_or_off(text: &str) -> Result<Option<dq::Rate>, Exit> {
    if text == "off" {
        return Ok(None);
    }
    text.parse::<dq::Rate>().map(Some).map_err(|e| {
        Exit(
            2,
            format!("{e}; `dq groups TOPIC --rate off` lifts the group rate"),
        )
    })
}

/// `dq resume`.
pub(crate) async fn resume(client: &Client, topic: &str, json: bool) -> Result<(), Exit> {
    client.resume(topic).await?;
    let said = format!("{topic} resumed");
    report(json, json!({ "resumed": topic }), &said);
    Ok(())
}

pub(crate) async fn expand(client: &Client, json: bool) -> Result<(), Exit> {
    let done = client.expand().await?;
    let said = format!("{} jobs moved out of compact storage", done.jobs);
    if done.parts_left > 0 {
        return Err(Exit(
            1,
            format!(
                "{said}, and {} parts of it are left: a process still stores jobs compact while this runs. Set DQ_COMPACT=off (Config::compact) on every process of the namespace, then run dq expand again",
                done.parts_left
            ),
        ));
    }
    report(
        json,
        json!({ "expanded": done.jobs, "parts_left": 0 }),
        &format!("{said}; none is left there"),
    );
    Ok(())
}

/// A command's number of jobs, at least 1, or `off` (`None`): exit 2 for anything else.
fn at_least_one_or_off<T: std::str::FromStr + PartialOrd + From<u8>>(
    command: &str,
    text: &str,
) -> Result<Option<T>, Exit> {
    if text == "off" {
        return Ok(None);
    }
    match text.parse::<T>() {
        Ok(n) if n >= T::from(1) => Ok(Some(n)),
        _ => Err(Exit(
            2,
            format!("{command} takes a number of jobs of at least 1, or `off`; got {text:?}"),
        )),
    }
}
