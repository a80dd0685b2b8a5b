package nodescript

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// AnnotationPrefix is the domain of the per-node state annotations; a
// NodeScript named N keeps its state on each node under
// "N.nodescript.nodeexec.io/state".
const AnnotationPrefix = "nodescript.nodeexec.io"

// StateAnnotation is the annotation key holding the state of NodeScript name on a node.
func StateAnnotation(name string) string { return name + "." + AnnotationPrefix + "/state" }

// RerunAnnotation is the node annotation asking the watcher to run
// NodeScript name again on the node: its value is the spec hash to run
// again (Rerun sets it). The watcher forgets the node's record of that hash
// (the node becomes Pending, its attempts keep counting) and removes the
// annotation, once no run of the NodeScript is going on the node; a value
// that is not the current spec hash is removed and does nothing.
func RerunAnnotation(name string) string { return name + "." + AnnotationPrefix + "/rerun" }

// IgnoreAnnotation is the node annotation excluding the node from
// NodeScript name without editing its spec, as spec.excludeNodes would: its
// value says who asked (SetIgnored sets it; any value ignores). The node's
// state is kept, so removing the annotation reruns nothing.
func IgnoreAnnotation(name string) string { return string(AppendIgnoreAnnotation(nil, name)) }

// AppendIgnoreAnnotation appends IgnoreAnnotation(name) to b: ignored builds
// the key in a stack buffer with it, as a reconcile asks of every node.
func AppendIgnoreAnnotation(b []byte, name string) []byte {
	return append(append(b, name...), "."+AnnotationPrefix+"/ignore"...)
}

// NodeAnnotation reports whether k is the key of a per-node annotation of
// some NodeScript (state, rerun, ignore), and of which.
func NodeAnnotation(k string) (name string, ok bool) {
	name, part, found := strings.Cut(k, "."+AnnotationPrefix+"/")
	return name, found && (part == "state" || part == "rerun" || part == "ignore")
}

// MaxStateBytes bounds the encoded NodeState, the value of one
// NodeScript's annotation on a node: the free-text fields are cut in the
// middle (Reason to 128 bytes, Message to 768, Drain to 256, then further
// if JSON escaping still makes it longer) so that, whatever a run printed or
// the API answered, a node carries at most this much per NodeScript. Output
// is never part of it (spec.recordOutput keeps output in an output record
// instead).
const MaxStateBytes = 2048

