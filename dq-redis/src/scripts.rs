//! The Lua scripts, one file per operation in `src/lua/`, each prefixed with the definitions of
//! `lib.lua` it uses and run with EVALSHA (redis-rs loads a script again when Redis answers
//! NOSCRIPT, as after a restart).
//!
//! Only the definitions a script reaches go in front of it: Redis runs a script's top level at
//! every call, and each `local function` of it makes a closure then. The whole of `lib.lua`
//! cost 19-21 us of Redis time per call on the 2-core machine of BENCHMARKS.md ("One awaited
//! push", where the script's time is broken down), about a third of a one-job push's own work.

use std::collections::BTreeSet;
use std::sync::LazyLock;

use redis::Script;

const LIB: &str = include_str!("lua/lib.lua");

/// A script as it runs on one Redis, or on a cluster (`cluster`): lib.lua's `need` reads
/// `CLUSTER`, and stops a call on a cluster before it touches a key it did not declare.
fn script(body: &str, cluster: bool) -> Script {
    Script::new(&format!(
        "local CLUSTER = {cluster}\n{}",
        with_lib(LIB, body)
    ))
}

/// One top-level definition of a library: a `local` statement at the start of a line, with the
/// comment lines right above it and every line after it up to the next definition's.
struct Definition<'a> {
    /// The names it declares (`local function f` or `local a, b = ...`).
    names: Vec<&'a str>,
    text: &'a str,
}

/// `lib` cut into its text before the first definition and its definitions, in order.
fn definitions(lib: &str) -> (&str, Vec<Definition<'_>>) {
    let lines: Vec<(usize, &str)> = lib
        .split_inclusive('\n')
        .scan(0, |at, line| {
            let start = *at;
            *at += line.len();
            Some((start, line))
        })
        .collect();
    // Where each definition starts: its `local` line, moved up over the comments right above.
    let mut starts = Vec::new();
    for (i, (_, line)) in lines.iter().enumerate() {
        if line.starts_with("local ") {
            let mut first = i;
            while first > 0 && lines[first - 1].1.starts_with("--") {
                first -= 1;
            }
            starts.push((first, i));
        }
    }
    let offset = |line: usize| lines.get(line).map_or(lib.len(), |l| l.0);
    let prelude = &lib[..starts.first().map_or(lib.len(), |s| offset(s.0))];
    let defs = starts
        .iter()
        .enumerate()
        .map(|(k, &(first, local))| {
            let end = starts.get(k + 1).map_or(lines.len(), |s| s.0);
            let head = lines[local].1["local ".len()..].trim_start();
            let head = head.strip_prefix("function ").unwrap_or(head);
            let declared = head.split(['=', '(']).next().unwrap_or("");
            Definition {
                names: declared
                    .split(',')
                    .map(str::trim)
                    .filter(|n| !n.is_empty())
                    .collect(),
                text: &lib[offset(first)..offset(end)],
            }
        })
        .collect();
    (prelude, defs)
}

/// The names `code` uses: its identifiers outside comments and string literals.
fn identifiers(code: &str) -> BTreeSet<&str> {
    let bytes = code.as_bytes();
    let mut out = BTreeSet::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'-' if bytes.get(i + 1) == Some(&b'-') => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            }
            quote @ (b'\'' | b'"') => {
                i += 1;
                while i < bytes.len() && bytes[i] != quote {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            b if b.is_ascii_alphabetic() || b == b'_' => {
                let start = i;
                while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                    i += 1;
                }
                out.insert(&code[start..i]);
            }
            b if b.is_ascii_digit() => {
                while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'.') {
                    i += 1;
                }
            }
            _ => i += 1,
        }
    }
    out
}

