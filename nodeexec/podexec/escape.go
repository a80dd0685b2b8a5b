package podexec

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// EscapeExpansion returns s with every `$` doubled, so that the kubelet's
// expansion of container command, args and environment values — `$(VAR)`
// replaced by the variable's value, `$$` by `$` — gives back s byte for
// byte. Every pod builder of nodeexec passes what it puts in those fields
// through it (the watcher's scripts, -e values); commands run over exec are
// not expanded and are left as they are.
func EscapeExpansion(s string) string { return strings.ReplaceAll(s, "$", "$$") }

// EscapeExpansionAll is EscapeExpansion of each of argv, in a new slice
// (nil for nil).
func EscapeExpansionAll(argv []string) []string {
	if argv == nil {
		return nil
	}
	out := make([]string, len(argv))
	for i, a := range argv {
		out[i] = EscapeExpansion(a)
	}
	return out
}

// RunToCompletion turns a pod built to hold for exec into one whose first
// container runs argv as its own process, for
// nodeexec.CompletionPodBuilder: the command is argv with $(VAR) expansion
// escaped (EscapeExpansionAll; it runs as written), no args, and
// terminationMessagePolicy FallbackToLogsOnError (the end of the output is
// the termination message of a failed run). It changes pod and returns it.
func RunToCompletion(pod *corev1.Pod, argv []string) *corev1.Pod {
	c := &pod.Spec.Containers[0]
	c.Command, c.Args = EscapeExpansionAll(argv), nil
	c.TerminationMessagePolicy = corev1.TerminationMessageFallbackToLogsOnError
	return pod
}
