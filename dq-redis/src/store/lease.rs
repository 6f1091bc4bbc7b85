//! The workers' side of a job's life: promote, fetch, ack, retry and postpone, dead-letter,
//! release, progress, extend, reclaim, and the waits for ready jobs and new due times.

use std::time::Duration;

use async_trait::async_trait;
use redis::{Script, Value};

use super::reply::{parse_member, Count, EndReply, Promotion, Reclamation, Released};
use super::slots::FetchSlots;
use super::waiters::RedisWakeListener;
use super::{micros, RedisStore};
use crate::keys::member;
use crate::subscription::ShardSubscription;
use dq_core::store::policy::{batch_limit, promote_limit};
use dq_core::store::{
    Fetcher, Leases, ReadyWaiter, Retention, Sharded, Succeeded, WakeListener, MAX_BATCH,
};
use dq_core::store::{RunEnd, RunEnded};
use dq_core::Result;
use dq_core::{Acked, Fetched, LeaseRef, Promoted, Reclaimed};
use dq_core::{Rate, Topic};

impl RedisStore {
    /// A failed run to retry (`counted`) or a postponed one, after `delay`.
    async fn retry_job(
        &self,
        lease: &LeaseRef,
        delay: Duration,
        error: &str,
        counted: bool,
    ) -> Result<RunEnded> {
        dq_core::store::check_retry_delay(lease, delay)?;
        let k = self.keys_of(&lease.topic, &lease.id);
        let mut inv = self.scripts().retry.prepare_invoke();
        inv.key(k.jobs())
            .key(k.inflight())
            .key(k.delayed())
            .key(k.counts())
            .key(k.leases())
            .key(k.ready(&lease.topic))
            .key(k.ready_gen(&lease.topic))
            .key(k.cancels())
            .key(k.progress())
            .key(k.events())
            .key(k.events_stream(&lease.topic))
            .key(k.ranked(&lease.topic))
            .arg(k.prefix())
            .arg(member(&lease.topic, &lease.id))
            .arg(lease.token)
            .arg(micros(delay))
            .arg(error)
            .arg(if counted { "1" } else { "0" });
        let how = if counted { "failed" } else { "was postponed" };
        let end = self
            .unless_asked(lease, self.call("retry", &mut inv).await?, how)
            .await?;
        self.free_slots([lease]);
        Ok(end)
    }

    /// The answer of a script that ends a run without success: what it applied, or, when a
    /// cancel was requested against the run's lease (it left the job alone), whether the job
    /// was then deleted as cancelled.
    async fn unless_asked(&self, lease: &LeaseRef, end: EndReply, how: &str) -> Result<RunEnded> {
        Ok(match end {
            EndReply::Applied(true) => RunEnded::Written,
            EndReply::Applied(false) => RunEnded::NotHeld,
            EndReply::CancelRequested => {
                let deleted = self.delete_asked(std::slice::from_ref(lease), how).await?;
                if deleted > 0 {
                    RunEnded::Cancelled
                } else {
                    RunEnded::NotHeld
                }
            }
        })
    }

    /// A failed run to dead-letter with `error`.
    async fn dead_letter_job(&self, lease: &LeaseRef, error: &str) -> Result<RunEnded> {
        let k = self.keys_of(&lease.topic, &lease.id);
        let mut inv = self.scripts().dead.prepare_invoke();
        inv.key(k.jobs())
            .key(k.inflight())
            .key(k.counts())
            .key(k.dead(&lease.topic))
            .key(k.leases())
            .key(k.cancels())
            .key(k.progress())
            .key(k.events())
            .key(k.events_stream(&lease.topic));
        inv.key(self.named_keys(k, [&lease.topic]));
        inv.key(self.leased_group_queues([lease]));
        inv.arg(member(&lease.topic, &lease.id))
            .arg(lease.token)
            .arg(error);
        let end = self.call("dead_letter", &mut inv).await?;
        let end = self.unless_asked(lease, end, "failed for good").await?;
        self.free_slots([lease]);
        Ok(end)
    }

    /// One fetch.lua call; `grant`: the starts `rate_grant` counted for it in the first shard;
    /// `slots`: the slots of its global concurrency it may use (`take_slots`).
    async fn fetch_call(
        &self,
        shard: u16,
        topic: &Topic,
        asked: usize,
        ttl: Duration,
        fetcher: &Fetcher,
        (grant, slots): (Option<&RateGrant>, Option<&FetchSlots>),
    ) -> Result<Vec<Value>> {
        let k = self.keys(shard);
        let recorded = !fetcher.consumer.is_empty();
        let lost: Vec<String> = fetcher.lost.iter().map(u64::to_string).collect();
        let mut inv = self.scripts().fetch.prepare_invoke();
        inv.key(k.jobs())
            .key(k.inflight())
            .key(k.ready(topic))
            .key(k.counts())
            .key(k.paused())
            .key(k.leases())
            .key(k.ready_gen(topic))
            .key(k.delayed())
            .key(k.fetched(&fetcher.consumer))
            .key(k.cancels())
            .key(k.events())
            .key(k.events_stream(topic))
            .key(k.limits())
            .key(k.ranked(topic))
            .key(k.dead(topic))
            .key(k.done(topic))
            .key(k.group_tat(topic))
            .arg(topic.as_str())
            .arg(asked)
            .arg(micros(ttl))
            .arg(if recorded {
                fetcher.nonce.to_string()
            } else {
                String::new()
            })
            .arg(lost.join(","))
            .arg(grant.map(|g| g.granted.to_string()).unwrap_or_default())
            .arg(grant.map_or(0, |g| g.wait_us))
            .arg(slots.map(|s| s.total().to_string()).unwrap_or_default());
        self.call("fetch", &mut inv).await
    }