/// `body` after the text of `lib` before its first definition and the definitions `body` uses,
/// directly or through other definitions, in their order in `lib`. A line `--@lib` in `body`
/// puts the definitions that only the code after it uses there, after the code before it: a
/// script that returns early (push.lua's short section for new jobs) does not make the closures of the rest.
fn with_lib(lib: &str, body: &str) -> String {
    let (prelude, defs) = definitions(lib);
    let mut placed = vec![false; defs.len()];
    let mut out = String::from(prelude);
    for (k, part) in body.split(LIB_MARK).enumerate() {
        if k > 0 {
            out.push('\n');
        }
        let mut needed = placed.clone();
        let mut names: Vec<&str> = identifiers(part).into_iter().collect();
        while let Some(name) = names.pop() {
            for (k, def) in defs.iter().enumerate() {
                if !needed[k] && def.names.contains(&name) {
                    needed[k] = true;
                    names.extend(
                        identifiers(def.text)
                            .into_iter()
                            .filter(|n| !def.names.contains(n)),
                    );
                }
            }
        }
        for (i, def) in defs.iter().enumerate() {
            if needed[i] && !placed[i] {
                out.push_str(def.text);
            }
        }
        placed = needed;
        out.push_str(if k == 0 { "\n" } else { "--@lib\n" });
        out.push_str(part);
    }
    out
}

/// The line of a script body where the library definitions of the code after it go.
const LIB_MARK: &str = "\n--@lib\n";

