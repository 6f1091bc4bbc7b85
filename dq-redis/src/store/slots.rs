//! A topic's global concurrency over several shards, as this store holds it: the grants of
//! slots that the namespace's first shard counts for all shards (`slots.lua`), the jobs running
//! here under each, and the slots of ended runs kept a moment for this store's next fetch of
//! the topic.
//!
//! Why keep them: a busy worker's consumers fetch again as soon as its handlers return and
//! its acks are sent. A slot given back to the first shard at each end and asked for again at
//! each fetch cost two calls there per fetch (on a 3-master cluster, as many calls as the
//! fetches and acks together). A slot kept serves that next fetch with no call; one not taken
//! goes back [`KEPT_FOR`] to twice that after (a task of the store looks every `KEPT_FOR`), and
//! a shutdown gives back what is kept at once.
//!
//! What bounds the keeping, so that the limit holds and other processes get their turn:
//! - a grant's slots serve fetches for a second after it was taken only, a twelfth of a lease
//!   when that is shorter (its time in the first shard runs out a lease after its last
//!   renewal, and the jobs that take them are renewed every third of a lease, each renewal
//!   taking up to a quarter more: see [`serves_for`]); after that, its slots go back as its
//!   jobs end, for whichever process asks first, and new ones are asked for under the limit
//!   as it is then (a lowered limit is met within a second and a run);
//! - a slot's count in the first shard never falls below what this store uses of it: a
//!   give-back lowers this store's count before it is sent, so no fetch takes a slot on its
//!   way back.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::Value;

use super::lease::Home;
use super::{micros, RedisStore};
use dq_core::store::MAX_BATCH;
use dq_core::{LeaseRef, Result, Topic};

/// How long a slot of an ended run waits for this store's next fetch of its topic before it
/// goes back to the first shard.
pub(super) const KEPT_FOR: Duration = Duration::from_millis(5);

/// How long a grant serves this store's fetches after it was taken (a twelfth of the lease when
/// that is shorter, see [`serves_for`]): then its slots go back as its jobs end, and the next
/// are asked for under the limit as it is then, against the other processes' fetches. A busy
/// process would otherwise keep every slot it once got (a worker killed then holds them all
/// until its grant runs out, a lease).
const SERVES_FOR: Duration = Duration::from_secs(1);

/// How long after the first shard granted fewer slots than asked (the topic was full) a fetch
/// that finds no slot kept here answers "at capacity" without asking it again: the consumer
/// waits for a run of its own to end, or looks again later (10 ms and more).
const FULL_FOR: Duration = Duration::from_millis(2);

/// How long a call to the first shard's count of slots may take before the caller goes on
/// without its answer (it gives back or renews slots: the next renewal makes it good).
const SLOTS_CALL_LIMIT: Duration = Duration::from_secs(1);

/// What this store holds of the grants of slots in the first shard.
#[derive(Default)]
pub(super) struct SlotBook {
    topics: HashMap<Topic, TopicSlots>,
    /// The grant each job leased here holds a slot of: by the shard and token of its fetch,
    /// then its id.
    jobs: HashMap<(u16, u64), HashMap<String, String>>,
    /// A task is on its way to give back the slots kept too long.
    giving_back: bool,
}

#[derive(Default)]
struct TopicSlots {
    grants: HashMap<String, Grant>,
    /// When the first shard last granted fewer slots than asked.
    full_at: Option<Instant>,
}

struct Grant {
    /// The slots the first shard counts for it, as far as this store knows: never less than
    /// `used` (a lost give-back leaves it counting more, until the next renewal).
    held: u64,
    /// Its slots in use here: runs under it, and those a fetch on its way has reserved.
    used: u64,
    /// When it was asked for: it serves fetches for [`serves_for`] after.
    taken: Instant,
    ttl: Duration,
    /// Since when some of its slots are unused (they go back [`KEPT_FOR`] after).
    kept_since: Option<Instant>,
}

/// How long a grant for leases of `ttl` serves fetches after it was taken. Its time in the
/// first shard runs out a lease after it was taken (or last renewed), and a job's renewal
/// comes every third of a lease and may take a quarter more, so the second renewal of a job
/// may come 11/12 of a lease after its fetch: with a slot of a grant at most a twelfth of a
/// lease old, the job's renewals may miss one and still find its grant, as with a grant taken
/// for its very fetch (helper-79's review).
fn serves_for(ttl: Duration) -> Duration {
    SERVES_FOR.min(ttl / 12)
}

