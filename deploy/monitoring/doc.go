// Package monitoring holds seqbus's Prometheus alert rules (seqbus-rules.yaml, loaded as a
// rules file; the kustomize base carries the same groups as a PrometheusRule), their promtool
// unit tests (seqbus-rules_test.yaml) and the Go tests that keep the monitoring honest: promtool
// runs the rule tests (skipped, saying why, where promtool is not installed; Debian's prometheus
// package ships it), the PrometheusRule and the rules file agree, every alert has a runbook
// section in docs/alerts.md and a firing and a quiet case, and every metric the rules and the
// Grafana dashboard (deploy/kubernetes/dashboards/seqbus.json) query is one the worker exports,
// read from a running worker's registry.
//
// The package has no code of its own; nothing imports it.
package monitoring
