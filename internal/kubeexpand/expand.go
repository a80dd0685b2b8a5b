// Package kubeexpand applies the kubelet's expansion of container command,
// args and environment values to strings, for tests that check what a
// container really runs: `$$` becomes `$`; `$(NAME)` becomes the value of
// NAME when the container defines it and stays as written otherwise; a `$`
// followed by anything else, and an unclosed `$(`, stay as written. The
// semantics are those documented for Container.command and EnvVar.value in
// k8s.io/api/core/v1; the end-to-end tests hold them against real kubelets.
package kubeexpand

import "strings"

// Expand returns s as the kubelet passes it to the container, with vars the
// container's environment.
func Expand(s string, vars map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			name := s[i+2 : i+2+end]
			if v, ok := vars[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString("$(" + name + ")")
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

// All is Expand of each of argv.
func All(argv []string, vars map[string]string) []string {
	out := make([]string, len(argv))
	for i, a := range argv {
		out[i] = Expand(a, vars)
	}
	return out
}
