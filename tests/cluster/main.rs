//! The third world: the real control plane (`harness::control_plane`:
//! etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok's
//! nodes and the LeaderWorkerSet manager, built from their Go modules by
//! `build.sh` beside this file) with the real `tandem serve` under exactly
//! the RBAC of `manifests/base/rbac.yaml`. What Kubernetes' own controllers,
//! scheduler and kubelets (played by kwok) do to Tandem's objects is asked
//! here, and nowhere else (tests/README.md).
//!
//! One test binary. Most scenarios share one control plane, each in a
//! namespace and on nodes of its own, several at once; the few that change
//! what the whole cluster sees (its CRDs, webhooks, RBAC or gates, or
//! Tandem's own process) run on a plane of their own, which is stopped as
//! soon as its last scenario is done. The harness is libtest's command line
//! (libtest-mimic), so that one step runs after every scenario: when all
//! those of the shared plane ran and passed, every request Tandem made on it
//! is checked against the RBAC it runs under, both ways
//! ([`end_to_end::every_request_granted_and_every_grant_used`]).

mod autoscaling;
mod batching;
mod dependencies;
mod end_to_end;
mod first_start;
mod gates_off;
mod helm;
mod install;
mod leader;
mod nodes;
mod pickers;
mod scale_nodes;
mod uninstall;

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use harness::control_plane::{ControlPlane, SHARED};
use libtest_mimic::{Arguments, Trial};

/// How many scenarios run at once when `--test-threads` does not say.
/// Most of a scenario's time is waiting (for kwok's load delays, grace
/// periods, the HPA's sync, a quiet check's ten seconds), so more run at
/// once than there are cores; BENCHMARKS.md ("A CI run's time") has the
/// measurements behind the number.
const AT_ONCE: usize = 6;

/// The control plane a scenario runs on.
#[derive(Clone, Copy, PartialEq, Eq)]
enum On {
    /// [`ControlPlane::shared`], whose requests the RBAC check reads.
    Shared,
    /// [`ControlPlane::own`] of that name.
    Own(&'static str),
}

impl On {
    fn name(self) -> &'static str {
        match self {
            On::Shared => SHARED,
            On::Own(name) => name,
        }
    }
}

/// One scenario: its trial and the plane it runs on.
struct Planned {
    trial: Trial,
    on: On,
}

/// How long each scenario took, by name, printed at the end (the figures
/// BENCHMARKS.md's table of a CI run takes).
static TOOK: Mutex<Vec<(String, Duration)>> = Mutex::new(Vec::new());

/// The scenarios still to finish on each plane; the last one to finish
/// stops the plane (see [`Finished`]).
static LEFT: Mutex<BTreeMap<&'static str, usize>> = Mutex::new(BTreeMap::new());

/// Marks a scenario finished when dropped, whether it passed or panicked:
/// records its time and stops its plane if it was the plane's last.
struct Finished {
    name: &'static str,
    on: On,
    started: Instant,
}

impl Drop for Finished {
    fn drop(&mut self) {
        let took = self.started.elapsed();
        eprintln!("scenario {} took {:.1} s", self.name, took.as_secs_f64());
        TOOK.lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push((self.name.to_owned(), took));
        let last = {
            let mut left = LEFT.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            let count = left.entry(self.on.name()).or_default();
            *count = count.saturating_sub(1);
            *count == 0
        };
        if last && self.on != On::Shared {
            ControlPlane::stop(self.on.name());
        }
    }
}

fn planned(on: On, name: &'static str, body: impl Fn() + Send + Sync + 'static) -> Planned {
    let trial = Trial::test(name, move || {
        let _finished = Finished {
            name,
            on,
            started: Instant::now(),
        };
        body();
        Ok(())
    });
    Planned { trial, on }
}

/// Runs an async scenario on a runtime of its own, as `#[tokio::test]`
/// with two workers would.
fn block_on(scenario: impl std::future::Future<Output = ()>) {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(scenario);
}

fn ignored(mut planned: Planned, why: &'static str) -> Planned {
    eprintln!(
        "{} is ignored unless asked for: {why}",
        planned.trial.name()
    );
    planned.trial = planned.trial.with_ignored_flag(true);
    planned
}