impl Grant {
    fn unused(&self) -> u64 {
        self.held.saturating_sub(self.used)
    }
}

/// The slots of one fetch: `(grant, count)` kept here or granted for it, and those of a topic
/// whose limit was lifted meanwhile (no grant: nothing to give back).
#[derive(Default)]
pub(super) struct FetchSlots {
    pub(super) parts: Vec<(String, u64)>,
    pub(super) unlimited: u64,
    /// When the first of them was asked for.
    pub(super) since: Option<Instant>,
}

impl FetchSlots {
    pub(super) fn total(&self) -> u64 {
        self.parts.iter().map(|(_, n)| n).sum::<u64>() + self.unlimited
    }
}

/// `(grant, count)` pairs for slots.lua, by topic.
type Counts = Vec<(Topic, Vec<(String, u64)>)>;

impl SlotBook {
    /// Takes up to `asked` of `topic`'s slots kept here, from grants young enough to serve a
    /// fetch with a lease of `ttl`.
    fn reserve(&mut self, topic: &Topic, asked: u64, ttl: Duration, now: Instant) -> FetchSlots {
        let mut out = FetchSlots::default();
        let Some(t) = self.topics.get_mut(topic) else {
            return out;
        };
        let mut left = asked;
        for (name, g) in &mut t.grants {
            if left == 0 {
                break;
            }
            let young = now.saturating_duration_since(g.taken) < serves_for(g.ttl.min(ttl));
            let n = g.unused().min(left);
            if n == 0 || !young {
                continue;
            }
            g.used += n;
            if g.unused() == 0 {
                g.kept_since = None;
            }
            left -= n;
            out.since = Some(out.since.map_or(g.taken, |s: Instant| s.min(g.taken)));
            out.parts.push((name.clone(), n));
        }
        out
    }

    fn full_lately(&self, topic: &Topic, now: Instant) -> bool {
        self.topics
            .get(topic)
            .and_then(|t| t.full_at)
            .is_some_and(|at| now.saturating_duration_since(at) < FULL_FOR)
    }

    /// A grant of `granted` slots the first shard made for a fetch (all reserved for it).
    fn add(&mut self, topic: &Topic, name: &str, granted: u64, taken: Instant, ttl: Duration) {
        let t = self.topics.entry(topic.clone()).or_default();
        t.grants.insert(
            name.to_owned(),
            Grant {
                held: granted,
                used: granted,
                taken,
                ttl,
                kept_since: None,
            },
        );
    }

    fn note_full(&mut self, topic: &Topic, at: Instant) {
        self.topics.entry(topic.clone()).or_default().full_at = Some(at);
    }

    /// The jobs `ids` a fetch under `(shard, token)` handed over hold the slots it reserved,
    /// in order; those it did not use are kept for the next fetch. True when some were.
    fn settle(
        &mut self,
        topic: &Topic,
        slots: &FetchSlots,
        (shard, token): (u16, u64),
        ids: Vec<String>,
        now: Instant,
    ) -> bool {
        let mut ids = ids.into_iter();
        let mut kept = false;
        let t = self.topics.entry(topic.clone()).or_default();
        for (name, n) in &slots.parts {
            let holders: Vec<String> = ids.by_ref().take(*n as usize).collect();
            let unused = *n - holders.len() as u64;
            if !holders.is_empty() {
                let jobs = self.jobs.entry((shard, token)).or_default();
                jobs.extend(holders.into_iter().map(|id| (id, name.clone())));
            }
            if let Some(g) = t.grants.get_mut(name).filter(|_| unused > 0) {
                g.used = g.used.saturating_sub(unused);
                g.kept_since.get_or_insert(now);
                kept = true;
            }
        }
        kept
    }