/// Declares the scripts once: the struct holding them, its loader and the name-to-hash list
/// all come from this one list of names, each the stem of its file in `src/lua/`.
macro_rules! scripts {
    ($($name:ident),* $(,)?) => {
        pub(crate) struct Scripts {
            $(pub(crate) $name: Script,)*
        }

        /// The scripts as they run on one Redis.
        pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
            $($name: script(include_str!(concat!("lua/", stringify!($name), ".lua")), false),)*
        });

        /// The scripts as they run on a Redis Cluster, where a call is stopped before it
        /// touches a key it did not declare (lib.lua's `need`; `RedisStore::run` calls again
        /// with those).
        pub(crate) static CLUSTER_SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
            $($name: script(include_str!(concat!("lua/", stringify!($name), ".lua")), true),)*
        });

        /// Each script's name and body, as in `src/lua/`.
        #[cfg(test)]
        const BODIES: &[(&str, &str)] = &[
            $((stringify!($name), include_str!(concat!("lua/", stringify!($name), ".lua"))),)*
        ];

        /// Each script's name and SHA1, as `EVALSHA` shows it in `SLOWLOG`, `MONITOR` or
        /// `INFO commandstats`: which dq operation a slow entry was (each name twice: as the
        /// script runs on one Redis, then on a cluster).
        pub fn script_hashes() -> Vec<(&'static str, String)> {
            let (s, c) = (&*SCRIPTS, &*CLUSTER_SCRIPTS);
            let mut out = vec![$((stringify!($name), s.$name.get_hash().to_owned()),)*];
            out.extend([$((stringify!($name), c.$name.get_hash().to_owned()),)*]);
            out
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
    rate_grant,
    slots,
    workflow_push,
    workflow_cancel,
    expand,
    events_off,
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

    const LIB: &str = "-- the prelude\n\n\
        local function a() return 1 end\n\
        -- b calls a\n\
        local function b()\n  return a()\nend\n\
        local function c() return 'a()' end -- a() in a comment\n\
        local X, Y = 5, 6\n";

    #[test]
    fn a_script_gets_the_definitions_it_calls_and_those_they_call_in_library_order() {
        assert_eq!(
            super::with_lib(LIB, "return b()"),
            "-- the prelude\n\nlocal function a() return 1 end\n-- b calls a\nlocal function b()\n  return a()\nend\n\nreturn b()"
        );
    }

    #[test]
    fn names_in_strings_and_comments_bring_no_definition() {
        assert_eq!(
            super::with_lib(LIB, "return c() -- b()"),
            "-- the prelude\n\nlocal function c() return 'a()' end -- a() in a comment\n\nreturn c() -- b()"
        );
    }

    #[test]
    fn a_name_of_a_definition_of_several_brings_it_whole() {
        assert_eq!(
            super::with_lib(LIB, "return Y"),
            "-- the prelude\n\nlocal X, Y = 5, 6\n\nreturn Y"
        );
    }

    #[test]
    fn the_definitions_only_the_code_after_a_mark_uses_go_after_the_code_before_it() {
        assert_eq!(
            super::with_lib(LIB, "if a() then return end\n--@lib\nreturn b()"),
            "-- the prelude\n\nlocal function a() return 1 end\n\nif a() then return end\n-- b calls a\nlocal function b()\n  return a()\nend\n--@lib\nreturn b()"
        );
    }

    #[test]
    fn every_definition_of_the_library_is_found() {
        let lib = include_str!("lua/lib.lua");
        let (_, defs) = super::definitions(lib);
        let locals = lib.lines().filter(|l| l.starts_with("local ")).count();
        assert_eq!(defs.len(), locals);
        assert!(defs.iter().all(|d| !d.names.is_empty()));
        // Nothing of the library is lost on the way: every script with everything it names is
        // the library itself.
        let all: String = defs
            .iter()
            .map(|d| d.names.join(" "))
            .collect::<Vec<_>>()
            .join(" ");
        assert_eq!(super::with_lib(lib, &all), format!("{lib}\n{all}"));
    }

    /// `identifiers` reads `--` to the end of the line as a comment and `'...'`, `"..."` as
    /// strings; Lua's long brackets (`[[...]]`, `--[[...]]`, `[=[...]=]`) it does not know, and
    /// an apostrophe inside one would hide the names after it (review of issue 34, helper-44,
    /// finding 1). None may appear until it does.
    #[test]
    fn no_script_uses_long_brackets_which_the_name_scan_does_not_read() {
        let sources = std::iter::once(("lib", include_str!("lua/lib.lua")))
            .chain(super::BODIES.iter().copied());
        for (name, source) in sources {
            for pattern in ["[[", "[="] {
                assert!(
                    !source.contains(pattern),
                    "{name}.lua has {pattern:?}: teach scripts.rs' identifiers Lua's long brackets first, or write it otherwise (t[ k[1] ], a string)"
                );
            }
        }
    }

    #[test]
    fn names_after_an_escaped_quote_or_a_double_dash_in_a_string_are_read() {
        let lib = "local function a() end\nlocal function b() end\nlocal function c() end\n";
        let script = super::with_lib(lib, "local s = 'it\\'s -- ' .. a() .. \"--\" .. b()");
        assert!(script.contains("function a()"), "{script}");
        assert!(script.contains("function b()"), "{script}");
        assert!(!script.contains("function c()"), "{script}");
    }

    /// The words in capitals the scripts quote that are not commands.
    const OPTIONS: &[&str] = &[
        "COUNT",
        "LIMIT",
        "LT",
        "MINID",
        "PX",
        "REV",
        "WITHSCORES",
        "XX",
    ];

    #[test]
    fn every_command_a_script_runs_is_granted_by_the_least_rights_rules() {
        let rules: Vec<&str> = crate::ACL_RULES.split_whitespace().collect();
        let sources = std::iter::once(("lib", include_str!("lua/lib.lua")))
            .chain(super::BODIES.iter().copied());
        for (name, source) in sources {
            for line in source.lines().map(|l| l.split("--").next().unwrap_or("")) {
                for (k, quoted) in line.split('\'').enumerate() {
                    let command = k % 2 == 1
                        && !quoted.is_empty()
                        && quoted.bytes().all(|b| b.is_ascii_uppercase())
                        && !OPTIONS.contains(&quoted);
                    if command {
                        let grant = format!("+{}", quoted.to_ascii_lowercase());
                        assert!(
                            rules.contains(&grant.as_str()),
                            "{name}.lua runs {quoted}, which dq::store::ACL_RULES does not grant: add {grant} there (and to OPERATIONS.md's \"Least rights\"), or to OPTIONS here if it is no command"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn every_script_has_a_name_and_a_distinct_hash() {
        let hashes = super::script_hashes();
        let distinct: std::collections::HashSet<_> = hashes.iter().map(|(_, h)| h).collect();
        assert_eq!(distinct.len(), hashes.len());
        assert!(hashes.iter().any(|(name, _)| *name == "schedule_set_next"));
    }
}
