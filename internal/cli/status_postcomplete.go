package cli

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/nodescripts"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// printPostComplete prints nodeexec status's lines for
// spec.maintenance.prePull, spec.rollout.postCompleteDelay (and when the
// next node may start, status.nextStart) and spec.postCompleteLabels.
func printPostComplete(w io.Writer, ns *v1alpha1.NodeScript, now time.Time) {
	if nodescripts.PrePulls(ns) {
		fmt.Fprintln(w, "pre-pull: the run's image is pulled on each node before it is cordoned (spec.maintenance.prePull)")
	}
	if d := ns.Spec.Rollout.PostCompleteDelay; d != nil && d.Duration > 0 {
		fmt.Fprintf(w, "post-complete delay: %s after each node succeeds before the next starts", d.Duration)
		if t := ns.Status.NextStart; t != nil {
			fmt.Fprintf(w, "; next start at %s (in %s)", t.UTC().Format(time.RFC3339), max(t.Sub(now), 0).Round(time.Second))
		}
		fmt.Fprintln(w)
	}
	if l := ns.Spec.PostCompleteLabels; len(l) > 0 {
		fmt.Fprintf(w, "post-complete labels: %s on each node once it succeeded\n", formatLabels(l))
	}
}

// formatLabels is labels as "k=v, k=v", sorted by key.
func formatLabels(l map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(l)) {
		parts = append(parts, k+"="+l[k])
	}
	return strings.Join(parts, ", ")
}