    /// Whether `topic`'s limit `home` is counted in the first shard for all, as this store
    /// last found.
    fn at_home(&self, home: Home, topic: &Topic) -> bool {
        let at_home = self.at_home.lock().unwrap_or_else(|p| p.into_inner());
        at_home.contains(&(home, topic.clone()))
    }

    /// Whether this store's last fetch of `topic` in `shard` left no ready entry there (for a
    /// rate counted in the first shard).
    fn ran_dry(&self, shard: u16, topic: &Topic) -> bool {
        let dry = self.ran_dry.lock().unwrap_or_else(|p| p.into_inner());
        dry.contains(&(shard, topic.clone()))
    }

    fn note_ran_dry(&self, shard: u16, topic: &Topic, yes: bool) {
        let mut dry = self.ran_dry.lock().unwrap_or_else(|p| p.into_inner());
        if yes {
            dry.insert((shard, topic.clone()));
        } else {
            dry.remove(&(shard, topic.clone()));
        }
    }

    pub(super) fn note_at_home(&self, home: Home, topic: &Topic, yes: bool) {
        let mut at_home = self.at_home.lock().unwrap_or_else(|p| p.into_inner());
        if yes {
            at_home.insert((home, topic.clone()));
        } else {
            at_home.remove(&(home, topic.clone()));
        }
    }

    /// Up to `asked` starts of `topic` counted against its rate in the first shard, for a
    /// fetch in another. A topic without a rate there (it was lifted) gets them all.
    async fn rate_grant(&self, topic: &Topic, asked: usize) -> Result<RateGrant> {
        let name = self.grants.next();
        let mut inv = self.scripts().rate_grant.prepare_invoke();
        inv.key(self.keys(0).limits())
            .arg(topic.as_str())
            .arg(asked)
            .arg(0)
            .arg(&name);
        let reply = self
            .call("count a fetch's starts against its topic's rate", &mut inv)
            .await;
        Home::Rate.count_call(topic, "take", if reply.is_ok() { "ok" } else { "failed" });
        let (granted, tat, wait_us): (i64, String, u64) = reply?;
        let Ok(granted) = u64::try_from(granted) else {
            self.note_at_home(Home::Rate, topic, false);
            return Ok(RateGrant {
                granted: asked as u64,
                tat: String::new(),
                name,
                wait_us: 0,
            });
        };
        Ok(RateGrant {
            granted,
            tat,
            name,
            wait_us,
        })
    }

    /// [`rate_grant`](Self::rate_grant), or, when the first shard does not answer, a grant of
    /// none and the error: the fetch then starts nothing new but still takes back the jobs of
    /// this consumer's lost fetches (their handlers never started: no attempt may be charged
    /// for them while the first shard is away), and `fetch_for` returns the error when there
    /// were none.
    async fn rate_grant_or_none(
        &self,
        topic: &Topic,
        asked: usize,
    ) -> (RateGrant, Option<dq_core::Error>) {
        match self.rate_grant(topic, asked).await {
            Ok(g) => (g, None),
            Err(e) => {
                let none = RateGrant {
                    granted: 0,
                    tat: String::new(),
                    name: String::new(),
                    wait_us: 0,
                };
                (none, Some(e))
            }
        }
    }

    /// Gives back `unused` starts of `grant`: applied while the topic's time is the one it
    /// wrote, and by it (rate_grant.lua; dropped, and counted `late`, once a later start moved
    /// the time on; applied once when the call is delivered twice).
    async fn rate_give_back(&self, topic: &Topic, unused: u64, grant: &RateGrant) -> Result<()> {
        let mut inv = self.scripts().rate_grant.prepare_invoke();
        inv.key(self.keys(0).limits())
            .arg(topic.as_str())
            .arg("-")
            .arg(unused)
            .arg(&grant.tat)
            .arg(&grant.name);
        let reply: Result<(i64, String, u64)> = self
            .call("give back a fetch's unused starts", &mut inv)
            .await;
        let outcome = match &reply {
            Ok((0, _, _)) => "late",
            Ok(_) => "ok",
            Err(_) => "failed",
        };
        Home::Rate.count_call(topic, "give_back", outcome);
        reply.map(|_| ())
    }

