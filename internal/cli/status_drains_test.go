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

// nodeexec status shows each node status.drainBlocked lists: a line per
// node, and DrainBlocked with the PDB and pod in the node's row.
func TestStatusDrainBlocked(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	ns := &v1alpha1.NodeScript{ObjectMeta: metav1.ObjectMeta{Name: "fix"}}
	ns.Status.DrainBlocked = []string{"node-1: PDB web/web blocks pod web/web-1"}
	rep := &nodescripts.Report{NodeScript: ns, Nodes: []nodescripts.NodeReport{
		{Node: "node-1", Selected: true, Current: true, State: nodescripts.NodeState{Phase: v1alpha1.PhasePending}},
		{Node: "node-2", Selected: true, Current: true, State: nodescripts.NodeState{Phase: v1alpha1.PhaseRunning, Maintenance: v1alpha1.MaintenanceDraining}},
	}}
	var b bytes.Buffer
	printReport(&b, rep, now)
	out := b.String()
	for _, want := range []string{
		"drain blocked: node-1: PDB web/web blocks pod web/web-1 (not cordoned; checked again every 15s)\n",
		"DrainBlocked", "PDB web/web blocks pod web/web-1",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "node-2 ") && strings.Contains(line, "DrainBlocked") {
			t.Errorf("node-2 shown blocked: %s", line)
		}
	}
}
