package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// printForecast prints nodeexec status's lines for the run forecast:
// status.forecast (nodes left, windows needed, ETA) and the learned
// durations of status.durations, p50/p95 per step.
func printForecast(w io.Writer, ns *v1alpha1.NodeScript) {
	if f := ns.Status.Forecast; f != nil {
		fmt.Fprintf(w, "forecast: %s\n", f.Message)
	}
	d := ns.Status.Durations
	if d == nil {
		return
	}
	var steps []string
	for _, s := range []struct {
		name string
		sd   *v1alpha1.StepDurations
	}{{v1alpha1.StepCheck, d.Check}, {v1alpha1.StepDrain, d.Drain}, {v1alpha1.StepRun, d.Run}, {v1alpha1.StepReboot, d.Reboot}, {v1alpha1.StepVerify, d.Verify}} {
		if s.sd != nil && len(s.sd.Samples) > 0 {
			steps = append(steps, fmt.Sprintf("%s %ds/%ds (%d)", s.name, s.sd.P50, s.sd.P95, len(s.sd.Samples)))
		}
	}
	if len(steps) > 0 {
		fmt.Fprintf(w, "durations (p50/p95, samples): %s\n", strings.Join(steps, ", "))
	}
}
