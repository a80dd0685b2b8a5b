package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/nodescripts"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// nodeexec status shows status.forecast's message and the learned
// durations.
func TestStatusForecast(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	ns := &v1alpha1.NodeScript{ObjectMeta: metav1.ObjectMeta{Name: "fix"}}
	ns.Status.Forecast = &v1alpha1.Forecast{NodesLeft: 14, WindowsNeeded: 2, Message: "14 node(s) left (30m0s per node at p50, 2 at once, 7 wave(s)) ≈ 2 window(s), done about Tue 2026-01-06 03:10 Europe/Berlin"}
	ns.Status.Durations = &v1alpha1.Durations{
		Run:   &v1alpha1.StepDurations{Samples: []int64{1700, 1800, 2400}, P50: 1800, P95: 2400},
		Drain: &v1alpha1.StepDurations{Samples: []int64{60}, P50: 60, P95: 60},
	}
	var b bytes.Buffer
	printReport(&b, &nodescripts.Report{NodeScript: ns}, now)
	for _, want := range []string{
		"forecast: 14 node(s) left (30m0s per node at p50, 2 at once, 7 wave(s)) ≈ 2 window(s), done about Tue 2026-01-06 03:10 Europe/Berlin\n",
		"durations (p50/p95, samples): drain 60s/60s (1), run 1800s/2400s (3)\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, b.String())
		}
	}
}
