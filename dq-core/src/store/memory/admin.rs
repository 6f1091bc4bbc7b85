//! What operators look at and do, and the registry of live workers.

use std::collections::BTreeSet;

use super::ready::ReadyQueue;
use std::time::SystemTime;

use async_trait::async_trait;

use super::state::Member;
use super::{lock, MemoryStore};
use crate::admin::{Cursor, Page, Throughput, TopicCounts, TopicStats, WorkerInfo, BUSIEST_GROUPS};
use crate::error::Result;
use crate::job::{from_us, to_us, JobInfo, JobState};
use crate::name::{JobId, Topic};
use crate::store::policy::{batch_limit, WORKER_EXPIRY_MS};
use crate::store::{Admin, DeadLetters, Registry, Wake, MAX_BATCH};

#[async_trait]
impl Admin for MemoryStore {
    async fn counts(&self, topic: &Topic) -> Result<TopicCounts> {
        Ok(lock(&self.state).counts(topic))
    }

    async fn stats(&self, topic: &Topic) -> Result<TopicStats> {
        let s = lock(&self.state);
        // The oldest of each priority's first job, as the Redis store looks.
        let oldest_ready_due = s
            .ready
            .get(topic)
            .into_iter()
            .flat_map(ReadyQueue::fronts)
            .chain(s.groups.get(topic).and_then(|g| g.parked().next()))
            .filter_map(|id| s.jobs.get(&(topic.clone(), id.clone())))
            .map(|e| e.due_us)
            .min()
            .map(from_us);
        let next_due = s
            .delayed
            .iter()
            .take(1000)
            .find(|(_, m)| m.0 == *topic)
            .map(|(due, _)| from_us(*due));
        Ok(TopicStats {
            counts: s.counts(topic),
            oldest_ready_due,
            next_due,
            paused: s.paused.contains(topic),
            max_pending: s.max_pending.get(topic).copied(),
            rate: s.rates.get(topic).copied(),
            global_concurrency: s.global_concurrency.get(topic).copied(),
            held_until: None, // the client asks `hold_ends_us`
            group_concurrency: s.group_concurrency.get(topic).copied(),
            group_rate: s.group_rates.get(topic).copied(),
            busiest_groups: s
                .groups
                .get(topic)
                .map(|g| g.busiest(BUSIEST_GROUPS))
                .unwrap_or_default(),
        })
    }

    async fn throughput(&self, topic: &Topic) -> Result<Throughput> {
        let now = self.now_us();
        Ok(lock(&self.state).throughput(topic, now))
    }

    // The memory store's listings walk its structures (it is for development and tests).
    async fn list(&self, topic: &Topic, state: JobState, at: Cursor, limit: usize) -> Result<Page> {
        let s = lock(&self.state);
        let skip = usize::try_from(at.raw()).unwrap_or(usize::MAX);
        let limit = batch_limit(limit);
        let members: Vec<Member> = match state {
            JobState::Ready => s
                .ready
                .get(topic)
                .into_iter()
                .flat_map(|q| q.iter())
                .chain(s.groups.get(topic).into_iter().flat_map(|g| g.parked()))
                .map(|id| (topic.clone(), id.clone()))
                .collect(),
            JobState::Delayed => of_topic(&s.delayed, topic),
            JobState::Running => of_topic(&s.inflight, topic),
            // The records its retention keeps, newest first.
            JobState::Done => s
                .done_order
                .get(topic)
                .into_iter()
                .flat_map(|o| o.iter().rev())
                .map(|(_, id)| (topic.clone(), id.clone()))
                .collect(),
            JobState::Blocked => {
                return Err(crate::Error::Config {
                    key: "state",
                    value: state.as_str().to_owned(),
                    reason: "blocked jobs are steps of workflows: read them with workflow_status (dq workflow ID)".into(),
                })
            }
            _ => {
                return Err(crate::Error::Config {
                    key: "state",
                    value: state.as_str().to_owned(),
                    reason: "list dead jobs with dead_jobs".into(),
                })
            }
        };
        let jobs: Vec<JobInfo> = members
            .iter()
            .skip(skip)
            .take(limit)
            .filter_map(|m| s.info(m))
            .collect();
        let next = (skip + jobs.len() < members.len()).then(|| offset(skip + jobs.len()));
        Ok(Page { jobs, next })
    }

    async fn pause(&self, topic: &Topic) -> Result<()> {
        lock(&self.state).paused.insert(topic.clone());
        Ok(())
    }

    async fn resume(&self, topic: &Topic) -> Result<()> {
        lock(&self.state).paused.remove(topic);
        self.signal_ready(topic);
        let _ = self.wake.send(Wake::Resumed(topic.clone()));
        Ok(())
    }

    async fn topics(&self) -> Result<Vec<Topic>> {
        let s = lock(&self.state);
        // The topics pushed to, and those paused (perhaps before their first push).
        let topics: Vec<Topic> = s.topics.union(&s.paused).cloned().collect();
        Ok(topics)
    }