    fn lease_invocation<'s>(
        script: &'s Script,
        keys: &[String],
        head: &[String],
        chunk: &[&LeaseRef],
    ) -> redis::ScriptInvocation<'s> {
        let mut inv = script.prepare_invoke();
        for k in keys {
            inv.key(k);
        }
        for a in head {
            inv.arg(a);
        }
        for l in chunk {
            inv.arg(member(&l.topic, &l.id)).arg(l.token);
        }
        inv
    }

    /// `leases` grouped by shard, in chunks of at most `MAX_BATCH`: one script call each.
    pub(super) fn lease_chunks<'a>(&self, leases: &'a [LeaseRef]) -> Vec<(u16, Vec<&'a LeaseRef>)> {
        let mut out = Vec::new();
        for (shard, group) in self.by_shard(leases) {
            for chunk in group.chunks(MAX_BATCH) {
                out.push((shard, chunk.to_vec()));
            }
        }
        out
    }

    /// Runs a script that moves a shard's jobs (promote, reclaim). A script must declare every
    /// key it touches, so it is called with the keys of the topics known here; when it finds
    /// jobs of topics it had not declared, once more with those. `invocation` makes the call
    /// for the topics to declare; `take` adds its reply to `out` and hands back the topics
    /// found undeclared (none: no second call).
    async fn declaring_topics<A, T: redis::FromRedisValue>(
        &self,
        op: &'static str,
        mut out: A,
        invocation: impl Fn(&A, &[Topic]) -> redis::ScriptInvocation<'static>,
        take: impl Fn(&mut A, T) -> Vec<Topic>,
    ) -> Result<A> {
        let mut needed: Vec<Topic> = Vec::new();
        for _ in 0..2 {
            let mut inv = invocation(&out, &self.declared_topics(&needed));
            let reply: T = self.call(op, &mut inv).await?;
            let undeclared = take(&mut out, reply);
            if undeclared.is_empty() {
                break;
            }
            self.learn(&undeclared);
            needed = undeclared;
        }
        Ok(out)
    }

    /// Puts `leases`' jobs back to the front of their ready lists; how many were, and how
    /// many were deleted as cancelled instead (their cancel requested against the lease).
    async fn release_runs(&self, leases: &[LeaseRef]) -> Result<(usize, usize)> {
        let (mut released, mut cancelled) = (0, 0);

        for (shard, chunk) in self.lease_chunks(leases) {
            let k = self.keys(shard);
            let mut keys = vec![
                k.inflight(),
                k.counts(),
                k.leases(),
                k.cancels(),
                k.jobs(),
                k.events(),
                k.progress(),
            ];
            let topics: std::collections::BTreeSet<&Topic> =
                chunk.iter().map(|l| &l.topic).collect();
            for t in topics {
                keys.push(k.ready(t));
                keys.push(k.ready_gen(t));
                keys.push(k.events_stream(t));
                keys.push(k.ranked(t));
            }
            // Their handlers have stopped: the slots are free whether or not the call comes
            // through (a release that fails leaves the jobs to the reclaimer).
            self.free_slots(chunk.iter().copied());
            let mut inv = Self::lease_invocation(
                &self.scripts().release,
                &keys,
                &[k.prefix().to_owned()],
                &chunk,
            );
            let r: Released = self.call("release", &mut inv).await?;
            released += r.released;
            let asked = named_leases(&chunk, r.asked);
            cancelled += self.delete_asked(&asked, "was released").await?;
        }
        Ok((released, cancelled))
    }
}

#[async_trait]
impl Leases for RedisStore {
    async fn promote(&self, shard: u16, limit: usize) -> Result<Promoted> {
        let k = self.keys(shard);
        self.declaring_topics(
            "promote",
            Promoted::default(),
            |out, topics| {
                let mut inv = self.scripts().promote.prepare_invoke();
                inv.key(k.delayed())
                    .key(k.counts())
                    .key(k.jobs())
                    .key(k.events());
                inv.key(self.named_keys(k, []));
                for t in topics {
                    inv.key(k.ready(t))
                        .key(k.ready_gen(t))
                        .key(k.events_stream(t))
                        .key(k.ranked(t));
                    if self.server.is_cluster() {
                        inv.key(k.topic_groups(t).to_vec());
                    }
                }
                inv.arg(k.prefix())
                    .arg(promote_limit(limit.saturating_sub(out.moved)))
                    .arg(self.far());
                inv
            },
            |out, p: Promotion| {
                out.moved += p.moved;
                out.next_due_us = p.next_due_us;
                out.now_us = p.now_us;
                self.clock.saw(p.now_us);
                out.topics.extend(p.made_ready);
                // Enough moved: no second call for the topics found undeclared.
                if out.moved >= limit {
                    Vec::new()
                } else {
                    p.undeclared
                }
            },
        )
        .await
    }

    async fn fetch(&self, shard: u16, topic: &Topic, max: usize, ttl: Duration) -> Result<Fetched> {
        self.fetch_for(shard, topic, max, ttl, &Fetcher::default())
            .await
    }

