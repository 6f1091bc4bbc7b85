//! `dq workers`: the worker processes heard from in the last minute.

use dq::Client;

use crate::output::{ago, print_table};
use crate::Exit;

/// Lists the live workers: host, pid, topics, running jobs, last heartbeat.
pub(crate) async fn list(client: &Client, json: bool) -> Result<(), Exit> {
    let workers = client.workers().await?;
    if json {
        println!("{}", serde_json::to_string(&workers)?);
        return Ok(());
    }
    let rows = workers
        .iter()
        .map(|w| {
            vec![
                w.id.clone(),
                w.host.clone(),
                w.pid.to_string(),
                w.topics.join(","),
                w.running.to_string(),
                ago(dq::store::from_us(w.last_seen_ms * 1000)),
            ]
        })
        .collect();
    print_table(
        &["WORKER", "HOST", "PID", "TOPICS", "RUNNING", "LAST SEEN"],
        rows,
    );
    Ok(())
}
