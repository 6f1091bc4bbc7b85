//! `dq push`: one job, its payload given on the command line, on stdin (`-`) or in a file
//! (`@path`). A command line holds about 128 KiB at most on Linux, payloads up to 1 MiB.

use std::io::{IsTerminal as _, Read as _};

use dq::Client;
use serde_json::json;

use crate::args::PushArgs;
use crate::Exit;

/// Pushes the job and prints its id and what became of it (created, already pending, ...).
pub(crate) async fn push(client: &Client, args: PushArgs, json: bool) -> Result<(), Exit> {
    let payload = read_payload(&args.payload)?;
    let mut push = client
        .push_json(&args.topic, payload)
        .max_retries(args.retries)
        .priority(args.priority);
    if let Some(id) = args.id {
        push = push.id(id);
    }
    if let Some(group) = args.group {
        push = push.group(group);
    }
    if let Some(d) = args.delay {
        push = push.delay(d);
    }
    if let Some(window) = args.unique_for {
        push = push.unique_for(window);
    }
    if let Some(quiet) = args.debounce {
        push = push.debounce(quiet);
    }
    let pushed = push.send().await?;
    let outcome = format!("{:?}", pushed.outcome);
    if json {
        println!(
            "{}",
            json!({ "id": pushed.id.as_str(), "outcome": outcome })
        );
    } else {
        println!("{}: {outcome}", pushed.id);
    }
    Ok(())
}

/// The payload `arg` names, checked to be JSON: `-` reads stdin, `@path` the file, anything
/// else is the JSON itself. No JSON text starts with `@` or is `-` alone, so neither needs an
/// escape.
fn read_payload(arg: &str) -> Result<Vec<u8>, Exit> {
    let (payload, from) = if arg == "-" {
        (read_stdin()?, " read from stdin".to_owned())
    } else if let Some(path) = arg.strip_prefix('@') {
        (read_file(path)?, format!(" in {path:?}"))
    } else {
        (arg.as_bytes().to_vec(), String::new())
    };
    if payload.iter().all(u8::is_ascii_whitespace) {
        let said = format!("the payload{from} is not JSON: it is empty");
        return Err(Exit(1, said));
    }
    serde_json::from_slice::<serde_json::Value>(&payload)
        .map_err(|e| Exit(1, format!("the payload{from} is not JSON: {e}")))?;
    Ok(payload)
}

fn read_stdin() -> Result<Vec<u8>, Exit> {
    let mut stdin = std::io::stdin();
    if stdin.is_terminal() {
        // Nothing was piped in: say what dq waits for rather than seem to hang.
        eprintln!("dq push: reading the payload from the terminal; end it with Ctrl-D");
    }
    let mut payload = Vec::new();
    stdin
        .read_to_end(&mut payload)
        .map_err(|e| Exit(1, format!("cannot read the payload from stdin: {e}")))?;
    Ok(payload)
}

fn read_file(path: &str) -> Result<Vec<u8>, Exit> {
    if path.is_empty() {
        return Err(Exit(
            1,
            "no file after `@`: write the payload's file as @path/to/payload.json".into(),
        ));
    }
    std::fs::read(path).map_err(|e| Exit(1, format!("cannot read the payload file {path:?}: {e}")))
}
