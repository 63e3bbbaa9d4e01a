// Package kubernetes holds seqbus's Kubernetes deployment, a kustomize base (the YAML files
// beside this one; `kubectl apply -k deploy/kubernetes`), and the tests that keep it honest
// without a cluster: every manifest decodes strictly (an unknown field fails) into the Kubernetes,
// KEDA and Prometheus Operator API types, kustomization.yaml lists every manifest, and the
// cross-references agree: labels and selectors, ports, the SEQBUS_ settings (real ones, with
// valid values), the grace period above SEQBUS_SHUTDOWN_TIMEOUT, the scaler's address and JSON
// field in the ScaledObject, the topology file.
//
// The package has no code of its own; nothing imports it.
package kubernetes
