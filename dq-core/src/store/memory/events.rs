//! The memory store's job events: per topic whose events are on, a queue of its latest events
//! (exactly `cap`: the memory store trims exactly where Redis trims approximately), numbered and
//! placed as Redis numbers stream entries (`<ms>-<seq>` by the store's clock, so virtual under
//! `dq::testing`), and the feeds that read them, woken by a watch channel when events are added.

use std::collections::{HashMap, VecDeque};

use async_trait::async_trait;
use tokio::sync::watch;

use super::state::Member;
use super::{lock, MemoryStore};
use crate::error::Result;
use crate::events::{EventCursor, EventEntry, EventKind, EventPosition, JobEvent};
use crate::job::from_us;
use crate::name::Topic;
use crate::store::EventFeed;

/// Most entries a feed hands over at once, as the Redis feed reads them.
const FEED_BATCH: usize = 1000;

/// The events of the topics that have them on.
pub(super) struct EventLog {
    /// Each topic with events on, and how many it keeps.
    caps: HashMap<Topic, u64>,
    streams: HashMap<Topic, TopicEvents>,
    /// Bumped whenever an event is added: the feeds look again.
    signal: watch::Sender<u64>,
}

/// One topic's events, oldest first, and the position of the last one added.
#[derive(Default)]
struct TopicEvents {
    entries: VecDeque<EventEntry>,
    last: EventPosition,
}

impl Default for EventLog {
    fn default() -> Self {
        EventLog {
            caps: HashMap::new(),
            streams: HashMap::new(),
            signal: watch::channel(0).0,
        }
    }
}

impl EventLog {
    /// Turns a topic's events on, keeping `cap` of them, or off (`None`): its events go, and
    /// the position of the last one stays, for the numbering to go on from it should they be
    /// turned on again (a reader resuming from before misses nothing: as on Redis).
    pub(super) fn set_cap(&mut self, topic: &Topic, cap: Option<u64>) {
        match cap {
            Some(cap) => {
                self.caps.insert(topic.clone(), cap.max(1));
            }
            None => {
                self.caps.remove(topic);
                if let Some(stream) = self.streams.get_mut(topic) {
                    stream.entries.clear();
                }
            }
        }
    }

    /// Adds the event `kind()` of run `attempt` of job `m` at `now` (us), when its topic has
    /// events on (`kind` is not called otherwise: a topic without events costs a lookup).
    pub(super) fn emit(
        &mut self,
        m: &Member,
        attempt: u32,
        now: u64,
        kind: impl FnOnce() -> EventKind,
    ) {
        let Some(&cap) = self.caps.get(&m.0) else {
            return;
        };
        let stream = self.streams.entry(m.0.clone()).or_default();
        let (ms, last) = (now / 1000, stream.last);
        // As Redis places entries: by the clock's millisecond, never before the last one.
        let position = if ms > last.ms {
            EventPosition::new(ms, 0, last.n + 1)
        } else {
            EventPosition::new(last.ms, last.seq + 1, last.n + 1)
        };
        stream.last = position;
        let event = JobEvent::new(m.0.clone(), m.1.clone(), kind(), attempt, from_us(now));
        stream.entries.push_back(EventEntry {
            shard: 0,
            position,
            event: Some(event),
        });
        while stream.entries.len() as u64 > cap {
            stream.entries.pop_front();
        }
        self.signal.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// Up to `max` of `topic`'s events after `after`, oldest first.
    fn read(&self, topic: &Topic, after: EventPosition, max: usize) -> Vec<EventEntry> {
        let Some(stream) = self.streams.get(topic) else {
            return Vec::new();
        };
        let key = |p: &EventPosition| (p.ms, p.seq);
        let first = stream
            .entries
            .partition_point(|e| key(&e.position) <= key(&after));
        stream.entries.range(first..).take(max).cloned().collect()
    }

    /// Where `topic`'s events end now (before the first when it has none).
    fn latest(&self, topic: &Topic) -> EventPosition {
        self.streams
            .get(topic)
            .map_or_else(EventPosition::default, |s| s.last)
    }
}

/// A read of one topic's events in the memory store.
#[derive(Debug)]
pub(super) struct MemoryEventFeed {
    store: MemoryStore,
    topic: Topic,
    start: EventCursor,
    /// The last entry handed over.
    at: EventPosition,
    added: watch::Receiver<u64>,
}

impl MemoryEventFeed {
    /// A feed of `topic`'s events after `after` (`now`: after the last one added so far).
    pub(super) fn open(store: &MemoryStore, topic: &Topic, after: &EventCursor) -> Self {
        let s = lock(&store.state);
        let (at, start) = if after.is_now() {
            let at = s.events.latest(topic);
            (at, EventCursor::at(vec![at]))
        } else {
            (after.position(0), after.clone())
        };
        MemoryEventFeed {
            store: store.clone(),
            topic: topic.clone(),
            start,
            at,
            added: s.events.signal.subscribe(),
        }
    }
}

#[async_trait]
impl EventFeed for MemoryEventFeed {
    fn start(&self) -> &EventCursor {
        &self.start
    }

    async fn next(&mut self) -> Result<Vec<EventEntry>> {
        loop {
            // Seen before looking: an event added in between still wakes the wait below.
            self.added.borrow_and_update();
            let read = lock(&self.store.state)
                .events
                .read(&self.topic, self.at, FEED_BATCH);
            if let Some(last) = read.last() {
                self.at = last.position;
                return Ok(read);
            }
            if self.added.changed().await.is_err() {
                // The store is gone: nothing will come.
                std::future::pending::<()>().await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::name::JobId;

    fn job(id: &str) -> Member {
        (Topic::new("t").unwrap(), JobId::new(id).unwrap())
    }

    #[test]
    fn events_are_kept_only_for_a_topic_that_has_them_on_up_to_its_cap() {
        let mut log = EventLog::default();
        let t = job("a").0;
        log.emit(&job("a"), 0, 5_000, || EventKind::Promoted);
        assert!(log.read(&t, EventPosition::default(), 10).is_empty(), "off");
        log.set_cap(&t, Some(2));
        for (i, id) in ["a", "b", "c"].iter().enumerate() {
            log.emit(&job(id), 0, 5_000 + i as u64, || EventKind::Promoted);
        }
        let kept = log.read(&t, EventPosition::default(), 10);
        let numbers: Vec<u64> = kept.iter().map(|e| e.position.n).collect();
        assert_eq!(numbers, [2, 3], "the cap keeps the latest");
        assert_eq!(
            (
                kept[0].position.ms,
                kept[0].position.seq,
                kept[1].position.seq
            ),
            (5, 1, 2),
            "one millisecond: the sequence counts up"
        );
        let after = log.read(&t, kept[0].position, 10);
        assert_eq!(after.len(), 1);
        assert_eq!(log.latest(&t), kept[1].position);
        log.set_cap(&t, None);
        assert!(
            log.read(&t, EventPosition::default(), 10).is_empty(),
            "its events went"
        );
        assert_eq!(log.latest(&t), kept[1].position, "the numbering stays");
    }
}
