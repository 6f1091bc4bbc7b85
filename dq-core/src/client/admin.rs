//! Administration through the client: what the `dq` command-line tool and the dashboard are
//! built on (topics, stats, pages of jobs, dead letters, pause and resume, workers).

use std::time::{Duration, SystemTime};

use super::Client;
use crate::admin::{Cursor, Expanded, Page, Throughput, TopicStats, WorkerInfo};
use crate::error::Result;
use crate::job::{from_us, JobState, DEFAULT_RETRIES};
use crate::name::{JobId, Topic};
use crate::rate::Rate;
use crate::store::{DeadLetters, MAX_BATCH};

impl Client {
    /// Every topic ever pushed to, and every paused one (even before its first push).
    pub async fn topics(&self) -> Result<Vec<Topic>> {
        self.store.topics().await
    }

    /// A topic's counts, the due time of its oldest ready job (how far behind the workers
    /// are), its next due time, whether it is paused, and its limits (`max_pending`, `rate`,
    /// `global_concurrency`, `group_rate`, and a handler's hold in force).
    pub async fn stats(&self, topic: &str) -> Result<TopicStats> {
        let topic = Topic::new(topic)?;
        let (mut stats, max_pending, rate, global, group_rate, hold) = tokio::try_join!(
            self.store.stats(&topic),
            self.store.max_pending(&topic),
            self.store.rate(&topic),
            self.store.global_concurrency(&topic),
            self.store.group_rate(&topic),
            self.store.hold_ends_us(&topic)
        )?;
        stats.max_pending = max_pending;
        stats.rate = rate;
        stats.global_concurrency = global;
        stats.group_rate = group_rate;
        stats.held_until = hold.map(from_us);
        Ok(stats)
    }

    /// How many runs of a topic ended done or failed in each of the last 60 minutes (what the
    /// dashboard charts). Kept by the store in a bounded ring, so this is cheap at any size.
    pub async fn throughput(&self, topic: &str) -> Result<Throughput> {
        self.store.throughput(&Topic::new(topic)?).await
    }

