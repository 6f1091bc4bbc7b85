//! Which shard holds a job: the same on every store and every release.

use crate::name::{JobId, Topic};

/// The shard of a job: FNV-1a of `topic:id`, modulo the shard count. Stable across releases
/// and platforms, because changing it would strand every pending job.
pub fn shard_of(topic: &Topic, id: &JobId, shards: u16) -> u16 {
    hashed(topic, id.as_str(), shards)
}

/// The shard that holds every job of `group` of `topic`: FNV-1a of `topic:group`, as
/// [`shard_of`] takes of an id. A grouped job's id must lead to the same shard (a generated
/// one is chosen so), so that its group's slots are counted in one place whatever the number
/// of shards.
pub fn shard_of_group(topic: &Topic, group: &str, shards: u16) -> u16 {
    hashed(topic, group, shards)
}

fn hashed(topic: &Topic, key: &str, shards: u16) -> u16 {
    if shards <= 1 {
        return 0;
    }
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in topic
        .as_str()
        .bytes()
        .chain(std::iter::once(b':'))
        .chain(key.bytes())
    {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    u16::try_from(hash % u64::from(shards)).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_of_is_stable_and_spreads() {
        let t = Topic::new("t").unwrap();
        let id = JobId::new("42").unwrap();
        assert_eq!(shard_of(&t, &id, 16), shard_of(&t, &id, 16));
        let mut seen = std::collections::HashSet::new();
        for i in 0..1000 {
            seen.insert(shard_of(&t, &JobId::new(i.to_string()).unwrap(), 16));
        }
        assert_eq!(seen.len(), 16);
    }
}
