package watcher

import (
	"encoding/json"
	"fmt"
	"time"
)

// Phases of a node in a rollout.
const (
	PhasePending    = "Pending"
	PhaseRunning    = "Running"
	PhaseSucceeded  = "Succeeded"
	PhaseFailed     = "Failed"
	PhaseRolledBack = "RolledBack"
)

// AnnotationPrefix is the domain of the per-node state annotations; a
// NodeScript named N keeps its state on each node under
// "N.nodescript.nodeexec.io/state".
const AnnotationPrefix = "nodescript.nodeexec.io"

// StateAnnotation is the annotation key holding the state of NodeScript name on a node.
func StateAnnotation(name string) string { return name + "." + AnnotationPrefix + "/state" }

// NodeState is one node's record of one NodeScript, kept in the node's
// annotation so that it survives a restart of the watcher.
type NodeState struct {
	// Hash is the SpecHash the phase refers to; a different hash means the
	// node has not run the current spec.
	Hash string `json:"hash"`
	// Phase is one of the Phase constants.
	Phase string `json:"phase"`
	// ExitCode of the script, when it ran.
	ExitCode *int `json:"exitCode,omitempty"`
	// Attempts made for this hash (infrastructure retries included).
	Attempts int `json:"attempts,omitempty"`
	// Infrastructure is set when the last failure was not the script's own
	// exit (image pull, pod rejected, node NotReady, eviction): it is retried
	// after NextRetry, within the retry limit.
	Infrastructure bool `json:"infrastructure,omitempty"`
	// NextRetry is when an infrastructure failure may be retried.
	NextRetry *time.Time `json:"nextRetry,omitempty"`
	// Since is when the phase began.
	Since time.Time `json:"since"`
	// Verified is set once the VerifyScript passed on this node (canaries,
	// before automatic promotion).
	Verified bool `json:"verified,omitempty"`
	// CordonedByUs records that the watcher cordoned the node (and may
	// uncordon it); a node cordoned by someone else is never uncordoned.
	CordonedByUs bool `json:"cordonedByUs,omitempty"`
	// OutputTail is the end of the script's output (at most 1 KiB).
	OutputTail string `json:"outputTail,omitempty"`
	// BootID is the node's status.nodeInfo.bootID when the run started: a
	// run that fails on a node that rebooted since is an infrastructure
	// failure (NodeRebooted), retried.
	BootID string `json:"bootID,omitempty"`
	// Pod is the run's pod while Phase is Running: the record that the run
	// was started, which a restarted watcher adopts instead of starting another.
	Pod string `json:"pod,omitempty"`
	// Reason says why the phase was entered when it is not the script's own
	// exit: Timeout, VerifyFailed, or an infrastructure reason (ErrImagePull,
	// Evicted, NodeNotReady, NodeRebooted, PodDisappeared, ...).
	Reason string `json:"reason,omitempty"`
	// Message is the detail of an infrastructure failure, with its fix when
	// one is known: for an image that cannot be pulled, the image, the
	// registry's answer and the fields to fix (spec.backend.image,
	// spec.backend.imagePullSecrets). Empty otherwise.
	Message string `json:"message,omitempty"`
	// Rollback is the progress of the RollbackScript after a script failure:
	// "" (not started), Running, Succeeded or Failed. Phase becomes
	// RolledBack when it succeeded.
	Rollback string `json:"rollback,omitempty"`
	// RollbackExitCode is the RollbackScript's exit code.
	RollbackExitCode *int `json:"rollbackExitCode,omitempty"`
	// Cordoned is set once the failure policy's cordon step was taken (by
	// the watcher, then CordonedByUs is set too, or found already done).
	Cordoned bool `json:"cordoned,omitempty"`
	// Drain is the drain's outcome after a failure: "", Drained or the error.
	Drain string `json:"drain,omitempty"`
}

// DecodeState reads a node's state for NodeScript name from its
// annotations; a node without one is Pending with no hash.
func DecodeState(annotations map[string]string, name string) (NodeState, error) {
	v, ok := annotations[StateAnnotation(name)]
	if !ok {
		return NodeState{Phase: PhasePending}, nil
	}
	var s NodeState
	if err := json.Unmarshal([]byte(v), &s); err != nil {
		return NodeState{}, fmt.Errorf("annotation %s: %w", StateAnnotation(name), err)
	}
	switch s.Phase {
	case PhasePending, PhaseRunning, PhaseSucceeded, PhaseFailed, PhaseRolledBack:
	default:
		return NodeState{}, fmt.Errorf("annotation %s: unknown phase %q", StateAnnotation(name), s.Phase)
	}
	return s, nil
}

// Encode is the annotation value of s.
func (s NodeState) Encode() string {
	b, _ := json.Marshal(s)
	return string(b)
}
