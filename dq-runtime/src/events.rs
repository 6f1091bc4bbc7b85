//! A listener's job events: turned on by [`Listener::events`] (`#[dq::listener(events = true)]`)
//! with an optional [`Listener::events_cap`], checked at start, and declared in the store with
//! the listener's other settings (see `ticker::Declared`).

use dq_core::events::DEFAULT_EVENTS_CAP;

use crate::listener::Listener;

impl Listener {
    /// Turns on the job events of this listener's topic, as `#[dq::listener(events = true)]`
    /// does: every step of each of its jobs (pushed, promoted, started, progress, succeeded,
    /// failed, retrying, postponed, dead, cancelled, stalled, released) is appended to the
    /// topic's capped stream in the same atomic step, for any program to read with
    /// `Client::events` and resume after a restart with `Client::events_from`. Each shard keeps
    /// at least the latest [`events_cap`](Listener::events_cap) (10,000) of them.
    ///
    /// Default: off. Nothing is written, and a listener without events turns them off for its
    /// topic when its runtime starts (the last runtime started decides), deleting the events
    /// kept. A program that only pushes writes the `pushed` events of a topic that has them on.
    ///
    /// ```
    /// use dq_runtime::Listener;
    ///
    /// # #[derive(serde::Deserialize)] struct Invoice { order_id: u64 }
    /// let invoices = Listener::new("invoice", |msg: Invoice| async move {
    ///     println!("invoice for order {}", msg.order_id);
    /// })
    /// .events(true)
    /// .events_cap(50_000);
    /// ```
    pub fn events(mut self, on: bool) -> Self {
        self.events = on;
        self
    }

    /// How many events of the topic each shard keeps at least, the oldest going first (default
    /// [`DEFAULT_EVENTS_CAP`], 10,000), as `#[dq::listener(events_cap = 50000)]`: a reader
    /// stopped for longer than that many events is told how many it missed. Redis trims
    /// approximately, keeping up to a hundred or so more. It goes with
    /// [`events`](Listener::events): alone, or zero, it fails `Runtime::start`.
    pub fn events_cap(mut self, cap: u64) -> Self {
        self.events_cap = Some(cap);
        self
    }

    /// What the runtime declares for the topic's events: how many each shard keeps, or `None`
    /// for off.
    pub(crate) fn event_cap(&self) -> Option<u64> {
        self.events
            .then_some(self.events_cap.unwrap_or(DEFAULT_EVENTS_CAP))
    }
}

/// Whether a listener's events can be declared: `events_cap` goes with `events`, and is not
/// zero (as the macro checks).
pub(crate) fn check_events(l: &Listener) -> Result<(), String> {
    match (l.events, l.events_cap) {
        (false, Some(_)) => Err("`events_cap` goes with `events`, which turns the topic's job events on: add `.events(true)` (`events = true`)".into()),
        (true, Some(0)) => Err("`events_cap` must be at least 1: leave `events` out to keep no events".into()),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listener() -> Listener {
        Listener::new("t", |_: u64| async {})
    }

    #[test]
    fn a_listeners_events_are_off_unless_turned_on_with_the_default_cap_unless_given() {
        assert_eq!(listener().event_cap(), None);
        assert_eq!(
            listener().events(true).event_cap(),
            Some(DEFAULT_EVENTS_CAP)
        );
        assert_eq!(listener().events(true).events_cap(5).event_cap(), Some(5));
        assert_eq!(listener().events(false).event_cap(), None);
    }

    #[test]
    fn an_events_cap_without_events_or_of_zero_is_refused() {
        let alone = check_events(&listener().events_cap(5)).unwrap_err();
        assert!(alone.contains("goes with `events`"), "{alone}");
        let zero = check_events(&listener().events(true).events_cap(0)).unwrap_err();
        assert!(zero.contains("at least 1"), "{zero}");
        assert!(check_events(&listener().events(true).events_cap(1)).is_ok());
    }
}
