//! A topic's groups: which jobs hold a slot of their group, how many each group holds, and the
//! jobs that wait for a slot (parked), in push order per group.
//!
//! A grouped job holds a slot of its group from the moment it is let into the topic's ready
//! jobs until it ends (succeeds, is dead-lettered or cancelled, or is replaced into another
//! group): while it waits in line, runs, and waits for a retry. A group holds at most the topic's group concurrency of
//! slots; the jobs beyond wait here, parked, and the first of them is let in (last in line) when
//! a slot comes back. So a group has at most that many jobs in line at once, whatever it has
//! waiting, and one with a million jobs takes its turn as one with one does. The Redis store
//! keeps the same structures (lib.lua's groups).

use std::collections::{BTreeMap, HashMap, VecDeque};

use crate::admin::GroupLoad;
use crate::name::JobId;

#[derive(Debug, Default)]
pub(super) struct Groups {
    /// The jobs holding a slot, and their group.
    active: HashMap<JobId, String>,
    /// How many slots each group holds (absent: none).
    held: HashMap<String, u32>,
    /// Each group's parked jobs, first in first out: (its number in push order, id).
    queues: HashMap<String, VecDeque<(u64, JobId)>>,
    /// The parked jobs by number (push order), for listing, and each one's number and group.
    parked: BTreeMap<u64, JobId>,
    parked_ids: HashMap<JobId, (u64, String)>,
    seq: u64,
}

impl Groups {
    /// Lets job `id` of `group` in when its group has a free slot (true: the caller makes it
    /// ready), else parks it last of its group. A job that already holds a slot is let in as
    /// it is.
    pub(super) fn enter(&mut self, group: &str, id: &JobId, limit: u32) -> bool {
        if self.active.contains_key(id) {
            return true;
        }
        let held = self.held.get(group).copied().unwrap_or(0);
        if held < limit {
            self.held.insert(group.to_owned(), held + 1);
            self.active.insert(id.clone(), group.to_owned());
            return true;
        }
        self.seq += 1;
        let seq = self.seq;
        self.queues
            .entry(group.to_owned())
            .or_default()
            .push_back((seq, id.clone()));
        self.parked.insert(seq, id.clone());
        self.parked_ids.insert(id.clone(), (seq, group.to_owned()));
        false
    }

    /// The group whose slot job `id` holds, if it holds one.
    pub(super) fn group_held_by(&self, id: &JobId) -> Option<&str> {
        self.active.get(id).map(String::as_str)
    }

    /// Whether job `id` waits for a slot.
    pub(super) fn is_parked(&self, id: &JobId) -> bool {
        self.parked_ids.contains_key(id)
    }

    /// Job `id` ended (or left its group): its slot comes back, and the jobs its group may let
    /// in now are returned, in push order, for the caller to make ready (last in line).
    pub(super) fn leave(&mut self, id: &JobId, limit: u32) -> Vec<JobId> {
        let Some(group) = self.active.remove(id) else {
            return Vec::new();
        };
        let held = self
            .held
            .get(&group)
            .copied()
            .unwrap_or(0)
            .saturating_sub(1);
        self.held.insert(group.clone(), held);
        let admitted = self.admit(&group, limit);
        if self.held.get(&group) == Some(&0) {
            self.held.remove(&group);
        }
        admitted
    }

    /// Takes a parked job out (a cancel, a replace, a reschedule); true when it was parked.
    pub(super) fn unpark(&mut self, id: &JobId) -> bool {
        let Some((seq, group)) = self.parked_ids.remove(id) else {
            return false;
        };
        self.parked.remove(&seq);
        if let Some(q) = self.queues.get_mut(&group) {
            q.retain(|(s, _)| *s != seq);
            if q.is_empty() {
                self.queues.remove(&group);
            }
        }
        true
    }

    /// Lets in what every group may now (the limit went up), in push order per group, the
    /// groups with fewest jobs waiting first (ties by name), as the Redis store walks them.
    pub(super) fn admit_all(&mut self, limit: u32) -> Vec<JobId> {
        let mut groups: Vec<(usize, String)> = self
            .queues
            .iter()
            .map(|(g, q)| (q.len(), g.clone()))
            .collect();
        groups.sort();
        let groups: Vec<String> = groups.into_iter().map(|(_, g)| g).collect();
        groups.iter().flat_map(|g| self.admit(g, limit)).collect()
    }

    fn admit(&mut self, group: &str, limit: u32) -> Vec<JobId> {
        let mut out = Vec::new();
        while self.held.get(group).copied().unwrap_or(0) < limit {
            let Some((seq, id)) = self.queues.get_mut(group).and_then(VecDeque::pop_front) else {
                break;
            };
            self.parked.remove(&seq);
            self.parked_ids.remove(&id);
            *self.held.entry(group.to_owned()).or_default() += 1;
            self.active.insert(id.clone(), group.to_owned());
            out.push(id);
        }
        if self.queues.get(group).is_some_and(VecDeque::is_empty) {
            self.queues.remove(group);
        }
        out
    }

    /// The parked jobs, in push order.
    pub(super) fn parked(&self) -> impl Iterator<Item = &JobId> {
        self.parked.values()
    }

    /// How many jobs are parked.
    pub(super) fn parked_len(&self) -> usize {
        self.parked.len()
    }

    /// The groups with the most jobs waiting for a slot, most first (ties: the name that sorts
    /// last first, as Redis' `ZRANGE ... REV` gives them), at most `n`.
    pub(super) fn busiest(&self, n: usize) -> Vec<GroupLoad> {
        let mut all: Vec<GroupLoad> = self
            .queues
            .iter()
            .map(|(g, q)| GroupLoad::new(g, q.len() as u64, self.held.get(g).copied().unwrap_or(0)))
            .collect();
        all.sort_by(|a, b| {
            b.waiting
                .cmp(&a.waiting)
                .then_with(|| b.group.cmp(&a.group))
        });
        all.truncate(n);
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> JobId {
        JobId::new(s).unwrap()
    }

    #[test]
    fn a_group_lets_one_in_at_a_time_and_the_next_when_it_ends() {
        let mut g = Groups::default();
        assert!(g.enter("big", &id("big-0"), 1));
        assert!(!g.enter("big", &id("big-1"), 1));
        assert!(!g.enter("big", &id("big-2"), 1));
        assert!(
            g.enter("small", &id("small-0"), 1),
            "another group has its own slot"
        );
        assert_eq!(g.parked_len(), 2);
        assert_eq!(g.leave(&id("big-0"), 1), [id("big-1")]);
        assert!(g.unpark(&id("big-2")));
        assert_eq!(g.leave(&id("big-1"), 1), Vec::<JobId>::new());
        assert_eq!(g.parked_len(), 0);
    }
}
