package cli

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// printNotifications prints one line per target of status.notifications:
// the events sent for the rollout, the last delivery and the last error.
func printNotifications(w io.Writer, notes []v1alpha1.NotificationStatus, now time.Time) {
	ago := func(at time.Time) string {
		return now.Sub(at).Round(time.Second).String() + " ago"
	}
	for _, n := range notes {
		line := fmt.Sprintf("notify %s: sent %s", n.URL, orDash(strings.Join(n.Sent, ",")))
		if n.LastDelivered != nil {
			line += fmt.Sprintf("; delivered %s", n.LastEvent)
			if n.LastNode != "" {
				line += " (" + n.LastNode + ")"
			}
			line += " " + ago(n.LastDelivered.Time)
		}
		if n.LastError != "" && n.LastErrorTime != nil {
			line += fmt.Sprintf("; failed %s: %s", ago(n.LastErrorTime.Time), n.LastError)
		}
		fmt.Fprintln(w, line)
	}
}
