package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AnnotationGate is a wait for annotations on the node that another
// controller sets (spec.hooks.beforeRun, spec.hooks.afterRun).
type AnnotationGate struct {
	// Annotations are the annotation keys that must all be "true" on the
	// node (qualified names, e.g. example.com/db-stepped-down); any other
	// value, or none, is not yet. The watcher removes them once all are
	// "true". At least one, at most 16; not in the watcher's own domain
	// (nodeexec.io).
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=317
	Annotations []string `json:"annotations"`
	// Timeout bounds the wait, counted from when the node was labelled.
	// Past it, before the run: an infrastructure failure of the node
	// (reason BeforeRunTimeout, never cordoned; retried under spec.retry);
	// after the run: the node's run is recorded Failed (reason
	// AfterRunTimeout, counted against spec.rollout.maxFailures; no
	// rollback). Defaults to none: the wait lasts until the annotations
	// are set (shown by nodeexec status).
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="must be positive, e.g. 30m (or left out for no timeout)"
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`
}
