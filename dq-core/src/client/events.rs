//! Reading a topic's job events: [`Client::events`] and [`EventStream`], which keeps the cursor
//! and tells a reader that fell behind the cap (see [`events`](crate::events)).

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::SystemTime;

use futures_util::Stream;

use super::Client;
use crate::error::Result;
use crate::events::{EventCursor, EventEntry, EventItem, EventPosition};
use crate::metric;
use crate::name::Topic;
use crate::store::EventFeed;

impl Client {
    /// The job events of `topic` from now on, as a [`Stream`] of [`EventItem`]s: pushed,
    /// promoted, started, progress, succeeded, failed, retrying, postponed, dead, cancelled,
    /// stalled and released, each with the job's id, the run and the time (a BullMQ
    /// `QueueEvents`). The topic's listener turns its events on
    /// (`#[dq::listener(events = true)]`); until then it has none, and the stream waits.
    ///
    /// Save the cursor of the last event handled ([`EventItem::Event`]'s, or
    /// [`EventStream::cursor`]) as a string: [`Client::events_from`] resumes right after it,
    /// missing nothing still within the cap.
    ///
    /// ```no_run
    /// use futures_util::StreamExt;
    /// use dq_core::events::{EventItem, EventKind};
    ///
    /// # async fn f(client: dq_core::Client) -> dq_core::Result<()> {
    /// let mut events = client.events("invoice").await?;
    /// while let Some(item) = events.next().await {
    ///     match item? {
    ///         EventItem::Event { event, cursor } => {
    ///             if let EventKind::Failed { error } = &event.kind {
    ///                 println!("{} failed on run {}: {error}", event.id, event.attempt);
    ///             }
    ///             // save cursor.to_string() to resume there after a restart
    ///         }
    ///         EventItem::Lagged { missed, .. } => println!("{missed} events were missed"),
    ///         _ => {}
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn events(&self, topic: &str) -> Result<EventStream> {
        self.events_from(topic, EventCursor::now()).await
    }

    /// The job events of `topic` after `after`: a cursor saved from an earlier stream (it
    /// resumes right after the event it was saved with), [`EventCursor::start`] (every event
    /// still kept) or [`EventCursor::now`]. A stream that fell behind the cap meanwhile says
    /// first how many events it missed ([`EventItem::Lagged`]).
    ///
    /// Refused ([`Error::InvalidCursor`](crate::Error::InvalidCursor)) when the cursor holds
    /// another number of shards than the namespace has.
    pub async fn events_from(&self, topic: &str, after: EventCursor) -> Result<EventStream> {
        let topic = Topic::new(topic)?;
        let shards = self.store.shards();
        after.check(shards)?;
        let feed = self.store.event_feed(&topic, &after).await?;
        Ok(EventStream::new(feed, shards, &topic))
    }
}

/// A read of the store's feed in flight: it owns the feed until it answers.
type Reading = Pin<Box<dyn Future<Output = (Box<dyn EventFeed>, Result<Vec<EventEntry>>)> + Send>>;

/// Whether the feed is idle or reading.
enum Feed {
    Idle(Box<dyn EventFeed>),
    Reading(Reading),
    /// Only while one state is replaced by the next.
    Moving,
}

/// A topic's job events as a [`Stream`] of [`EventItem`]s, from [`Client::events`] or
/// [`Client::events_from`]. It never ends: it waits for the next event, reads on connections of
/// its own, and after a dropped connection reconnects by itself, with backoff, and goes on from
/// its cursor (the log says so). An `Err` item is a failure it could not get past (a command
/// Redis' ACL denies, say); the stream goes on after it.
pub struct EventStream {
    feed: Feed,
    /// Where the reader stands in each shard: after the last entry handed out.
    cursor: Vec<EventPosition>,
    /// Entries read and not yet handed out.
    read: VecDeque<EventEntry>,
    /// The topic, for the metrics' label.
    topic: String,
}

impl std::fmt::Debug for EventStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventStream")
            .field("cursor", &self.cursor())
            .field("read", &self.read.len())
            .finish_non_exhaustive()
    }
}

impl EventStream {
    fn new(feed: Box<dyn EventFeed>, shards: u16, topic: &Topic) -> EventStream {
        let start = feed.start();
        let cursor = (0..shards).map(|s| start.position(s)).collect();
        EventStream {
            feed: Feed::Idle(feed),
            cursor,
            read: VecDeque::new(),
            topic: topic.to_string(),
        }
    }

    /// Where the reader stands: right after the last item handed out. Saved as a string, it
    /// resumes there ([`Client::events_from`]).
    pub fn cursor(&self) -> EventCursor {
        EventCursor::at(self.cursor.clone())
    }

    /// The next item (the stream never ends, so always `Some`); the same as `StreamExt::next`,
    /// without importing it.
    pub async fn recv(&mut self) -> Option<Result<EventItem>> {
        std::future::poll_fn(|cx| Pin::new(&mut *self).poll_next(cx)).await
    }

