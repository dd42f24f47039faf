{{- define "tessera.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "tessera.serviceAccountName" -}}
{{- default (include "tessera.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "tessera.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "tessera.labels" -}}
{{ include "tessera.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: tessera
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Rules on tessera's workloads: granted cluster-wide, or per watched namespace. */}}
{{- define "tessera.workloadRules" -}}
- apiGroups: [tessera.ai]
  resources: [compoundinferencesystems, adapterpools]
  verbs: [list, watch]
- apiGroups: [tessera.ai]
  resources: [compoundinferencesystems/status, adapterpools/status]
  verbs: [patch]
# Server-side apply creates a missing object: create and patch.
- apiGroups: [apps]
  resources: [deployments]
  verbs: [list, watch, create, patch, delete]
- apiGroups: [""]
  resources: [services]
  verbs: [list, create, patch, delete]
# Each model-server Deployment's PodDisruptionBudget (a drain evicts one of its pods at a time).
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [list, create, patch, delete]
# Each system's frontend config (spec.frontend), each AdapterPool's placement record.
- apiGroups: [""]
  resources: [configmaps]
  verbs: [list, create, patch, delete]
- apiGroups: [""]
  resources: [events]
  verbs: [create]
# ResourceQuotas on MIG instances cap what a solve may give a namespace's systems.
- apiGroups: [""]
  resources: [resourcequotas]
  verbs: [list]
# AdapterPool server pods: watched (a restarted container or a new pod gets its adapters loaded again);
# their readiness gate tessera.ai/adapters-loaded, their annotations and adapter labels, all written
# through pods/status (which keeps a pod's spec as it is: no right to patch pods themselves).
- apiGroups: [""]
  resources: [pods]
  verbs: [watch]
- apiGroups: [""]
  resources: [pods/status]
  verbs: [patch]
# An AdapterPool's route per adapter: a Service without a selector (the rule above) and its EndpointSlice,
# which tessera keeps to the pods holding the adapter.
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, create, patch, delete]
# The pool's InferencePool, where the cluster has the Gateway API Inference Extension's CRDs.
- apiGroups: [inference.networking.k8s.io]
  resources: [inferencepools]
  verbs: [list, create, patch, delete]
# Profiler Jobs: watched either way (a Job left by an earlier install is still seen), created
# (server-side apply: patch) only with profiling on. Their pods' termination messages are read with
# the ClusterRole's cluster-wide pods list.
- apiGroups: [batch]
  resources: [jobs]
  verbs: [list, watch{{ if .Values.profiling.enabled }}, create, patch{{ end }}]
{{- end -}}
