//! A listener's bound on its topic's pending jobs: [`Listener::max_pending`]
//! (`#[dq::listener(max_pending = 100000)]`), declared in the store at runtime start as
//! `Client::set_max_pending` does.

use crate::listener::Listener;

impl Listener {
    /// Bounds how many jobs of this topic may be pending at once, delayed, ready and running
    /// together, in every process, as `#[dq::listener(max_pending = 100000)]` does: a push past
    /// it stores nothing and fails with `Error::TopicFull` (`ErrorKind::TopicFull`; a batch
    /// says which of its jobs were refused), so a runaway producer cannot fill Redis' memory.
    /// The runtime records it in the store at start, as `Client::set_max_pending` does.
    ///
    /// Default: none, and a listener without one leaves the store's as it is (one set by
    /// `Client::set_max_pending` or by another runtime's listener stays): removing the
    /// attribute does not lift a bound, `dq max-pending TOPIC off` does. A listener with one
    /// writes it at every start, and again when Redis lost its data, over what the client set
    /// meanwhile. At least 1: zero fails `Runtime::start`.
    ///
    /// ```
    /// use dq_runtime::Listener;
    ///
    /// # #[derive(serde::Deserialize)] struct Email { to: String }
    /// let emails = Listener::new("send-email", |msg: Email| async move {
    ///     let _ = msg.to;
    ///     Ok::<(), String>(())
    /// })
    /// .max_pending(100_000);
    /// ```
    pub fn max_pending(mut self, max: u64) -> Self {
        self.max_pending = Some(max);
        self
    }
}

/// Whether a listener's bound can be declared: at least 1.
pub(crate) fn check_max_pending(l: &Listener) -> Result<(), String> {
    match l.max_pending {
        Some(0) => Err("`max_pending` must be at least 1: leave it out for no bound".into()),
        _ => Ok(()),
    }
}