macro_rules! scenario {
    ($on:expr, async $module:ident :: $name:ident) => {
        planned(
            $on,
            concat!(stringify!($module), "::", stringify!($name)),
            || block_on($module::$name()),
        )
    };
    ($on:expr, $module:ident :: $name:ident) => {
        planned(
            $on,
            concat!(stringify!($module), "::", stringify!($name)),
            $module::$name,
        )
    };
}

fn main() -> ExitCode {
    let mut arguments = Arguments::from_args();
    arguments.test_threads = arguments.test_threads.or(Some(AT_ONCE));
    let scenarios = scenarios();
    // Which scenarios this run takes, as libtest-mimic will decide.
    let runs = |p: &Planned| {
        let ignored = p.trial.has_ignored_flag();
        let by_flag = if arguments.ignored {
            ignored
        } else {
            !ignored || arguments.include_ignored
        };
        by_flag && !arguments.is_filtered_out(&p.trial)
    };
    let shared = scenarios.iter().filter(|p| p.on == On::Shared).count();
    let shared_running = scenarios
        .iter()
        .filter(|p| p.on == On::Shared && runs(p))
        .count();
    {
        let mut left = LEFT.lock().expect("nothing has run yet");
        for p in scenarios.iter().filter(|p| runs(p)) {
            *left.entry(p.on.name()).or_default() += 1;
        }
    }
    let listing = arguments.list;
    let trials = scenarios.into_iter().map(|p| p.trial).collect();
    let conclusion = libtest_mimic::run(&arguments, trials);
    if listing {
        return conclusion.exit_code();
    }
    print_times();
    if conclusion.has_failed() {
        return conclusion.exit_code();
    }
    if let Some(reason) = harness::control_plane::unavailable() {
        eprintln!("SKIPPED the RBAC check: {reason}");
        return conclusion.exit_code();
    }
    if shared_running != shared {
        eprintln!(
            "SKIPPED the RBAC check: it needs the requests of every scenario on the shared \
             plane, and {shared_running} of {shared} ran"
        );
        return conclusion.exit_code();
    }
    match end_to_end::every_request_granted_and_every_grant_used() {
        Ok(used) => {
            println!("RBAC check: ok, {used}");
            conclusion.exit_code()
        }
        Err(problem) => {
            eprintln!("RBAC check FAILED: {problem}");
            ExitCode::FAILURE
        }
    }
}

/// Every scenario's time, longest first.
fn print_times() {
    let mut took = TOOK
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .clone();
    took.sort_by_key(|(_, took)| std::cmp::Reverse(*took));
    eprintln!("scenario times, longest first:");
    for (name, took) in took {
        eprintln!("{:>8.1} s  {name}", took.as_secs_f64());
    }
}

