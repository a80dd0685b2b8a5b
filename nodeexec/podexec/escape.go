package podexec

import "strings"

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