// NodeState is one node's record of one NodeScript, kept in the node's
// annotation so that it survives a restart of the watcher: phase, exit
// code, attempts, spec hash, times and reasons; never the run's output.
// Readers of the node (get nodes) can read it. While a check or run pod
// goes, the pod is the record and the annotation still holds the state
// before it (WithRunPod combines them, as Status does).
type NodeState struct {
	// Hash is the SpecHash the phase refers to; a different hash means the
	// node has not run the current spec.
	Hash string `json:"hash"`
	// Phase is one of the Phase constants.
	Phase string `json:"phase"`
	// ExitCode of the script, when it ran.
	ExitCode *int `json:"exitCode,omitempty"`
	// Attempts made for this hash (infrastructure retries and reruns
	// included): each has its own pod name.
	Attempts int `json:"attempts,omitempty"`
	// AttemptsBefore is Attempts when the node was last rerun (nodeexec
	// rerun): the retry limit counts only the attempts after it.
	AttemptsBefore int `json:"attemptsBefore,omitempty"`
	// Infrastructure is set when the last failure was not the script's own
	// exit (image pull, pod rejected, node NotReady, eviction): it is retried
	// after NextRetry, within the retry limit.
	Infrastructure bool `json:"infrastructure,omitempty"`
	// NextRetry is when an infrastructure failure may be retried.
	NextRetry *time.Time `json:"nextRetry,omitempty"`
	// Since is when the phase began.
	Since time.Time `json:"since"`
	// Maintenance is the run's preparation under spec.maintenance while
	// Phase is Running and before its pod: Pulling (spec.maintenance.prePull:
	// Pod is the pre-pull pod, the node not cordoned yet), Draining (cordoned, the drain
	// going), then Drained (the run pod starts next); or, after the script
	// succeeded under spec.reboot, Rebooting (BootID is the boot the script
	// ran in; Succeeded once the node is back with another). Empty
	// otherwise.
	Maintenance string `json:"maintenance,omitempty"`
	// RebootIssued is set once the reboot was asked for (Rebooting).
	RebootIssued bool `json:"rebootIssued,omitempty"`
	// Checked is set while Pending once spec.checkScript exited 1 for Hash:
	// the node needs the script, whose run starts next (no check again).
	Checked bool `json:"checked,omitempty"`
	// Verified is set once the VerifyScript passed on this node (canaries,
	// before automatic promotion).
	Verified bool `json:"verified,omitempty"`
	// CordonedByUs records that the watcher cordoned the node (and may
	// uncordon it); a node cordoned by someone else is never uncordoned.
	CordonedByUs bool `json:"cordonedByUs,omitempty"`
	// BootID is the node's status.nodeInfo.bootID when the run started
	// (kept when it succeeded: the boot the fix was made in): a run that
	// fails on a node that rebooted since is an infrastructure failure
	// (NodeRebooted), retried; a success on a node that rebooted since runs
	// again under spec.reapply.onReboot.
	BootID string `json:"bootID,omitempty"`
	// Pod is the run's pod: while Phase is Running, the pod that is the
	// run's record (the annotation keeps the state before the run until its
	// outcome is written; WithRunPod shows the run), which a restarted
	// watcher adopts instead of starting another; after, the pod the
	// outcome came from.
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
	// Silences are the Alertmanager silences created for the node's
	// maintenance (spec.maintenance.silences) and not expired yet: kept
	// while the node is in maintenance, expired once it is back in service
	// (silences.go).
	Silences []HeldSilence `json:"silences,omitempty"`
	// Hook is the progress of a node hook of spec.hooks (hooks.go),
	// "HOOK:PHASE": "preNode:Running" while the preNode Job goes (Phase
	// Running, before the cordon; the Job is found again by its name after
	// a restart), "preNode:Failed" after it failed (with Reason
	// PreHookFailed); "postNode:Running", then "postNode:Succeeded" or
	// "postNode:Failed" once the outcome of the attempt is recorded. A new
	// attempt's state starts without it.
	Hook string `json:"hook,omitempty"`
	// Awaiting is the node's place in an external gate by annotation
	// (spec.hooks; annotations.go): BeforeRun (Running, labelled
	// nodeexec.io/before-run, not cordoned), BeforeRunDone (Running, the run
	// starts next), AfterRun (Succeeded, the after-run gate not passed
	// yet; the node counts as running). Empty otherwise.
	Awaiting string `json:"awaiting,omitempty"`
	// AwaitingSince is when the node was labelled for the gate Awaiting
	// names (its timeout counts from it); nil before.
	AwaitingSince *time.Time `json:"awaitingSince,omitempty"`
	// Uninstall is the progress of spec.uninstallScript on the node while
	// the NodeScript is deleted (uninstall.go); kept on the node after the
	// NodeScript is gone when it failed.
	Uninstall *UninstallRecord `json:"uninstall,omitempty"`
}

// DecodeState reads a node's state for NodeScript name from its
// annotations; a node without one is Pending with no hash.
func DecodeState(annotations map[string]string, name string) (NodeState, error) {
	v, ok := annotations[StateAnnotation(name)]
	if !ok {
		return NodeState{Phase: v1alpha1.PhasePending}, nil
	}
	var s NodeState
	if err := json.Unmarshal([]byte(v), &s); err != nil {
		return NodeState{}, fmt.Errorf("annotation %s: %w", StateAnnotation(name), err)
	}
	switch s.Phase {
	case v1alpha1.PhasePending, v1alpha1.PhaseRunning, v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed, v1alpha1.PhaseRolledBack, v1alpha1.PhaseNotNeeded:
	default:
		return NodeState{}, fmt.Errorf("annotation %s: unknown phase %q", StateAnnotation(name), s.Phase)
	}
	return s, nil
}

// Encode is the annotation value of s, its free-text fields cut to keep
// it within MaxStateBytes.
func (s NodeState) Encode() string {
	b, _ := json.Marshal(s.Bounded())
	return string(b)
}

// bounded is s with Reason, Message and Drain cut to their limits (see
// MaxStateBytes).
func (s NodeState) Bounded() NodeState {
	var b NodeState
	for _, d := range []int{1, 2, 4, 8, 16} {
		b = s
		b.Reason, b.Message, b.Drain = Truncate(s.Reason, 128/d), Truncate(s.Message, 768/d), Truncate(s.Drain, 256/d)
		if enc, _ := json.Marshal(b); len(enc) <= MaxStateBytes {
			break
		}
	}
	return b
}
