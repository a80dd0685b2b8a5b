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
package watcher
