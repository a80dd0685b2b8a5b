package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/nodescripts"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

func TestPrintSilences(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	rep := &nodescripts.Report{NodeScript: &v1alpha1.NodeScript{Spec: v1alpha1.NodeScriptSpec{Maintenance: &v1alpha1.MaintenanceSpec{
		Cordon: true, Silences: []v1alpha1.Silence{{URL: "http://am:9093", NodeLabel: "node"}},
	}}}, Nodes: []nodescripts.NodeReport{
		{Node: "n1", State: nodescripts.NodeState{Silences: []nodescripts.HeldSilence{{URL: "http://am:9093", ID: "id-1", EndsAt: now.Add(40 * time.Minute)}}}},
		{Node: "n2"},
	}}
	var b bytes.Buffer
	printSilences(&b, rep, now)
	for _, want := range []string{
		"silences: 1 per node in maintenance (spec.maintenance.silences; required",
		"silence held: n1: id-1 on http://am:9093, ends 2026-11-27T12:40:00Z (in 40m0s)",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("got:\n%s\nwant a line with %q", b.String(), want)
		}
	}
	if strings.Contains(b.String(), "n2") {
		t.Errorf("n2 holds nothing:\n%s", b.String())
	}
	b.Reset()
	printSilences(&b, &nodescripts.Report{NodeScript: &v1alpha1.NodeScript{}}, now)
	if b.Len() != 0 {
		t.Errorf("no silences asked or held: printed %q", b.String())
	}
}
