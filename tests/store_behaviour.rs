//! The store's behaviour, one test per behaviour, run against every store: Redis (a real
//! redis-server per test), a Redis Cluster (3 masters and 3 replicas per test) and the
//! in-memory store, so they cannot drift apart. The behaviours address shard 0, so the
//! cluster runs them with one shard; `tests/cluster.rs` spreads 16 shards over the masters.
//!
//! This file sets up the stores and runs each behaviour on each
//! (`behaviour_on_redis::<behaviour>`, `behaviour_on_cluster::...`, `behaviour_on_memory::...`);
//! the behaviours are in `store_behaviour/`, by subject. They wait on Redis far more than they
//! compute, so `scripts/test` runs them on their own, four at a time (the module names'
//! `behaviour_on_` is what it leaves out of the rest of the suite: keep it unique to this file).

#![allow(clippy::unwrap_used, unreachable_pub)] // test code: a panic is the failure report

mod support;

#[path = "store_behaviour/admin.rs"]
mod admin;
#[path = "store_behaviour/backpressure.rs"]
mod backpressure;
#[path = "store_behaviour/cancel_running.rs"]
mod cancel_running;
#[path = "store_behaviour/changes.rs"]
mod changes;
#[path = "store_behaviour/concurrency.rs"]
mod concurrency;
#[path = "store_behaviour/dead_letters.rs"]
mod dead_letters;
#[path = "store_behaviour/events.rs"]
mod events;
#[path = "store_behaviour/far.rs"]
mod far;
#[path = "store_behaviour/groups.rs"]
mod groups;
#[path = "store_behaviour/history.rs"]
mod history;
#[path = "store_behaviour/leases.rs"]
mod leases;
#[path = "store_behaviour/priorities.rs"]
mod priorities;
#[path = "store_behaviour/progress.rs"]
mod progress;
#[path = "store_behaviour/push.rs"]
mod push;
#[path = "store_behaviour/rate.rs"]
mod rate;
#[path = "store_behaviour/results.rs"]
mod results;
#[path = "store_behaviour/ticks.rs"]
mod ticks;
#[path = "store_behaviour/trace_context.rs"]
mod trace_context;
#[path = "store_behaviour/uniqueness.rs"]
mod uniqueness;
#[path = "store_behaviour/workflows.rs"]
mod workflows;

use std::sync::Arc;

use dq::push::{PushBuilder, PushOutcome};
use dq::store::{LeasedJob, MemoryStore};
use dq::{Client, JobInfo};
use support::{lease_one, topic, OrderCancel, RedisCluster, RedisServer, TestClient, LEASE};

#[derive(Clone, Copy, Debug)]
enum Kind {
    Redis,
    Cluster,
    Memory,
}

/// A client on a fresh store of the given kind (and its redis-server, killed on drop). On a
/// cluster, the keys its scripts touch are audited: a behaviour whose scripts touch a key they
/// did not declare fails when the harness drops (a live reshard could lose its writes: lib.lua's
/// `need`).
struct Harness {
    client: TestClient,
    _redis: Option<RedisServer>,
    _cluster: Option<RedisCluster>,
    audit: Option<dq_testkit::KeyAudit>,
}

impl Drop for Harness {
    fn drop(&mut self) {
        let Some(audit) = self.audit.take() else {
            return;
        };
        let names: std::collections::HashMap<String, &str> = dq::store::script_hashes()
            .into_iter()
            .map(|(name, sha)| (sha, name))
            .collect();
        let undeclared = audit.finish(&names);
        if !undeclared.is_empty() && !std::thread::panicking() {
            panic!(
                "scripts touched keys they did not declare (unsafe while a cluster reshards; lib.lua's need):\n{}",
                undeclared.join("\n")
            );
        }
    }
}

impl Harness {
    async fn new(
        kind: Kind,
        tweak: impl FnOnce(dq::config::ConfigBuilder) -> dq::config::ConfigBuilder,
    ) -> Harness {
        match kind {
            Kind::Redis => {
                let redis = RedisServer::start();
                let client = support::client_with(&redis, tweak).await;
                Harness {
                    client,
                    _redis: Some(redis),
                    _cluster: None,
                    audit: None,
                }
            }
            Kind::Cluster => {
                let cluster = RedisCluster::start(3, 1);
                let audit = dq_testkit::KeyAudit::start(
                    cluster.node(cluster.master_of("dq:{test:0}:jobs")),
                );
                let config = tweak(
                    dq::Config::builder()
                        .redis_cluster(cluster.urls())
                        .shards(1)
                        .namespace("test"),
                )
                .build()
                .unwrap();
                Harness {
                    client: TestClient::connect(config).await.unwrap(),
                    _redis: None,
                    _cluster: Some(cluster),
                    audit: Some(audit),
                }
            }
            Kind::Memory => {
                let config = tweak(dq::Config::builder()).build().unwrap();
                Harness {
                    client: TestClient::new(Arc::new(MemoryStore::new()), config),
                    _redis: None,
                    _cluster: None,
                    audit: None,
                }
            }
        }
    }
}

