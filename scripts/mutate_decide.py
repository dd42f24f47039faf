"""A mutation run of the operator's decide: each rule inverted or removed in turn, the unit test that must fail.

    .venv/bin/python -P scripts/mutate_decide.py    # from the repository root; prints one line per mutation

Every mutation must be "killed" (its test fails); each mutated file is restored after the run, also on error.
The table in docs/operator.md ("Invariants of a reconcile") names the tests; the AdapterPools' rows are its
decisions (adapter_pool_decide.py) and the priority order over both kinds (docs/operator.md, "Priorities across
AdapterPools and compound systems").
"""

import pathlib
import subprocess
import sys

DECIDE = ("operator/reconcile/decide.py", "tests/tessera_operator/test_decide.py")
ADAPTER_POOLS = ("operator/reconcile/adapter_pool_decide.py", "tests/tessera_operator/test_adapter_pool_decide.py")
PRIORITIES = ("operator/reconcile/decide.py", "tests/tessera_operator/test_priorities.py")
ADAPTER_PLANNING = ("operator/reconcile/adapter_pools.py", "tests/tessera_operator/test_adapter_pool_decide.py")
DECIDE_MUTATIONS = [
    ("a failed solve may delete", "    if outcome.solve_error is not None:\n        return actions  # a failed solve never deletes running servers\n", "",
     "test_a_failed_solve_never_deletes_a_running_server"),
    ("equal hash is rewritten", "builders.applied_hash(current) == builders.applied_hash(body)", "builders.applied_hash(current) != builders.applied_hash(body)",
     "test_an_unchanged_cluster_gets_no_write_of_a_child"),
    ("deployments before services", 'key=lambda item: (item[0][0] != "Service", item[0])', 'key=lambda item: (item[0][0] == "Service", item[0])',
     "test_services_are_applied_before_any_deployment"),
    ("deployments onto unapplied nodes", "if not ready_to_apply or key[1:] in held or (current", "if key[1:] in held or (current",
     "test_no_deployment_goes_onto_a_node_whose_layout_is_not_applied"),
    ("servers wait for every layout", "return ((mig.changing or mig.propagating) and mig.serving_change",
     "return (False and mig.serving_change",
     "test_a_server_goes_onto_a_node_that_serves_nothing_while_mig_manager_applies_its_layout"),
    ("servers early onto a node tessera cordoned", " and node.cordoned_for is None\n", "\n",
     "test_a_server_waits_for_the_layout_of_a_serving_node_tessera_cordoned_to_re_partition"),
    ("servers early onto a node labelled with their profile", "and not node.advertised_counts().get(profile) and ", "and ",
     "test_a_server_waits_for_the_layout_of_a_node_that_advertises_its_mig_profile"),
    ("servers early onto a node allocating their profile", " and not node.gpu_allocatable.get(resource))", ")",
     "test_a_server_waits_for_the_layout_of_a_node_that_advertises_its_mig_profile"),
    ("servers early onto a failed layout", "changing=not (applied or failed)", "changing=not applied",
     "test_a_server_waits_for_a_layout_mig_manager_failed"),
    ("an early server kept on a failed layout", "    for key in sorted(withdrawn_after_a_failed_layout(planned, live, outcome)):",
     "    for key in sorted(set[ChildKey]()):",
     "test_a_server_applied_before_its_layout_is_withdrawn_with_its_budget_when_mig_manager_fails_the_layout"),
    ("a serving server withdrawn from a failed layout", "                and not (current.get(\"status\") or {}).get(\"availableReplicas\")):", "):",
     "test_a_server_applied_before_its_layout_is_withdrawn_with_its_budget_when_mig_manager_fails_the_layout"),
    ("servers early onto a serving or held node", "        states[node_name] = replace(planned, blocked_by=blocked_by, waiting=waits)\n",
     "        states[node_name] = replace(planned, blocked_by=blocked_by, waiting=waits, changing=True)\n",
     "test_a_server_waits_for_the_layout_of_a_node_whose_gpus_pods_hold_or_whose_change_is_held"),
    ("servers wait for the config's propagation", "return ((mig.changing or mig.propagating) and",
     "return (mig.changing and",
     "test_a_server_goes_onto_a_node_that_serves_nothing_while_its_layout_config_propagates"),
    ("servers early onto a propagating node advertising their profile", "and not node.advertised_counts().get(profile) and ", "and ",
     "test_a_server_waits_for_the_layout_of_a_node_whose_config_propagates_while_it_advertises_the_server_profile"),
    ("invalid system's children deleted", "if key in planned or not owner.valid or owner.ref.key in outcome.invalid or owner.ref.key in outdated:",
     "if key in planned or owner.ref.key in outdated:",
     "test_the_children_of_a_spec_that_turned_invalid_at_the_api_keep_running"),
    ("children of a plan older than its spec rebuilt", "        if plan_older_than_spec(system, outcome):\n            continue", "",
     "test_the_children_of_a_system_whose_variant_was_renamed_before_its_new_plan_are_kept_as_they_are"),
    ("invalid system's children rewritten", "        if system.spec is None or system.ref.key in outcome.invalid:\n            continue", "        if system.spec is None:\n            continue",
     "test_an_invalid_systems_children_are_neither_rewritten_nor_deleted"),
    ("applied without the counts", " and node.advertised_counts() == mig.expected\n", "\n",
     "test_a_layout_counts_as_applied_only_on_success_with_the_planned_counts_advertised"),
    ("no propagation wait", "wait = written.get(planned.config, now) + propagation_s - now", "wait = 0.0",
     "test_a_node_is_relabelled_only_once_its_config_had_time_to_reach_mig_manager"),
    ("serving nodes relabelled", "        if waits or blocked_by:\n            continue  # held back", "        if waits:\n            continue  # held back",
     "test_a_node_whose_gpus_serve_is_not_relabelled_and_reads_node_in_use"),
    ("unchanged status rewritten", "    if not st.status_changed(system.status, new):\n        return []\n", "",
     "test_an_unchanged_status_is_neither_written_nor_announced"),
    ("config re-stamped every run", "missing = {config: now for config in wanted if config not in written}", "missing = {config: now for config in wanted}",
     "test_a_new_mig_config_is_written_once_with_the_time_it_was_written"),
    ("unused configs kept", "dropped = {config for config in written if config not in kept_configs}", "dropped: set[str] = set()",
     "test_tessera_mig_configs_no_node_names_and_no_plan_wants_are_dropped"),
    ("mig failure ignored", 'layout_applied(pool, node_name, planned), node.mig_state == "failed"',
     "layout_applied(pool, node_name, planned), False",
     "test_mig_manager_failed_reads_mig_layout_failed_and_the_system_is_not_ready"),
    ("stale server deleted before its replacement", "        if key in awaited:\n            continue  # make before break", "        if False:\n            continue  # make before break",
     "test_a_serving_deployment_is_not_deleted_before_its_replacement_is_applied"),
    ("a cordoned node's server deleted before the re-plan", "        replan = awaits_replan(child, outcome)\n",
     "        replan = None\n", "test_a_server_on_a_node_an_admin_cordoned_serves_until_a_plan_without_the_node_is_in_force"),
    ("replacement behind the old one awaited", " | _hosts_without_room(planned, stale, outcome)\n", "\n",
     "test_a_replacement_on_an_applied_node_where_the_old_deployment_runs_is_not_awaited"),
    ("replacement with room beside the old one not awaited", " and not room_beside_the_old(m, servers)}", "}",
     "test_a_replacement_on_an_applied_node_with_instances_beside_the_old_deployment_is_awaited"),
    ("replacement in place not found", "        if needing:\n            found[key] = needing\n", "",
     "test_a_replacement_that_needs_the_old_deployments_instances_is_found_in_place"),
    ("replacement in place deleted under wait", 'if key in outcome.in_place and outcome.without_replacement == "wait":', "if False:",
     "test_a_replacement_in_place_with_without_replacement_wait_holds_the_old_deployment_and_says_why"),
    ("held replacement in place applied", " or key[1:] in held or", " or",
     "test_a_replacement_in_place_with_without_replacement_wait_holds_the_old_deployment_and_says_why"),
    ("loss of a replacement in place unstated", "servers = _in_place_condition(key, outcome) or _servers_condition(",
     "servers = _servers_condition(", "test_a_replacement_in_place_with_without_replacement_change_deletes_the_old_deployment_stating_the_loss"),
    ("a task also planned elsewhere taken for a break", " or \\\n                any(builders.pinned_hostname(body) != host for _, body in bodies):", ":",
     "test_a_replacement_in_place_of_a_task_the_plan_also_runs_elsewhere_is_make_before_break"),
    ("failed re-plan reads PlanFound", "    if outcome.solve_error:\n        return st.Condition(st.PLANNED, True, st.LAST_GOOD_PLAN,", "    if False:\n        return st.Condition(st.PLANNED, True, st.LAST_GOOD_PLAN,",
     "test_a_failed_re_plan_keeps_the_last_plan_and_reads_last_good_plan_kept"),
]
ADAPTER_POOL_MUTATIONS = [
    ("server started on a GPU the compound plan holds", "not first_plan_solving and slot not in compound",
     "not first_plan_solving", "test_a_server_waits_while_the_compound_plan_in_force_holds_its_gpu"),
    ("server started before its node's layout", "\n                        and (node_mig is None or node_mig.applied)))", "))",
     "test_a_server_waits_while_its_node_waits_for_a_mig_layout"),
    ("server started while the first compound plan is solved", "not first_plan_solving and slot not in compound",
     "slot not in compound", "test_a_server_waits_while_the_pools_first_compound_plan_is_solved"),
    ("invalid pool's servers deleted", "    if not valid:\n        return []\n    by_name", "    by_name",
     "test_a_server_no_placement_wants_is_deleted_then_its_budget_but_an_invalid_pools_servers_stay"),
    ("unchanged server rewritten", "current is None or applied_hash(current) != applied_hash(wanted)", "True",
     "test_an_unchanged_cluster_gets_no_write_of_a_server"),
    ("lowest priority places first", "-(o.spec.pool_priority if o.spec else 0)", "(o.spec.pool_priority if o.spec else 0)",
     "test_adapter_pools_take_free_gpus_invalid_ones_first_then_by_priority_highest_first_then_by_name"),
    ("running server loses its GPU", "kept[i] if i in kept else next(spare)", "next(spare)",
     "test_a_running_server_keeps_its_gpu_unless_another_adapter_pool_holds_it"),
    ("compound-held GPUs taken first", "return [s for s in free if s not in busy] + [s for s in free if s in busy]",
     "return free", "test_new_servers_take_whole_gpus_no_compound_plan_holds_from_the_pools_last_gpu_backwards"),
    ("quota ignored", "if quota is None or quota.limit >= free:", "if True:",
     "test_a_quota_on_whole_gpus_tighter_than_the_free_gpus_caps_the_servers"),
    ("unchanged pool status rewritten", "    if not st.status_changed(obj.status, new):\n        return []\n", "",
     "test_an_unchanged_status_is_not_written_again"),
    ("equal priority takes what runs", "priorities[s] >= priority}", "priorities[s] > priority}",
     "test_an_adapter_pool_never_takes_a_gpu_held_for_a_compound_system_of_its_priority_or_higher"),
    ("lower priority's GPUs kept from a higher pool", "priorities[s] >= priority}", "True}",
     "test_a_higher_priority_adapter_pool_claims_gpus_a_lower_priority_compound_system_holds_and_reserves_them"),
    ("yields to an equal priority", "return bool(compound) and max(compound) > priority",
     "return bool(compound) and max(compound) >= priority",
     "test_an_adapter_pool_lends_its_gpus_to_the_compound_solve_where_a_compound_system_outranks_it"),
    ("never yields", "return bool(compound) and max(compound) > priority", "return False",
     "test_an_outranked_adapter_pools_gpus_and_its_live_servers_are_lent_to_the_systems_above_its_priority"),
    ("a mixed pool's GPUs reserved against all", "return bool(compound) and max(compound) > priority",
     "return bool(compound) and min(compound) > priority",
     "test_in_a_mixed_pool_an_adapter_pools_gpus_are_lent_only_above_its_priority"),
    ("who took the GPUs unnamed", "    if decided.outranked_by:\n", "    if False:\n",
     "test_an_adapter_pool_a_higher_priority_compound_system_holds_below_its_adapters_is_degraded_naming_it"),
    ("a fresh node relabelled for a server", "\n            if pool.node(name).advertised_counts()}", "}",
     "test_a_claimed_gpu_a_compound_plan_left_partitioned_gets_mig_off_for_its_server"),
    ("a node the compound plan lays out relabelled", " for node, _ in d.slots} - set(placement.nodes)",
     " for node, _ in d.slots}", "test_a_claimed_gpu_a_compound_plan_left_partitioned_gets_mig_off_for_its_server"),
    ("a lent pool unnamed to lower priorities", "for d in decided if d.gpus}", "for d in decided if not d.yields and d.gpus}",
     "test_the_compound_status_learns_each_adapter_pools_priority_and_gpus_reserved_or_lent"),
]
PRIORITY_MUTATIONS = [
    ("a higher-priority AdapterPool unnamed", "for pool, (priority, gpus) in outcome.adapter_pools.items()",
     "for pool, (priority, gpus) in {}.items()",
     "test_a_system_held_below_its_demand_by_a_higher_priority_adapter_pool_reads_preempted_by_priority_naming_it"),
    ("a lower-priority AdapterPool named", "if priority > mine and gpus > 0]", "if gpus > 0]",
     "test_a_system_held_below_its_demand_by_a_higher_priority_adapter_pool_reads_preempted_by_priority_naming_it"),
]
ADAPTER_PLANNING_MUTATIONS = [
    ("a higher priority's GPUs free for a lower pool", "blocked = taken | others | set(outranked)",
     "blocked = taken | others", "test_gpus_a_higher_priority_compound_system_holds_are_not_free_for_a_lower_priority_adapter_pool"),
    ("a yielding pool's GPUs reserved", "if d.yields else None\n", "if False else None\n",
     "test_an_outranked_adapter_pools_gpus_and_its_live_servers_are_lent_to_the_systems_above_its_priority"),
    ("a GPU one pool keeps lent by another", "found[slot] = None if before is None or above is None else max(before, above)",
     "found[slot] = above", "test_a_gpu_two_adapter_pools_name_is_reserved_where_one_keeps_it"),
]
QUOTA_TRANSITIONS = ("operator/reconcile/quota_transitions.py", "tests/tessera_operator/test_quota_transitions.py")
QUOTA_TRANSITION_MUTATIONS = [
    ("a change past the quota made before break", "            stepped[key] = (body, False)\n", "",
     "test_a_reconcile_with_the_quota_full_scales_the_old_server_down_keeps_it_and_warns"),
    ("the old server never scaled down", "            scale_down[_name(shrinking)] = _replicas(shrinking) - 1", "            pass",
     "test_with_the_quota_full_the_new_deployment_starts_at_zero_and_the_old_one_goes_down_by_one"),
    ("the new server never up", "        replicas[_name(growing)] += 1  # the new one up", "        pass",
     "test_the_room_an_old_pod_left_takes_one_new_replica_and_no_old_one_goes_meanwhile"),
    ("a second old server down while one goes", " and all(_settled(child) for child in old):", ":",
     "test_while_an_old_pod_goes_the_next_old_one_is_not_scaled_down"),
    ("a change that fits stepped", "<= limit:\n        return None", "<= -1:\n        return None",
     "test_a_change_that_fits_the_quota_beside_the_old_pods_is_make_before_break_as_usual"),
    ("a break stepped", "        return key not in breaks and is_model_server(child)", "        return is_model_server(child)",
     "test_an_old_deployment_whose_replacements_need_its_instances_takes_no_step"),
    ("a step unstated in the status", "    if message is None:\n        return conditions", "    if True:\n        return conditions",
     "test_a_stepped_system_reads_progressing_quota_transition_naming_the_quota_instead_of_replacement_pending"),
    ("a replacement behind the old pods grown first", "sorted(new, key=lambda body: builders.pinned_hostname(body) in behind)",
     "new", "test_the_room_in_the_quota_goes_first_to_a_new_deployment_on_a_node_with_instances_free_beside_the_old_pods"),
    ("an old server a step moves deleted while it holds pods", "if not (\n        isinstance(action, DeleteChild)",
     "if not (False and\n        isinstance(action, DeleteChild)",
     "test_an_old_server_a_step_moves_is_not_deleted_while_it_holds_pods_though_its_replacements_are_available"),
]
MUTATIONS = ([(DECIDE, *row) for row in DECIDE_MUTATIONS] + [(ADAPTER_POOLS, *row) for row in ADAPTER_POOL_MUTATIONS]
             + [(PRIORITIES, *row) for row in PRIORITY_MUTATIONS]
             + [(ADAPTER_PLANNING, *row) for row in ADAPTER_PLANNING_MUTATIONS]
             + [(QUOTA_TRANSITIONS, *row) for row in QUOTA_TRANSITION_MUTATIONS])
originals = {target: pathlib.Path(target).read_text() for (target, _), *_ in MUTATIONS}
rows = []
try:
    for (target, tests), name, old, new, test in MUTATIONS:
        path, original = pathlib.Path(target), originals[target]
        assert original.count(old) == 1, name
        path.write_text(original.replace(old, new))
        run = subprocess.run([sys.executable, "-P", "-m", "pytest", "-q", "-p", "no:randomly", f"{tests}::{test}"],
                             capture_output=True, text=True)
        path.write_text(original)
        rows.append((name, test, "killed" if run.returncode == 1 else f"SURVIVED (rc {run.returncode})"))
        print(f"{rows[-1][2]:>10}  {name}: {test}", flush=True)
finally:
    for target, original in originals.items():
        pathlib.Path(target).write_text(original)
sys.exit(0 if all(verdict == "killed" for _, _, verdict in rows) else 1)