    async fn fetch_for(
        &self,
        shard: u16,
        topic: &Topic,
        max: usize,
        ttl: Duration,
        fetcher: &Fetcher,
    ) -> Result<Fetched> {
        self.learn([topic]);
        let asked = batch_limit(max);
        // A limit over several shards is counted in the first shard for all: a global
        // concurrency's slots (slots.lua; those of this store's ended runs kept a moment for
        // its next fetch: `slots`), then a rate's starts for as many (rate_grant.lua; the first
        // shard's own fetch counts them itself). What the fetch did not use is kept (slots) or
        // given back (starts) after it.
        let (mut rate, mut slots, mut unanswered) = (None, None, None);
        if self.at_home(Home::Slots, topic) {
            let (s, e) = self.take_slots(topic, asked as u64, ttl).await;
            (slots, unanswered) = (Some(s), e);
        }
        let room = slots.as_ref().map_or(asked as u64, FetchSlots::total);
        if room == 0 && fetcher.lost.is_empty() {
            // Full: nothing to start, nothing of a lost fetch to take back.
            if let Some(e) = unanswered {
                return Err(e);
            }
            let mut full = Fetched::default();
            full.at_capacity = true;
            full.now_us = self.clock.now_us();
            return Ok(full);
        }
        // A rate's starts are asked for as many as the batch may start; but for a shard whose
        // last fetch here left no ready entry, the fetch first asks the shard how
        // many it has (fetch.lua's `home` reply, nothing done): an empty shard's fetch then
        // takes no starts, and a woken one as many as it has jobs. (A grant of the whole batch
        // for one job held the rest a moment, and their give-back, dropped once a later grant
        // moved the rate's time on, lost them to the rate: helper-76, finding 7.)
        let rated_elsewhere = shard != 0 && self.at_home(Home::Rate, topic);
        let ask_first = rated_elsewhere && fetcher.lost.is_empty() && self.ran_dry(shard, topic);
        if rated_elsewhere && !ask_first {
            let (g, e) = self.rate_grant_or_none(topic, room as usize).await;
            rate = Some(g);
            unanswered = unanswered.or(e);
        }
        let mut reply = self
            .fetch_call(
                shard,
                topic,
                asked,
                ttl,
                fetcher,
                (rate.as_ref(), slots.as_ref()),
            )
            .await;
        if let Some((rate_home, slots_home, ready)) = reply.as_deref().ok().and_then(home_reply) {
            self.note_at_home(Home::Rate, topic, rate_home);
            self.note_at_home(Home::Slots, topic, slots_home);
            if ask_first && rate_home && ready == Some(0) {
                // Nothing ready: no starts taken, no fetch. The slots taken, if any, are
                // kept for the next fetch.
                self.keep_unused_slots(topic, slots.as_ref(), ttl).await;
                if let Some(e) = unanswered {
                    return Err(e);
                }
                let mut none = Fetched::default();
                none.now_us = self.clock.now_us();
                return Ok(none);
            }
            if slots_home && slots.is_none() {
                let (s, e) = self.take_slots(topic, asked as u64, ttl).await;
                slots = Some(s);
                unanswered = unanswered.or(e);
            }
            let mut room = slots.as_ref().map_or(asked as u64, FetchSlots::total);
            if ask_first {
                room = room.min(ready.unwrap_or(room).max(1));
            }
            if rate_home && rate.is_none() && shard != 0 {
                let (g, e) = self.rate_grant_or_none(topic, room as usize).await;
                rate = Some(g);
                unanswered = unanswered.or(e);
            }
            reply = self
                .fetch_call(
                    shard,
                    topic,
                    asked,
                    ttl,
                    fetcher,
                    (rate.as_ref(), slots.as_ref()),
                )
                .await;
        }
        let reply = match reply {
            Ok(reply) => reply,
            Err(e) => {
                // The fetch may have leased jobs, to no handler: a later fetch of this
                // consumer takes them back under its own slots, so these are kept.
                self.keep_unused_slots(topic, slots.as_ref(), ttl).await;
                return Err(e);
            }
        };
        let members = leased_members(&reply);
        let token = reply_token(&reply);
        if let Some(e) = unanswered.filter(|_| members.is_empty()) {
            self.keep_unused_slots(topic, slots.as_ref(), ttl).await;
            return Err(e);
        }
        if let Some(g) = rate.as_ref().filter(|g| !g.tat.is_empty()) {
            let unused = g.granted.saturating_sub(members.len() as u64);
            if unused > 0 {
                // Best effort: the jobs are leased; a give-back that does not come only
                // leaves those starts unused.
                if let Err(e) = self.rate_give_back(topic, unused, g).await {
                    tracing::warn!(topic = %topic, unused, error = %e, "could not give back a fetch's unused starts of the topic's rate to the namespace's first shard; they are lost to the rate for this period");
                }
            }
        }
        let ready_left = reply_ready_left(&reply);
        let fetched = match self.read_fetched(shard, topic, reply).await {
            Ok(fetched) => fetched,
            Err(e) => {
                // As above: no handler starts, a later fetch takes them back.
                self.keep_unused_slots(topic, slots.as_ref(), ttl).await;
                return Err(e);
            }
        };
        if rate.is_some() || ask_first {
            // No ready job left in the shard: the next fetch asks it first. (`rate`: the
            // starts asked, here or once the shard said the first shard counts them; none
            // after asking first: the rate was lifted.)
            self.note_ran_dry(shard, topic, rate.is_some() && ready_left == Some(0));
        }
        // The jobs handed over hold the slots (a malformed job was dead-lettered: its slot is
        // kept for the next fetch); recorded once they are.
        if let Some(s) = &slots {
            let ids: Vec<String> = fetched
                .jobs
                .iter()
                .map(|j| j.lease.id.as_str().to_owned())
                .collect();
            let at = token.map(|t| (shard, t));
            self.settle_slots(topic, s, at, ids, ttl).await;
        }
        Ok(fetched)
    }

    async fn ack_succeeded(&self, done: &[Succeeded]) -> Result<Acked> {
        self.ack_jobs(done).await
    }

    async fn retry(&self, lease: &LeaseRef, delay: Duration, error: &str) -> Result<bool> {
        let end = self.retry_job(lease, delay, error, true).await?;
        Ok(end != RunEnded::NotHeld)
    }

