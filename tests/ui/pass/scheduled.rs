use serde::{Deserialize, Serialize};

// A tick's job carries the schedule and the tick.
#[dq::listener(topic = "nightly-report", cron = "0 3 * * *", tz = "Europe/Paris", missed = "run_once")]
async fn nightly_report(tick: dq::schedule::Tick) {
    let _ = (tick.schedule, tick.at);
}

// A message with a Default: each tick's job carries `Sweep::default()`.
#[derive(Default, Serialize, Deserialize, dq::Message)]
#[message(topic = "sweep")]
struct Sweep {
    older_than_days: u32,
}

#[dq::listener(every = "5m", missed = "all:10")]
async fn sweep(msg: Sweep) {
    let _ = msg.older_than_days;
}

fn main() {}
