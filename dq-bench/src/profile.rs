//! Where Redis' time goes during a part of a run, with `DQ_BENCH_PROFILE` set: by command
//! (`INFO commandstats`) and by dq script (`SLOWLOG` with every call logged, each `EVALSHA`
//! named by its script's SHA, `dq::store::script_hashes`). Logging every call costs Redis some
//! time of its own: compare profiled runs with profiled runs only.

use std::collections::HashMap;

use serde_json::{json, Value};

use crate::stats::round3;
use crate::target::Target;

/// A profile being taken (or none, without `DQ_BENCH_PROFILE`).
pub(crate) struct Profile {
    commands: Option<HashMap<String, u64>>,
}

impl Profile {
    /// Starts logging every call on the masters.
    pub(crate) fn start(target: &Target) -> Profile {
        if std::env::var_os("DQ_BENCH_PROFILE").is_none() {
            return Profile { commands: None };
        }
        for m in target.masters() {
            m.command(&["CONFIG", "SET", "slowlog-log-slower-than", "0"]);
            m.command(&["CONFIG", "SET", "slowlog-max-len", "1000000"]);
            m.command(&["SLOWLOG", "RESET"]);
        }
        Profile {
            commands: Some(command_usec(target)),
        }
    }

    /// Redis' time since `start` per job of `jobs`, us: `by_script` (with each script's calls)
    /// and the eight costliest commands (`by_command`); logging stops. `None` without a profile.
    pub(crate) fn finish(self, target: &Target, jobs: usize) -> Option<Value> {
        let before = self.commands?;
        let per_job = |us: u64| round3(us as f64 / jobs.max(1) as f64);
        let mut commands: Vec<(String, u64)> = command_usec(target)
            .into_iter()
            .map(|(k, v)| {
                let d = v - before.get(&k).copied().unwrap_or(0);
                (k.trim_start_matches("cmdstat_").to_owned(), d)
            })
            .filter(|(_, d)| *d > 0)
            .collect();
        commands.sort_by_key(|c| std::cmp::Reverse(c.1));
        let names: HashMap<String, &str> = dq::store::script_hashes()
            .into_iter()
            .map(|(name, sha)| (sha, name))
            .collect();
        let mut scripts: HashMap<String, (u64, u64)> = HashMap::new();
        for m in target.masters() {
            let log = m.command(&["SLOWLOG", "GET", "1000000"]);
            // RESP: an entry is :id, :time, :duration, *args, $7, evalsha, $40, sha, ...
            let lines: Vec<&str> = log.lines().collect();
            for i in 3..lines.len().saturating_sub(2) {
                if !lines[i].eq_ignore_ascii_case("evalsha") {
                    continue;
                }
                let us: u64 = lines[i - 3].trim_start_matches(':').parse().unwrap_or(0);
                let name = names.get(lines[i + 2]).copied().unwrap_or("?").to_owned();
                let e = scripts.entry(name).or_default();
                e.0 += us;
                e.1 += 1;
            }
            m.command(&["CONFIG", "SET", "slowlog-log-slower-than", "10000"]);
            m.command(&["SLOWLOG", "RESET"]);
        }
        let by_script: serde_json::Map<String, Value> = scripts
            .into_iter()
            .map(|(name, (us, calls))| (name, json!({"us_per_job": per_job(us), "calls": calls})))
            .collect();
        let by_command: serde_json::Map<String, Value> = commands
            .into_iter()
            .take(8)
            .map(|(name, us)| (name, per_job(us)))
            .collect();
        Some(json!({"by_script": by_script, "by_command": by_command}))
    }
}

/// Redis time per command (and per script SHA) so far, us (`INFO commandstats`).
fn command_usec(target: &Target) -> HashMap<String, u64> {
    let mut out = HashMap::new();
    for m in target.masters() {
        for line in m.command(&["INFO", "commandstats"]).lines() {
            let Some((name, rest)) = line.split_once(':') else {
                continue;
            };
            let usec = rest
                .split(',')
                .find_map(|kv| kv.strip_prefix("usec="))
                .and_then(|v| v.parse::<u64>().ok());
            if let Some(u) = usec {
                *out.entry(name.to_owned()).or_default() += u;
            }
        }
    }
    out
}
