package watcher

import (
	"github.com/nodeexec/nodeexec/nodeexec/watcher/internal/nodescript"
)

// The node state codec lives in internal/nodescript, shared with the
// client verbs (package nodescripts).

// nodeState is one node's record of one NodeScript (nodescript.NodeState).
type nodeState = nodescript.NodeState

// stateAnnotation is nodescript.StateAnnotation.
func stateAnnotation(name string) string { return nodescript.StateAnnotation(name) }

// rerunAnnotation is nodescript.RerunAnnotation.
func rerunAnnotation(name string) string { return nodescript.RerunAnnotation(name) }

// ignoreAnnotation is nodescript.IgnoreAnnotation.
func ignoreAnnotation(name string) string { return nodescript.IgnoreAnnotation(name) }

// decodeState is nodescript.DecodeState.
func decodeState(annotations map[string]string, name string) (nodeState, error) {
	return nodescript.DecodeState(annotations, name)
}
