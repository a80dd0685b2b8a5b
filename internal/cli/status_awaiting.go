package cli

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
	"github.com/nodeexec/nodeexec/nodeexec/watcher/nodescripts"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// printAwaiting prints, under nodeexec status's node table, the
// annotation gates spec.hooks asks for (spec.hooks.beforeRun, afterRun)
// and, one line per node, what each node waits for now.
func printAwaiting(w io.Writer, rep *nodescripts.Report, now time.Time) {
	h := rep.NodeScript.Spec.Hooks
	if h != nil && h.BeforeRun != nil {
		fmt.Fprintf(w, "\nbefore-run gate: %s \"true\" on the node (labelled %s=%s meanwhile)%s\n",
			strings.Join(h.BeforeRun.Annotations, ", "), v1alpha1.LabelBeforeRun, rep.NodeScript.Name, gateTimeout(h.BeforeRun.Timeout))
	}
	if h != nil && h.AfterRun != nil {
		fmt.Fprintf(w, "after-run gate: %s \"true\" on the node (labelled %s=%s meanwhile)%s\n",
			strings.Join(h.AfterRun.Annotations, ", "), v1alpha1.LabelAfterRun, rep.NodeScript.Name, gateTimeout(h.AfterRun.Timeout))
	}
	for _, n := range rep.Nodes {
		if n.Awaiting == "" {
			continue
		}
		since := ""
		if t := n.State.AwaitingSince; t != nil {
			since = fmt.Sprintf(" (for %s)", now.Sub(*t).Round(time.Second))
		}
		fmt.Fprintf(w, "awaiting: %s: %s%s\n", n.Node, n.Awaiting, since)
	}
}

// gateTimeout is an annotation gate's timeout for the gate's line.
func gateTimeout(d *metav1.Duration) string {
	if d == nil {
		return "; no timeout"
	}
	return "; timeout " + d.Duration.String()
}
