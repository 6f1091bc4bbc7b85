//! The Lua scripts, one file per operation in `src/lua/`, each prefixed with `lib.lua` and run
//! with EVALSHA (redis-rs loads a script again when Redis answers NOSCRIPT, as after a restart).

use std::sync::LazyLock;

use redis::Script;

const LIB: &str = include_str!("lua/lib.lua");

fn script(body: &str) -> Script {
    Script::new(&format!("{LIB}\n{body}"))
}

/// Declares the scripts once: the struct holding them, its loader and the name-to-hash list
/// all come from this one list of names, each the stem of its file in `src/lua/`.
macro_rules! scripts {
    ($($name:ident),* $(,)?) => {
        pub(crate) struct Scripts {
            $(pub(crate) $name: Script,)*
        }

        pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
            $($name: script(include_str!(concat!("lua/", stringify!($name), ".lua"))),)*
        });

        /// Each script's name and SHA1, as `EVALSHA` shows it in `SLOWLOG`, `MONITOR` or
        /// `INFO commandstats`: which dq operation a slow entry was.
        pub fn script_hashes() -> Vec<(&'static str, String)> {
            let s = &*SCRIPTS;
            vec![$((stringify!($name), s.$name.get_hash().to_owned()),)*]
        }
    };
}

scripts!(
    push,
    lift_hold,
    group_concurrency,
    promote,
    fetch,
    ack,
    retry,
    dead,
    release,
    extend,
    progress,
    reclaim,
    cancel,
    reschedule,
    status,
    counts,
    stats,
    list,
    dead_list,
    done_list,
    forget_done,
    requeue_dead,
    purge_dead,
    delete_dead,
    throughput,
    schedule_advance,
    schedule_put,
    schedule_set_next,
    epoch,
    schedule_raise,
    shard_count,
    cancel_running,
    hold,
    workflow_push,
    workflow_cancel,
);

#[cfg(test)]
mod tests {
    use dq_core::store::policy::lease_expired;

    #[test]
    fn the_reclaim_script_writes_the_lease_expiry_message_of_every_store() {
        let script = include_str!("lua/reclaim.lua");
        assert!(script.contains("'lease expired on attempt ' .. e.attempt .. ' of ' .. max"));
        assert!(script.contains("' (the worker died or stopped renewing its lease)'"));
        assert_eq!(
            lease_expired(2, Some(3)),
            "lease expired on attempt 2 of 3 (the worker died or stopped renewing its lease)"
        );
    }

    #[test]
    fn every_script_has_a_name_and_a_distinct_hash() {
        let hashes = super::script_hashes();
        let distinct: std::collections::HashSet<_> = hashes.iter().map(|(_, h)| h).collect();
        assert_eq!(distinct.len(), hashes.len());
        assert!(hashes.iter().any(|(name, _)| *name == "schedule_set_next"));
    }
}
