//! Periodic schedules, in shard 0 beside the worker registry.

use async_trait::async_trait;
use redis::Value;

use super::reply::{read, Applied};
use super::RedisStore;
use dq_core::store::{FiredTick, ScheduleEntry, Schedules};
use dq_core::Result;

#[async_trait]
impl Schedules for RedisStore {
    async fn put_schedule(&self, id: &str, spec_json: &str, next_us: Option<u64>) -> Result<()> {
        let args = [id, spec_json, &tick_arg(next_us)];
        self.schedule_script(&self.scripts().schedule_put, "put schedule", args)
            .await
            .map(drop)
    }

    async fn remove_schedule(&self, id: &str) -> Result<bool> {
        let k = self.keys(0);
        let mut pipe = redis::pipe();
        pipe.atomic()
            .hdel(k.schedules(), id)
            .zrem(k.schedule_next(), id)
            .hdel(k.schedule_last(), id)
            .hdel(k.schedule_gen(), id);
        let (removed, _, _, _): (u64, Value, Value, Value) =
            self.query_pipe("remove schedule", &pipe).await?;
        // Its tick fences, one per shard its ticks went to. One declared again under this id
        // starts at a generation above them anyway (Redis' clock), so this only frees memory.
        for keys in &self.shards {
            let cmd = redis::cmd("HDEL").arg(keys.tick_fence()).arg(id).clone();
            self.simple("remove schedule", &cmd).await?;
        }
        Ok(removed > 0)
    }

    async fn schedule(&self, id: &str) -> Result<Option<ScheduleEntry>> {
        let k = self.keys(0);
        let mut pipe = redis::pipe();
        pipe.hget(k.schedules(), id)
            .zscore(k.schedule_next(), id)
            .hget(k.schedule_last(), id)
            .hget(k.schedule_gen(), id);
        type Field = Option<String>;
        let (spec, next, last, generation): (Field, Field, Field, Field) =
            self.query_pipe("read schedule", &pipe).await?;
        Ok(spec.map(|spec| {
            ScheduleEntry::new(id.to_owned(), spec, us(next), us(last))
                .with_generation(us(generation).unwrap_or(0))
        }))
    }

    async fn schedules(&self) -> Result<Vec<ScheduleEntry>> {
        let k = self.keys(0);
        let mut pipe = redis::pipe();
        pipe.hgetall(k.schedules())
            .cmd("ZRANGE")
            .arg(k.schedule_next())
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .hgetall(k.schedule_last())
            .hgetall(k.schedule_gen());
        type Pairs = Vec<(String, String)>;
        let (specs, next, last, gens): (Pairs, Pairs, Pairs, Pairs) =
            self.query_pipe("list schedules", &pipe).await?;
        let next: std::collections::HashMap<String, String> = next.into_iter().collect();
        let last: std::collections::HashMap<String, String> = last.into_iter().collect();
        let gens: std::collections::HashMap<String, String> = gens.into_iter().collect();
        let mut all: Vec<ScheduleEntry> = specs
            .into_iter()
            .map(|(id, spec)| {
                let (n, l) = (next.get(&id).cloned(), last.get(&id).cloned());
                let g = us(gens.get(&id).cloned()).unwrap_or(0);
                ScheduleEntry::new(id, spec, us(n), us(l)).with_generation(g)
            })
            .collect();
        all.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(all)
    }

    async fn due_schedules(&self, until_us: u64, limit: usize) -> Result<Vec<(String, u64)>> {
        let mut cmd = redis::cmd("ZRANGE");
        cmd.arg(self.keys(0).schedule_next())
            .arg("-inf")
            .arg(until_us)
            .arg("BYSCORE")
            .arg("LIMIT")
            .arg(0)
            .arg(limit)
            .arg("WITHSCORES");
        let due: Vec<(String, String)> = self.query("due schedules", &cmd).await?;
        Ok(due
            .into_iter()
            .filter_map(|(id, tick)| Some((id, us(Some(tick))?)))
            .collect())
    }

    async fn advance_schedule(&self, fired: &FiredTick, to_us: Option<u64>) -> Result<bool> {
        let k = self.keys(0);
        let mut inv = self.scripts().schedule_advance.prepare_invoke();
        inv.key(k.schedule_next())
            .key(k.schedule_last())
            .key(k.schedule_gen())
            .arg(&fired.schedule)
            .arg(fired.tick_us)
            .arg(tick_arg(to_us))
            .arg(fired.generation);
        let reply = self.run("advance schedule", &mut inv).await?;
        Ok(read::<Applied>("advance schedule", reply)?.0)
    }

    async fn set_schedule_next(&self, id: &str, next_us: Option<u64>) -> Result<bool> {
        let reply = self
            .schedule_script(
                &self.scripts().schedule_set_next,
                "set schedule",
                [id, &tick_arg(next_us)],
            )
            .await?;
        Ok(read::<Applied>("set schedule", reply)?.0)
    }

    async fn raise_schedule_generation(&self, id: &str, above: u64) -> Result<Option<u64>> {
        let op = "raise schedule generation";
        let above = above.to_string();
        let reply = self
            .schedule_script(&self.scripts().schedule_raise, op, [id, &above])
            .await?;
        let generation: u64 = read(op, reply)?;
        Ok((generation > 0).then_some(generation))
    }
}

impl RedisStore {
    /// Runs a script over a schedule's spec, next tick and generation (shard 0) with `args`.
    async fn schedule_script<const N: usize>(
        &self,
        script: &redis::Script,
        op: &'static str,
        args: [&str; N],
    ) -> Result<Value> {
        let k = self.keys(0);
        let mut inv = script.prepare_invoke();
        inv.key(k.schedules())
            .key(k.schedule_next())
            .key(k.schedule_gen());
        for arg in args {
            inv.arg(arg);
        }
        self.run(op, &mut inv).await
    }
}

/// A tick as a script argument: its microseconds, or '' for none.
fn tick_arg(tick_us: Option<u64>) -> String {
    tick_us.map_or(String::new(), |t| t.to_string())
}

/// A score or stored number as microseconds (Redis prints large scores as `1.7e+15`).
fn us(text: Option<String>) -> Option<u64> {
    let text = text?;
    text.parse::<u64>().ok().or_else(|| {
        let f = text.parse::<f64>().ok()?;
        // Whole and within u64: the cast cannot truncate.
        (f >= 0.0 && f.fract() == 0.0 && f < 1.8e19).then_some(f as u64)
    })
}