    /// Runs that ended (their end is written, or their lease was lost): their slots are kept
    /// for the next fetch. True when some were.
    fn end<'a>(&mut self, leases: impl IntoIterator<Item = &'a LeaseRef>, now: Instant) -> bool {
        let mut kept = false;
        if self.jobs.is_empty() {
            return kept;
        }
        for l in leases {
            let key = (l.shard, l.token);
            let Some(jobs) = self.jobs.get_mut(&key) else {
                continue;
            };
            let Some(name) = jobs.remove(l.id.as_str()) else {
                continue;
            };
            if jobs.is_empty() {
                self.jobs.remove(&key);
            }
            let grant = self
                .topics
                .get_mut(&l.topic)
                .and_then(|t| t.grants.get_mut(&name));
            if let Some(g) = grant {
                g.used = g.used.saturating_sub(1);
                g.kept_since.get_or_insert(now);
                kept = true;
            }
        }
        kept
    }

    /// The grants whose unused slots were kept since `before` (all of them when `None`), each
    /// with the count it keeps now (what it uses): they go back. The second: whether slots
    /// are still kept.
    fn give_back(&mut self, before: Option<Instant>) -> (Counts, bool) {
        let mut out = Counts::new();
        let mut still = false;
        for (topic, t) in &mut self.topics {
            let mut counts = Vec::new();
            for (name, g) in &mut t.grants {
                let Some(since) = g.kept_since else {
                    continue;
                };
                if before.is_some_and(|b| since > b) {
                    still = true;
                    continue;
                }
                g.held = g.used;
                g.kept_since = None;
                counts.push((name.clone(), g.used));
            }
            t.grants.retain(|_, g| g.held > 0 || g.used > 0);
            if !counts.is_empty() {
                out.push((topic.clone(), counts));
            }
        }
        self.topics
            .retain(|_, t| !t.grants.is_empty() || t.full_at.is_some());
        (out, still)
    }

    /// The grants of `leases` (extended), each with the count it keeps (what it uses): the
    /// first shard renews them, and the slots kept unused go back with it.
    fn renewals<'a>(&mut self, leases: impl IntoIterator<Item = &'a LeaseRef>) -> Counts {
        let mut names: Vec<(&Topic, &String)> = Vec::new();
        for l in leases {
            if let Some(name) = self
                .jobs
                .get(&(l.shard, l.token))
                .and_then(|j| j.get(l.id.as_str()))
            {
                if !names.contains(&(&l.topic, name)) {
                    names.push((&l.topic, name));
                }
            }
        }
        let mut out: HashMap<Topic, Vec<(String, u64)>> = HashMap::new();
        for (topic, name) in names {
            let Some(g) = self
                .topics
                .get_mut(topic)
                .and_then(|t| t.grants.get_mut(name))
            else {
                continue;
            };
            g.held = g.used;
            g.kept_since = None;
            out.entry(topic.clone())
                .or_default()
                .push((name.clone(), g.used));
        }
        out.into_iter().collect()
    }

    /// The grants named in `slots`, each with the count it keeps (to renew them).
    fn counts_of(&mut self, topic: &Topic, slots: &FetchSlots) -> Vec<(String, u64)> {
        let Some(t) = self.topics.get_mut(topic) else {
            return Vec::new();
        };
        slots
            .parts
            .iter()
            .filter_map(|(name, _)| {
                let g = t.grants.get_mut(name)?;
                g.held = g.used;
                g.kept_since = None;
                Some((name.clone(), g.used))
            })
            .collect()
    }
}

