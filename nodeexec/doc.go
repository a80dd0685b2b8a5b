// Package nodeexec runs commands and scripts on Kubernetes nodes: one node, or
// many at once with bounded concurrency, with each node's output streamed live
// and an exit code per node.
//
// The package holds the parts every way of reaching a node shares: a [Request]
// says what to run where, a [Backend] turns it into a running process and
// reports a [Result], and a [Runner] resolves target nodes (names, a label
// selector, or all) and fans a request out over them. Backends live in their
// own packages; [github.com/nodeexec/nodeexec/nodeexec/debugpod] builds its pod
// exactly like `kubectl debug node/NAME --profile=...`.
//
// # Errors
//
// A command that exits non-zero is reported as an [*ExitError] (test it with
// errors.As). A pod that could not run the command (image pull failure,
// rejection by the kubelet, eviction, deadline) is a [*PodError]. States a
// caller branches on are sentinels: [ErrTimeout], [ErrNodeNotFound],
// [ErrNoNodes], [ErrNodeNotReady], [ErrForbidden].
//
// # Security
//
// Most backends create privileged pods with the node's namespaces and root
// filesystem. Whoever can create such pods in a namespace that admits them
// (Pod Security level "privileged") owns the node. Every object nodeexec
// creates is labelled [LabelManagedBy]=[ManagedByValue] and [LabelRunID], carries a
// deadline, and is deleted when the run ends, fails, times out or is cancelled.
//
// # Non-goals
//
// The library never prints and never reads the terminal: streams are passed in,
// and logs go to the logr.Logger found in the context (discarded by default).
package nodeexec
