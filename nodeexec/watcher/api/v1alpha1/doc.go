// Package v1alpha1 is the nodeexec.io/v1alpha1 API: NodeScript, a script
// applied to every node a selector matches, now and to each node that joins,
// with a canary, promotion, staged batches, an error budget, rollback and
// per-node state kept in the Kubernetes API.
//
// The CustomResourceDefinition in deploy/crd is generated from these types by
// controller-gen (`make generate`).
//
// +kubebuilder:object:generate=true
// +groupName=nodeexec.io
package v1alpha1
