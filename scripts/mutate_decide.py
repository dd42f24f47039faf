"""A mutation run of the operator's decide: each rule inverted or removed in turn, the unit test that must fail.

    .venv/bin/python -P scripts/mutate_decide.py    # from the repository root; prints one line per mutation

Every mutation must be "killed" (its test fails); decide.py is restored after the run, also on error.
The table in docs/operator.md ("Invariants of a reconcile") names the tests.
"""

import pathlib
import subprocess
import sys

path = pathlib.Path("operator/reconcile/decide.py")
original = path.read_text()
MUTATIONS = [
    ("a failed solve may delete", "    if outcome.solve_error is not None:\n        return actions  # a failed solve never deletes running servers\n", "",
     "test_a_failed_solve_never_deletes_a_running_server"),
    ("equal hash is rewritten", "builders.applied_hash(current) == builders.applied_hash(body)", "builders.applied_hash(current) != builders.applied_hash(body)",
     "test_an_unchanged_cluster_gets_no_write_of_a_child"),
    ("deployments before services", 'key=lambda item: (item[0][0] != "Service", item[0])', 'key=lambda item: (item[0][0] == "Service", item[0])',
     "test_services_are_applied_before_any_deployment"),
    ("deployments onto unapplied nodes", "if not ready_to_apply or key[1:] in held or (current", "if key[1:] in held or (current",
     "test_no_deployment_goes_onto_a_node_whose_layout_is_not_applied"),
    ("invalid system's children deleted", "if key in planned or not owner.valid or owner.ref.key in outcome.invalid:", "if key in planned:",
     "test_the_children_of_a_spec_that_turned_invalid_at_the_api_keep_running"),
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
    ("mig failure ignored", 'failed=node.mig_state == "failed"', "failed=False",
     "test_mig_manager_failed_reads_mig_layout_failed_and_the_system_is_not_ready"),
    ("stale server deleted before its replacement", "        if key in awaited:\n            continue  # make before break", "        if False:\n            continue  # make before break",
     "test_a_serving_deployment_is_not_deleted_before_its_replacement_is_applied"),
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
rows = []
try:
    for name, old, new, test in MUTATIONS:
        assert original.count(old) == 1, name
        path.write_text(original.replace(old, new))
        run = subprocess.run([sys.executable, "-P", "-m", "pytest", "-q", "-p", "no:randomly",
                              f"tests/tessera_operator/test_decide.py::{test}"], capture_output=True, text=True)
        rows.append((name, test, "killed" if run.returncode == 1 else f"SURVIVED (rc {run.returncode})"))
        print(f"{rows[-1][2]:>10}  {name}: {test}", flush=True)
finally:
    path.write_text(original)
sys.exit(0 if all(verdict == "killed" for _, _, verdict in rows) else 1)
