"""`helm test`: the operator runs and leads, i.e. the Lease tessera-operator is held and was renewed
within its duration. Runs in the operator's image with its ServiceAccount (which may read only that
Lease), in cluster; out of cluster with KUBECONFIG (the chart's end-to-end test runs it so)."""

import os
import sys
from datetime import datetime, timezone

from kubernetes import client, config

if os.environ.get("KUBERNETES_SERVICE_HOST"):
    config.load_incluster_config()
else:
    config.load_kube_config()
namespace = os.environ["POD_NAMESPACE"]
lease = client.CoordinationV1Api().read_namespaced_lease("tessera-operator", namespace).spec
age_s = (datetime.now(timezone.utc) - lease.renew_time).total_seconds() if lease.renew_time else None
if not lease.holder_identity or age_s is None or age_s > lease.lease_duration_seconds:
    print(f"no operator leads in {namespace}: Lease tessera-operator held by {lease.holder_identity!r}, "
          f"last renewed {age_s} s ago (duration {lease.lease_duration_seconds} s); "
          f"see kubectl -n {namespace} logs deploy/<release>-operator", file=sys.stderr)
    sys.exit(1)
print(f"the operator {lease.holder_identity} leads in {namespace} (Lease renewed {age_s:.0f} s ago)")