    async fn postpone(&self, lease: &LeaseRef, delay: Duration) -> Result<bool> {
        let end = self.retry_job(lease, delay, "", false).await?;
        Ok(end != RunEnded::NotHeld)
    }

    async fn dead_letter(&self, lease: &LeaseRef, error: &str) -> Result<bool> {
        Ok(self.dead_letter_job(lease, error).await? != RunEnded::NotHeld)
    }

    async fn end_run(&self, lease: &LeaseRef, end: RunEnd<'_>) -> Result<RunEnded> {
        match end {
            RunEnd::Retry { delay, error } => self.retry_job(lease, delay, error, true).await,
            RunEnd::Postpone { delay } => self.retry_job(lease, delay, "", false).await,
            RunEnd::DeadLetter { error } => self.dead_letter_job(lease, error).await,
            RunEnd::Release => {
                let (released, cancelled) = self.release_runs(std::slice::from_ref(lease)).await?;
                Ok(RunEnded::of_release(released, cancelled))
            }
        }
    }

    async fn release(&self, leases: &[LeaseRef]) -> Result<usize> {
        let (released, cancelled) = self.release_runs(leases).await?;
        Ok(released + cancelled)
    }

    async fn progress(&self, lease: &LeaseRef, value: &[u8]) -> Result<bool> {
        self.record_progress(lease, value).await
    }

    async fn extend(&self, leases: &[LeaseRef], lease: Duration) -> Result<Vec<LeaseRef>> {
        let (mut lost, mut extended) = (Vec::new(), Vec::new());
        for (shard, chunk) in self.lease_chunks(leases) {
            let k = self.keys(shard);
            let mut inv = Self::lease_invocation(
                &self.scripts().extend,
                &[k.inflight(), k.leases()],
                &[micros(lease).to_string()],
                &chunk,
            );
            let lost_members: Vec<String> = self.call("extend", &mut inv).await?;
            extended.extend(
                chunk
                    .iter()
                    .copied()
                    .filter(|l| !lost_members.contains(&member(&l.topic, &l.id))),
            );
            lost.extend(named_leases(&chunk, lost_members));
        }
        // The first shard's count after every shard's leases (a slow first shard delays no
        // other shard's renewal, and its calls are bounded): a lease lost is a run this worker
        // no longer holds, whose slot goes back; the others' grants are renewed.
        self.free_slots(&lost);
        self.renew_slots(&extended, lease).await;
        Ok(lost)
    }

    async fn cancel_requests(&self, leases: &[LeaseRef]) -> Result<Vec<LeaseRef>> {
        self.read_cancel_requests(leases).await
    }

    fn run_returned(&self, lease: &LeaseRef) {
        self.free_slots([lease]);
    }

    async fn give_back_kept(&self) {
        self.give_back_kept_slots().await;
    }

    async fn cancel_running(&self, lease: &LeaseRef) -> Result<bool> {
        let deleted = self.delete_cancelled_run(lease).await?;
        self.free_slots([lease]);
        Ok(deleted)
    }

    async fn reclaim(&self, shard: u16, limit: usize) -> Result<Reclaimed> {
        let k = self.keys(shard);
        let (mut out, asked) = self
            .declaring_topics(
                "reclaim",
                (Reclaimed::default(), Vec::new()),
                |_, topics| {
                    let mut inv = self.scripts().reclaim.prepare_invoke();
                    inv.key(k.jobs())
                        .key(k.inflight())
                        .key(k.counts())
                        .key(k.leases())
                        .key(k.attempts())
                        .key(k.cancels())
                        .key(k.events())
                        .key(k.progress());
                    inv.key(self.named_keys(k, []));
                    for t in topics {
                        inv.key(k.ready(t))
                            .key(k.dead(t))
                            .key(k.ready_gen(t))
                            .key(k.events_stream(t))
                            .key(k.ranked(t));
                        if self.server.is_cluster() {
                            inv.key(k.topic_groups(t).to_vec());
                        }
                    }
                    inv.arg(k.prefix()).arg(batch_limit(limit));
                    inv
                },
                |(out, asked), r: Reclamation| {
                    out.requeued += r.requeued;
                    out.dead += r.dead;
                    out.next_expiry = r.next_expiry;
                    asked.extend(r.asked);
                    r.undeclared
                },
            )
            .await?;
        // The jobs whose worker died after their cancel was requested.
        let asked: Vec<LeaseRef> = asked
            .into_iter()
            .filter_map(|(m, token)| {
                let (topic, id) = parse_member(&m)?;
                Some(LeaseRef {
                    topic,
                    id,
                    token,
                    shard,
                })
            })
            .collect();
        out.cancelled += self.delete_asked(&asked, "lost its worker").await?;
        Ok(out)
    }

    async fn set_attempt_limit(&self, topic: &Topic, max_attempts: Option<u32>) -> Result<()> {
        for k in &self.shards {
            let cmd = match max_attempts {
                Some(max) => redis::cmd("HSET")
                    .arg(k.attempts())
                    .arg(topic.as_str())
                    .arg(max.max(1))
                    .to_owned(),
                None => redis::cmd("HDEL")
                    .arg(k.attempts())
                    .arg(topic.as_str())
                    .to_owned(),
            };
            self.simple("record the listeners' attempt limit", &cmd)
                .await?;
        }
        Ok(())
    }