    async fn dead_jobs(&self, topic: &Topic, at: Cursor, limit: usize) -> Result<Page> {
        let s = lock(&self.state);
        let limit = batch_limit(limit);
        let Some(dead) = s.dead.get(topic) else {
            return Ok(Page::default());
        };
        let skip = usize::try_from(at.raw()).unwrap_or(usize::MAX);
        let jobs: Vec<JobInfo> = dead
            .iter()
            .rev()
            .skip(skip)
            .take(limit)
            .filter_map(|(_, id)| s.info(&(topic.clone(), id.clone())))
            .collect();
        let next = (skip.saturating_add(limit) < dead.len()).then(|| offset(skip + limit));
        Ok(Page { jobs, next })
    }

    async fn requeue_dead(&self, topic: &Topic, which: DeadLetters<'_>, max: u32) -> Result<usize> {
        let now = self.now_us();
        let n = {
            let mut s = lock(&self.state);
            let chosen: Vec<JobId> = match which {
                DeadLetters::Ids(ids) => ids.iter().take(MAX_BATCH).cloned().collect(),
                DeadLetters::DiedBy { before_us, limit } => s
                    .dead
                    .get(topic)
                    .map(|d| {
                        d.iter()
                            .take_while(|(died, _)| *died <= before_us)
                            .take(batch_limit(limit))
                            .map(|(_, id)| id.clone())
                            .collect()
                    })
                    .unwrap_or_default(),
            };
            let mut n = 0;
            for id in chosen {
                let m = (topic.clone(), id.clone());
                let Some(died) = s.died_at.remove(&m) else {
                    continue;
                };
                if let Some(d) = s.dead.get_mut(topic) {
                    d.remove(&(died, id.clone()));
                }
                if let Some(e) = s.jobs.get_mut(&m) {
                    e.attempt = 0;
                    e.max_attempts = max;
                    e.due_us = now;
                }
                s.enter((topic.clone(), id));
                n += 1;
            }
            n
        };
        if n > 0 {
            self.signal_ready(topic);
        }
        Ok(n)
    }

    async fn purge_dead(&self, topic: &Topic, before: SystemTime, limit: usize) -> Result<usize> {
        let before = to_us(before);
        let mut s = lock(&self.state);
        let old: Vec<(u64, JobId)> = s
            .dead
            .get(topic)
            .map(|d| {
                d.iter()
                    .take_while(|(at, _)| *at < before)
                    .take(limit)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        for (at, id) in &old {
            let m = (topic.clone(), id.clone());
            if let Some(d) = s.dead.get_mut(topic) {
                d.remove(&(*at, id.clone()));
            }
            s.died_at.remove(&m);
            s.unique_for.remove(&m);
            s.jobs.remove(&m);
        }
        Ok(old.len())
    }

    async fn delete_dead(&self, topic: &Topic, ids: &[JobId]) -> Result<usize> {
        let mut s = lock(&self.state);
        let mut n = 0;
        for id in ids.iter().take(MAX_BATCH) {
            let m = (topic.clone(), id.clone());
            // Only a dead letter: an id pushed again (pending) or retried is not in `died_at`.
            let Some(died) = s.died_at.remove(&m) else {
                continue;
            };
            if let Some(d) = s.dead.get_mut(topic) {
                d.remove(&(died, id.clone()));
            }
            s.unique_for.remove(&m);
            s.jobs.remove(&m);
            n += 1;
        }
        Ok(n)
    }
}

#[async_trait]
impl Registry for MemoryStore {
    async fn register_worker(&self, worker: &WorkerInfo) -> Result<()> {
        let mut worker = worker.clone();
        worker.last_seen_ms = self.now_us() / 1000;
        lock(&self.state).workers.insert(worker.id.clone(), worker);
        Ok(())
    }

    async fn unregister_worker(&self, id: &str) -> Result<()> {
        lock(&self.state).workers.remove(id);
        Ok(())
    }

    async fn workers(&self) -> Result<Vec<WorkerInfo>> {
        let now_ms = self.now_us() / 1000;
        let mut s = lock(&self.state);
        s.workers
            .retain(|_, w| now_ms.saturating_sub(w.last_seen_ms) <= WORKER_EXPIRY_MS);
        let mut all: Vec<WorkerInfo> = s.workers.values().cloned().collect();
        all.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(all)
    }

    async fn namespace_epoch(&self) -> Result<String> {
        // Memory is lost only with the process, and the runtime with it.
        Ok(self.epoch.clone())
    }
}

/// The memory store's cursors are positions in the listing.
fn offset(position: usize) -> Cursor {
    Cursor::from_raw(position as u64)
}

/// The members of `topic` in a set ordered by time (due times, lease deadlines), in its order.
fn of_topic(set: &BTreeSet<(u64, Member)>, topic: &Topic) -> Vec<Member> {
    set.iter()
        .filter(|(_, m)| m.0 == *topic)
        .map(|(_, m)| m.clone())
        .collect()
}
