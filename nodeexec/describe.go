package nodeexec

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Backends declare what they need and what they would create through the
// small optional interfaces below, so that callers (preflight, --explain,
// the CLI's target resolution and shell) know a backend only through
// Backend and these. A wrapper (the resident agents' Backend) implements
// Wrapper; As finds an interface on a backend or on what it wraps, as
// errors.As does for errors.

// Permission is one RBAC permission, as a SelfSubjectAccessReview asks for it.
type Permission struct {
	// Verb is the API verb: create, get, list, watch, delete, patch, update.
	Verb string
	// Group is the API group; "" is the core group.
	Group string
	// Resource is the resource's plural name, e.g. "pods".
	Resource string
	// Subresource, e.g. "exec", "attach", "ephemeralcontainers". Optional.
	Subresource string
	// Cluster is true for a cluster-scoped check (e.g. list nodes); otherwise
	// the check is made in Requirements.Namespace.
	Cluster bool
}

// String is "create pods/exec", "list nodes (cluster-wide)".
func (p Permission) String() string {
	s := p.Verb + " " + p.Resource
	if p.Subresource != "" {
		s += "/" + p.Subresource
	}
	if p.Group != "" {
		s += "." + p.Group
	}
	if p.Cluster {
		s += " (cluster-wide)"
	}
	return s
}

// Requirements are what a backend, as configured, needs from the cluster
// to run a command: nodeexec/preflight checks them before anything is
// created, and `--explain` prints them.
type Requirements struct {
	// Namespace is where the backend creates its objects (for a backend that
	// adds to an existing pod, the pod's namespace); Permissions without
	// Cluster are checked there.
	Namespace string
	// PodSecurityLevel is the Pod Security level ("privileged", "baseline",
	// "restricted") the namespace must allow for the backend's pod; empty
	// when the backend creates no pod.
	PodSecurityLevel string
	// Permissions is the RBAC the caller needs, in the order the backend uses it.
	Permissions []Permission
	// VariantKind and Variant name the backend's configuration, e.g.
	// "profile" and "sysadmin"; Grants says what it grants on the node.
	// Optional.
	VariantKind, Variant, Grants string
	// Alternatives are the other variants and the Pod Security level each
	// needs, offered when PodSecurityLevel does not fit; AlternativeFlag is
	// how a CLI user picks one, e.g. "--profile". Optional.
	Alternatives    map[string]string
	AlternativeFlag string
}

// Requirer is implemented by backends that declare their Requirements.
type Requirer interface {
	Requirements() Requirements
}

// PodDescriber is implemented by backends that create a pod per run: Pod
// is the pod they would create on req.Node for req. It makes no API call.
type PodDescriber interface {
	Pod(req Request) (*corev1.Pod, error)
}

// CompletionPodBuilder is implemented by pod backends that can run a
// request to completion in a pod of their own, without exec: CompletionPod
// is the pod Pod(req) would be, named name and created at now, whose
// container runs Argv(req) as its own process (the kubelet's $(VAR)
// expansion escaped) instead of holding for an exec, with
// terminationMessagePolicy FallbackToLogsOnError. Its exit code and the end
// of its output stay in the pod's status whether or not the caller still
// runs: the NodeScript watcher creates these pods and reads the outcome from
// its pod informer. It is a pure function; req.Node must be set.
type CompletionPodBuilder interface {
	CompletionPod(req Request, name string, now time.Time) (*corev1.Pod, error)
}

// CommandDescriber is implemented by backends that run req as a command
// line in their pod's container: Argv is that command line.
type CommandDescriber interface {
	Argv(req Request) []string
}

// TargetResolver is implemented by backends that target a container in an
// existing pod rather than a node: TargetNode reads the pod (no object is
// created) and returns its node, the run's only target. Errors wrap
// ErrPodNotFound, ErrContainerNotFound or ErrContainerNotRunning.
type TargetResolver interface {
	TargetNode(ctx context.Context) (string, error)
}

// HostRooter is implemented by backends whose container sees the node's
// root filesystem at a path (`chroot PATH` runs in the node's root):
// HostRoot is the path, "" when the configuration mounts none.
type HostRooter interface {
	HostRoot() string
}

// Wrapper is implemented by backends that wrap another (the resident
// agents' Backend, which falls back to the backend it wraps).
type Wrapper interface {
	Unwrap() Backend
}

// Explainer is implemented by backends with more to say in `--explain`
// than their pod and Requirements: the lines to print (for the resident
// agents, which agent would run req and how).
type Explainer interface {
	Explain(ctx context.Context, req Request) []string
}

// As finds the first backend in b's chain (b, then what it wraps, through
// Wrapper) that implements T, as errors.As does for errors.
func As[T any](b Backend) (T, bool) {
	for b != nil {
		if t, ok := b.(T); ok {
			return t, true
		}
		w, ok := b.(Wrapper)
		if !ok {
			break
		}
		b = w.Unwrap()
	}
	var zero T
	return zero, false
}
