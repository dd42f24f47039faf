"""What serves while a change is under way (tessera/closed_loop.py, docs/operator.md part 2)."""

import pytest

from tessera.closed_loop import change_steps, keyed, node_layouts, node_pool
from tessera.planner.nodes import NodePool
from tessera.planner.profile_sources import build_profile_store
from tessera.planner.solve import plan
from tessera.planner.spec_file import load_systems
from tessera.shipped import example

RECONFIGURE_S = 120.0


@pytest.fixture(scope="module")
def running():
    systems = keyed(load_systems(example("single-model.yaml")))
    pool = NodePool(gpu="H100-80GB", nodes=node_pool("H100-80GB", {}, 1, 1).nodes)
    return plan(systems, pool, build_profile_store(systems, pool.gpu))


def _replicas(p):
    return sum(c.replicas for t in p.tasks for c in t.configs)


def test_a_task_moved_to_a_node_being_partitioned_keeps_its_old_replicas_until_the_new_ones_serve(running):
    # The new plan puts the task on node-1, which serves nothing and must be partitioned; node-0 keeps its layout.
    moved = running.model_copy(update={"gpus": [g.model_copy(update={"node": "node-1"}) for g in running.gpus]})
    layouts = node_layouts(running)
    steps, free, repartitioned = change_steps(running, moved, layouts, node_pool("H100-80GB", layouts, 2, 1),
                                              at_s=100.0, reconfigure_s=RECONFIGURE_S, max_changing=1)
    assert (free, repartitioned) == (["node-1"], [])
    assert [s.start_s for s in steps] == [100.0, 100.0 + RECONFIGURE_S]
    assert _replicas(steps[0].serving) == _replicas(running) > 0  # make before break: the old replica serves
    assert _replicas(steps[1].serving) == _replicas(moved)
    assert all(s.lost_slices == 0 and not s.stopped for s in steps)
