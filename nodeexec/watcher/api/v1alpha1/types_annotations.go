package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Hooks are steps around each node's run done by something other than the
// script (docs/nodescript-annotations.md). BeforeRun and AfterRun are
// external gates by annotation, after Flatcar's update operator's
// before-reboot and after-reboot checks. Not part of the spec hash.
type Hooks struct {
	// BeforeRun, when set, holds each node's run until other controllers
	// set every one of its annotations to "true" on the node: after the
	// image pre-pull (and the preNode hook), before the silences, the
	// cordon and the drain. While it waits the watcher labels the node
	// nodeexec.io/before-run=<NodeScript name>; once all are "true" it
	// removes them and the label, and the run starts. Defaults to none: no
	// wait.
	// +optional
	BeforeRun *AnnotationGate `json:"beforeRun,omitempty"`
	// AfterRun, when set, holds a node whose run succeeded (after the
	// reboot and the uncordon) until every one of its annotations is "true"
	// on the node, labelled nodeexec.io/after-run=<NodeScript name>
	// meanwhile; the annotations and the label are then removed. Until then
	// the node counts as running for the rollout's pace (maxConcurrency,
	// batches, canaries). Not after a failure. Defaults to none: no wait.
	// +optional
	AfterRun *AnnotationGate `json:"afterRun,omitempty"`
}

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
