//! A topic's ready jobs, in the order fetches take them.

use std::cmp::Reverse;
use std::collections::{BTreeMap, VecDeque};

use crate::name::JobId;

/// A topic's ready jobs: higher priority first and, within a priority, the job that became
/// ready first; a released or reclaimed job goes back first of its priority. One queue per
/// priority in use, as the Redis store keeps a list for priority 0 and a sorted set for the
/// others (lib.lua), so the order is the same on every store.
#[derive(Debug, Default)]
pub(super) struct ReadyQueue {
    lanes: BTreeMap<Reverse<i8>, VecDeque<JobId>>,
    len: usize,
}

impl ReadyQueue {
    /// Adds a job last of its priority.
    pub(super) fn push_back(&mut self, id: JobId, priority: i8) {
        self.lanes
            .entry(Reverse(priority))
            .or_default()
            .push_back(id);
        self.len += 1;
    }

    /// Adds a job first of its priority.
    pub(super) fn push_front(&mut self, id: JobId, priority: i8) {
        self.lanes
            .entry(Reverse(priority))
            .or_default()
            .push_front(id);
        self.len += 1;
    }

    /// Takes the job a fetch takes next.
    pub(super) fn pop_front(&mut self) -> Option<JobId> {
        let mut lane = self.lanes.first_entry()?;
        let id = lane.get_mut().pop_front();
        if lane.get().is_empty() {
            lane.remove();
        }
        self.len -= usize::from(id.is_some());
        id
    }

    /// The first job of each priority: the one that waited longest in it.
    pub(super) fn fronts(&self) -> impl Iterator<Item = &JobId> {
        self.lanes.values().filter_map(VecDeque::front)
    }

    /// Takes a job out, wherever it waits (a cancel, a replace, a reschedule).
    pub(super) fn remove(&mut self, id: &JobId) -> bool {
        let found = self.lanes.iter_mut().find_map(|(p, lane)| {
            let pos = lane.iter().position(|x| x == id)?;
            lane.remove(pos);
            Some((*p, lane.is_empty()))
        });
        match found {
            Some((p, emptied)) => {
                if emptied {
                    self.lanes.remove(&p);
                }
                self.len -= 1;
                true
            }
            None => false,
        }
    }

    /// The jobs in the order fetches take them.
    pub(super) fn iter(&self) -> impl Iterator<Item = &JobId> {
        self.lanes.values().flatten()
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> JobId {
        JobId::new(s).unwrap()
    }

    #[test]
    fn higher_priority_first_and_first_in_first_out_within_one() {
        let mut q = ReadyQueue::default();
        q.push_back(id("low"), -3);
        q.push_back(id("a"), 0);
        q.push_back(id("high"), 5);
        q.push_back(id("b"), 0);
        q.push_front(id("released"), 0);
        assert_eq!(q.len(), 5);
        assert!(q.remove(&id("b")));
        let order: Vec<String> = std::iter::from_fn(|| q.pop_front())
            .map(|i| i.to_string())
            .collect();
        assert_eq!(order, ["high", "released", "a", "low"]);
        assert!(q.is_empty() && q.iter().next().is_none() && q.fronts().next().is_none());
    }
}
