package cli

import (
	"fmt"
	"io"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/nodescripts"
)

// printSilences prints, under nodeexec status's node table, the
// Alertmanager silences spec.maintenance.silences asks for and those each
// node holds now (its state's record), one line each.
func printSilences(w io.Writer, rep *nodescripts.Report, now time.Time) {
	m := rep.NodeScript.Spec.Maintenance
	if m == nil || len(m.Silences) == 0 {
		held := false
		for _, n := range rep.Nodes {
			held = held || len(n.State.Silences) > 0
		}
		if !held {
			return
		}
	} else {
		req := "required: a node whose silence fails does not start"
		if m.SilencesRequired != nil && !*m.SilencesRequired {
			req = "not required: a node whose silence fails goes on"
		}
		fmt.Fprintf(w, "\nsilences: %d per node in maintenance (spec.maintenance.silences; %s)\n", len(m.Silences), req)
	}
	for _, n := range rep.Nodes {
		for _, h := range n.State.Silences {
			fmt.Fprintf(w, "silence held: %s: %s on %s, ends %s (in %s)\n", n.Node, h.ID, h.URL, h.EndsAt.UTC().Format(time.RFC3339), h.EndsAt.Sub(now).Round(time.Second))
		}
	}
}
