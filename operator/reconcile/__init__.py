"""One reconcile of every GPU pool: read the cluster, decide, write; the objects it writes."""
