//! The names of the metrics dq records, in one place; every recorder call in dq uses these
//! constants. What to watch and alert on is in OPERATIONS.md.

/// Counter, label `topic`: jobs created or replaced by pushes of this process.
pub const JOBS_PUSHED: &str = "dq_jobs_pushed_total";
/// Counter, label `topic`: jobs a push refused because their topic was full (`max_pending`).
pub const PUSHES_REFUSED_FULL: &str = "dq_pushes_refused_full_total";
/// Counter, label `topic`: handler runs started.
pub const JOBS_STARTED: &str = "dq_jobs_started_total";
/// Counter, label `topic`: runs that finished the job.
pub const JOBS_SUCCEEDED: &str = "dq_jobs_succeeded_total";
/// Counter, label `topic`: runs that failed (error, panic, timeout).
pub const JOBS_FAILED: &str = "dq_jobs_failed_total";
/// Counter, label `topic`: runs cancelled by their timeout.
pub const JOBS_TIMED_OUT: &str = "dq_jobs_timed_out_total";
/// Counter, label `topic`: failed jobs scheduled to run again.
pub const JOBS_RETRIED: &str = "dq_jobs_retried_total";
/// Counter, label `topic`: jobs whose handler asked to run again later.
pub const JOBS_POSTPONED: &str = "dq_jobs_postponed_total";
/// Counter, label `topic`: runs whose handler met its provider's rate limit
/// (`Outcome::RateLimited`): the topic was held back in every process, the job went back to
/// ready, no attempt spent.
pub const JOBS_RATE_LIMITED: &str = "dq_jobs_rate_limited_total";
/// Counter, label `topic`: fetches that the topic's rate limit (or a hold) cut short while jobs
/// were ready: the consumer waited for the next start the limit allowed.
pub const FETCHES_THROTTLED: &str = "dq_fetches_throttled_total";
/// Counter, label `topic`: fetches that the topic's global concurrency cut short while jobs
/// were ready: the consumer waited for a lease to end. Over several shards (a cluster), also a
/// fetch that found no slot free, whether or not jobs were ready: it asks its shard nothing.
pub const FETCHES_AT_CAPACITY: &str = "dq_fetches_at_capacity_total";
/// Counter, label `topic`: ready jobs a fetch of this process found whose group had used its
/// rate (`group_rate`): each went back to wait for its group's next turn, not started.
pub const JOBS_HELD_BY_GROUP_RATE: &str = "dq_jobs_held_by_group_rate_total";
/// Counter, label `topic`: jobs moved to the dead letters.
pub const JOBS_DEAD_LETTERED: &str = "dq_jobs_dead_lettered_total";
/// Counter, label `topic`: jobs of a fetch whose reply was lost, taken back by a later fetch of
/// the same consumer (no run counted).
pub const JOBS_TAKEN_BACK: &str = "dq_jobs_taken_back_total";
/// Counter, label `topic`: runs whose lease was found lost while the handler ran (the job may
/// run elsewhere too; its outcome will be refused).
pub const LEASES_LOST: &str = "dq_leases_lost_total";
/// Counter, label `topic`: running jobs a cancel asked to stop whose run then ended without
/// success: deleted, neither retried nor dead-lettered.
pub const JOBS_CANCELLED: &str = "dq_jobs_cancelled_total";
/// Counter, label `topic`: progress reports (`JobContext::progress`) written to the store.
pub const PROGRESS_REPORTS: &str = "dq_progress_reports_total";
/// Counter, label `topic`: succeeded jobs acked with their record kept (the listener has a
/// retention), value or not.
pub const RESULTS_KEPT: &str = "dq_results_kept_total";
/// Counter, labels `topic` and `answer`: waits for a job's end (`Client::wait`), by what they
/// answered: `finished` (succeeded), `dead`, `not_kept`, `cancelled`, `not_found` or
/// `timed_out`.
pub const WAITS: &str = "dq_waits_total";
/// Counter, label `topic`: job events handed out by this process' event readers
/// (`Client::events`; a topic read by two readers counts each).
pub const EVENTS_READ: &str = "dq_events_read_total";
/// Counter, label `topic`: job events this process' readers missed: trimmed from their stream
/// (past its cap) before they were read (`EventItem::Lagged`). Above 0, a reader is slower
/// than its topic, or was stopped for longer than the cap holds: raise the listener's
/// `events_cap`, or read faster.
pub const EVENTS_MISSED: &str = "dq_events_missed_total";
/// Gauge, label `topic`: how old the latest event a reader of this process handed out was when
/// it did, in seconds: a reader falling behind its topic shows here before it misses events.
/// Set at each event handed out (by the store's time of the event against this host's clock,
/// 0 when that is behind): a reader that stopped keeps its last value, and shows instead as
/// [`EVENTS_READ`] no longer growing. Several readers of one topic in a process share it.
pub const EVENTS_BEHIND: &str = "dq_events_behind_seconds";
/// Histogram, label `topic`: start of a run minus the job's due time, in seconds.
pub const JOB_LATENESS: &str = "dq_job_lateness_seconds";
/// Histogram, label `topic`: how long handlers ran, in seconds.
pub const JOB_DURATION: &str = "dq_job_duration_seconds";
/// Gauge, labels `topic` and `state`: jobs delayed, ready, running and dead, and the records of
/// succeeded jobs kept (`done`, with a retention).
pub const QUEUE_JOBS: &str = "dq_queue_jobs";
/// Gauge, label `topic`: age of the oldest ready job, in seconds.
pub const QUEUE_LAG: &str = "dq_queue_lag_seconds";
/// Gauge, label `topic`: the most jobs one group of the topic has waiting for a slot (its
/// busiest group's; 0 when none waits): a tenant flooding its group shows here, its name in
/// `dq groups`.
pub const QUEUE_GROUP_WAITING_MAX: &str = "dq_queue_group_waiting_max";
/// Gauge, labels `topic` and `limit`: each flow limit of the topic, 0 when it has none:
/// `max_pending`, `global_concurrency`, `rate_per_second` (a rate limit's count over its
/// period), `group_concurrency` (1 when none is set: the default) and `group_rate_per_second`.
pub const TOPIC_LIMIT: &str = "dq_topic_limit";
/// Gauge, labels `topic` and `limit`: how much of a limit the topic uses, from 0 to 1 (and past
/// 1 while a bound lowered below what is already there is caught up with): its pending jobs over
/// `max_pending`, its running jobs over `global_concurrency`, and for `rate_per_second` the runs
/// that ended in the last full minute over the starts its rate allows in a minute
/// (`Throughput::rate_used`: over more minutes for a slow rate, 0 for one of under two starts
/// an hour); 0 for a limit it does not have.
pub const TOPIC_LIMIT_USED: &str = "dq_topic_limit_used_ratio";
/// Counter, labels `topic`, `limit`, `call` and `outcome`: calls this process made to the
/// namespace's first shard, which counts a topic's `rate` or `global_concurrency` for every
/// shard when the namespace has several (a cluster's 16, or `DQ_SHARDS` above 1; none on one
/// shard). `call`: `take` (a fetch's grant of starts or slots), `give_back` (the starts a fetch
/// did not use), `free` (the slots of ended runs no fetch took) or `renew` (the slots of running
/// jobs, at a lease extension or after a slow fetch). `outcome`: `ok`, `failed` (no answer or an
/// error: a fetch without its grant of starts starts none, one without its grant of slots no
/// more than it kept; a slot not freed comes back when its grant runs out; a grant not renewed
/// may run out under its running jobs, and one more job may then start), or `late` for a
/// `give_back` dropped because a later grant, or a start in the first shard, moved the rate on
/// (those starts are lost to the rate for its period, never added to it). `failed` growing
/// explains a limited topic that stalls while its own shard is healthy: look at the first
/// shard's master.
pub const FIRST_SHARD_CALLS: &str = "dq_first_shard_calls_total";
/// Gauge, label `topic`: seconds left of a hold a handler asked for (`Outcome::RateLimited`),
/// 0 when none is in force.
pub const TOPIC_HELD: &str = "dq_topic_held_seconds";
/// Counter: jobs a schedule created, by schedule and topic (one per tick however many processes
/// fire it; catch-up jobs for missed ticks count too).
pub const SCHEDULE_FIRED: &str = "dq_schedule_fired_total";
/// Histogram: how late after its tick a schedule's job was created (0 when it was created ahead
/// of its tick, as it normally is: the job is then due exactly at the tick), by schedule.
pub const SCHEDULE_LATENESS: &str = "dq_schedule_lateness_seconds";
