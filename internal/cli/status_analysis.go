package cli

import (
	"fmt"
	"io"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// printAnalysis prints the canary analysis line of `nodeexec status`: the
// last check's verdict, the canaries' and the baseline's means, its message
// and when it was made; or that no check was made yet for the current spec.
func printAnalysis(w io.Writer, ns *v1alpha1.NodeScript, now time.Time) {
	a, r := ns.Spec.Rollout.Analysis, ns.Status.Analysis
	if a == nil {
		return
	}
	if r == nil || r.SpecHash != ns.Status.SpecHash {
		fmt.Fprintln(w, "canary analysis: no check yet (checks run while the canaries soak)")
		return
	}
	num := func(n *v1alpha1.Number) string {
		if n == nil {
			return "-"
		}
		return n.String()
	}
	ago := "-"
	if r.CheckedAt != nil {
		ago = now.Sub(r.CheckedAt.Time).Round(time.Second).String() + " ago"
	}
	fmt.Fprintf(w, "canary analysis: %s (canary %s, baseline %s; check %d, %s): %s\n", r.Verdict, num(r.Canary), num(r.Baseline), r.Checks, ago, r.Message)
}
