//! The Lua scripts, one file per operation in `src/lua/`, each prefixed with `lib.lua` and run
//! with EVALSHA (redis-rs loads a script again when Redis answers NOSCRIPT, as after a restart).

use std::sync::LazyLock;

use redis::Script;

const LIB: &str = include_str!("../lua/lib.lua");

fn script(body: &str) -> Script {
    Script::new(&format!("{LIB}\n{body}"))
}

pub(crate) struct Scripts {
    pub(crate) push: Script,
    pub(crate) promote: Script,
    pub(crate) fetch: Script,
    pub(crate) ack: Script,
    pub(crate) retry: Script,
    pub(crate) dead: Script,
    pub(crate) release: Script,
    pub(crate) extend: Script,
    pub(crate) reclaim: Script,
    pub(crate) cancel: Script,
    pub(crate) reschedule: Script,
    pub(crate) status: Script,
    pub(crate) counts: Script,
    pub(crate) stats: Script,
    pub(crate) list: Script,
    pub(crate) dead_list: Script,
    pub(crate) requeue_dead: Script,
    pub(crate) purge_dead: Script,
    pub(crate) delete_dead: Script,
    pub(crate) throughput: Script,
    pub(crate) schedule_advance: Script,
    pub(crate) schedule_put: Script,
    pub(crate) schedule_set_next: Script,
    pub(crate) epoch: Script,
    pub(crate) schedule_raise: Script,
    pub(crate) shard_count: Script,
}

pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    push: script(include_str!("../lua/push.lua")),
    promote: script(include_str!("../lua/promote.lua")),
    fetch: script(include_str!("../lua/fetch.lua")),
    ack: script(include_str!("../lua/ack.lua")),
    retry: script(include_str!("../lua/retry.lua")),
    dead: script(include_str!("../lua/dead.lua")),
    release: script(include_str!("../lua/release.lua")),
    extend: script(include_str!("../lua/extend.lua")),
    reclaim: script(include_str!("../lua/reclaim.lua")),
    cancel: script(include_str!("../lua/cancel.lua")),
    reschedule: script(include_str!("../lua/reschedule.lua")),
    status: script(include_str!("../lua/status.lua")),
    counts: script(include_str!("../lua/counts.lua")),
    stats: script(include_str!("../lua/stats.lua")),
    list: script(include_str!("../lua/list.lua")),
    dead_list: script(include_str!("../lua/dead_list.lua")),
    requeue_dead: script(include_str!("../lua/requeue_dead.lua")),
    purge_dead: script(include_str!("../lua/purge_dead.lua")),
    delete_dead: script(include_str!("../lua/delete_dead.lua")),
    throughput: script(include_str!("../lua/throughput.lua")),
    schedule_advance: script(include_str!("../lua/schedule_advance.lua")),
    schedule_put: script(include_str!("../lua/schedule_put.lua")),
    schedule_set_next: script(include_str!("../lua/schedule_set_next.lua")),
    epoch: script(include_str!("../lua/epoch.lua")),
    schedule_raise: script(include_str!("../lua/schedule_raise.lua")),
    shard_count: script(include_str!("../lua/shard_count.lua")),
});

/// Each script's name and SHA1, as `EVALSHA` shows it in `SLOWLOG`, `MONITOR` or
/// `INFO commandstats`: which dq operation a slow entry was.
pub fn script_hashes() -> Vec<(&'static str, String)> {
    let s = &*SCRIPTS;
    vec![
        ("push", s.push.get_hash().to_owned()),
        ("promote", s.promote.get_hash().to_owned()),
        ("fetch", s.fetch.get_hash().to_owned()),
        ("ack", s.ack.get_hash().to_owned()),
        ("retry", s.retry.get_hash().to_owned()),
        ("dead", s.dead.get_hash().to_owned()),
        ("release", s.release.get_hash().to_owned()),
        ("extend", s.extend.get_hash().to_owned()),
        ("reclaim", s.reclaim.get_hash().to_owned()),
        ("cancel", s.cancel.get_hash().to_owned()),
        ("reschedule", s.reschedule.get_hash().to_owned()),
        ("status", s.status.get_hash().to_owned()),
        ("counts", s.counts.get_hash().to_owned()),
        ("stats", s.stats.get_hash().to_owned()),
        ("list", s.list.get_hash().to_owned()),
        ("dead_list", s.dead_list.get_hash().to_owned()),
        ("requeue_dead", s.requeue_dead.get_hash().to_owned()),
        ("purge_dead", s.purge_dead.get_hash().to_owned()),
        ("delete_dead", s.delete_dead.get_hash().to_owned()),
        ("throughput", s.throughput.get_hash().to_owned()),
        ("schedule_advance", s.schedule_advance.get_hash().to_owned()),
        ("schedule_put", s.schedule_put.get_hash().to_owned()),
        (
            "schedule_set_next",
            s.schedule_set_next.get_hash().to_owned(),
        ),
        ("epoch", s.epoch.get_hash().to_owned()),
        ("schedule_raise", s.schedule_raise.get_hash().to_owned()),
        ("shard_count", s.shard_count.get_hash().to_owned()),
    ]
}