    async fn set_retention(&self, topic: &Topic, retention: Option<Retention>) -> Result<()> {
        self.record_retention(topic, retention).await
    }

    async fn set_events(&self, topic: &Topic, cap: Option<u64>) -> Result<()> {
        self.record_events(topic, cap).await
    }

    async fn max_pending(&self, topic: &Topic) -> Result<Option<u64>> {
        self.read_limit(topic, "max_pending", "<share>:<bound>", |raw| {
            raw.split_once(':')
                .and_then(|(_, bound)| bound.parse().ok())
        })
        .await
    }

    async fn set_max_pending(&self, topic: &Topic, max: Option<u64>) -> Result<()> {
        let field = format!("{topic}:max_pending");
        let shards = self.shards.len() as u64;
        if let Some(max) = max.filter(|max| *max < shards) {
            return Err(dq_core::Error::Config {
                key: "max_pending",
                value: max.to_string(),
                reason: format!(
                    "topic {topic:?}: the namespace has {shards} shards, each holding a share of the bound of at least 1 (a share of 0 would refuse every push to its shard), so {shards} jobs could be pending; give a bound of at least {shards}, or use a namespace of fewer shards (DQ_SHARDS) for this topic"
                ),
            });
        }
        for (i, k) in (0u64..).zip(&self.shards) {
            let cmd = match max {
                Some(max) => redis::cmd("HSET")
                    .arg(k.limits())
                    .arg(&field)
                    .arg(format!("{}:{max}", share(max, shards, i)))
                    .to_owned(),
                None => redis::cmd("HDEL").arg(k.limits()).arg(&field).to_owned(),
            };
            self.simple("record a topic's max_pending", &cmd).await?;
        }
        Ok(())
    }

    async fn rate(&self, topic: &Topic) -> Result<Option<Rate>> {
        self.read_limit(
            topic,
            "rate",
            "<interval>:<tolerance>:<count>/<period>",
            |raw| raw.splitn(3, ':').nth(2).and_then(|r| r.parse().ok()),
        )
        .await
    }

    async fn set_rate(&self, topic: &Topic, rate: Option<Rate>) -> Result<()> {
        // Counted in the first shard for all (fetch_for). A new rate starts afresh (a hold
        // stays).
        self.record_rate(topic, "rate", rate, true, |k| {
            redis::cmd("HDEL")
                .arg(k.limits())
                .arg(format!("{topic}:tat"))
                .arg(format!("{topic}:tat_by"))
                .to_owned()
        })
        .await
    }

    async fn set_group_concurrency(&self, topic: &Topic, max: Option<u32>) -> Result<()> {
        // In every shard, though a grouped job lives in a namespace of one (produce.rs): the
        // limit reads the same wherever it is asked.
        let limit = max.map(|m| m.max(1).to_string()).unwrap_or_default();
        for shard in 0..self.shards() {
            let k = self.keys(shard);
            let mut inv = self.scripts().group_concurrency.prepare_invoke();
            inv.key(k.limits()).key(k.counts()).key(k.jobs());
            inv.key(self.named_keys(k, [topic]));
            inv.arg(k.prefix()).arg(topic.as_str()).arg(&limit);
            self.call::<Count>("set a topic's group concurrency", &mut inv)
                .await?;
        }
        Ok(())
    }

    async fn set_group_rate(&self, topic: &Topic, rate: Option<Rate>) -> Result<()> {
        // Every shard holds the whole rate: every job of a group lives in its group's shard
        // (produce.rs), and the rate reads the same wherever it is asked. A new rate starts
        // afresh for every group.
        self.record_rate(topic, "group_rate", rate, false, |k| {
            redis::cmd("DEL").arg(k.group_tat(topic)).to_owned()
        })
        .await
    }

    async fn group_rate(&self, topic: &Topic) -> Result<Option<Rate>> {
        self.read_limit(
            topic,
            "group_rate",
            "<interval>:<tolerance>:<count>/<period>",
            |raw| raw.splitn(3, ':').nth(2).and_then(|r| r.parse().ok()),
        )
        .await
    }

    async fn group_concurrency(&self, topic: &Topic) -> Result<Option<u32>> {
        self.read_limit(topic, "group_concurrency", "<limit>", |raw| {
            raw.parse().ok()
        })
        .await
    }

    async fn global_concurrency(&self, topic: &Topic) -> Result<Option<u32>> {
        self.read_limit(topic, "running", "<limit>:<limit> or home:<limit>", |raw| {
            raw.split_once(':')
                .and_then(|(_, limit)| limit.parse().ok())
        })
        .await
    }

    async fn set_global_concurrency(&self, topic: &Topic, max: Option<u32>) -> Result<()> {
        // One shard counts its inflight jobs (fetch.lua); several count slots in the first
        // for all (slots.lua): `home:` in every shard. The slots held are kept across a
        // change, a lift included (they are running jobs, whose grants run out as they end).
        let field = format!("{topic}:running");
        let several = self.shards.len() > 1;
        for k in &self.shards {
            let cmd = match max {
                Some(max) if several => redis::cmd("HSET")
                    .arg(k.limits())
                    .arg(&field)
                    .arg(format!("home:{max}"))
                    .to_owned(),
                Some(max) => redis::cmd("HSET")
                    .arg(k.limits())
                    .arg(&field)
                    .arg(format!("{max}:{max}"))
                    .to_owned(),
                None => redis::cmd("HDEL").arg(k.limits()).arg(&field).to_owned(),
            };
            self.simple("record a topic's global concurrency", &cmd)
                .await?;
        }
        Ok(())
    }

