//! The Redis key layout. Every key of shard `s` in namespace `ns` starts with one hashtag,
//! `dq:{ns:0}:` for shard 0 and `dq:{ns:s:k}:` for the others, so each script touches one
//! cluster slot (the seed kept one `{project}` hashtag, which put the whole queue on one node).
//! The salt `k` places shard `s` near slot `reverse14(s)` (1 -> 8192, 2 -> 4096, 3 -> 12288,
//! ...): any number of shards is spread evenly over the slot space, so over the masters of a
//! cluster whatever their number (plain `ns:s` tags leave some of 12 masters without a shard).
//! The salt is computed, never stored; it must never change between releases.
//!
//! | key | type | content |
//! | --- | --- | --- |
//! | `jobs` | HASH | `topic:id` -> envelope (see [`Envelope`](dq_core::Envelope)) |
//! | `delayed` | ZSET | `topic:id` scored by due time (us) |
//! | `far:<bucket>:<n>:<topic>` | LIST | far jobs (lib.lua): part `n` of the topic's new jobs due in a bucket (its start / 300 s, base 36; 5 minutes wide within a day, an hour within 30 days, a day beyond) starting more than 5 minutes ahead, at most 1,000 elements `<max_attempts>:<due - bucket start>:<due - created>:<id length>:<id><payload>` (times in us, hexadecimal; '' for a job cancelled, replaced or rescheduled since). On a cluster a call names a part it was not given in a first call (lib.lua's `need`) |
//! | `far` | ZSET | far jobs: `<bucket>:<n>:<topic>` of each part, scored by the earliest due time written into it (us); the mover moves a part into `jobs` and `delayed` 5 minutes before |
//! | `farn` | HASH | far jobs: `<topic>:<bucket>` -> the part being filled |
//! | `fx:<h>` | HASH | far jobs' index, 32,768 hashes (`h` from the SHA-1 of `topic:id`): `topic:id` -> `<bucket>:<n>:<position>` (the bucket in base 36, the position in hexadecimal) |
//! | `ready:<topic>` | LIST | ids due and waiting for a worker, oldest first |
//! | `inflight` | ZSET | `topic:id` scored by lease deadline (us); one member `:skiplist ...` scored +inf, a long text that keeps the set a skip list (fetch.lua) |
//! | `meta` | HASH | shard 0 only: `epoch` -> when dq first used the namespace (us), gone when Redis loses its data; `shards` -> the namespace's shard count, recorded by the first process |
//! | `fetched:<consumer>` | STRING | the last fetches of a consumer (process, topic), `<nonce>:<token>:<deadline>` joined by `\|`, expiring after three leases |
//! | `leases` | HASH | `topic:id` -> lease token of each running job; `:next` -> the last token given (never below the shard's clock in us); `:table` -> a long text that keeps the hash a hash table (fetch.lua) |
//! | `cancels` | HASH | `topic:id` -> the lease token of a running job a cancel asked to stop; the entry goes when the lease ends |
//! | `progress` | HASH | `topic:id` -> the latest progress a running job reported (JSON), gone when it leaves running |
//! | `dead:<topic>` | ZSET | `topic:id` scored by time of death (us); envelope stays in `jobs` |
//! | `counts` | HASH | `<topic>:delayed`, `<topic>:inflight` -> counts, kept by the scripts; `<topic>:minute@<s>`, `<topic>:done@<s>`, `<topic>:failed@<s>` for 60 one-minute slots `s`: runs done and failed in the last hour |
//! | `topics` | SET | every topic pushed to |
//! | `paused` | SET | topics whose workers stop fetching (until resumed) |
//! | `attempts` | HASH | topic -> most runs its listeners allow (written at runtime start); the reclaimer's limit |
//! | `unique` | ZSET | `topic:id` of jobs that finished with `unique_for`, scored by the end of the reservation (us); expired ones trimmed by pushes |
//! | `unique_for` | HASH | `topic:id` -> the reservation (us) a pending job asked for, moved to `unique` when it succeeds |
//! | `schedules` | HASH | (shard 0 only) schedule id -> its spec as JSON |
//! | `schedule_next` | ZSET | (shard 0 only) schedule id scored by its next tick (us); a paused one is absent |
//! | `schedule_last` | HASH | (shard 0 only) schedule id -> the last tick fired (us) |
//! | `workers` | HASH | (shard 0 only) worker id -> JSON: host, pid, topics, last heartbeat |
//! | `done:<topic>` | HASH | the topic's kept records of succeeded jobs (retention only): `topic:id` -> `<us it succeeded>:<value>` (the handler's JSON, '' for none); the envelope stays in `jobs` |
//! | `done:<topic>:order` | LIST | the ack calls that kept records, oldest first: per call its n members, an element each, between two heads `<us>:<n>`; the records go a call's worth at a time, oldest first, once the rest holds the count or once they are older than the age (lib.lua) |
//! | `done:<topic>:taken` | HASH | `topic:id` -> how many of the id's listed records a push or a cancel took out (the ack that forgets their calls checks those records against the call's time, and counts down); absent when none (lib.lua) |
//! | `cancelled:<topic>` | ZSET | marks of the topic's cancelled jobs (retention only): `topic:id` scored by when it was cancelled (us), trimmed to the retention's age and count by each cancel; a wait that finds a job gone and marked answers `Cancelled` |
//! | `retain` | HASH | topic -> `<age us>:<count>`: how long and how many succeeded jobs it keeps (written at runtime start) |
//! | `gactive:<topic>` | HASH | groups (lib.lua): id -> group of each job holding one of its group's slots (in line, running, or waiting for a retry or for its group's rate) |
//! | `groups:<topic>` | HASH | groups: group -> how many slots it holds (absent: none) |
//! | `parked:<topic>` | ZSET | groups: the ids of ready jobs waiting for a slot of their group, scored by push order (counted as ready) |
//! | `gq:<topic>:<group>` | LIST | groups: one group's parked jobs, `<id>` in the order they came (exactly those: a job taken out of line is removed with an LREM) |
//! | `gwait:<topic>` | ZSET | groups: group scored by how many of its jobs are parked (the busiest groups) |
//! | `gtat:<topic>` | ZSET | a group rate (fetch.lua): group -> its theoretical arrival time (us, GCRA), and `:<group>` -> the due time last given to a job of the group held back; a fetch that looks at grouped jobs drops the times passed |
//! | `gslots:<topic>` | HASH | (first shard of a namespace of several) the slots of a topic's global concurrency (slots.lua): `:held` -> how many are held in all, each live grant's name -> how many it holds |
//! | `gslotx:<topic>` | ZSET | (first shard of a namespace of several) each live grant of `gslots:<topic>` scored by when it runs out (us) |
//! | `limits` | HASH | `<topic>:max_pending` -> `<share>:<bound>`: the most jobs of the topic this shard holds pending (delayed, ready and running), the shares of the shards add up to the bound, each at least 1; a push past it is refused (code `6:<bound>`). `<topic>:rate` -> `<interval>:<tolerance>:<rate as written>` (the rate limit, us) in the namespace's first shard, which counts the starts of every shard (`<topic>:tat` -> its theoretical arrival time, us; GCRA, fetch.lua for its own jobs, rate_grant.lua for a fetch in another shard; `<topic>:tat_by` -> the name of the grant that wrote it last, so that its give-back applies once), and `home:0:<rate as written>` in the others, whose fetch.lua starts no job of the topic without that grant; `<topic>:hold` -> when a handler's `RateLimited` hold ends (us, hold.lua). `<topic>:running` -> `<limit>:<limit>` in a namespace of one shard: the most of the topic's jobs leased at once (its global concurrency), checked by fetch.lua against the topic's inflight count; `home:<limit>` in every shard of a namespace of several, whose fetch.lua leases no job of the topic without slots granted by the first shard (slots.lua, `gslots:<topic>`). `<topic>:group_concurrency` -> how many slots each group of the topic holds at most (1 when absent). `<topic>:group_rate` -> `<interval>:<tolerance>:<rate as written>`: each group's rate (the whole of it in every shard: each group lives in one) |
//! | `events` | HASH | topic -> how many events its streams keep (the cap, at least 1), for the topics whose job events are on (written at runtime start); absent: off. `<topic>:n` -> the number of the last event of a stream deleted when the topic's events were turned off, for a stream made again to go on from (events_off.lua) |
//! | `events:<topic>` | STREAM | the topic's job events in this shard, appended by the script that makes each change (`XADD MINID ~`: at least the cap's latest events are kept). An entry holds one event, or several of one kind from one call (`c` of them: a promotion, fetch, ack or push of many jobs writes one entry per topic and kind, each per-job field one line per job); its id is `0-<n>`. Fields: `n` (the number of the entry's last event, 1, 2, ...: a reader that finds a gap missed that many), `c` (how many events, 1 when absent), `k` (`pushed`, `promoted`, `started`, `progress`, `succeeded`, `failed`, `retrying`, `postponed`, `dead`, `cancelled`, `stalled`, `released`), `id` (the job's id), `a` (the run, see `dq::events::EventKind`), `t` (when, us of Redis `TIME`); then one of `d` (due time, us: pushed to wait, retrying, postponed), `e` (error: failed, dead), `v` (JSON: progress, and succeeded in a topic that keeps its values) |
//! | `workflows` | HASH | workflows: `topic:id` -> `<workflow>:<step>` for the job of each step that has not ended (a blocked step's too, whose job is not in `jobs` yet); the entry goes when the step ends |
//! | `workflow:<id>` | HASH | one workflow (lib.lua's workflows): `created`, `keep`, `left` (steps not ended), `cancelled`, `ended`, `steps` (names in order); per step `s`: `m:s` member, `s:s` state (`b`locked, `p`ending, `d`one, `f`ailed, `c`ancelled), `w:s` dependencies not ended, `a:s` and `k:s` the steps before and after it (`name\|policy,...`), `j:s` and `t:s` a blocked step's envelope and delay (us), `v:s` its value, `e:s` its error. Expires `keep` after its last step ended |
//! | `ended` | pub/sub channel | `topic:id` of a job that succeeded (while a wait listens: `waiting`), died or was cancelled, one a line: wakes the waits for it |
//! | `wake` | pub/sub channel | the new earliest due time, when a push makes one; `resumed <topic>` when a topic is resumed; `cancel <topic:id>` when a cancel asks a running job's worker to stop it |

