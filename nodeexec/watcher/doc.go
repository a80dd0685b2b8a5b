// Package watcher applies a NodeScript (nodeexec.io/v1alpha1) to every node
// its selector matches, now and as nodes join, as a controlled rollout.
//
// This file set holds the level-based decision at the watcher's core, as
// pure functions: from the NodeScript, the selected nodes and each node's
// recorded state (an annotation on the node, see NodeState), Decide says
// which nodes to start now, the stage, the counts per phase, and whether the
// rollout must halt. The controller around it (informers, workqueue, leader
// election) calls it on every change, and runs each script in the pod of
// the NodeScript's backend: Options.Backends (package backends by default)
// builds the nodeexec.Backend spec.backend names, and the watcher creates its
// CompletionPod (nodeexec.CompletionPodBuilder), reading the outcome from
// the pod's status. It knows no backend by name.
//
// Writes: while a run goes, its pod is the record (attempt, spec hash,
// start, boot ID: see WithRunPod); the outcome is written once, when the pod
// has finished, as one patch of the node's status that sets the state
// annotation and the NodeScript's Node condition; then the pod is deleted.
// A plain run is three writes per node (create, patch, delete), and the
// successes a reconcile records are one Event on the NodeScript. A run pod
// deleted by someone else while no watcher runs leaves no record: the node
// runs again. A run is recorded lost (RunInfrastructureFailure) only when
// the API server, not just the cache, no longer has its pod: under load
// the pod informer can lag behind the pods the watcher created.
package watcher
