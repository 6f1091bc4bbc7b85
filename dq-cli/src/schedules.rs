//! `dq schedules`: periodic schedules: list them, pause, resume, remove or run one now. An
//! unknown schedule id exits 3.

use dq::schedule::ScheduleInfo;
use dq::Client;
use serde_json::json;

use crate::args::ScheduleCommand;
use crate::output::{ago, print_table, report, until};
use crate::Exit;

/// Runs one `dq schedules` subcommand; without one, lists them.
pub(crate) async fn run(
    client: &Client,
    command: Option<ScheduleCommand>,
    json: bool,
) -> Result<(), Exit> {
    let (id, found, done) = match command.unwrap_or(ScheduleCommand::List) {
        ScheduleCommand::List => return list(client, json).await,
        ScheduleCommand::Run { id } => return run_now(client, &id, json).await,
        ScheduleCommand::Pause { id } => {
            let found = client.pause_schedule(&id).await?;
            (id, found, "paused")
        }
        ScheduleCommand::Resume { id } => {
            let found = client.resume_schedule(&id).await?;
            (id, found, "resumed")
        }
        ScheduleCommand::Remove { id } => {
            let found = client.unschedule(&id).await?;
            (id, found, "removed")
        }
    };
    if !found {
        return Err(unknown(&id));
    }
    report(
        json,
        json!({ "schedule": id, "done": done }),
        &format!("{id} {done}"),
    );
    Ok(())
}

fn unknown(id: &str) -> Exit {
    Exit(3, format!("no schedule {id:?} (dq schedules lists them)"))
}

/// `dq schedules run`: one job of the schedule now, outside its ticks.
async fn run_now(client: &Client, id: &str, json: bool) -> Result<(), Exit> {
    let pushed = client
        .run_schedule_now(id)
        .await?
        .ok_or_else(|| unknown(id))?;
    let text = format!("{id}: job {} created", pushed.id);
    report(
        json,
        json!({ "schedule": id, "job": pushed.id.as_str() }),
        &text,
    );
    Ok(())
}

/// `dq schedules` (`dq schedules list`): every schedule, how it repeats, its next and last tick.
async fn list(client: &Client, json: bool) -> Result<(), Exit> {
    let all = client.schedules().await?;
    if json {
        let list: Vec<_> = all.iter().map(schedule_json).collect();
        println!("{}", serde_json::Value::Array(list));
        return Ok(());
    }
    let rows = all
        .iter()
        .map(|s| {
            vec![
                s.id.clone(),
                s.spec.repeat.describe(),
                match &s.spec.group {
                    Some(g) => format!("{} (group {g})", s.spec.topic),
                    None => s.spec.topic.clone(),
                },
                s.next.map_or("paused".into(), until),
                s.last.map_or("-".into(), ago),
                format!("{:?}", s.spec.missed),
            ]
        })
        .collect();
    print_table(
        &["SCHEDULE", "REPEATS", "TOPIC", "NEXT", "LAST", "MISSED"],
        rows,
    );
    Ok(())
}

fn schedule_json(s: &ScheduleInfo) -> serde_json::Value {
    json!({
        "id": s.id,
        "repeat": s.spec.repeat.describe(),
        "topic": s.spec.topic,
        "group": s.spec.group,
        "missed": format!("{:?}", s.spec.missed),
        "paused": s.next.is_none(),
        "next_ms": s.next.map(|t| dq::store::to_us(t) / 1000),
        "last_ms": s.last.map(|t| dq::store::to_us(t) / 1000),
    })
}