//!
//! On a Redis Cluster every script call declares every key it touches (Redis checks the
//! declared keys of a call while its slot moves, and reads any other where the call runs): the
//! keys a script names from what it reads (a group's list, a workflow, the lists of the topics
//! of a workflow's other steps) it names in a first call that stops before its first write
//! (lib.lua's `need`), and the store calls again with them declared (`RedisStore::run`).

use dq_core::{JobId, Topic};

/// The keys of one shard of one namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardKeys {
    prefix: String,
}

impl ShardKeys {
    /// The keys of `shard` in `namespace`.
    pub fn new(namespace: &str, shard: u16) -> ShardKeys {
        ShardKeys {
            prefix: format!("dq:{{{}}}:", hashtag(namespace, shard)),
        }
    }

    /// The prefix every key of the shard starts with, hashtag included.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    fn key(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    /// The envelopes.
    pub fn jobs(&self) -> String {
        self.key("jobs")
    }
    /// Jobs waiting for their due time.
    pub fn delayed(&self) -> String {
        self.key("delayed")
    }
    /// Leased jobs by lease deadline.
    pub fn inflight(&self) -> String {
        self.key("inflight")
    }
    /// The lease tokens of running jobs.
    pub fn leases(&self) -> String {
        self.key("leases")
    }
    /// The running jobs a cancel asked to stop: `topic:id` -> the lease token it applies to.
    pub fn cancels(&self) -> String {
        self.key("cancels")
    }
    /// The latest progress of running jobs: `topic:id` -> JSON.
    pub fn progress(&self) -> String {
        self.key("progress")
    }
    /// Per-topic counters.
    pub fn counts(&self) -> String {
        self.key("counts")
    }
    /// Every topic pushed to.
    pub fn topics(&self) -> String {
        self.key("topics")
    }
    /// Paused topics.
    pub fn paused(&self) -> String {
        self.key("paused")
    }
    /// Per topic, the most runs its listeners allow (their `retries` + 1).
    pub fn attempts(&self) -> String {
        self.key("attempts")
    }
    /// Ids reserved after their job finished (`unique_for`): `topic:id` scored by the end of
    /// the reservation (us).
    pub fn unique(&self) -> String {
        self.key("unique")
    }
    /// How long each pending job that asked for it keeps its id reserved after it finishes:
    /// `topic:id` -> microseconds.
    pub fn unique_for(&self) -> String {
        self.key("unique_for")
    }
    /// Periodic schedules (kept in shard 0): id -> spec as JSON.
    pub fn schedules(&self) -> String {
        self.key("schedules")
    }
    /// Each schedule's next tick (shard 0): id scored by the tick (us); paused ones are absent.
    pub fn schedule_next(&self) -> String {
        self.key("schedule_next")
    }
    /// Each schedule's last fired tick (shard 0): id -> us.
    pub fn schedule_last(&self) -> String {
        self.key("schedule_last")
    }
    /// Each schedule's generation (shard 0): id -> a number that grows whenever its spec
    /// changes or it is resumed (see [`ScheduleEntry::generation`](dq_core::store::ScheduleEntry)).
    pub fn schedule_gen(&self) -> String {
        self.key("schedule_gen")
    }
    /// Per schedule, the latest tick whose job was created in this shard and the generation it
    /// was created under: id -> `<generation>:<tick us>` (see [`FiredTick`](dq_core::store::FiredTick)).
    pub fn tick_fence(&self) -> String {
        self.key("tick_fence")
    }
    /// The namespace's record of itself (kept in shard 0): `epoch` -> what
    /// [`Registry::namespace_epoch`](dq_core::store::Registry::namespace_epoch) answers;
    /// `shards` -> the shard count every process must use.
    pub fn meta(&self) -> String {
        self.key("meta")
    }
    /// The last fetches of a consumer (`<nonce>:<token>:<deadline>|...`, expiring after three
    /// leases), for its later fetches to take back the jobs of one whose reply was lost.
    pub fn fetched(&self, consumer: &str) -> String {
        format!("{}fetched:{consumer}", self.prefix)
    }
    /// Live workers (kept in shard 0).
    pub fn workers(&self) -> String {
        self.key("workers")
    }
    /// A topic's ready list.
    pub fn ready(&self, topic: &Topic) -> String {
        format!("{}ready:{topic}", self.prefix)
    }
    /// A topic's ready jobs of a priority other than 0, in fetch order (lib.lua's ready lanes;
    /// those of priority 0 are in its ready list).
    pub fn ranked(&self, topic: &Topic) -> String {
        format!("{}ranked:{topic}", self.prefix)
    }
    /// The generations of a topic's ready jobs whose entry in the ready list went stale (a
    /// replace, cancel or reschedule of a ready job), so that the list is never scanned.
    pub fn ready_gen(&self, topic: &Topic) -> String {
        format!("{}gen:{topic}", self.prefix)
    }
    /// A topic's dead letters.
    pub fn dead(&self, topic: &Topic) -> String {
        format!("{}dead:{topic}", self.prefix)
    }
    /// A topic's kept records of succeeded jobs (when it has a retention): `topic:id` ->
    /// `<us>:<value>`, with their order in `done:<topic>:order` (lib.lua).
    pub fn done(&self, topic: &Topic) -> String {
        format!("{}done:{topic}", self.prefix)
    }
    /// Each topic's retention of succeeded jobs: topic -> `<age us>:<count>` (written at
    /// runtime start, in every shard).
    pub fn retain(&self) -> String {
        self.key("retain")
    }
    /// Each limited topic's limits: `<topic>:max_pending` -> `<this shard's share>:<the bound>`
    /// (push.lua refuses a job past the share); `<topic>:rate`, `<topic>:tat` and
    /// `<topic>:hold` (fetch.lua leases no more than the rate allows, none during a hold);
    /// `<topic>:running` (no more leased at once than the global concurrency, or, over
    /// several shards, than the first shard granted).
    pub fn limits(&self) -> String {
        self.key("limits")
    }
    /// The topics whose job events are on: topic -> how many events each stream keeps.
    pub fn events(&self) -> String {
        self.key("events")
    }
    /// Marks of a topic's cancelled jobs (when it keeps its ends): `topic:id` scored by when
    /// it was cancelled (us), trimmed to the topic's retention.
    pub fn cancelled(&self, topic: &Topic) -> String {
        format!("{}cancelled:{topic}", self.prefix)
    }
    /// A topic's stream of job events in this shard.
    pub fn events_stream(&self, topic: &Topic) -> String {
        format!("{}events:{topic}", self.prefix)
    }
    /// The pub/sub channel that announces that jobs ended (`topic:id`, one a line): what waits
    /// for their ends listen to.
    pub fn ended_channel(&self) -> String {
        self.key("ended")
    }
    /// Present (with a time to live) while a wait for the end of one of this shard's jobs
    /// listens: an ack announces its jobs on [`ShardKeys::ended_channel`] only then.
    pub fn waiting(&self) -> String {
        self.key("waiting")
    }
    /// A topic's group rate: each group's theoretical arrival time (ZSET group -> us) and, as
    /// `:<group>`, the due time last given to a job of the group held back; a fetch that looks
    /// at grouped jobs drops the times passed.
    pub fn group_tat(&self, topic: &Topic) -> String {
        format!("{}gtat:{topic}", self.prefix)
    }
    /// A topic's slots of its global concurrency over a namespace of several shards (kept in
    /// shard 0, slots.lua): `:held` -> the slots held in all, and each live grant's name ->
    /// how many it holds.
    pub fn global_slots(&self, topic: &Topic) -> String {
        format!("{}gslots:{topic}", self.prefix)
    }
    /// The live grants of [`ShardKeys::global_slots`], scored by when each runs out (us).
    pub fn global_slot_times(&self, topic: &Topic) -> String {
        format!("{}gslotx:{topic}", self.prefix)
    }
    /// Far jobs (lib.lua): every part of the shard, scored by its earliest due time.
    pub fn far(&self) -> String {
        self.key("far")
    }
    /// Far jobs: the part being filled of each topic and bucket.
    pub fn farn(&self) -> String {
        self.key("farn")
    }
    /// The index hash of far jobs that holds `member` (`topic:id`), if it is one: one of
    /// [`FAR_INDEXES`], from the first 16 bits of the SHA-1 of the member, as lib.lua's
    /// `far_index` computes it. On a cluster a call that may meet the job declares it.
    pub fn far_index(&self, member: &str) -> String {
        let digest = sha1_smol::Sha1::from(member).digest().bytes();
        let h = u16::from_be_bytes([digest[0], digest[1]]) % FAR_INDEXES;
        format!("{}fx:{h}", self.prefix)
    }
    /// A topic's keys of its groups that the scripts name themselves (lib.lua's
    /// `topic_group_keys`): `gactive:`, `groups:`, `parked:` and `gwait:`.
    pub fn topic_groups(&self, topic: &Topic) -> [String; 4] {
        ["gactive", "groups", "parked", "gwait"].map(|k| format!("{}{k}:{topic}", self.prefix))
    }
    /// One group's list of parked jobs (lib.lua's `group_queue`).
    pub fn group_queue(&self, topic: &Topic, group: &str) -> String {
        format!("{}gq:{topic}:{group}", self.prefix)
    }
    /// The workflow and step of each job of a workflow step that has not ended (`topic:id` ->
    /// `<workflow>:<step>`), blocked ones too (lib.lua's workflows).
    pub fn workflow_steps(&self) -> String {
        self.key("workflows")
    }
    /// One workflow: its steps, their states, dependencies, values and errors (lib.lua's
    /// workflows).
    pub fn workflow(&self, id: &str) -> String {
        format!("{}workflow:{id}", self.prefix)
    }
    /// The pub/sub channel that announces a new earliest due time.
    pub fn wake(&self) -> String {
        self.key("wake")
    }
    /// The pub/sub channel that announces, by topic, that jobs became ready.
    pub fn ready_channel(&self) -> String {
        self.key("ready")
    }
}

