//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/nodescripts"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"github.com/nodeexec/nodeexec/nodeexec/watcher"
	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// TestWatcherReboot: spec.reboot: IfRequired with spec.maintenance's cordon
// on a real node. The watcher's Options.Rebooter is the test cluster's node
// reboot (kubelet and containerd stopped, a new boot ID, started again; the
// machine itself is never rebooted).
//   - The script leaves the sentinel file: the node is rebooted once, comes
//     back with a new boot ID, is Succeeded (recording that boot) and is
//     uncordoned; Events Rebooting and Rebooted.
//   - A reboot that never happens (a Rebooter that does nothing) within
//     rebootTimeout: Failed RebootTimeout, counted against the error budget
//     (the rollout halts), not a success.
func TestWatcherReboot(t *testing.T) {
	if env.cluster == nil {
		t.Skip("needs the local test cluster's node reboot")
	}
	node := env.nodes[1]
	run := func(t *testing.T, rebooter func(context.Context, string) error, timeout string) (dynamic.Interface, string, nodescripts.NodeState) {
		ctx := context.Background()
		dyn := watcherSetup(t)
		name := uniqueName("e2e-reboot-")
		sentinel := "/var/tmp/nodeexec-e2e-" + name + "-reboot-required"
		t.Cleanup(func() { _ = os.Remove(sentinel) })
		cleanupNodeScript(t, dyn, name, node)
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			restoreCluster(ctx, t)
		})
		startWatcherWith(t, watcher.Options{Client: env.client, Dynamic: dyn, Resync: 2 * time.Second, Rebooter: rebooter})
		before, err := env.client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		applyNodeScript(ctx, t, dyn, fmt.Sprintf(`
apiVersion: nodeexec.io/v1alpha1
kind: NodeScript
metadata: {name: %s}
spec:
  %s
  script: 'touch "$NODESCRIPT_REBOOT_SENTINEL"; echo "needs a reboot"'
  reboot: IfRequired
  rebootSentinel: %s
  rebootTimeout: %s
  maintenance: {cordon: true}
`, name, onlyNode(node), sentinel, timeout))
		var s nodescripts.NodeState
		if !waitFor(3*time.Minute, func() bool {
			s, _ = nodeState(ctx, t, node, name)
			return s.Phase == v1alpha1.PhaseSucceeded || s.Phase == v1alpha1.PhaseFailed
		}) {
			t.Fatalf("node %s: %+v, never finished", node, s)
		}
		if _, err := os.Stat(sentinel); err != nil {
			t.Errorf("the script left no sentinel: %v", err)
		}
		t.Logf("boot ID before %s; state %+v", before.Status.NodeInfo.BootID, s)
		return dyn, name, s
	}

	t.Run("rebooted", func(t *testing.T) {
		ctx := context.Background()
		var reboots atomic.Int32
		rebooter := func(ctx context.Context, n string) error {
			reboots.Add(1)
			id, err := env.cluster.RebootNode(ctx, n)
			t.Logf("rebooted %s: boot ID %s, %v", n, id, err)
			return err
		}
		before, _ := env.client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		_, name, s := run(t, rebooter, "2m")
		after, n := nodeState(ctx, t, node, name)
		if s.Phase != v1alpha1.PhaseSucceeded || after.BootID == "" || after.BootID == before.Status.NodeInfo.BootID || after.BootID != n.Status.NodeInfo.BootID {
			t.Errorf("state %+v (node boot ID %s, was %s): want Succeeded on the new boot", after, n.Status.NodeInfo.BootID, before.Status.NodeInfo.BootID)
		}
		if r := reboots.Load(); r != 1 {
			t.Errorf("%d reboots, want 1", r)
		}
		if !waitFor(20*time.Second, func() bool {
			n, err := env.client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			return err == nil && !n.Spec.Unschedulable
		}) {
			t.Errorf("node %s still cordoned after the reboot", node)
		}
		for _, reason := range []string{v1alpha1.ReasonRebooting, v1alpha1.ReasonRebooted} {
			events, err := env.client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + node + ",reason=" + reason})
			if err != nil || !strings.Contains(fmt.Sprint(events.Items), name) {
				t.Errorf("no %s Event on %s naming %s: %v", reason, node, name, err)
			}
		}
	})

	t.Run("never back", func(t *testing.T) {
		ctx := context.Background()
		dyn, name, s := run(t, func(context.Context, string) error { return nil }, "8s")
		if s.Phase != v1alpha1.PhaseFailed || s.Reason != v1alpha1.ReasonRebootTimeout {
			t.Errorf("state %+v: want Failed RebootTimeout", s)
		}
		waitNodeScript(ctx, t, dyn, name, 30*time.Second, "halted", func(ns *v1alpha1.NodeScript) bool {
			return ns.Status.Stage == v1alpha1.StageHalted && ns.Status.Failed == 1
		})
	})
}