    /// The next item among the entries read: word of a lag first, when the entry's number says
    /// that entries before it were trimmed unread, or of a rollback, when its number is one the
    /// reader has read already (the store went back, and the feed with it: see
    /// [`EventItem::RolledBack`]).
    fn next_read(&mut self) -> Option<EventItem> {
        while let Some(entry) = self.read.pop_front() {
            let shard = entry.shard;
            let Some(at) = self.cursor.get_mut(usize::from(shard)) else {
                continue; // a shard beyond the namespace's: not one of ours
            };
            // A reader that has read nothing of a stream yet (from `start`, or from `now` on a
            // stream that did not exist) is owed nothing before its first entry.
            if at.n > 0 && entry.position.n <= at.n {
                let forgotten = at.n - entry.position.n.saturating_sub(1);
                // Told once: the reader now stands just before the entry's event, which
                // comes next (a cursor saved here resumes with it).
                *at = entry.position;
                at.n = entry.position.n.saturating_sub(1);
                self.read.push_front(entry);
                return Some(EventItem::RolledBack { shard, forgotten });
            }
            if at.n > 0 && entry.position.n > at.n.saturating_add(1) {
                let missed = entry.position.n - at.n - 1;
                metrics::counter!(metric::EVENTS_MISSED, "topic" => self.topic.clone())
                    .increment(missed);
                // The lag is told once: the entry comes next.
                at.n = entry.position.n - 1;
                self.read.push_front(entry);
                return Some(EventItem::Lagged { shard, missed });
            }
            *at = entry.position;
            if let Some(event) = entry.event {
                let topic = self.topic.clone();
                metrics::counter!(metric::EVENTS_READ, "topic" => topic.clone()).increment(1);
                let age = SystemTime::now()
                    .duration_since(event.at)
                    .unwrap_or_default();
                metrics::gauge!(metric::EVENTS_BEHIND, "topic" => topic).set(age.as_secs_f64());
                return Some(EventItem::Event {
                    event,
                    cursor: self.cursor(),
                });
            }
        }
        None
    }
}

impl Stream for EventStream {
    type Item = Result<EventItem>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Some(item) = this.next_read() {
                return Poll::Ready(Some(Ok(item)));
            }
            if matches!(this.feed, Feed::Idle(_)) {
                if let Feed::Idle(mut feed) = std::mem::replace(&mut this.feed, Feed::Moving) {
                    this.feed = Feed::Reading(Box::pin(async move {
                        let read = feed.next().await;
                        (feed, read)
                    }));
                }
            }
            let Feed::Reading(reading) = &mut this.feed else {
                return Poll::Ready(None); // not reached: the feed is idle or reading
            };
            let (feed, read) = match reading.as_mut().poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(done) => done,
            };
            this.feed = Feed::Idle(feed);
            match read {
                Ok(entries) => this.read.extend(entries),
                Err(e) => return Poll::Ready(Some(Err(e))),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use async_trait::async_trait;

    use super::*;
    use crate::events::{EventKind, JobEvent};
    use crate::name::JobId;

    /// A feed that hands out the entries it was given, then waits.
    #[derive(Debug)]
    struct Given(EventCursor, Vec<EventEntry>);

    #[async_trait]
    impl EventFeed for Given {
        fn start(&self) -> &EventCursor {
            &self.0
        }

        async fn next(&mut self) -> Result<Vec<EventEntry>> {
            if self.1.is_empty() {
                std::future::pending::<()>().await;
            }
            Ok(std::mem::take(&mut self.1))
        }
    }

    fn entry(n: u64) -> EventEntry {
        let event = JobEvent::new(
            Topic::new("t").unwrap(),
            JobId::new(n.to_string()).unwrap(),
            EventKind::Started,
            1,
            SystemTime::UNIX_EPOCH,
        );
        EventEntry {
            shard: 0,
            position: EventPosition::new(n, 0, n),
            event: Some(event),
        }
    }

    async fn items(start: &str, entries: Vec<EventEntry>, n: usize) -> Vec<EventItem> {
        let feed = Given(start.parse().unwrap(), entries);
        let mut stream = EventStream::new(Box::new(feed), 1, &Topic::new("t").unwrap());
        let mut out = Vec::new();
        for _ in 0..n {
            let next = tokio::time::timeout(Duration::from_secs(1), stream.recv()).await;
            out.push(next.unwrap().unwrap().unwrap());
        }
        out
    }

    fn id_of(item: &EventItem) -> String {
        match item {
            EventItem::Event { event, .. } => event.id.to_string(),
            other => format!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn a_reader_resuming_behind_trimmed_entries_is_told_how_many_once() {
        let got = items("3-0:3", vec![entry(7), entry(8)], 3).await;
        assert_eq!(
            got[0],
            EventItem::Lagged {
                shard: 0,
                missed: 3
            }
        );
        assert_eq!((id_of(&got[1]), id_of(&got[2])), ("7".into(), "8".into()));
        match &got[2] {
            EventItem::Event { cursor, .. } => assert_eq!(cursor.to_string(), "8-0:8"),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn a_reader_handed_numbers_it_has_read_is_told_of_the_rollback_once() {
        // It had read up to 5; the store went back to 2 and wrote 3 and 4 since.
        let got = items("5-0:5", vec![entry(3), entry(4)], 3).await;
        assert_eq!(
            got[0],
            EventItem::RolledBack {
                shard: 0,
                forgotten: 3
            }
        );
        assert_eq!((id_of(&got[1]), id_of(&got[2])), ("3".into(), "4".into()));
    }

    #[tokio::test]
    async fn a_reader_from_the_start_or_right_behind_is_owed_nothing() {
        let from_start = items("start", vec![entry(5), entry(6)], 2).await;
        assert_eq!(id_of(&from_start[0]), "5");
        let right_behind = items("4-0:4", vec![entry(5)], 1).await;
        assert_eq!(id_of(&right_behind[0]), "5");
    }
}
