"""The `restricted` Pod Security Standard for the pods tessera's Deployments and Jobs create.

A namespace may enforce it; PodSecurity admits pods, so a violation is a FailedCreate on the
ReplicaSet or Job, not an error on the object tessera writes. Model servers (reconcile) and
profiler Jobs (profiling) both use it, so it sits beside the layers rather than in one of them.
"""

# No runAsUser: the image's own non-root numeric USER runs (docs/model-server-contract.md);
# a root image is refused by the kubelet under runAsNonRoot.
RESTRICTED_POD_SECURITY = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
RESTRICTED_CONTAINER_SECURITY = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
