package nodeexec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/remotecommand"
)

// Labels and annotations set on every object nodeexec creates.
const (
	// LabelManagedBy is the well-known label naming the tool that manages an object.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// ManagedByValue is the value of LabelManagedBy on every object nodeexec creates.
	ManagedByValue = "nodeexec"
	// LabelRunID carries the ID of the run (one Runner.Run or one Backend) that created the object.
	LabelRunID = "nodeexec.io/run-id"
	// AnnotationNode names the target node (node names may exceed the 63 characters a label value allows).
	AnnotationNode = "nodeexec.io/node"
	// AnnotationDeadline is the RFC 3339 time after which the object is garbage:
	// its pod's activeDeadlineSeconds ends it on the server side by then.
	AnnotationDeadline = "nodeexec.io/deadline"
	// AnnotationCommand records what the object was created to run (truncated to 1 KiB), for audit.
	AnnotationCommand = "nodeexec.io/command"
)

// DefaultTimeout is the per-node time limit of a Request whose Timeout is zero.
const DefaultTimeout = 10 * time.Minute

// Limits of a Request (see Request.Validate).
const (
	// MaxTimeout is the largest Request.Timeout, 596523h13m7s (about 68
	// years): the pod a backend creates ends by activeDeadlineSeconds, the
	// timeout plus a slack of 30 s, which the API server caps at 2147483647
	// seconds.
	MaxTimeout = (math.MaxInt32 - 60) * time.Second
	// MaxArgBytes is the largest Script, and the largest element of
	// Command, in bytes: each is one argument of an exec, and Linux refuses
	// to exec an argument of 128 KiB or more (MAX_ARG_STRLEN: execve fails
	// with E2BIG).
	MaxArgBytes = 128<<10 - 1
)

// Request says what to run on one node.
//
// Exactly one of Command and Script must be set.
type Request struct {
	// Node is the name of the target node. Required by Backend.Run; set by the Runner.
	Node string

	// Command is the argv to run, e.g. []string{"sh", "-c", "hostname"}.
	// Each element is at most MaxArgBytes long and holds no NUL byte.
	Command []string
	// Script is a shell script run by `sh -c`. Backends that can see the
	// host's root filesystem run it there (debugpod: `chroot /host sh -c`
	// for profiles that mount /host). At most MaxArgBytes long; no NUL byte.
	Script string

	// Env sets environment variables for the command.
	Env map[string]string
	// SecretEnv sets environment variables from Secrets, which the kubelet
	// reads into the pod's container: the values are never in the request,
	// the pod spec, annotations, Events or logs. The Secrets must be in the
	// namespace of the pod the backend creates (the target pod's, for the
	// ephemeral backend); a missing Secret or key fails the run with a
	// PodError (CreateContainerConfigError); preflight.Options.Secrets finds
	// it before the pod is created. Backends that create no pod for
	// the command (runtime, resident agents) do not support it.
	SecretEnv []SecretEnv

	// Stdin, when non-nil, is streamed to the command's standard input; the
	// command sees EOF when it is exhausted. Nil means no standard input.
	Stdin io.Reader
	// Stdout and Stderr receive the command's output as it is produced. Nil
	// discards the stream.
	Stdout, Stderr io.Writer

	// TTY allocates a terminal for the command; Stderr is then merged into Stdout.
	TTY bool
	// TerminalSizeQueue delivers terminal size changes when TTY is set. Optional.
	TerminalSizeQueue remotecommand.TerminalSizeQueue

	// Timeout bounds the whole run on this node: creating what the backend
	// needs, waiting for it, and the command itself. When it expires the run
	// ends with an error wrapping ErrTimeout and everything created is deleted.
	// Defaults to DefaultTimeout; at most MaxTimeout.
	Timeout time.Duration
}

// Validate reports the first problem with r, naming the field. It does not
// require Node (the Runner fills it in).
func (r *Request) Validate() error {
	switch {
	case len(r.Command) == 0 && r.Script == "":
		return errors.New("no command: give a command (Command, or after `--` on the command line) or a script (Script, --script FILE)")
	case len(r.Command) > 0 && r.Script != "":
		return errors.New("both Command and Script are set: give one")
	case len(r.Command) > 0 && r.Command[0] == "":
		return errors.New("Command[0] is empty: the first element must name the program to run")
	case r.Timeout < 0:
		return fmt.Errorf("Timeout %s is negative: give a positive duration, or 0 for the default %s", r.Timeout, DefaultTimeout)
	case r.Timeout > MaxTimeout:
		return fmt.Errorf("Timeout %s is too large, at most %s (a pod's activeDeadlineSeconds limit, about 68 years)", r.Timeout, MaxTimeout)
	case r.TerminalSizeQueue != nil && !r.TTY:
		return errors.New("TerminalSizeQueue is set but TTY is not: a size queue needs a terminal")
	}
	if err := checkArg("Script", r.Script); err != nil {
		return err
	}
	for i, a := range r.Command {
		if err := checkArg(fmt.Sprintf("Command[%d]", i), a); err != nil {
			return err
		}
	}
	for k := range r.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return fmt.Errorf("Env has an invalid variable name %q: names must be non-empty and contain no '=' or NUL", k)
		}
	}
	for i, e := range r.SecretEnv {
		if msgs := validation.IsDNS1123Subdomain(e.Secret); len(msgs) > 0 {
			return fmt.Errorf("SecretEnv[%d].Secret %q is not a valid Secret name: %s", i, e.Secret, strings.Join(msgs, "; "))
		}
		if e.Key != "" {
			if msgs := validation.IsConfigMapKey(e.Key); len(msgs) > 0 {
				return fmt.Errorf("SecretEnv[%d].Key %q is not a valid Secret key: %s", i, e.Key, strings.Join(msgs, "; "))
			}
		}
	}
	return nil
}