impl RedisStore {
    fn slot_book(&self) -> std::sync::MutexGuard<'_, SlotBook> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A slots.lua call on the first shard's count of `topic`'s slots.
    fn slots_invocation(&self, topic: &Topic, what: &str) -> redis::ScriptInvocation<'static> {
        let k = self.keys(0);
        let mut inv = self.scripts().slots.prepare_invoke();
        inv.key(k.limits())
            .key(k.global_slots(topic))
            .key(k.global_slot_times(topic))
            .arg(topic.as_str())
            .arg(what);
        inv
    }

    /// Up to `asked` of `topic`'s slots for a fetch with a lease of `ttl`: those kept here
    /// first, then a grant of the rest from the first shard (slots.lua), unless it said lately
    /// that the topic is full. A topic whose global concurrency is not counted there any more
    /// (it was lifted) gets all it asks, with no grant. When the first shard does not answer:
    /// the slots kept here, and the error (the fetch then starts no more than those, but still
    /// takes back the jobs of this consumer's lost fetches).
    pub(super) async fn take_slots(
        &self,
        topic: &Topic,
        asked: u64,
        ttl: Duration,
    ) -> (FetchSlots, Option<dq_core::Error>) {
        let now = Instant::now();
        let (mut slots, full) = {
            let mut book = self.slot_book();
            (
                book.reserve(topic, asked, ttl, now),
                book.full_lately(topic, now),
            )
        };
        let wanted = asked - slots.total();
        if wanted == 0 || full {
            return (slots, None);
        }
        let name = self.grants.next();
        let mut inv = self.slots_invocation(topic, "grant");
        inv.arg(wanted).arg(micros(ttl)).arg(&name);
        let reply: Result<(i64, u64)> = self
            .call("take slots of a topic's global concurrency", &mut inv)
            .await;
        let outcome = if reply.is_ok() { "ok" } else { "failed" };
        Home::Slots.count_call(topic, "take", outcome);
        let granted = match reply {
            Ok((granted, _limit)) => granted,
            Err(e) => return (slots, Some(e)),
        };
        let Ok(granted) = u64::try_from(granted) else {
            // Lifted (the other shards follow): the fetch goes on as without a limit.
            self.note_at_home(Home::Slots, topic, false);
            slots.unlimited = wanted;
            return (slots, None);
        };
        let mut book = self.slot_book();
        if granted < wanted {
            book.note_full(topic, now);
        }
        if granted > 0 {
            book.add(topic, &name, granted, now, ttl);
            slots.parts.push((name, granted));
            slots.since = Some(slots.since.map_or(now, |s| s.min(now)));
        }
        (slots, None)
    }

    /// After a fetch that handed over no job (it failed, or found none to start): the slots it
    /// took, if any, are kept for this store's next fetch of `topic` (`settle_slots`).
    pub(super) async fn keep_unused_slots(
        &self,
        topic: &Topic,
        slots: Option<&FetchSlots>,
        ttl: Duration,
    ) {
        if let Some(s) = slots {
            self.settle_slots(topic, s, None, Vec::new(), ttl).await;
        }
    }

    /// After a fetch: the jobs `ids` it handed over (leased under `at`, its shard and token)
    /// hold `slots`, the rest are kept for the next fetch. A fetch that took a third of a
    /// lease since its slots' grants were taken renews them at once (they run out a lease
    /// after).
    pub(super) async fn settle_slots(
        &self,
        topic: &Topic,
        slots: &FetchSlots,
        at: Option<(u16, u64)>,
        ids: Vec<String>,
        ttl: Duration,
    ) {
        let now = Instant::now();
        // No lease token: nothing was handed over.
        let (at, ids) = at.map_or(((0, 0), Vec::new()), |at| (at, ids));
        let kept = self.slot_book().settle(topic, slots, at, ids, now);
        if kept {
            self.give_back_later();
        }
        if slots
            .since
            .is_some_and(|s| now.saturating_duration_since(s) > ttl / 3)
        {
            let counts = self.slot_book().counts_of(topic, slots);
            self.keep_slots(topic, &counts, Some(ttl), "a slow fetch")
                .await;
        }
    }

    /// Has grants of `topic` keep no more slots than they still need (`(name, count)`:
    /// slots.lua's `free`, or with `renew`, also running out a lease of `renew` from now).
    /// Best effort, and bounded by [`SLOTS_CALL_LIMIT`]: a grant that keeps more comes down at
    /// its next renewal, or gives them all back when it runs out, a lease after its jobs' last
    /// renewal.
    async fn keep_slots(
        &self,
        topic: &Topic,
        grants: &[(String, u64)],
        renew: Option<Duration>,
        why: &str,
    ) {
        for chunk in grants.chunks(MAX_BATCH) {
            let mut inv = match renew {
                Some(ttl) => {
                    let mut inv = self.slots_invocation(topic, "renew");
                    inv.arg(micros(ttl));
                    inv
                }
                None => self.slots_invocation(topic, "free"),
            };
            for (name, n) in chunk {
                inv.arg(name).arg(n);
            }
            let call =
                self.call::<Value>("count the slots of a topic's global concurrency", &mut inv);
            let what = if renew.is_some() { "renew" } else { "free" };
            let error = match tokio::time::timeout(SLOTS_CALL_LIMIT, call).await {
                Ok(Ok(_)) => {
                    Home::Slots.count_call(topic, what, "ok");
                    continue;
                }
                Ok(Err(e)) => e.to_string(),
                Err(_) => format!("no answer within {SLOTS_CALL_LIMIT:?}"),
            };
            Home::Slots.count_call(topic, what, "failed");
            tracing::warn!(topic = %topic, grants = chunk.len(), error = %error, "could not count the global concurrency slots of {why} in the namespace's first shard; those of ended runs come back at their grant's next renewal or when it runs out, within a lease");
        }
    }

    /// Runs that ended (their end is written or on its way, or their lease was lost): their
    /// slots are kept for this store's next fetch of their topic, and go back to the first
    /// shard [`KEPT_FOR`] later if none takes them. Each run's slot once.
    pub(super) fn free_slots<'a>(&self, ended: impl IntoIterator<Item = &'a LeaseRef>) {
        if self.slot_book().end(ended, Instant::now()) {
            self.give_back_later();
        }
    }

    /// Starts the task that gives back the slots kept unused for [`KEPT_FOR`], unless it
    /// runs. Outside a Tokio runtime (no task can run), gives them back now.
    fn give_back_later(&self) {
        let store = self.clone();
        start_giving_back(&self.slots, async move {
            loop {
                tokio::time::sleep(KEPT_FOR).await;
                let due = Instant::now().checked_sub(KEPT_FOR);
                let (counts, still) = {
                    let mut book = store.slot_book();
                    let (counts, still) = book.give_back(Some(due.unwrap_or_else(Instant::now)));
                    book.giving_back = still;
                    (counts, still)
                };
                for (topic, grants) in counts {
                    store.keep_slots(&topic, &grants, None, "ended runs").await;
                }
                if !still {
                    return;
                }
            }
        });
    }

    /// Gives back every slot kept unused here, now.
    pub(super) async fn give_back_kept_slots(&self) {
        let (counts, _) = self.slot_book().give_back(None);
        for (topic, grants) in counts {
            self.keep_slots(&topic, &grants, None, "a shutdown").await;
        }
    }

    /// Renews the grants whose jobs' leases were extended by `ttl`, each keeping as many slots
    /// as it uses here (the kept ones go back). Best effort: a grant not renewed runs out with
    /// the lease it was given, and then one more job of the topic may start while these run.
    pub(super) async fn renew_slots(&self, extended: &[&LeaseRef], ttl: Duration) {
        let counts = self.slot_book().renewals(extended.iter().copied());
        for (topic, grants) in counts {
            self.keep_slots(&topic, &grants, Some(ttl), "running jobs")
                .await;
        }
    }
}

