"""GPU nodes as the operator sees them: discovery labels, the planner's node pool, node plans, the mig-parted ConfigMap."""
