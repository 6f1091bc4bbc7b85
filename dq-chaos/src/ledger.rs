//! The ledger: every handler run appends `id attempt pid start_us end_us due_us` to its
//! worker's append-only file, one `write` per line, when the handler finishes. It lives outside
//! Redis, so what Redis lost cannot hide what ran. Each run also writes its start when it starts
//! (`<ledger>.starts`, as a run that ends then), so that the runs a kill cut are seen too
//! ([`Ledger::with_cut_runs`]).

use std::collections::{HashMap, HashSet};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// One handler run.
#[derive(Debug, Clone)]
pub(crate) struct Run {
    pub(crate) id: String,
    pub(crate) attempt: u32,
    /// The worker process that ran it.
    pub(crate) pid: u32,
    pub(crate) start_us: u64,
    pub(crate) end_us: u64,
    pub(crate) due_us: u64,
}

pub(crate) fn line(id: &str, attempt: u32, start_us: u64, end_us: u64, due_us: u64) -> String {
    format!(
        "{id} {attempt} {} {start_us} {end_us} {due_us}\n",
        std::process::id()
    )
}

fn parse(line: &str) -> Option<Run> {
    let mut f = line.split(' ');
    let id = f.next()?.to_owned();
    let attempt = f.next()?.parse().ok()?;
    let pid = f.next()?.parse().ok()?;
    let start_us = f.next()?.parse().ok()?;
    let end_us = f.next()?.parse().ok()?;
    let due_us = f.next()?.parse().ok()?;
    f.next().is_none().then_some(Run {
        id,
        attempt,
        pid,
        start_us,
        end_us,
        due_us,
    })
}

/// Every run read so far from the `*.ledger` files of a directory, read on incrementally.
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    pub(crate) runs: Vec<Run>,
    pub(crate) malformed: usize,
    offsets: HashMap<PathBuf, u64>,
}

impl Ledger {
    /// The ids of the jobs that ran.
    pub(crate) fn ids(&self) -> HashSet<&str> {
        self.runs.iter().map(|r| r.id.as_str()).collect()
    }

    /// How many times each job ran, by id.
    pub(crate) fn runs_by_id(&self) -> HashMap<&str, usize> {
        let mut runs: HashMap<&str, usize> = HashMap::new();
        for r in &self.runs {
            *runs.entry(r.id.as_str()).or_default() += 1;
        }
        runs
    }

    /// Each job's runs, by id.
    pub(crate) fn by_id(&self) -> HashMap<&str, Vec<&Run>> {
        let mut by_id: HashMap<&str, Vec<&Run>> = HashMap::new();
        for run in &self.runs {
            by_id.entry(run.id.as_str()).or_default().push(run);
        }
        by_id
    }

    /// The runs of the ledger and those a kill or a shutdown cut: the starts in `dir` with no
    /// ledger line (same job, attempt and process), each ending when its process ended
    /// (`ended`: the harness' times after it killed or stopped a process of that pid, the first
    /// one after the start), or at its start when the harness did not end the process (then
    /// counted in the second value). The ledger's runs come first, in their order, then the
    /// cut ones.
    pub(crate) fn with_cut_runs(
        &self,
        dir: &Path,
        ended: &HashMap<u32, Vec<u64>>,
    ) -> std::io::Result<(Vec<Run>, usize)> {
        let mut starts = Ledger::default();
        starts.refresh_from(dir, "starts")?;
        let done: HashSet<(&str, u32, u32)> = self
            .runs
            .iter()
            .map(|r| (r.id.as_str(), r.attempt, r.pid))
            .collect();
        let mut all = self.runs.clone();
        let mut unended = 0;
        for s in starts.runs {
            if done.contains(&(s.id.as_str(), s.attempt, s.pid)) {
                continue;
            }
            let after = ended
                .get(&s.pid)
                .and_then(|ends| ends.iter().copied().filter(|&end| end >= s.start_us).min());
            let end_us = match after {
                Some(end) => end,
                None => {
                    unended += 1;
                    s.start_us
                }
            };
            all.push(Run { end_us, ..s });
        }
        Ok((all, unended))
    }

    /// Reads the complete lines appended since the last call.
    pub(crate) fn refresh(&mut self, dir: &Path) -> std::io::Result<()> {
        self.refresh_from(dir, "ledger")
    }

    /// Reads the complete lines appended since the last call to the `*.<extension>` files of
    /// `dir` (the diamond steps also write their starts, as runs that end when they start, to
    /// `*.starts`).
    pub(crate) fn refresh_from(&mut self, dir: &Path, extension: &str) -> std::io::Result<()> {
        for entry in std::fs::read_dir(dir)? {
            let path = entry?.path();
            if path.extension().is_none_or(|e| e != extension) {
                continue;
            }
            let offset = self.offsets.entry(path.clone()).or_default();
            let mut file = std::fs::File::open(&path)?;
            file.seek(SeekFrom::Start(*offset))?;
            let mut text = String::new();
            file.read_to_string(&mut text)?;
            let complete = text.rfind('\n').map_or(0, |i| i + 1);
            for l in text[..complete].lines() {
                match parse(l) {
                    Some(run) => self.runs.push(run),
                    None => self.malformed += 1,
                }
            }
            *offset += complete as u64;
        }
        Ok(())
    }
}