/// How many index hashes of far jobs a shard has (lib.lua's `FAR_INDEXES`).
const FAR_INDEXES: u16 = 32768;

/// The hashtag of a shard: `ns:0` for shard 0 (so one-shard keys read naturally), and for
/// shard `s` > 0 the first `ns:s:k` whose slot lies in the 16 slots from `reverse14(s)`.
fn hashtag(namespace: &str, shard: u16) -> String {
    if shard == 0 {
        return format!("{namespace}:0");
    }
    let target = (shard % 16384).reverse_bits() >> 2; // the 14-bit reversal of the shard
    (0u32..)
        .map(|k| format!("{namespace}:{shard}:{k}"))
        .find(|tag| (target..target.saturating_add(16)).contains(&slot(tag)))
        .expect("some salt lands in every window of 16 slots")
}

/// The Redis Cluster hash slot of a key: CRC16 (XMODEM) of its hashtag, modulo 16384.
pub(crate) fn slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let tagged = key
        .find('{')
        .and_then(|open| {
            key[open + 1..]
                .find('}')
                .filter(|&len| len > 0)
                .map(|len| &bytes[open + 1..open + 1 + len])
        })
        .unwrap_or(bytes);
    let mut crc: u16 = 0;
    for &b in tagged {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

/// The member naming a job in the shard's sets and hash.
pub(crate) fn member(topic: &Topic, id: &JobId) -> String {
    format!("{topic}:{id}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_far_jobs_index_hash_is_named_from_the_first_16_bits_of_its_members_sha1() {
        // (Python's hashlib: int(sha1(member).hexdigest()[:4], 16) % 32768, as lib.lua does)
        let k = ShardKeys::new("ns", 0);
        for (member, h) in [
            ("orders:1", 4566),
            ("bench-0:f123", 11456),
            ("t:a-very-long-id", 26977),
        ] {
            assert_eq!(k.far_index(member), format!("dq:{{ns:0}}:fx:{h}"));
        }
    }

    #[test]
    fn shards_spread_evenly_over_any_number_of_masters() {
        for (masters, shards) in [(3, 16), (6, 32), (12, 64)] {
            let mut per_master = vec![0; masters];
            for s in 0..shards {
                let key = ShardKeys::new("dq", s).jobs();
                per_master[usize::from(slot(&key)) * masters / 16384] += 1;
            }
            let (min, max) = (per_master.iter().min(), per_master.iter().max());
            let fair = usize::from(shards) / masters;
            assert!(
                *min.unwrap() >= fair - 1 && *max.unwrap() <= fair + 2,
                "{shards} shards over {masters} masters: {per_master:?}"
            );
        }
    }

    #[test]
    fn shard_zero_keeps_the_plain_tag_and_the_others_are_salted() {
        assert_eq!(ShardKeys::new("shop", 0).prefix(), "dq:{shop:0}:");
        let k = ShardKeys::new("shop", 1);
        assert!(k.prefix().starts_with("dq:{shop:1:"), "{}", k.prefix());
        let s = slot(&k.jobs());
        assert!((8192..8208).contains(&s), "shard 1 near slot 8192, got {s}");
    }

    #[test]
    fn slots_match_redis_cluster_keyslot() {
        // Values from `CLUSTER KEYSLOT` on Redis 7.
        assert_eq!(slot("foo"), 12182);
        assert_eq!(slot("{user1000}.following"), slot("{user1000}.followers"));
        assert_eq!(slot("123456789"), 12739);
        assert_eq!(slot("a{}b"), 13694); // an empty tag: the whole key is hashed
    }

    #[test]
    fn every_key_of_a_shard_shares_its_hashtag() {
        let k = ShardKeys::new("shop", 3);
        let t = Topic::new("order-cancel").unwrap();
        for key in [
            k.jobs(),
            k.delayed(),
            k.inflight(),
            k.counts(),
            k.topics(),
            k.ready(&t),
            k.ranked(&t),
            k.dead(&t),
            k.events(),
            k.events_stream(&t),
            k.wake(),
            k.limits(),
            k.global_slots(&t),
            k.global_slot_times(&t),
        ] {
            assert!(key.starts_with(k.prefix()), "{key}");
            assert_eq!(slot(&key), slot(&k.jobs()), "{key}");
        }
    }
}
