package watcher

import (
	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
	"github.com/nodeexec/nodeexec/nodeexec/watcher/internal/nodescript"
)

// Phases of a node in a rollout (v1alpha1.Phase*).
const (
	PhasePending    = v1alpha1.PhasePending
	PhaseRunning    = v1alpha1.PhaseRunning
	PhaseSucceeded  = v1alpha1.PhaseSucceeded
	PhaseFailed     = v1alpha1.PhaseFailed
	PhaseRolledBack = v1alpha1.PhaseRolledBack
	PhaseNotNeeded  = v1alpha1.PhaseNotNeeded
)

// The node state codec lives in internal/nodescript, shared with the
// client verbs (package nodescripts).

// AnnotationPrefix is nodescript.AnnotationPrefix.
const AnnotationPrefix = nodescript.AnnotationPrefix

// MaxStateBytes is nodescript.MaxStateBytes.
const MaxStateBytes = nodescript.MaxStateBytes

// NodeState is one node's record of one NodeScript (nodescript.NodeState).
type NodeState = nodescript.NodeState

// StateAnnotation is nodescript.StateAnnotation.
func StateAnnotation(name string) string { return nodescript.StateAnnotation(name) }

// RerunAnnotation is nodescript.RerunAnnotation.
func RerunAnnotation(name string) string { return nodescript.RerunAnnotation(name) }

// IgnoreAnnotation is nodescript.IgnoreAnnotation.
func IgnoreAnnotation(name string) string { return nodescript.IgnoreAnnotation(name) }

// appendIgnoreAnnotation is nodescript.AppendIgnoreAnnotation.
func appendIgnoreAnnotation(b []byte, name string) []byte {
	return nodescript.AppendIgnoreAnnotation(b, name)
}

// nodeAnnotation is nodescript.NodeAnnotation.
func nodeAnnotation(k string) (name string, ok bool) { return nodescript.NodeAnnotation(k) }

// DecodeState is nodescript.DecodeState.
func DecodeState(annotations map[string]string, name string) (NodeState, error) {
	return nodescript.DecodeState(annotations, name)
}