/// Spawns `task`, which gives back kept slots, unless one runs (`giving_back`); outside a
/// Tokio runtime, starts nothing (the slots go back at a shutdown, at a renewal, or when their
/// grant runs out). The mark is cleared when the task ends, or when it is dropped, polled or
/// not (its runtime ended): the next end starts another.
fn start_giving_back(
    book: &Arc<Mutex<SlotBook>>,
    task: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let lock = |book: &Mutex<SlotBook>| {
        let mut b = book.lock().unwrap_or_else(|p| p.into_inner());
        std::mem::replace(&mut b.giving_back, true)
    };
    if lock(book) {
        return;
    }
    let done = GivingBack(book.clone());
    match tokio::runtime::Handle::try_current() {
        Ok(rt) => {
            rt.spawn(async move {
                let _done = done;
                task.await;
            });
        }
        Err(_) => {
            drop(done);
            tracing::debug!("no Tokio runtime to give kept slots back later; they go back at a shutdown, a renewal, or when their grants run out");
        }
    }
}

/// Clears the mark of the task that gives back kept slots when it is dropped.
struct GivingBack(Arc<Mutex<SlotBook>>);

impl Drop for GivingBack {
    fn drop(&mut self) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).giving_back = false;
    }
}

/// The names of a store's grants of slots: a random prefix (std's per-process random hash
/// keys), and a count.
pub(super) struct GrantNames {
    prefix: u64,
    count: std::sync::atomic::AtomicU64,
}

impl Default for GrantNames {
    fn default() -> Self {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        GrantNames {
            prefix: h.finish(),
            count: std::sync::atomic::AtomicU64::new(0),
        }
    }
}

