package v1alpha1

// Bounds of the lifecycle fields (spec.reapply.schedule,
// spec.uninstallScript, status.uninstall).
const (
	// MaxUninstallNames bounds each node list of status.uninstall: the
	// first names, sorted; the counts say how many there are.
	MaxUninstallNames = 20
)

// LifecycleFields are the NodeScriptSpec fields of a NodeScript's end of
// life (inlined into NodeScriptSpec).
type LifecycleFields struct {
	// UninstallScript, when set, runs (sh -c, on the node, as the script
	// does: same backend, image, namespace, environment and timeout) on
	// every node whose recorded state is Succeeded for the current spec
	// hash when the NodeScript is deleted, before the watcher releases its
	// finalizer: NodeWright's uninstall stage. At most
	// spec.rollout.maxConcurrency nodes at once; not held by the
	// maintenance window, pause, gates or budgets (the deletion is the
	// request). Nodes that are NotNeeded, Failed, RolledBack, or that ran
	// another spec, are not uninstalled. Progress is in status.uninstall
	// and Events UninstallStarted, UninstallSucceeded and UninstallFailed; a
	// node where it failed keeps its state annotation (with the outcome)
	// after the NodeScript is gone. Not part of the spec hash. At most
	// 131071 bytes, as the other scripts. Defaults to none: deleting the
	// NodeScript only removes its records. See docs/nodescript-lifecycle.md.
	// +kubebuilder:validation:MaxLength=131071
	// +kubebuilder:validation:XValidation:rule="!self.contains('\\u0000')",message="contains a NUL byte, which would cut the script there"
	// +optional
	UninstallScript string `json:"uninstallScript,omitempty"`
}

// UninstallStatus is the progress of spec.uninstallScript while the
// NodeScript is being deleted: the nodes it is to run on, by outcome.
// Each list holds the first MaxUninstallNames node names, sorted; the
// counts are the whole.
type UninstallStatus struct {
	// Pending are the nodes where the uninstall script has not finished:
	// waiting for a slot (spec.rollout.maxConcurrency), for the node to be
	// Ready (at most UninstallNodeWait), or running.
	// +optional
	// +listType=atomic
	Pending []string `json:"pending,omitempty"`
	// Succeeded are the nodes where it exited 0.
	// +optional
	// +listType=atomic
	Succeeded []string `json:"succeeded,omitempty"`
	// Failed are the nodes where it failed (exit code, timeout, pod
	// failure, or the node not Ready in time), each "NODE: WHY". Their
	// state annotations stay on the nodes after the NodeScript is gone.
	// +optional
	// +listType=atomic
	Failed []string `json:"failed,omitempty"`
	// PendingCount, SucceededCount and FailedCount count the nodes of
	// each list.
	// +optional
	PendingCount int32 `json:"pendingCount,omitempty"`
	// +optional
	SucceededCount int32 `json:"succeededCount,omitempty"`
	// +optional
	FailedCount int32 `json:"failedCount,omitempty"`
}
