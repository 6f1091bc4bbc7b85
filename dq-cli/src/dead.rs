//! `dq dead`: dead letters, the jobs that failed every attempt: list, retry, purge.

use std::time::Duration;

use dq::admin::Cursor;
use dq::{Client, JobInfo, JobState};
use serde_json::json;

use crate::args::DeadCommand;
use crate::output::{ago, print_page, report};
use crate::Exit;

/// Runs one `dq dead` subcommand.
pub(crate) async fn run(client: &Client, command: DeadCommand, json: bool) -> Result<(), Exit> {
    match command {
        DeadCommand::List {
            topic,
            limit,
            cursor,
        } => list(client, &topic, limit, cursor, json).await,
        DeadCommand::Retry {
            topic,
            ids,
            all,
            all_topics,
        } => retry(client, topic, &ids, all, all_topics, json).await,
        DeadCommand::Purge { topic, older_than } => purge(client, &topic, older_than, json).await,
    }
}

/// `dq dead list`: a page, newest first, then the command that prints the next one.
async fn list(
    client: &Client,
    topic: &str,
    limit: usize,
    cursor: Cursor,
    json: bool,
) -> Result<(), Exit> {
    let page = client.jobs(topic, JobState::Dead, cursor, limit).await?;
    let row = |j: &JobInfo| {
        vec![
            j.id.to_string(),
            j.state_since_or_until.map(ago).unwrap_or_default(),
            format!("{}/{}", j.attempt, j.max_attempts),
            j.last_error.clone().unwrap_or_default(),
        ]
    };
    let next = format!("dq dead list {topic} --limit {limit} --cursor");
    let headers = ["ID", "DIED", "ATTEMPTS", "ERROR"];
    print_page(json, &page, &headers, row, &next);
    Ok(())
}

/// `dq dead retry`: the `ids` of `topic`, all of its dead letters (`all`), or those of every
/// topic (`all_topics`); with neither ids nor a flag it is a usage error (exit 2), since an
/// empty list of ids would mean all of them to the client.
async fn retry(
    client: &Client,
    topic: Option<String>,
    ids: &[String],
    all: bool,
    all_topics: bool,
    json: bool,
) -> Result<(), Exit> {
    let (n, what) = match topic {
        _ if all_topics => (client.retry_all_dead().await?, "every topic".to_owned()),
        Some(topic) if all || !ids.is_empty() => {
            let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
            (client.retry_dead(&topic, &ids).await?, topic)
        }
        _ => {
            return Err(Exit(
                2,
                "name the ids to retry, or pass --all (one topic) or --all-topics".into(),
            ))
        }
    };
    let said = format!("{n} dead letter(s) of {what} will run again");
    report(json, json!({ "retried": n }), &said);
    Ok(())
}

/// `dq dead purge`.
async fn purge(client: &Client, topic: &str, older_than: Duration, json: bool) -> Result<(), Exit> {
    let n = client.purge_dead(topic, older_than).await?;
    let said = format!("{n} dead letter(s) of {topic} deleted");
    report(json, json!({ "purged": n }), &said);
    Ok(())
}