impl GrantNames {
    pub(super) fn next(&self) -> String {
        let n = self
            .count
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        format!("{:x}.{n}", self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(shard: u16, token: u64, id: &str) -> LeaseRef {
        LeaseRef {
            topic: Topic::new("t").unwrap(),
            id: dq_core::JobId::new(id).unwrap(),
            token,
            shard,
        }
    }

    #[test]
    fn a_slot_of_an_ended_run_serves_the_next_fetch_then_goes_back() {
        let (t, ttl, now) = (
            Topic::new("t").unwrap(),
            Duration::from_secs(30),
            Instant::now(),
        );
        let mut book = SlotBook::default();
        book.add(&t, "g", 2, now, ttl);
        let fetch = FetchSlots {
            parts: vec![("g".into(), 2)],
            ..FetchSlots::default()
        };
        assert!(!book.settle(&t, &fetch, (1, 7), vec!["a".into(), "b".into()], now));
        assert!(book.end([&lease(1, 7, "a")], now));
        assert!(!book.end([&lease(1, 7, "a")], now), "once");
        let next = book.reserve(&t, 5, ttl, now);
        assert_eq!(next.parts, vec![("g".to_owned(), 1)]);
        assert!(book.reserve(&t, 5, ttl, now).parts.is_empty(), "taken");
        assert!(
            book.settle(&t, &next, (2, 1), vec![], now),
            "the fetch leased none: kept again"
        );
        let (back, still) = book.give_back(None);
        assert_eq!(
            back,
            vec![(t.clone(), vec![("g".to_owned(), 1)])],
            "the grant keeps the slot of the run still going"
        );
        assert!(!still);
        assert!(book.reserve(&t, 5, ttl, now).parts.is_empty(), "gone back");
    }

    #[test]
    /// Issue 33 review (helper-79, finding 1): a slot of a grant a third of a lease old left
    /// its job's renewals one miss before the grant ran out under it (a grant taken for the
    /// fetch leaves two).
    fn a_grant_serves_fetches_for_a_second_or_a_twelfth_of_a_short_lease() {
        for (ttl, serves) in [(30_000, 1_000), (12_000, 1_000), (3_000, 250), (600, 50)] {
            let (ttl, serves) = (Duration::from_millis(ttl), Duration::from_millis(serves));
            assert_eq!(serves_for(ttl), serves);
            let t = Topic::new("t").unwrap();
            let then = Instant::now();
            let mut book = SlotBook::default();
            book.add(&t, "g", 2, then, ttl);
            let fetch = FetchSlots {
                parts: vec![("g".into(), 2)],
                ..FetchSlots::default()
            };
            book.settle(&t, &fetch, (0, 1), vec!["a".into(), "b".into()], then);
            book.end([&lease(0, 1, "a"), &lease(0, 1, "b")], then);
            let before = then + serves - Duration::from_millis(1);
            assert_eq!(book.reserve(&t, 1, ttl, before).parts.len(), 1, "{ttl:?}");
            let after = then + serves + Duration::from_millis(1);
            assert!(book.reserve(&t, 1, ttl, after).parts.is_empty(), "{ttl:?}");
        }
    }

    #[test]
    fn a_give_back_task_dropped_unpolled_clears_its_mark() {
        let book = Arc::new(Mutex::new(SlotBook::default()));
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let entered = rt.enter();
        start_giving_back(&book, std::future::pending());
        assert!(book.lock().unwrap().giving_back, "started");
        start_giving_back(&book, async { panic!("a second task") });
        drop(entered);
        drop(rt);
        assert!(!book.lock().unwrap().giving_back, "cleared with the task");
    }

    #[test]
    fn a_grant_older_than_a_twelfth_of_a_lease_serves_no_new_fetch() {
        let (t, ttl) = (Topic::new("t").unwrap(), Duration::from_millis(900));
        let then = Instant::now();
        let mut book = SlotBook::default();
        book.add(&t, "g", 1, then, ttl);
        let fetch = FetchSlots {
            parts: vec![("g".into(), 1)],
            ..FetchSlots::default()
        };
        book.settle(&t, &fetch, (0, 1), vec!["a".into()], then);
        book.end([&lease(0, 1, "a")], then);
        let later = then + ttl / 12 + Duration::from_millis(1);
        assert!(book.reserve(&t, 1, ttl, later).parts.is_empty());
    }
}