// checkArg refuses an argument no exec can pass: longer than MaxArgBytes,
// or holding a NUL byte (which would end it there).
func checkArg(field, a string) error {
	if len(a) > MaxArgBytes {
		return fmt.Errorf("%s is %d bytes, too large, at most %d: Linux refuses to exec a longer argument (E2BIG); ship the rest as a file", field, len(a), MaxArgBytes)
	}
	if i := strings.IndexByte(a, 0); i >= 0 {
		return fmt.Errorf("%s has a NUL byte (at byte %d), which would cut it there: a command line cannot carry binary data; pass it on Stdin", field, i)
	}
	return nil
}

// SecretEnv names environment variables kept in a Secret.
type SecretEnv struct {
	// Secret is the Secret's name. Required.
	Secret string
	// Key is the key of the Secret whose value becomes the variable of the
	// same name (valueFrom.secretKeyRef). Empty: every key of the Secret
	// becomes a variable (envFrom.secretRef).
	Key string
	// Name is the variable's name when Key is set. Defaults to Key.
	Name string
}

// SecretEnvVars returns the container environment entries for secrets: one
// secretKeyRef variable per entry with a Key, and the envFrom sources of
// the others, in order.
func SecretEnvVars(secrets []SecretEnv) ([]corev1.EnvVar, []corev1.EnvFromSource) {
	var env []corev1.EnvVar
	var from []corev1.EnvFromSource
	for _, e := range secrets {
		ref := corev1.LocalObjectReference{Name: e.Secret}
		if e.Key == "" {
			from = append(from, corev1.EnvFromSource{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: ref}})
			continue
		}
		name := e.Name
		if name == "" {
			name = e.Key
		}
		env = append(env, corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: ref, Key: e.Key}}})
	}
	return env, from
}

// EffectiveTimeout is r.Timeout, or DefaultTimeout when it is zero.
func (r *Request) EffectiveTimeout() time.Duration {
	if r.Timeout > 0 {
		return r.Timeout
	}
	return DefaultTimeout
}

// Argv is the command the request runs: Command, or `sh -c Script`.
// Backends that run scripts elsewhere (such as in the host's root) build their own.
func (r *Request) Argv() []string {
	if r.Script != "" {
		return []string{"sh", "-c", r.Script}
	}
	return slices.Clone(r.Command)
}

// Result says what happened on one node.
type Result struct {
	// Node is the node the command ran on.
	Node string
	// ExitCode is the command's exit status; -1 when it never ran or its
	// status is unknown (see the error returned beside the Result).
	ExitCode int
	// Started is when the backend began work on the node (before creating any
	// object); Finished is when the command's streams closed or the run failed.
	Started, Finished time.Time
	// FirstOutput is when the first byte of stdout or stderr arrived; zero if none did.
	FirstOutput time.Time
	// Backend names the backend that ran the command, e.g. "debugpod".
	Backend string
	// Namespace and Pod name the pod that ran the command, when one was created or used.
	Namespace, Pod string
}

// Duration is Finished - Started.
func (r Result) Duration() time.Duration { return r.Finished.Sub(r.Started) }

// Backend runs one Request on one node.
//
// Run blocks until the command has finished, failed or ctx is done, and
// releases everything it created before returning (including on
// cancellation). It returns the Result (with as much filled in as is known)
// and an error: nil when the command exited 0, an *ExitError when it exited
// non-zero, an error wrapping ErrTimeout when req.Timeout expired, a *PodError
// when the pod could not run it, or another error. Run is safe for concurrent
// use by the Runner, one call per node.
type Backend interface {
	// Name is a short, stable name for results and logs, e.g. "debugpod".
	Name() string
	Run(ctx context.Context, req Request) (Result, error)
}

// Preflighter is implemented by backends that can check, before anything is
// created, that the cluster will accept what they create (for example with a
// server-side dry-run). The Runner calls Preflight once per multi-node run,
// with the first target node, before fanning out.
type Preflighter interface {
	Preflight(ctx context.Context, node string) error
}

// PreflightSkipper is implemented by backends that, on some nodes, create
// nothing a preflight would check: a resident agent's node, where the run is
// one request the API server authorises itself (pods/portforward or
// pods/exec). SkipPreflight reports whether node is one (it may look, at
// the cost of a round trip that the run then saves); the caller then makes
// no preflight check at all.
type PreflightSkipper interface {
	SkipPreflight(ctx context.Context, node string) bool
}

// NodeObserver is implemented by backends whose pods depend on what a
// node runs (its status.nodeInfo: kubelet and container runtime versions),
// such as the debugpod backend, which mounts its agent as an image volume
// where the node has them. The Runner calls ObserveNodes once per run with
// the resolved target nodes, before Preflight and before any Run; a
// backend never told about a node assumes the least of it.
type NodeObserver interface {
	ObserveNodes(nodes []*corev1.Node)
}

// NodeResult is the outcome on one node of a Runner.Run.
type NodeResult struct {
	Result
	// Err is nil on success; otherwise what Backend.Run returned (an *ExitError
	// for a non-zero exit), or an error wrapping ErrSkipped for a node not run.
	Err error
	// Attempts is how often the node was tried (retries after infrastructure
	// failures included); 0 for a skipped node.
	Attempts int
	// Stdout and Stderr summarise the node's output (of its last attempt).
	Stdout, Stderr Output
}