/// Each behaviour (`module: [behaviour, ...]`) as a test on each store.
macro_rules! on_every_store {
    ($($module:ident: [$($name:ident),* $(,)?]),* $(,)?) => {
        mod behaviour_on_redis {
            $($(#[tokio::test] async fn $name() { super::$module::$name(super::Kind::Redis).await })*)*
        }
        mod behaviour_on_cluster {
            $($(#[tokio::test] async fn $name() { super::$module::$name(super::Kind::Cluster).await })*)*
        }
        mod behaviour_on_memory {
            $($(#[tokio::test] async fn $name() { super::$module::$name(super::Kind::Memory).await })*)*
        }
    };
}

on_every_store!(
    far: [
        a_job_due_hours_ahead_shows_its_payload_due_time_and_attempts,
        a_job_due_hours_ahead_is_kept_or_replaced_by_a_push_of_its_id,
        a_job_due_hours_ahead_can_be_cancelled_and_its_id_used_again,
        a_job_due_hours_ahead_rescheduled_to_now_runs_with_its_payload,
        jobs_due_hours_ahead_are_listed_after_the_sooner_ones,
        thousands_of_jobs_due_hours_ahead_are_each_found_by_id,
        jobs_due_days_and_weeks_ahead_keep_their_exact_due_times,
        expanding_jobs_due_far_ahead_changes_none_of_them,
    ],
    workflows: [
        a_fan_in_step_runs_once_after_both_its_dependencies_succeeded,
        one_ack_of_the_steps_of_many_workflows_releases_each_ones_next,
        a_failed_dependency_cancels_the_steps_after_it_by_default,
        a_step_that_runs_after_a_failure_is_released_once_the_others_ended,
        a_failure_under_cancel_workflow_cancels_every_step_that_has_not_run,
        cancelling_a_workflow_cancels_what_has_not_run_and_releases_nothing_after,
        a_steps_delay_counts_from_its_release,
        a_blocked_step_is_shown_keeps_its_id_and_can_be_cancelled,
        a_workflow_is_stored_once_and_a_taken_job_id_refuses_all_of_it,
        a_step_whose_worker_died_on_its_last_attempt_fails_its_dependents,
        a_workflow_with_a_cycle_is_refused_before_anything_is_stored,
        released_and_cancelled_steps_and_the_workflows_end_are_job_events,
        a_waiting_job_a_workflow_cancel_deleted_leaves_its_id_free,
        a_job_taken_back_from_a_dead_worker_in_a_cancelled_workflow_is_deleted,
        a_step_id_taken_by_a_dead_letter_refuses_the_workflow,
        a_waiting_job_cancelled_with_its_workflow_answers_its_waits_cancelled,
        a_wait_for_a_blocked_step_waits_and_its_cancel_answers_it,
        a_step_released_and_cancelled_with_its_workflow_in_one_call_never_runs,
        a_wait_for_a_released_steps_job_hears_its_cancel,
        a_wait_for_a_released_steps_job_hears_its_ack,
        a_dead_steps_own_event_comes_before_its_workflows_end,
        a_cancel_of_an_ended_workflow_leaves_it_as_it_ended,
        a_released_step_keeps_the_time_its_workflow_was_pushed,
    ],
    groups: [
        a_groups_jobs_run_one_at_a_time_in_push_order,
        one_ack_of_many_grouped_topics_lets_each_groups_next_job_in,
        groups_take_turns_so_a_big_group_does_not_delay_a_small_one,
        a_dead_workers_group_slot_comes_back_and_its_job_runs_first_again,
        a_cancelled_waiting_job_is_skipped_and_counted_out,
        a_cancelled_job_in_line_gives_its_slot_to_the_next_of_its_group,
        a_group_concurrency_of_two_runs_two_of_a_group_at_once,
        a_retried_job_keeps_its_groups_slot_until_it_succeeds,
        a_dead_letter_frees_its_slot_and_a_requeue_waits_its_turn,
        a_delayed_grouped_job_waits_for_its_group_when_due,
        a_job_pushed_to_run_now_does_not_pass_one_of_its_group_already_due,
        jobs_pushed_together_behind_the_mover_go_in_line_in_push_order,
        a_job_rescheduled_to_run_now_does_not_pass_one_of_its_group_already_due,
        a_replaced_waiting_job_goes_last_of_its_group_once,
        a_waiting_job_rescheduled_to_later_leaves_the_line,
        a_replace_into_another_group_hands_the_old_slot_on,
        a_batch_moving_a_slot_holder_and_its_next_job_runs_each_once,
        a_batch_moving_a_slot_holder_and_replacing_its_next_job_runs_each_once,
        a_batch_moving_a_slot_holder_and_replacing_one_of_several_waiting_runs_each_once,
        stats_and_listings_show_the_waiting_jobs_and_the_busiest_groups,
        an_ack_of_several_groups_counts_each_groups_waiting_jobs_down,
        a_job_its_group_lets_in_goes_in_line_at_its_priority,
        a_groups_slot_count_follows_its_jobs_as_they_end_and_come_in,
        a_group_key_that_is_not_a_valid_key_is_refused,
        a_group_rate_spaces_a_groups_starts_and_leaves_other_groups_alone,
        a_job_held_back_by_its_group_rate_keeps_its_slot_and_its_place,
        a_group_rate_lifted_lets_the_groups_jobs_start_at_once,
        jobs_held_back_by_a_group_rate_start_in_the_order_they_were_held_back,
        a_job_held_back_by_its_group_rate_leaves_the_room_it_took_unused,
        a_job_held_back_by_its_group_rate_does_not_throttle_the_topic,
        a_job_held_back_by_its_group_rate_is_announced_as_postponed,
    ],
    priorities: [
        higher_priorities_run_first_and_one_priority_in_push_order,
        a_fetch_from_the_list_leaves_the_lower_priorities_waiting,
        a_replace_that_raises_a_priority_runs_the_job_once,
        the_oldest_ready_job_is_found_behind_younger_ones_of_higher_priority,
        a_store_refuses_a_priority_outside_the_range,
        a_job_that_waited_keeps_its_priority_when_it_becomes_due,
        released_and_reclaimed_jobs_go_back_first_of_their_priority,
        retried_and_requeued_jobs_keep_their_priority,
        ranked_ready_jobs_are_listed_counted_cancelled_and_replaced_in_fetch_order,
        a_priority_outside_the_range_is_refused_and_nothing_stored,
    ],
    push: [
        pushed_job_is_delayed_with_its_payload_and_due_time,
        push_without_id_generates_unique_ids,
        push_of_a_pending_id_keeps_the_first_job_by_default,
        push_with_replace_swaps_payload_and_due_time,
        replace_leaves_a_running_job_alone,
        push_at_a_past_time_is_ready_at_once,
        concurrent_pushes_are_each_stored_once,
        the_same_id_twice_in_one_batch_is_one_job,
        keep_and_replace_pushes_in_one_batch_each_get_their_mode,
        batch_of_100_000_jobs_is_pushed_and_promoted_with_none_lost,
        invalid_topics_and_ids_are_rejected_before_anything_is_stored,
        oversized_payload_is_rejected_with_the_limit,
        a_bad_job_in_a_batch_fails_the_batch_and_stores_nothing,
    ],
    changes: [
        cancel_deletes_delayed_and_ready_jobs_but_not_running_ones,
        reschedule_moves_a_pending_job_and_refuses_a_running_one,
        ready_jobs_replaced_cancelled_or_rescheduled_are_counted_listed_and_run_once,
        a_reused_id_after_a_cancel_of_a_ready_job_runs_once,
        stats_answer_when_only_stale_entries_were_left,
    ],
    leases: [
        promote_moves_only_due_jobs_and_reports_the_next_due_time,
        promote_moves_a_bounded_batch_per_call,
        fetch_leases_at_most_the_asked_number_and_counts_the_attempt,
        ack_completes_jobs_and_refuses_a_lease_that_was_taken_over,
        retry_records_the_error_and_runs_again_after_the_delay,
        a_retry_delay_over_the_limit_is_refused_and_the_job_stays_leased,
        a_postponed_job_runs_again_without_spending_an_attempt_or_its_last_error,
        reclaim_requeues_expired_leases_and_dead_letters_the_last_attempt,
        reclaim_judges_a_job_by_its_listeners_attempt_limit_until_it_is_forgotten,
        reclaim_says_when_the_next_lease_still_held_runs_out,
        extend_keeps_a_running_job_leased,
        release_puts_jobs_back_first_in_line_without_spending_an_attempt,
    ],
    dead_letters: [
        dead_letters_keep_the_error_and_can_be_listed_requeued_and_purged,
        requeue_without_ids_takes_the_oldest_dead_letters_up_to_the_limit,
        a_dead_job_does_not_block_its_id,
        deleting_a_dead_letter_leaves_a_job_pushed_again_under_its_id_alone,
        dead_letters_are_retried_and_purged_through_the_client,
        dead_letters_page_with_a_cursor_at_most_1000_per_call,
        retry_all_dead_takes_only_what_died_before_it_began,
    ],
    admin: [
        a_paused_topic_is_not_fetched_until_resumed,
        a_topic_paused_before_its_first_push_is_listed_as_paused,
        counts_are_kept_per_topic,
        listing_pages_through_each_state_of_one_topic,
        stats_show_how_far_behind_and_what_comes_next,
        workers_are_listed_while_they_beat,
        throughput_counts_runs_done_and_failed_in_the_last_hour_per_topic,
    ],
    uniqueness: [
        unique_for_reserves_the_id_after_the_job_succeeds_until_the_window_ends,
        unique_for_reserves_nothing_when_the_job_dies_or_is_cancelled,
        a_replace_without_unique_for_drops_the_reservation_asked_before,
        a_uniqueness_window_over_the_limit_is_refused_and_one_at_the_limit_holds,
        unique_by_payload_makes_the_same_message_one_job,
        debounce_keeps_the_last_payload_and_moves_the_due_time,
    ],
    ticks: [
        a_ticks_job_is_created_once_per_generation_even_after_it_is_gone,
        a_schedule_moves_on_only_under_the_generation_its_look_read,
    ],
    cancel_running: [
        a_cancel_of_a_running_job_is_announced_and_recorded_against_its_lease,
        status_says_a_running_jobs_cancel_was_requested_until_its_run_ends,
        cancel_running_deletes_the_job_and_ends_the_waits_for_it,
        a_cancel_request_goes_with_the_lease_and_binds_no_later_run,
        a_run_that_fails_after_its_cancel_was_requested_is_deleted_not_retried,
        end_run_says_which_runs_were_deleted_as_cancelled,
    ],
    results: [
        a_topic_without_retention_keeps_nothing_of_a_succeeded_job,
        an_ack_of_two_topics_keeps_only_the_jobs_of_the_one_with_retention,
        a_topic_whose_retention_is_removed_forgets_its_succeeded_jobs,
        a_succeeded_job_of_a_topic_with_retention_is_done_with_its_value,
        done_records_past_the_count_go_oldest_first,
        done_records_older_than_the_age_go_at_a_later_ack,
        done_records_are_listed_newest_first_page_by_page,
        a_push_of_a_done_id_makes_a_new_job,
        a_done_record_keeps_its_unique_for_reservation_and_is_not_rescheduled,
        a_cancel_deletes_a_done_record,
        the_done_count_follows_acks_pushes_and_trims,
        an_id_cancelled_and_kept_again_outlives_the_call_that_first_kept_it,
        wait_answers_at_once_for_a_done_a_dead_and_an_unknown_job,
        wait_answers_not_kept_for_a_topic_without_retention,
        a_wait_for_a_pending_job_of_a_topic_without_retention_answers_not_kept_when_it_succeeds,
        a_wait_for_a_pending_job_of_a_topic_without_retention_answers_dead_when_it_dies,
        a_wait_made_before_the_retention_is_recorded_gets_the_value,
        wait_is_woken_when_the_job_is_acked,
        a_wait_without_a_bound_gets_the_value,
        a_wait_whose_topic_stops_keeping_ends_is_answered_not_kept,
        wait_times_out_on_a_job_still_pending,
        a_dead_letter_ends_the_wait_with_its_error,
        a_cancel_ends_the_wait_as_cancelled,
        a_cancelled_job_past_the_retention_count_is_not_found,
    ],
    progress: [
        a_running_jobs_progress_is_read_back_and_replaced_by_the_next,
        progress_is_refused_for_a_lease_no_longer_held_and_over_the_bound,
        progress_goes_when_the_job_is_acked,
        progress_goes_whenever_the_job_leaves_running,
    ],
    trace_context: [
        a_jobs_trace_context_reaches_every_run_whatever_rewrote_the_job,
        a_traced_job_is_read_listed_and_counted_as_any,
    ],
    events: [
        a_jobs_life_gives_pushed_started_and_succeeded_in_order,
        a_failing_job_gives_failed_and_retrying_then_dead,
        a_cancel_gives_cancelled_before_or_while_the_job_runs,
        every_other_step_of_a_job_is_announced_with_its_run,
        a_succeeded_event_carries_the_value_only_when_the_topic_keeps_it,
        a_topic_without_events_has_no_stream_at_all,
        a_reader_resuming_across_events_turned_off_and_on_misses_nothing,
        a_reader_resuming_behind_the_cap_is_told_how_many_it_missed,
        a_reader_resumed_inside_a_bulk_push_gets_the_rest_of_it_once,
        the_cap_counts_events_however_many_an_entry_holds,
    ],
    backpressure: [
        a_push_past_max_pending_is_refused_and_stores_nothing,
        a_batch_past_max_pending_says_which_jobs_it_refused,
    ],
    rate: [
        a_rate_limited_fetch_leases_its_burst_and_says_when_the_next_may_start,
        a_fetch_that_leaves_no_job_behind_is_not_throttled,
        a_rate_is_never_exceeded_by_a_consumer_fetching_in_a_loop,
        lifting_the_rate_lets_every_ready_job_out,
        a_hold_stops_every_fetch_of_its_topic_until_it_ends,
        declaring_the_same_rate_again_keeps_where_the_limit_stands,
        a_lost_fetchs_jobs_wait_out_a_hold_in_the_ready_list,
        a_lifted_hold_lets_the_topic_start_at_once,
    ],
    concurrency: [
        a_fetch_leases_no_more_than_the_global_concurrency_allows,
        a_fetch_that_takes_the_last_ready_job_is_not_at_capacity,
        a_dead_workers_slot_comes_back_when_its_lease_is_reclaimed,
        stale_entries_ahead_of_a_free_slot_do_not_read_as_a_full_topic,
    ],
    history: [
        a_jobs_history_keeps_the_error_of_each_run_that_failed,
        a_jobs_history_is_empty_when_its_topic_has_no_events,
        a_job_keeps_the_error_of_each_failed_run_without_events,
        a_dead_letter_keeps_the_error_of_each_failed_run_and_a_retry_of_it_goes_on,
        a_job_keeps_the_latest_ten_failed_runs_each_cut_at_a_characters_start,
    ],
);

/// What a push did: created its job, kept the pending one, replaced it, ...
async fn outcome(push: PushBuilder) -> PushOutcome {
    push.send().await.unwrap().outcome
}

/// The status of job `id` of `topic_name`, which must exist.
async fn existing(c: &Client, topic_name: &str, id: &str) -> JobInfo {
    let info = c.status_in(topic_name, id).await.unwrap();
    info.unwrap_or_else(|| panic!("no job {topic_name}:{id}"))
}

/// Pushes the order-cancel job `id` (order 1) and leases it.
async fn push_and_lease(c: &TestClient, id: &str) -> LeasedJob {
    c.push(OrderCancel { order_id: 1 }).id(id).await.unwrap();
    lease_one(c.store(), "order-cancel").await
}

/// Nothing was stored: the store knows no topic.
async fn assert_nothing_written(c: &TestClient) {
    let topics = c.store().topics().await.unwrap();
    assert!(topics.is_empty(), "nothing was written");
}

/// Pushes `n` jobs of `topic_name` (ids `0`, `1`, ..., each with its number as payload),
/// leases them all and dead-letters each with the error `error(id)`.
async fn push_and_dead_letter(
    c: &TestClient,
    topic_name: &str,
    n: u64,
    error: impl Fn(&str) -> String,
) {
    let jobs = (0..n).map(|i| c.push_to(topic_name, &i).id(i.to_string()));
    c.push_batch(jobs).await.unwrap();
    let (s, t) = (c.store(), topic(topic_name));
    let mut leased = Vec::new();
    while leased.len() < n as usize {
        leased.extend(s.fetch(0, &t, 1000, LEASE).await.unwrap().jobs);
    }
    for j in &leased {
        let message = error(j.lease.id.as_str());
        assert!(s.dead_letter(&j.lease, &message).await.unwrap());
    }
}
