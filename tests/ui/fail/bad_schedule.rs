use serde::{Deserialize, Serialize};

// A Tick has no topic of its own.
#[dq::listener(cron = "0 3 * * *")]
async fn no_topic(_tick: dq::schedule::Tick) {}

// Both ways of repeating.
#[dq::listener(topic = "a", cron = "0 3 * * *", every = "1h")]
async fn both(_tick: dq::schedule::Tick) {}

// A zone with an interval.
#[dq::listener(topic = "b", every = "1h", tz = "Europe/Paris")]
async fn zone_with_interval(_tick: dq::schedule::Tick) {}

// A zone without a schedule.
#[dq::listener(topic = "c", tz = "Europe/Paris")]
async fn zone_alone(_n: u64) {}

// An unknown policy.
#[dq::listener(topic = "d", every = "1h", missed = "sometimes")]
async fn bad_policy(_tick: dq::schedule::Tick) {}

// A message without a Default: what would each tick carry?
#[derive(Serialize, Deserialize)]
struct Invoice {
    id: u64,
}

#[dq::listener(topic = "e", every = "1h")]
async fn no_default(_msg: Invoice) {}

fn main() {}
