//! A listener's flow control, declared in the store at runtime start as the client's setters
//! do: the bound on its topic's pending jobs ([`Listener::max_pending`],
//! `#[dq::listener(max_pending = 100000)]`, `Client::set_max_pending`) and its rate limit
//! ([`Listener::rate`], `#[dq::listener(rate = "100/1s")]`, `Client::set_rate`), and the
//! limits of each group of the topic: how many run at once ([`Listener::group_concurrency`])
//! and start per period ([`Listener::group_rate`]).

use dq_core::Rate;

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

    /// Limits how many jobs of this topic start per period, in all processes together, as
    /// `#[dq::listener(rate = "100/1s")]` does: "at most 100 calls a second to the payment
    /// provider, whatever the number of workers". Enforced where jobs are leased, with Redis'
    /// clock (GCRA: the starts are spread evenly, with a burst of the jobs of 10 ms; see
    /// [`Rate`]); a worker with free slots waits for the next start the limit allows. A
    /// handler that meets the provider's own limit anyway returns
    /// [`Outcome::RateLimited`](crate::Outcome::RateLimited).
    ///
    /// Default: none, and a listener without one leaves the store's as it is (one set by
    /// `Client::set_rate` stays): removing the attribute does not lift a rate, `dq rate TOPIC
    /// off` does. A listener with one writes it at every start, and again when Redis lost its
    /// data, over what the client set meanwhile.
    ///
    /// ```
    /// use dq_runtime::Listener;
    ///
    /// # #[derive(serde::Deserialize)] struct Charge { order: u64 }
    /// let charges = Listener::new("charge-card", |msg: Charge| async move {
    ///     let _ = msg.order;
    ///     Ok::<(), String>(())
    /// })
    /// .rate("100/1s".parse().expect("a valid rate"));
    /// ```
    pub fn rate(mut self, rate: Rate) -> Self {
        self.rate = Some(rate);
        self
    }

    /// Limits how many jobs of this topic run at once in all processes together, as
    /// `#[dq::listener(global_concurrency = 10)]` does ("at most 10 calls in flight to the
    /// provider"), beside [`concurrency`](Listener::concurrency), which bounds this process
    /// alone. Counted by leases in the fetch: a job counts from its fetch until its end is
    /// written, and the slot of a worker killed mid-run comes back when its lease is
    /// reclaimed, never leaked. A worker at the limit fetches again when one of the topic's
    /// jobs ends in its process, or after 10 ms (up to 160 ms while the topic stays full) for
    /// the ends in other processes. On Redis over several shards the first shard counts the
    /// slots of all of them (README, "Global concurrency").
    ///
    /// Default: none, and a listener without one leaves the store's as it is (one set by
    /// `Client::set_global_concurrency` stays); `dq global-concurrency TOPIC off` lifts it. A
    /// listener with one writes it at every start, and again when Redis lost its data. At least
    /// 1: zero fails `Runtime::start`.
    ///
    /// ```
    /// use dq_runtime::Listener;
    ///
    /// # #[derive(serde::Deserialize)] struct Charge { order: u64 }
    /// let charges = Listener::new("charge-card", |msg: Charge| async move {
    ///     let _ = msg.order;
    ///     Ok::<(), String>(())
    /// })
    /// .concurrency(16)
    /// .global_concurrency(10);
    /// ```
    pub fn global_concurrency(mut self, max: u32) -> Self {
        self.global_concurrency = Some(max);
        self
    }

    /// How many jobs of one group of this topic run at once, as
    /// `#[dq::listener(group_concurrency = 2)]` does, for the jobs pushed with
    /// [`PushBuilder::group`](dq_core::PushBuilder::group) ("never two jobs of one account at
    /// once"). A grouped job holds one of its group's slots from when it is let in line until
    /// it ends (through its retries); the group's other jobs wait, in push order, counted as
    /// ready. Exact across processes: the store counts the slots (README, "Groups").
    ///
    /// Default: the store's, 1 unless `Client::set_group_concurrency` set another (a listener
    /// without one leaves it as it is). A listener with one writes it at every start. At least
    /// 1: zero fails `Runtime::start`.
    ///
    /// ```
    /// use dq_runtime::Listener;
    ///
    /// # #[derive(serde::Deserialize)] struct Sync { account: String }
    /// let syncs = Listener::new("sync-account", |msg: Sync| async move {
    ///     let _ = msg.account;
    ///     Ok::<(), String>(())
    /// })
    /// .group_concurrency(2);
    /// ```
    pub fn group_concurrency(mut self, max: u32) -> Self {
        self.group_concurrency = Some(max);
        self
    }

    /// Limits how many jobs of each group of this topic start per period, in all processes
    /// together, as `#[dq::listener(group_rate = "10/1s")]` does: "at most 10 calls a second
    /// per account", whatever the number of accounts and workers. The same rule as the topic's
    /// [`rate`](Listener::rate), counted for each group on its own: GCRA with the store's
    /// clock, checked when a job is leased, the starts spread evenly, a burst of the jobs of
    /// 10 ms at the rate (at least 1, see [`Rate`]), and at most `count + burst - 1` starts of
    /// one group in any window of one period (`count + 1` when the burst is 1).
    ///
    /// A job whose group has used its rate does not start: it waits as a delayed job
    /// (`postponed` in its events), due when its group may start again and a turn after the
    /// group's job held back before it, and keeps its group's slot while other groups go on.
    /// With a [`group_concurrency`](Listener::group_concurrency) of 1 the group's later jobs
    /// stay behind it, in push order; with more, the jobs held back keep their order among
    /// themselves, but a job of the group let in line before one of them is due may start
    /// first, again and again when the topic has a backlog (README "A rate per group").
    /// Every run counts, retries included. Jobs pushed without a group are not limited by it
    /// (the topic's `rate` still applies to them). A rate lifted or raised leaves the jobs
    /// already held back waiting until their due time, at most one interval of the old rate.
    ///
    /// Default: none, and a listener without one leaves the store's as it is (one set by
    /// `Client::set_group_rate` stays): removing the attribute does not lift it, `dq groups
    /// TOPIC --rate off` does. A listener with one writes it at every start, and again when
    /// Redis lost its data, over what the client set meanwhile; a new rate starts afresh.
    ///
    /// ```
    /// use dq_runtime::Listener;
    ///
    /// # #[derive(serde::Deserialize)] struct Charge { account: String }
    /// let charges = Listener::new("charge-card", |msg: Charge| async move {
    ///     let _ = msg.account;
    ///     Ok::<(), String>(())
    /// })
    /// .group_concurrency(1)
    /// .group_rate("10/1s".parse().expect("a valid rate"));
    /// ```
    pub fn group_rate(mut self, rate: Rate) -> Self {
        self.group_rate = Some(rate);
        self
    }
}

/// Whether a listener's group concurrency can be declared: at least 1.
pub(crate) fn check_group_concurrency(l: &Listener) -> Result<(), String> {
    match l.group_concurrency {
        Some(0) => Err(
            "`group_concurrency` must be at least 1 (1, the default, runs a group's jobs one at a time)"
                .into(),
        ),
        _ => Ok(()),
    }
}

/// Whether a listener's global concurrency can be declared: at least 1.
pub(crate) fn check_global_concurrency(l: &Listener) -> Result<(), String> {
    match l.global_concurrency {
        Some(0) => Err(
            "`global_concurrency` must be at least 1: leave it out for no limit (pause the topic to run none)"
                .into(),
        ),
        _ => Ok(()),
    }
}

/// Whether a listener's bound can be declared: at least 1.
pub(crate) fn check_max_pending(l: &Listener) -> Result<(), String> {
    match l.max_pending {
        Some(0) => Err("`max_pending` must be at least 1: leave it out for no bound".into()),
        _ => Ok(()),
    }
}