/// Every scenario, in the order they start: the longest first, so that
/// the last to finish is a short one.
fn scenarios() -> Vec<Planned> {
    vec![
        // First: it builds KEDA's operator (about 6 minutes of the 2 cores
        // when Go's build cache is cold), beside the other scenarios.
        scenario!(On::Shared, async autoscaling::keda_takes_a_prefill_decode_service_to_zero_and_a_queued_request_brings_the_pair_back),
        scenario!(On::Shared, async nodes::a_replica_whose_pods_cannot_come_back_still_counts_in_its_roles_budget),
        scenario!(On::Shared, async nodes::a_placement_change_replaces_each_replicas_group_only_with_the_replica),
        scenario!(On::Shared, async nodes::kubernetes_gang_binds_the_core_pair_all_or_nothing_and_each_further_replica_alone),
        scenario!(On::Shared, async nodes::kubernetes_gang_keeps_each_replica_in_one_rack_and_waits_whole_for_a_rack_that_holds_it),
        scenario!(On::Shared, async pickers::gies_endpoint_picker_runs_on_tandems_configuration_as_its_service_account_and_holds_the_ready_leaders),
        scenario!(On::Shared, async autoscaling::an_hpa_scaling_a_view_in_the_middle_of_a_rollout_is_honoured),
        scenario!(On::Shared, async nodes::a_rolling_update_with_surge_and_a_partition_keeps_its_budget_at_every_pod_event),
        scenario!(On::Own(first_start::PLANE), async first_start::a_first_start_over_200_services_serves_each_in_turn),
        scenario!(On::Shared, async nodes::a_crash_loop_under_group_recreation_is_one_degraded_episode_with_the_exit_and_one_event),
        scenario!(On::Shared, async nodes::a_multi_node_replica_is_not_recreated_while_one_of_its_pods_is_pending),
        scenario!(On::Shared, async nodes::a_replica_that_keeps_restarting_backs_off_fails_at_its_limit_and_a_new_template_brings_it_back),
        scenario!(On::Shared, async pickers::the_quickstarts_service_is_admitted_and_gies_picker_holds_its_simulated_replicas),
        scenario!(On::Shared, async pickers::gies_picker_at_zero_starts_holds_no_endpoint_and_queues_a_request_until_its_timeout),
        scenario!(On::Own(batching::PLANE), async batching::many_creations_at_once_create_each_child_once),
        scenario!(On::Shared, async nodes::a_rolling_update_to_an_image_that_never_gets_ready_halts_after_one_replica_and_a_revert_resumes),
        scenario!(On::Shared, async autoscaling::an_hpa_on_prefill_moves_decode_at_its_ratio_at_every_step),
        scenario!(On::Shared, async autoscaling::an_hpa_on_each_role_keeps_decode_within_its_band_of_prefill_at_every_instant),
        scenario!(On::Shared, async autoscaling::an_hpa_takes_a_prefill_decode_service_to_zero_and_a_queued_request_brings_the_pair_back),
        scenario!(On::Shared, async autoscaling::an_hpa_on_a_view_scales_it_by_priority_on_a_served_metric_and_back_down_spot_first),
        scenario!(On::Shared, async end_to_end::a_service_named_as_every_child_accepts_deploys_and_a_dotted_name_is_denied_with_a_hint),
        scenario!(On::Shared, async nodes::kubernetes_gang_lands_the_prefill_decode_pair_in_one_block),
        scenario!(On::Shared, async nodes::a_node_drain_through_the_eviction_api_is_held_by_each_roles_budget),
        scenario!(On::Shared, async nodes::a_new_revision_takes_all_traffic_at_once_only_when_every_replica_of_it_is_ready),
        scenario!(On::Shared, async nodes::an_incremental_upgrade_moves_traffic_only_onto_ready_pods_and_a_rollback_returns_it),
        scenario!(On::Own(batching::PLANE), async batching::a_scale_typo_corrected_within_two_seconds_stops_after_one_batch),
        scenario!(On::Shared, async end_to_end::a_paced_rolling_update_replaces_one_decode_replica_at_a_time_and_leaves_prefill_alone),
        scenario!(On::Shared, async end_to_end::a_target_deployment_scaled_by_hand_is_set_back_without_reading_the_api_server),
        scenario!(On::Shared, async nodes::an_exclusive_rack_holds_one_replica_and_the_next_waits_for_a_rack_of_its_own),
        scenario!(On::Shared, async nodes::without_a_gang_each_replica_shares_one_rack_by_pod_affinity),
        scenario!(On::Shared, async end_to_end::group_replication_goes_from_one_group_to_three_and_back_to_two),
        scenario!(On::Shared, async nodes::single_node_replicas_spread_evenly_over_blocks),
        scenario!(On::Shared, async nodes::a_preferred_rack_schedules_across_racks_when_no_rack_has_room),
        scenario!(On::Shared, async nodes::a_lost_node_is_tainted_its_pods_evicted_and_the_replica_comes_back_elsewhere),
        scenario!(On::Shared, async end_to_end::an_hpa_scaling_the_inplace_source_moves_the_targets_and_a_hand_edit_is_set_back),
        scenario!(On::Shared, async nodes::a_scaling_group_moves_a_statefulset_and_a_leaderworkerset_with_a_deployment_and_their_pods_follow),
        scenario!(On::Shared, async end_to_end::a_router_role_gets_its_endpoint_picker_pool_and_route_from_the_real_controllers),
        scenario!(On::Shared, async autoscaling::an_hpa_on_a_replicated_group_adds_and_removes_whole_units),
        scenario!(On::Shared, async end_to_end::fields_another_manager_adds_to_a_leader_worker_set_are_kept_and_nothing_is_written),
        scenario!(On::Own(dependencies::PLANE), async dependencies::the_installed_volcano_decides_the_gang_layout_and_a_missing_lws_is_refused),
        scenario!(On::Shared, async nodes::a_service_larger_than_the_fleet_waits_with_the_schedulers_reason_and_starts_when_nodes_come),
        scenario!(On::Shared, async end_to_end::a_child_deleted_by_hand_is_recreated_and_pod_readiness_reaches_status_from_the_caches),
        scenario!(On::Shared, async nodes::a_scale_down_drains_the_victims_then_their_pods_terminate_for_their_grace_period),
        scenario!(On::Shared, async end_to_end::binpack_scale_down_drains_then_removes_the_replicas_cheapest_to_lose),
        scenario!(On::Shared, async autoscaling::absent_then_absurd_metrics_leave_the_view_within_its_bounds_without_a_loop),
        scenario!(On::Own(uninstall::PLANE), async uninstall::the_documented_uninstall_leaves_nothing_terminating_and_no_replica_deleted_first),
        scenario!(On::Shared, async end_to_end::story_4_is_deployed_by_the_real_controllers_and_becomes_ready),
        scenario!(On::Own(leader::PLANE), async leader::when_the_leader_dies_mid_scale_the_other_replica_takes_over_and_finishes_it),
        scenario!(On::Own(gates_off::PLANE), async gates_off::without_the_topology_gate_a_required_placement_is_refused_and_nothing_dropped_is_written),
        scenario!(
            On::Shared,
            autoscaling::a_default_added_is_kept_a_field_dropped_is_not
        ),
        ignored(
            scenario!(On::Own(scale_nodes::PLANE), async scale_nodes::story_4_services_on_kwok_nodes),
            "a benchmark: minutes on the real control plane (BENCHMARKS.md)",
        ),
        scenario!(On::Shared, async end_to_end::kubectl_scale_of_a_view_reaches_the_roles_and_a_strict_view_refuses_out_of_range),
        scenario!(On::Shared, async pickers::llm_ds_endpoint_picker_runs_tandems_prefill_decode_configuration_and_holds_both_roles_leaders),
        scenario!(On::Shared, async end_to_end::deleting_a_namespace_with_a_service_its_view_and_a_scaling_group_leaves_nothing),
        scenario!(On::Shared, async autoscaling::an_hpa_asking_a_strict_view_for_too_much_is_refused_in_its_conditions),
        scenario!(On::Own(install::STOPPED_PLANE), async install::with_tandem_stopped_a_views_finalizer_comes_off_by_hand_and_its_namespace_goes),
        scenario!(On::Own(helm::PLANE), async helm::helm_installs_upgrades_and_uninstalls_the_chart_on_a_real_control_plane_keeping_the_crds),
        scenario!(On::Shared, async nodes::kwok_deletes_only_a_pod_that_is_being_deleted),
        scenario!(On::Shared, async autoscaling::every_autoscaling_recipe_is_taken_by_the_real_api_server_against_its_crd),
        scenario!(
            On::Own(helm::PLANE),
            helm::the_chart_makes_the_objects_of_the_kustomize_installs
        ),
        scenario!(On::Own(dependencies::PLANE), async dependencies::check_says_which_gated_pod_group_fields_the_api_server_keeps),
        scenario!(
            On::Own(helm::PLANE),
            helm::values_the_chart_cannot_use_are_refused_with_their_path
        ),
        scenario!(On::Own(install::PLANE), async install::the_install_without_cert_manager_needs_no_hand_edit),
        scenario!(On::Own(install::PLANE), async install::the_monitoring_component_fits_the_operators_crds_and_finds_the_metrics_service),
        scenario!(On::Own(install::PLANE), async install::the_dev_and_prod_overlays_build_and_the_api_server_takes_them),
        scenario!(
            On::Own(helm::PLANE),
            helm::the_chart_lints_with_the_default_and_the_prod_values
        ),
        scenario!(On::Shared, async end_to_end::a_scenario_that_ends_without_finish_fails),
        scenario!(On::Own(install::PLANE), async install::the_install_without_cert_manager_moves_to_another_namespace),
        scenario!(
            On::Own(install::PLANE),
            install::an_install_in_another_namespace_agrees_on_every_name
        ),
        scenario!(On::Own(install::PLANE), async install::the_pod_patch_policy_lets_tandem_relabel_its_pods_and_nothing_more),
        scenario!(
            On::Shared,
            autoscaling::every_metric_a_recipe_reads_is_cited_with_its_exporter
        ),
        scenario!(
            On::Shared,
            autoscaling::promql_metrics_are_the_names_before_selectors
        ),
    ]
}