    async fn hold_ends_us(&self, topic: &Topic) -> Result<Option<u64>> {
        let now = self.time_us().await?;
        let mut latest: Option<u64> = None;
        for k in &self.shards {
            let cmd = redis::cmd("HGET")
                .arg(k.limits())
                .arg(format!("{topic}:hold"))
                .to_owned();
            let raw: Option<String> = self.query("read a topic's hold", &cmd).await?;
            let end = raw
                .and_then(|r| r.parse::<u64>().ok())
                .filter(|end| *end > now);
            latest = latest.max(end);
        }
        Ok(latest)
    }

    async fn hold(&self, topic: &Topic, duration: Duration) -> Result<()> {
        for shard in 0..self.shards() {
            let mut inv = self.scripts().hold.prepare_invoke();
            inv.key(self.keys(shard).limits())
                .arg(topic.as_str())
                .arg(micros(duration));
            let _: Value = self.call("hold a topic's starts", &mut inv).await?;
        }
        Ok(())
    }

    async fn lift_hold(&self, topic: &Topic) -> Result<bool> {
        let mut lifted = false;
        for shard in 0..self.shards() {
            let k = self.keys(shard);
            let mut inv = self.scripts().lift_hold.prepare_invoke();
            inv.key(k.limits())
                .arg(topic.as_str())
                .arg(k.wake())
                .arg(format!("{}{topic}", super::waiters::RESUMED));
            lifted |= self.call::<Count>("lift a topic's hold", &mut inv).await?.0 > 0;
        }
        Ok(lifted)
    }

    fn ready_waiter(&self, shard: u16, topic: &Topic) -> Box<dyn ReadyWaiter> {
        // The bells of the `ready` channel on one server too: a job can become ready in the
        // topic's list or in its ranked set (lib.lua's ready lanes), and no blocking command
        // waits on both.
        self.hub
            .waiter(&self.server, &self.conn, &self.shards, shard, topic)
    }

    async fn wake_listener(&self) -> Result<Box<dyn WakeListener>> {
        let channels = self
            .shards
            .iter()
            .zip(0u16..)
            .map(|(k, shard)| (k.wake(), shard))
            .collect();
        let subscription =
            ShardSubscription::open("wake subscription", &self.server, &self.conn, channels)
                .await?;
        Ok(Box::new(RedisWakeListener::new(
            subscription,
            self.shards(),
        )))
    }
}

/// The leases of `chunk` that a script's reply names by member, in the reply's order.
fn named_leases(chunk: &[&LeaseRef], members: Vec<String>) -> Vec<LeaseRef> {
    members
        .into_iter()
        .filter_map(|m| chunk.iter().find(|l| member(&l.topic, &l.id) == m))
        .map(|l| (*l).clone())
        .collect()
}

impl RedisStore {
    /// The `limits` field `<topic>:<name>` as shard 0 holds it (every shard holds the
    /// setting, with its own share of a bound, and shard 0 the whole of a rate), read by `parse`; a value that does not read is
    /// `Error::Malformed`, naming the key, the field and the `form` it should have.
    async fn read_limit<T>(
        &self,
        topic: &Topic,
        name: &str,
        form: &str,
        parse: impl Fn(&str) -> Option<T>,
    ) -> Result<Option<T>> {
        let key = self.keys(0).limits();
        let field = format!("{topic}:{name}");
        let cmd = redis::cmd("HGET").arg(&key).arg(&field).to_owned();
        let raw: Option<String> = self.query("read a topic's limits", &cmd).await?;
        let Some(raw) = raw else { return Ok(None) };
        parse(&raw)
            .map(Some)
            .ok_or_else(|| dq_core::Error::Malformed {
                location: format!("{key} field {field}"),
                reason: format!("{raw:?} is not {form}"),
            })
    }

    /// Records a rate in the `limits` field `<topic>:<name>` of every shard, as
    /// `<interval>:<tolerance>:<rate>` (us; `None`: removed), the first shard first; with
    /// `at_home`, the shards after the first hold `home:0:<rate>`: the first counts the rate
    /// for all of them (rate_grant.lua). The same rate declared again (every runtime start
    /// does) keeps where the limit stands: starting afresh would let one more burst out at each
    /// restart. A change runs `reset` in the shard (the limit's times are forgotten).
    async fn record_rate(
        &self,
        topic: &Topic,
        name: &str,
        rate: Option<Rate>,
        at_home: bool,
        reset: impl Fn(&crate::keys::ShardKeys) -> redis::Cmd,
    ) -> Result<()> {
        let field = format!("{topic}:{name}");
        for (i, k) in self.shards.iter().enumerate() {
            let spec = rate.map(|r| {
                if at_home && i > 0 {
                    return format!("home:0:{r}");
                }
                let (interval, tolerance) = r.gcra_us();
                format!("{interval}:{tolerance}:{r}")
            });
            let current = redis::cmd("HGET").arg(k.limits()).arg(&field).to_owned();
            let current: Option<String> = self.query("read a topic's rate", &current).await?;
            if current == spec {
                continue;
            }
            let cmd = match &spec {
                Some(spec) => redis::cmd("HSET")
                    .arg(k.limits())
                    .arg(&field)
                    .arg(spec)
                    .to_owned(),
                None => redis::cmd("HDEL").arg(k.limits()).arg(&field).to_owned(),
            };
            self.simple("record a topic's rate", &cmd).await?;
            self.simple("record a topic's rate", &reset(k)).await?;
        }
        Ok(())
    }
}