    /// A page of at most `limit` (at most 1,000) of a topic's jobs in one state; `at` is
    /// [`Cursor::START`], then the page's `next` until it is `None`. Pages go shard by shard;
    /// dead letters come newest first within a shard. Every page costs bounded work, however
    /// long the queue.
    ///
    /// ```no_run
    /// # async fn f(client: dq_core::Client) -> dq_core::Result<()> {
    /// use dq_core::{Cursor, JobState};   // in the facade: dq::admin::Cursor, dq::JobState
    ///
    /// let mut at = Some(Cursor::START);
    /// while let Some(cursor) = at {
    ///     let page = client.jobs("order-cancel", JobState::Dead, cursor, 100).await?;
    ///     for job in &page.jobs {
    ///         println!("{} died: {:?}", job.id, job.last_error);
    ///     }
    ///     at = page.next;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn jobs(
        &self,
        topic: &str,
        state: JobState,
        at: Cursor,
        limit: usize,
    ) -> Result<Page> {
        let topic = Topic::new(topic)?;
        if state == JobState::Dead {
            return self.store.dead_jobs(&topic, at, limit).await;
        }
        self.store.list(&topic, state, at, limit).await
    }

    /// Runs dead letters again with a fresh set of attempts (the default retries): the given
    /// ids, or with `ids` empty all of the topic's dead letters. Returns how many.
    pub async fn retry_dead(&self, topic: &str, ids: &[&str]) -> Result<usize> {
        let topic = Topic::new(topic)?;
        let max = DEFAULT_RETRIES + 1;
        if !ids.is_empty() {
            let ids = job_ids(ids)?;
            let mut n = 0;
            for chunk in ids.chunks(MAX_BATCH) {
                n += self
                    .store
                    .requeue_dead(&topic, DeadLetters::Ids(chunk), max)
                    .await?;
            }
            return Ok(n);
        }
        // Only what died before this call began: a job that dies again while we work through
        // the list is not taken again (with a failing handler that would never end).
        let before_us = self.store.time_us().await?;
        let mut n = 0;
        loop {
            let oldest = DeadLetters::DiedBy {
                before_us,
                limit: MAX_BATCH,
            };
            let moved = self.store.requeue_dead(&topic, oldest, max).await?;
            n += moved;
            if moved == 0 {
                return Ok(n);
            }
        }
    }

    /// Moves every job stored compact (due far ahead, on one Redis: README, "How jobs are
    /// stored") into the layout every release reads, `jobs` and `delayed`, with its exact due
    /// time, shard by shard, in bounded steps (`dq expand`). Before a rollback to a release
    /// before compact storage (OPERATIONS.md): first set [`Config::compact`](crate::Config::compact) off on every
    /// process (`DQ_COMPACT=off`), so that no push stores more, then run this, then deploy the
    /// older release. The jobs then take the memory of the plain layout, about 190 bytes a job
    /// more. No job changes: due times, attempts, payloads and counts stay (but for jobs
    /// dead-lettered on the way, as the mover does: an element that cannot be read, or a far job
    /// whose id an older release pushed again). Returns the jobs moved and the parts of
    /// compact storage left: none, unless processes kept storing jobs compact while it ran
    /// (it stops a shard after as many steps as the shard had parts, and some more). The
    /// in-memory store stores nothing compact: nothing to move there.
    ///
    /// ```no_run
    /// # async fn f(client: dq_core::Client) -> dq_core::Result<()> {
    /// let done = client.expand().await?;
    /// println!("{} jobs moved; {} parts left", done.jobs, done.parts_left);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn expand(&self) -> Result<Expanded> {
        let mut total = Expanded::default();
        for shard in 0..self.store.shards() {
            let first = self.store.expand(shard).await?;
            total.jobs += first.jobs;
            // Two parts a step: as many steps as the shard had parts is twice what it needs.
            let mut steps = first.parts_left + 16;
            let mut left = first.parts_left;
            while left > 0 && steps > 0 {
                let step = self.store.expand(shard).await?;
                total.jobs += step.jobs;
                left = step.parts_left;
                steps -= 1;
            }
            total.parts_left += left;
        }
        Ok(total)
    }

    /// Runs every dead letter of every topic again. Returns how many.
    pub async fn retry_all_dead(&self) -> Result<usize> {
        let mut n = 0;
        for topic in self.store.topics().await? {
            n += self.retry_dead(topic.as_str(), &[]).await?;
        }
        Ok(n)
    }

    /// Deletes a topic's dead letters that died more than `older_than` ago. Returns how many.
    pub async fn purge_dead(&self, topic: &str, older_than: Duration) -> Result<usize> {
        let topic = Topic::new(topic)?;
        // By the store's clock, as the deaths were stamped.
        let now = from_us(self.store.time_us().await?);
        let before = now
            .checked_sub(older_than)
            .unwrap_or(SystemTime::UNIX_EPOCH);
        let mut n = 0;
        loop {
            let limit = MAX_BATCH;
            let deleted = self.store.purge_dead(&topic, before, limit).await?;
            n += deleted;
            if deleted < limit {
                return Ok(n);
            }
        }
    }

    /// Deletes the given dead letters of a topic; returns how many. Only dead letters are
    /// deleted: an id that was pushed again since it died (a new job, pending now), retried, or
    /// is gone is skipped and nothing of it is touched, where [`Client::cancel_in`] would
    /// delete the new job. With `ids` empty nothing is deleted ([`Client::purge_dead`] takes
    /// them all).
    pub async fn delete_dead(&self, topic: &str, ids: &[&str]) -> Result<usize> {
        let topic = Topic::new(topic)?;
        let ids = job_ids(ids)?;
        let mut n = 0;
        for chunk in ids.chunks(MAX_BATCH) {
            n += self.store.delete_dead(&topic, chunk).await?;
        }
        Ok(n)
    }

    /// Stops every worker from fetching the topic (running jobs finish); survives restarts.
    ///
    /// A topic may be paused before its first push (so that its jobs wait from the start): it
    /// is then listed by [`Client::topics`] (and `dq stats`, the dashboard) as paused until it
    /// is resumed. `dq pause` asks for `--force` for a topic nobody pushed to, which is more
    /// often a typo.
    pub async fn pause(&self, topic: &str) -> Result<()> {
        self.store.pause(&Topic::new(topic)?).await
    }

    /// Lets workers fetch the topic again.
    pub async fn resume(&self, topic: &str) -> Result<()> {
        self.store.resume(&Topic::new(topic)?).await
    }

    /// Bounds how many jobs of `topic` may be pending at once, delayed, ready and running
    /// together (`None`: no bound, the default), in every process from now on: a push past it
    /// stores nothing and fails with [`Error::TopicFull`](crate::Error::TopicFull)
    /// ([`ErrorKind::TopicFull`](crate::ErrorKind::TopicFull)); a batch says which of its jobs
    /// were refused ([`PushOutcome::Full`](crate::PushOutcome::Full)). So a runaway producer
    /// cannot fill Redis' memory; the jobs already stored all run. A listener's `max_pending`
    /// (`#[dq::listener(max_pending = 100000)]`) sets the same bound at runtime start.
    ///
    /// On Redis each shard of the namespace holds its share, and the shares add up to the
    /// bound, so the topic never holds more; a push is refused once the shard its id falls in
    /// holds its share, which for a bound of a few jobs per shard can be before the topic as a
    /// whole reaches it. Zero is refused ([`Error::InvalidPush`](crate::Error::InvalidPush)), and
    /// on Redis a bound under the namespace's shard count
    /// ([`Error::Config`](crate::Error::Config): a share of 0 would refuse every push to its
    /// shard).
    ///
    /// Retrying dead letters (`retry_dead`, `dq dead retry`) is an operator's act and is not
    /// bounded; a periodic schedule's tick on a full topic waits (tried again at each look,
    /// with a warning) until the topic has room, its `missed` policy then deciding about the
    /// ticks that came meanwhile.
    ///
    /// ```no_run
    /// # async fn f(client: dq_core::Client) -> dq_core::Result<()> {
    /// client.set_max_pending("send-email", Some(100_000)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn set_max_pending(&self, topic: &str, max: Option<u64>) -> Result<()> {
        if max == Some(0) {
            return Err(crate::Error::InvalidPush {
                topic: topic.to_owned(),
                reason: "max_pending must be at least 1 (None lifts the bound)".into(),
            });
        }
        self.store.set_max_pending(&Topic::new(topic)?, max).await
    }

    /// The bound on `topic`'s pending jobs ([`Client::set_max_pending`]), `None` when it has
    /// none.
    pub async fn max_pending(&self, topic: &str) -> Result<Option<u64>> {
        self.store.max_pending(&Topic::new(topic)?).await
    }

    /// Limits how many jobs of `topic` start per period, in all processes together, from the
    /// next fetch on (`None`: no limit, the default). The same limit as a listener's
    /// `#[dq::listener(rate = "100/1s")]`, which sets it at runtime start; changeable while
    /// workers run (`dq rate TOPIC 50/1s`). How it is enforced, and its burst: [`Rate`].
    ///
    /// On Redis at most [`Rate::most_in_one_period`] start in any period whatever the number
    /// of shards the topic's jobs are spread over: the namespace's first shard counts the
    /// starts of all of them, and a fetch in another shard is granted its starts there first
    /// (so the first shard's master must answer for such a topic's jobs to start anywhere;
    /// README "Rate limits").
    ///
    /// ```no_run
    /// # async fn f(client: dq_core::Client) -> dq_core::Result<()> {
    /// client.set_rate("charge-card", Some("100/1s".parse()?)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn set_rate(&self, topic: &str, rate: Option<Rate>) -> Result<()> {
        self.store.set_rate(&Topic::new(topic)?, rate).await
    }

    /// `topic`'s rate limit ([`Client::set_rate`]), `None` when it has none.
    pub async fn rate(&self, topic: &str) -> Result<Option<Rate>> {
        self.store.rate(&Topic::new(topic)?).await
    }

    /// Limits how many jobs of each group of `topic` run at once (`None`: the default of 1, a
    /// group's jobs one at a time in push order; see [`PushBuilder::group`](crate::PushBuilder::group)).
    /// Zero is refused ([`Error::InvalidPush`](crate::Error::InvalidPush)).
    pub async fn set_group_concurrency(&self, topic: &str, max: Option<u32>) -> Result<()> {
        if max == Some(0) {
            return Err(crate::Error::InvalidPush {
                topic: topic.to_owned(),
                reason: "group_concurrency must be at least 1 (pause the topic to run none; None goes back to 1)".into(),
            });
        }
        self.store
            .set_group_concurrency(&Topic::new(topic)?, max)
            .await
    }

    /// `topic`'s group concurrency ([`Client::set_group_concurrency`]), `None` for the default.
    pub async fn group_concurrency(&self, topic: &str) -> Result<Option<u32>> {
        self.store.group_concurrency(&Topic::new(topic)?).await
    }

    /// Limits how many jobs of each group of `topic` start per period, in all processes
    /// together, from the next fetch on (`None`: no group rate, the default): "at most 10
    /// calls a second per account". The same limit as a listener's
    /// `#[dq::listener(group_rate = "10/1s")]`, which sets it at runtime start; changeable
    /// while workers run (`dq groups TOPIC --rate 10/1s`, `--rate off`). A new rate starts
    /// afresh.
    ///
    /// Each group is counted on its own, by the rule of a topic's rate ([`Rate`]: GCRA with
    /// the store's clock, the same burst): `10/1s` starts a group's jobs 100 ms apart, and one
    /// window of one second can hold 11 of its starts ([`Rate::most_in_one_period`]; set
    /// `9/1s` for a hard limit of 10). A job whose group has used its rate does not start: it waits as a delayed
    /// job (`postponed` in its events), due when its group may start again, and keeps its
    /// group's slot while other groups go on (README "A rate per group": with a group
    /// concurrency of 1 a group's jobs keep their push order; with more, they may not).
    /// Every run counts, retries included; jobs without a group are not limited by it. A rate
    /// lifted or raised leaves the jobs already held back waiting until their due time.
    ///
    /// ```no_run
    /// # async fn f(client: dq_core::Client) -> dq_core::Result<()> {
    /// client.set_group_rate("charge", Some("10/1s".parse()?)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn set_group_rate(&self, topic: &str, rate: Option<Rate>) -> Result<()> {
        self.store.set_group_rate(&Topic::new(topic)?, rate).await
    }

    /// `topic`'s group rate ([`Client::set_group_rate`]), `None` when it has none.
    pub async fn group_rate(&self, topic: &str) -> Result<Option<Rate>> {
        self.store.group_rate(&Topic::new(topic)?).await
    }

    /// Ends a hold of `topic` now, in every process (`dq rate TOPIC --lift-hold`): a handler's
    /// `Outcome::RateLimited` held the topic, and the provider is back sooner. Its jobs start
    /// again at once, as its rate allows. True when a hold was in force.
    pub async fn lift_hold(&self, topic: &str) -> Result<bool> {
        self.store.lift_hold(&Topic::new(topic)?).await
    }

    /// Limits how many jobs of `topic` run at once in all processes together (`None`: no
    /// limit, the default), from the next fetch on: "at most 10 calls in flight to the
    /// provider, whatever the number of workers". The same limit as a listener's
    /// `#[dq::listener(global_concurrency = 10)]`, which sets it at runtime start; changeable
    /// while workers run (`dq global-concurrency TOPIC 10`). Each process's own `concurrency`
    /// still holds within it.
    ///
    /// Counted by leases in the fetch script: a job counts from its fetch until its run's end
    /// is written (ack, retry, dead letter), and the slot of a worker killed mid-run comes back
    /// when its lease is reclaimed (within a lease of the kill and a few ms where the processes
    /// share their lease length: README "Leases"): never a leaked permit. As with any job, a
    /// worker cut off from Redis past its lease keeps running its handler while the job runs
    /// again elsewhere, one more in that window. A worker at the
    /// limit fetches again when one of the topic's jobs ends in its process, or after 10 ms
    /// (up to 160 ms while the topic stays full) for the ends in other processes. On Redis
    /// over several shards (a cluster's 16) the first shard counts the slots of all, exact
    /// whichever shards hold the jobs; its master must answer for the topic's jobs to start
    /// (README, "Global concurrency"). Zero is refused
    /// ([`Error::InvalidPush`](crate::Error::InvalidPush)).
    ///
    /// ```no_run
    /// # async fn f(client: dq_core::Client) -> dq_core::Result<()> {
    /// client.set_global_concurrency("charge-card", Some(10)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn set_global_concurrency(&self, topic: &str, max: Option<u32>) -> Result<()> {
        if max == Some(0) {
            return Err(crate::Error::InvalidPush {
                topic: topic.to_owned(),
                reason: "global_concurrency must be at least 1 (pause the topic to run none; None lifts the limit)".into(),
            });
        }
        self.store
            .set_global_concurrency(&Topic::new(topic)?, max)
            .await
    }

    /// `topic`'s global concurrency ([`Client::set_global_concurrency`]), `None` when it has
    /// none.
    pub async fn global_concurrency(&self, topic: &str) -> Result<Option<u32>> {
        self.store.global_concurrency(&Topic::new(topic)?).await
    }

    /// The worker processes heard from in the last minute.
    pub async fn workers(&self) -> Result<Vec<WorkerInfo>> {
        self.store.workers().await
    }
}

/// The ids, each checked.
fn job_ids(ids: &[&str]) -> Result<Vec<JobId>> {
    ids.iter().map(|i| JobId::new(*i)).collect()
}
