//! A listener's retention of its succeeded jobs: asked for with [`Listener::retain`]
//! (`#[dq::listener(retain = "1h")]`) and an optional [`Listener::retain_count`], turned into a
//! [`Retention`] that the runtime records in the store at start (checked in `start`).

use std::time::Duration;

use dq_core::Retention;

use crate::listener::Listener;

impl Listener {
    /// Keeps the record of each succeeded job of this topic, with the value its handler
    /// returned (a handler returning `Result<T, E>` with `T: Serialize`), for `age` after it
    /// succeeded, as `#[dq::listener(retain = "1h")]` does; at most
    /// [`Retention::DEFAULT_COUNT`] (10,000) records per shard unless
    /// [`retain_count`](Listener::retain_count) says otherwise. A program that pushed a job
    /// then reads its value with `Client::result`, or waits for its end with `Client::wait`.
    ///
    /// Default: none. Nothing is kept, and `Client::wait` on a job of the topic answers
    /// `JobResult::NotKept` once the job has ended (at once for one that has: a wait for a
    /// pending job waits for its end, since a runtime that keeps it may start before it
    /// ends). The runtime records the retention in the store at start
    /// (the last runtime started decides for its topic), and a listener without one turns it
    /// off there: the jobs that succeed from then on leave no record.
    ///
    /// ```
    /// use std::time::Duration;
    /// use dq_runtime::Listener;
    ///
    /// # #[derive(serde::Deserialize)] struct Invoice { order_id: u64 }
    /// #[derive(serde::Serialize)]
    /// struct Receipt { number: String }
    ///
    /// let invoices = Listener::new("invoice", |msg: Invoice| async move {
    ///     Ok::<_, String>(Receipt { number: format!("R-{}", msg.order_id) })
    /// })
    /// .retain(Duration::from_secs(3600))
    /// .retain_count(1_000);
    /// ```
    pub fn retain(mut self, age: Duration) -> Self {
        self.retain = Some(age);
        self
    }

    /// The most records of succeeded jobs kept per shard of the topic (default
    /// [`Retention::DEFAULT_COUNT`], 10,000), as `#[dq::listener(retain_count = 1000)]`: the
    /// oldest go first. It goes with [`retain`](Listener::retain), which says for how long:
    /// alone, or zero, it fails `Runtime::start`.
    pub fn retain_count(mut self, n: u64) -> Self {
        self.retain_count = Some(n);
        self
    }

    /// What [`retain`](Listener::retain) and [`retain_count`](Listener::retain_count) ask for:
    /// `None` without `retain` (a `retain_count` alone is refused at start).
    pub(crate) fn retention(&self) -> Option<Retention> {
        let age = self.retain?;
        Some(match self.retain_count {
            Some(count) => Retention { age, count },
            None => Retention::for_age(age),
        })
    }
}
