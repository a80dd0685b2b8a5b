package cli

import (
	"fmt"
	"io"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// printGates prints one line per gate of status.gates: open or closed,
// since when, what it saw, the message and when it was last checked.
func printGates(w io.Writer, gates []v1alpha1.GateStatus, now time.Time) {
	for _, g := range gates {
		state := "closed"
		if g.Open {
			state = "open"
		}
		since, checked := "-", "-"
		if g.Since != nil {
			since = now.Sub(g.Since.Time).Round(time.Second).String()
		}
		if g.LastChecked != nil {
			checked = now.Sub(g.LastChecked.Time).Round(time.Second).String() + " ago"
		}
		fmt.Fprintf(w, "gate %s: %s (for %s; saw %s; checked %s): %s\n", g.Name, state, since, orDash(g.Value), checked, g.Message)
	}
}
