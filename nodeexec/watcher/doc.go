// Package watcher is the NodeScript controller: it applies each NodeScript
// (nodeexec.io/v1alpha1, package v1alpha1) to every node its selector
// matches, now and as nodes join, as a controlled rollout (canaries,
// promotion, maxUnavailable, windows, budgets, drains, reboots, hooks), and
// records each node's outcome on the node. It is what `nodeexec watcher`
// and deploy/'s Deployment run; a program may embed it as well.
//
// # Public face
//
// The package exports the Watcher, its Options (with LeaderElection and the
// defaults Options documents), New, the Watcher's Start, the errors Start
// returns (ErrCRDNotInstalled, ErrLeadershipLost), and the notification
// webhook's payload (NotificationPayload, NotificationCounts, Sign) that a
// receiver decodes and verifies. Nothing else: the rollout decision, the
// pods, the per-node lifecycle are the package's own.
//
// Elsewhere:
//   - package v1alpha1 (nodeexec/watcher/api/v1alpha1): the API types
//     (NodeScript, MaintenanceBudget, MaintenanceCalendar), their
//     validation and defaults, and the well-known strings the watcher
//     writes (labels, annotations, node condition types, Event reasons,
//     phases, stages, holds, the finalizer, the scripts' environment) in
//     wellknown.go;
//   - package nodescripts (nodeexec/watcher/nodescripts): the client verbs
//     (Apply, Get, Promote, SetPaused, RunNow, Rerun, SetIgnored, Status,
//     Openings, the manifest parsers, DecodeState for a node's record), with
//     the RBAC each needs; the nodeexec CLI's NodeScript commands call them;
//   - nodeexec/watcher/internal/nodescript: what the controller and the
//     client verbs share (the node state codec, the calendar math, the spec
//     hash, selection and names), so that neither imports the other.
//
// # Embedding
//
//	w, err := watcher.New(watcher.Options{Client: client, Dynamic: dyn})
//	if err != nil {
//		return err
//	}
//	return w.Start(ctx) // until ctx ends; errors.Is(err, watcher.ErrCRDNotInstalled) without the CRD
//
// Start has controller-runtime's Runnable signature, so a manager can run
// it (mgr.Add(w)); set Options.LeaderElection only when nothing else
// elects a leader. The watcher never prints: it logs on ctx's logger
// (logr, klog's by default) and records Events. It keeps no state of its
// own: stopped and started again at any moment, it reads the rollout back
// from the nodes and the pods.
//
// # How it works
//
// On every change of a NodeScript, a node or a run pod, a level-based
// decision (pure functions) takes the NodeScript, the selected nodes and
// each node's record (an annotation on the node: nodescripts.DecodeState
// reads it) and says which nodes to start now, the rollout's stage, the
// counts per phase, and whether it must halt. Each script runs in the pod
// of the NodeScript's backend: Options.Backends (package backends by
// default) builds the nodeexec.Backend spec.backend names, and the watcher
// creates its CompletionPod (nodeexec.CompletionPodBuilder), reading the
// outcome from the pod's status. It knows no backend by name.
//
// Writes: while a run goes, its pod is the record (attempt, spec hash,
// start, boot ID); the outcome is written once, when the pod has finished,
// as one patch of the node's status that sets the state annotation and the
// NodeScript's Node condition (nodescripts.ConditionType); then the pod is
// deleted. A plain run is three writes per node (create, patch, delete),
// and the successes a reconcile records are one Event on the NodeScript. A
// run pod deleted by someone else while no watcher runs leaves no record:
// the node runs again. A run is recorded lost (RunInfrastructureFailure)
// only when the API server, not just the cache, no longer has its pod:
// under load the pod informer can lag behind the pods the watcher created.
package watcher
