//! `dq workflow`: one workflow's steps and their states, and its cancel.

use dq::workflow::{OnFailure, StepState, WorkflowInfo};
use dq::Client;
use serde_json::json;

use crate::output::{print_table, report};
use crate::Exit;

/// `dq workflow ID [--cancel]`.
pub(crate) async fn run(client: &Client, id: &str, cancel: bool, json: bool) -> Result<(), Exit> {
    if cancel {
        let Some(n) = client.cancel_workflow(id).await? else {
            return Err(not_found(id));
        };
        report(
            json,
            json!({ "workflow": id, "result": "cancelled", "steps": n }),
            &format!(
                "workflow {id} cancelled: {n} step(s) cancelled or, when running, asked to stop"
            ),
        );
        return Ok(());
    }
    let Some(info) = client.workflow_status(id).await? else {
        return Err(not_found(id));
    };
    if json {
        println!("{}", workflow_json(&info));
        return Ok(());
    }
    let ended = info
        .ended_us
        .map_or_else(|| "-".to_owned(), |us| crate::output::ago(at(us)));
    println!(
        "workflow {}: {}{} (pushed {}, ended {ended})",
        info.id,
        info.state.as_str(),
        if info.cancelled { ", cancelled" } else { "" },
        crate::output::ago(at(info.created_us)),
    );
    let mut rows = Vec::new();
    for step in &info.steps {
        // A pending step's job says where it is: delayed, ready or running.
        let state = match step.state {
            StepState::Pending => match client
                .status_in(step.topic.as_str(), step.id.as_str())
                .await?
            {
                Some(job) => format!("pending ({})", job.state.as_str()),
                None => "pending".to_owned(),
            },
            s => s.as_str().to_owned(),
        };
        let detail = match (&step.error, &step.value) {
            (Some(e), _) => e.clone(),
            (None, Some(v)) => String::from_utf8_lossy(v).into_owned(),
            (None, None) => "-".to_owned(),
        };
        rows.push(vec![
            step.name.clone(),
            state,
            after_text(&step.after),
            step.topic.to_string(),
            step.id.to_string(),
            detail,
        ]);
    }
    print_table(
        &["STEP", "STATE", "AFTER", "TOPIC", "JOB", "VALUE/ERROR"],
        rows,
    );
    Ok(())
}

/// Microseconds since the epoch as a time.
fn at(us: u64) -> std::time::SystemTime {
    std::time::UNIX_EPOCH + std::time::Duration::from_micros(us)
}

fn not_found(id: &str) -> Exit {
    Exit(
        3,
        format!("no workflow {id:?} (never pushed, or ended longer ago than it is kept)"),
    )
}

/// `b, c (run)`: the steps a step comes after, each with its policy when not the default.
fn after_text(after: &[(String, OnFailure)]) -> String {
    if after.is_empty() {
        return "-".to_owned();
    }
    let parts: Vec<String> = after
        .iter()
        .map(|(name, p)| match p {
            OnFailure::Cancel => name.clone(),
            p => format!("{name} ({})", p.as_str()),
        })
        .collect();
    parts.join(", ")
}

fn workflow_json(info: &WorkflowInfo) -> serde_json::Value {
    let steps: Vec<_> = info
        .steps
        .iter()
        .map(|s| {
            let after: Vec<_> = s
                .after
                .iter()
                .map(|(name, p)| json!({ "step": name, "on_failure": p.as_str() }))
                .collect();
            let value = s.value.as_deref().map(|v| {
                serde_json::from_slice::<serde_json::Value>(v).unwrap_or_else(|_| {
                    serde_json::Value::String(String::from_utf8_lossy(v).into_owned())
                })
            });
            json!({
                "step": s.name,
                "topic": s.topic.as_str(),
                "id": s.id.as_str(),
                "state": s.state.as_str(),
                "after": after,
                "value": value,
                "error": s.error,
            })
        })
        .collect();
    json!({
        "workflow": info.id,
        "state": info.state.as_str(),
        "cancelled": info.cancelled,
        "created_us": info.created_us,
        "ended_us": info.ended_us,
        "steps": steps,
    })
}
