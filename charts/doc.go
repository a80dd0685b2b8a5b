// Package charts holds nodeexec's Helm chart, charts/nodeexec: the watcher's
// Deployment, its RBAC, the CRDs and the admission policy, the same objects
// as deploy/ and deploy/policy (kustomize), which stay the reference. Its
// tests render the chart with Helm's Go SDK and compare it with deploy/,
// object by object; docs/helm.md describes the values.
package charts
