//! One topic's jobs: a page of them (`dq jobs`), one of them (`dq show`), and the changes to a
//! job that has not started (`dq cancel`, `dq reschedule`).

use dq::admin::ChangeOutcome;
use dq::{Client, Due, JobInfo, JobState};
use serde_json::json;

use crate::args::{JobsArgs, RescheduleArgs};
use crate::output::{
    ago, job_json, pretty, print_page, print_table, report, result_line, result_pretty, until,
};
use crate::Exit;

/// How much of a done job's result a row of `dq jobs --state done` shows.
const RESULT_PREVIEW: usize = 60;

/// `dq jobs`: a page, then the command that prints the next one.
pub(crate) async fn list(client: &Client, args: JobsArgs, json: bool) -> Result<(), Exit> {
    let JobsArgs {
        topic,
        state,
        limit,
        cursor,
    } = args;
    let page = client.jobs(&topic, state, cursor, limit).await?;
    let next = format!("dq jobs {topic} --state {state} --limit {limit} --cursor");
    if state == JobState::Done {
        // When each succeeded and what its handler returned, where the others have a due time
        // and an error.
        let row = |j: &JobInfo| {
            vec![
                j.id.to_string(),
                j.state_since_or_until.map(ago).unwrap_or_default(),
                format!("{}/{}", j.attempt, j.max_attempts),
                result_line(j, RESULT_PREVIEW),
            ]
        };
        let headers = ["ID", "SUCCEEDED", "ATTEMPT", "RESULT"];
        print_page(json, &page, &headers, row, &next);
        return Ok(());
    }
    let row = |j: &JobInfo| {
        vec![
            j.id.to_string(),
            j.state.as_str().to_owned(),
            j.priority.to_string(),
            j.group.clone().unwrap_or_else(|| "-".into()),
            format!("{}/{}", j.attempt, j.max_attempts),
            until(j.due),
            j.last_error.clone().unwrap_or_default(),
        ]
    };
    // Ready jobs are listed in the order they run: by priority, then in the order they came;
    // the jobs waiting for a slot of their group last, in push order.
    let headers = [
        "ID",
        "STATE",
        "PRIORITY",
        "GROUP",
        "ATTEMPT",
        "DUE",
        "LAST ERROR",
    ];
    print_page(json, &page, &headers, row, &next);
    Ok(())
}

/// `dq show`: every field of one job; exit 3 when there is no such job, saying what its topic
/// kept of it (a mark that it was cancelled, or nothing).
pub(crate) async fn show(client: &Client, topic: &str, id: &str, json: bool) -> Result<(), Exit> {
    let Some(job) = client.status_in(topic, id).await? else {
        let why = match client.result_in::<serde_json::Value>(topic, id).await? {
            dq::JobResult::Cancelled => format!(
                "job {id:?} of topic {topic:?} was cancelled: its topic keeps a mark of it within its retention, nothing else"
            ),
            dq::JobResult::NotKept => format!(
                "no job {id:?} in topic {topic:?}: it finished or was cancelled (its topic keeps no records: `retain` on its listener), or was never pushed"
            ),
            _ => format!(
                "no job {id:?} in topic {topic:?}: never pushed, purged, or past its topic's retention"
            ),
        };
        return Err(Exit(3, why));
    };
    if json {
        println!("{}", job_json(&job));
    } else {
        print_table(&["FIELD", "VALUE"], job_fields(&job));
    }
    Ok(())
}

/// The rows of `dq show`'s table; a done job's say when it succeeded and what its handler
/// returned, a running job's the progress it reported last (when it reported one).
fn job_fields(job: &JobInfo) -> Vec<Vec<String>> {
    let mut rows = vec![
        vec!["topic".into(), job.topic.to_string()],
        vec!["id".into(), job.id.to_string()],
        vec!["state".into(), job.state.as_str().into()],
        vec!["priority".into(), job.priority.to_string()],
        vec![
            "group".into(),
            job.group.clone().unwrap_or_else(|| "-".into()),
        ],
        vec![
            "attempt".into(),
            format!("{} of {}", job.attempt, job.max_attempts),
        ],
        vec!["due".into(), until(job.due)],
        vec!["pushed".into(), ago(job.created)],
        vec![
            "last error".into(),
            job.last_error.clone().unwrap_or_else(|| "-".into()),
        ],
        vec![
            "payload".into(),
            String::from_utf8_lossy(&job.payload).into_owned(),
        ],
    ];
    // Each failed run's error, oldest first, under the last error (which is kept whole).
    for (i, e) in job.errors.iter().enumerate() {
        let at = ago(dq::store::from_us(e.at_us));
        rows.insert(
            9 + i,
            vec![
                format!("run {} failed", e.run),
                format!("{at}: {}", e.error),
            ],
        );
    }
    if job.state == JobState::Done {
        let succeeded = job.state_since_or_until.map_or_else(|| "-".into(), ago);
        // After `pushed`, and the result last, under the payload.
        rows.insert(7, vec!["succeeded".into(), succeeded]);
        rows.push(vec!["result".into(), result_pretty(job)]);
    }
    if let Some(progress) = &job.progress {
        // Last, under the payload, as a done job's result.
        rows.push(vec!["progress".into(), pretty(progress)]);
    }
    if job.cancel_requested {
        rows.insert(
            3,
            vec![
                "cancel".into(),
                "requested: its worker was asked to stop it".into(),
            ],
        );
    }
    rows
}

/// `dq cancel`.
pub(crate) async fn cancel(client: &Client, topic: &str, id: &str, json: bool) -> Result<(), Exit> {
    let outcome = client.cancel_in(topic, id).await?;
    change(outcome, "cancelled", topic, id, json)
}

/// `dq reschedule`.
pub(crate) async fn reschedule(
    client: &Client,
    args: RescheduleArgs,
    json: bool,
) -> Result<(), Exit> {
    let RescheduleArgs { topic, id, delay } = args;
    let outcome = client.reschedule_in(&topic, &id, Due::After(delay)).await?;
    change(outcome, "rescheduled", &topic, &id, json)
}

/// Says what a cancel or reschedule did: exit 0 when a cancel asked a running job's worker to
/// stop it, 4 when the job is running and was left alone (a reschedule), 3 when there is no
/// such pending job.
fn change(
    outcome: ChangeOutcome,
    done: &str,
    topic: &str,
    id: &str,
    json: bool,
) -> Result<(), Exit> {
    match outcome {
        ChangeOutcome::Done => {
            report(
                json,
                json!({ "id": id, "result": done }),
                &format!("{topic}:{id} {done}"),
            );
            Ok(())
        }
        ChangeOutcome::CancelRequested => {
            report(
                json,
                json!({ "id": id, "result": "cancel requested" }),
                &format!("{topic}:{id} is running: asked its worker to stop it"),
            );
            Ok(())
        }
        ChangeOutcome::Running => Err(Exit(
            4,
            format!("{topic}:{id} is running; it was left alone"),
        )),
        _ => Err(Exit(3, format!("no pending job {id:?} in topic {topic:?}"))),
    }
}
