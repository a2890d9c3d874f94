{{/*
Labels of every object: the kustomize install's (app.kubernetes.io/name),
and Helm's own, which say which release and chart made it. The objects'
names are fixed, as in manifests/: one Tandem per cluster (its webhook
configurations, ClusterRoles and PriorityClass are cluster-wide).
*/}}
{{- define "tandem.labels" -}}
app.kubernetes.io/name: tandem
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{/* The pods of the Deployment; immutable once installed. */}}
{{- define "tandem.selector" -}}
app.kubernetes.io/name: tandem
app.kubernetes.io/component: webhook
{{- end }}

{{/* Tandem's user name, as the API server reports its ServiceAccount. */}}
{{- define "tandem.user" -}}
system:serviceaccount:{{ .Release.Namespace }}:tandem
{{- end }}

{{/*
The checks values.schema.json cannot make, failing the install with the
value's path and what to do.
*/}}
{{- define "tandem.check" -}}
{{- if eq .Values.certificate.source "provided" }}
{{- range $key := list "caCert" "tlsCert" "tlsKey" }}
{{- if not (index $.Values.certificate.provided $key) }}
{{- fail (printf "certificate.provided.%s: required when certificate.source is provided; write the files with `tandem certs --namespace %s --out-dir certs` and give them with --set-file certificate.provided.caCert=certs/ca.crt, certificate.provided.tlsCert=certs/tls.crt and certificate.provided.tlsKey=certs/tls.key" $key $.Release.Namespace) }}
{{- end }}
{{- end }}
{{- end }}
{{- if and .Values.webhook.hostNetwork (eq (int .Values.webhook.port) 10250) }}
{{- fail "webhook.port: 10250 is the kubelet's port on the node, which webhook.hostNetwork shares; set another (10260, say) and allow it from the control plane in the nodes' firewall" }}
{{- end }}
{{- end }}