/// Starts of a topic that `rate_grant.lua` counted against its rate in the first shard of the
/// namespace, for one fetch in another shard.
struct RateGrant {
    granted: u64,
    /// The topic's time the grant wrote (empty: nothing to give back).
    tat: String,
    /// The grant's name, written beside the time (a give-back applies once, to this grant's
    /// time only).
    name: String,
    /// How long until the next start, when fewer than asked were granted (0: not cut).
    wait_us: u64,
}

/// The ids of the jobs a fetch.lua reply leased, those taken back from a lost fetch included:
/// they use the grants too (fetch.lua).
fn leased_members(reply: &[Value]) -> Vec<String> {
    if reply_token(reply).is_none() {
        return Vec::new();
    }
    reply
        .get(7..)
        .unwrap_or_default()
        .iter()
        .step_by(2)
        .filter_map(|id| match id {
            Value::BulkString(id) => Some(String::from_utf8_lossy(id).into_owned()),
            _ => None,
        })
        .collect()
}

/// The lease token of a fetch.lua reply that leased jobs (its second item).
fn reply_token(reply: &[Value]) -> Option<u64> {
    match reply.get(1)? {
        Value::Int(t) => u64::try_from(*t).ok(),
        Value::BulkString(t) => std::str::from_utf8(t).ok()?.parse().ok(),
        _ => None,
    }
}

/// The entries a fetch.lua reply says are left in the topic's ready lanes (its seventh item;
/// none in a `paused` or `home` reply).
fn reply_ready_left(reply: &[Value]) -> Option<u64> {
    match reply.first() {
        Some(Value::BulkString(b)) if b == b"paused" || b == b"home" => None,
        _ => count_at(reply, 6),
    }
}

/// The count at item `i` of a fetch.lua reply (none when it is not a count).
fn count_at(reply: &[Value], i: usize) -> Option<u64> {
    match reply.get(i) {
        Some(Value::Int(n)) => u64::try_from(*n).ok(),
        _ => None,
    }
}

/// fetch.lua's `{'home', rate, slots, ready}`: which of the topic's limits the first shard
/// counts for all, when the call brought no grant of one of them, and how many entries the
/// shard's ready lanes of the topic hold.
fn home_reply(reply: &[Value]) -> Option<(bool, bool, Option<u64>)> {
    let flag = |i: usize| matches!(reply.get(i), Some(Value::BulkString(b)) if b == b"1");
    match reply.first() {
        Some(Value::BulkString(b)) if b == b"home" => Some((flag(1), flag(2), count_at(reply, 3))),
        _ => None,
    }
}

/// The limits of a topic the first shard of a namespace of several may count for all.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Home {
    /// Its rate (rate_grant.lua).
    Rate,
    /// Its global concurrency (slots.lua).
    Slots,
}

impl Home {
    /// Its name in metrics: the limit's own.
    fn limit(self) -> &'static str {
        match self {
            Home::Rate => "rate",
            Home::Slots => "global_concurrency",
        }
    }

    /// Counts a call to the namespace's first shard for `topic`'s limit
    /// ([`metric::FIRST_SHARD_CALLS`](dq_core::metric::FIRST_SHARD_CALLS)): `call` is `take`,
    /// `give_back`, `free` or `renew`, `outcome` `ok`, `failed` or `late`.
    pub(super) fn count_call(self, topic: &Topic, call: &'static str, outcome: &'static str) {
        metrics::counter!(dq_core::metric::FIRST_SHARD_CALLS,
            "topic" => topic.as_str().to_owned(),
            "limit" => self.limit(),
            "call" => call,
            "outcome" => outcome)
        .increment(1);
    }
}

/// Shard `i`'s share of a limit of `max` over `shards` shards (a global concurrency, a
/// `max_pending`): the shares add up to `max` (the first `max % shards` shards hold one more).
/// `max` is at least the shard count (`set_global_concurrency` and `set_max_pending` refuse
/// less: a share of 0 would never run, or never take, the shard's jobs), so each share is at
/// least 1.
fn share(max: u64, shards: u64, i: u64) -> u64 {
    let shards = shards.max(1);
    (max / shards + u64::from(i < max % shards)).max(1)
}

#[cfg(test)]
mod tests {
    use super::share;

    #[test]
    fn the_shares_of_a_limit_add_up_to_it_each_at_least_one() {
        let shares = |max, shards| {
            (0..shards)
                .map(|i| share(max, shards, i))
                .collect::<Vec<_>>()
        };
        assert_eq!(shares(10, 1), [10]);
        assert_eq!(shares(10, 3), [4, 3, 3]);
        assert_eq!(shares(256, 16).iter().sum::<u64>(), 256);
        assert_eq!(shares(4, 4), [1, 1, 1, 1]);
    }
}
