//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/nodescripts"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// amSilence is a silence as the Alertmanager's API v2 shows it
// (GET /api/v2/silences).
type amSilence struct {
	ID       string                 `json:"id"`
	Status   struct{ State string } `json:"status"`
	Comment  string                 `json:"comment"`
	Creator  string                 `json:"createdBy"`
	Matchers []struct {
		Name    string `json:"name"`
		Value   string `json:"value"`
		IsEqual bool   `json:"isEqual"`
		IsRegex bool   `json:"isRegex"`
	} `json:"matchers"`
}

// amSilences lists the real Alertmanager's silences whose comment names
// NodeScript name.
func amSilences(ctx context.Context, name string) ([]amSilence, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, env.cluster.AlertmanagerURL()+"/api/v2/silences", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var all, mine []amSilence
	if err := json.NewDecoder(resp.Body).Decode(&all); err != nil {
		return nil, err
	}
	for _, s := range all {
		if strings.Contains(s.Comment, "nodescript "+name+" ") {
			mine = append(mine, s)
		}
	}
	return mine, nil
}

// TestWatcherSilences: spec.maintenance {cordon, silences} with nodeLabel,
// against the test cluster's real Alertmanager.
//   - The Alertmanager is stopped: the silence cannot be created, so the node
//     is never cordoned, and its state says SilenceFailed (an infrastructure
//     failure, retried).
//   - Started again: the retry creates the silence (active, with the
//     matcher node="<node>") before the cordon, holds it while the script
//     runs, and expires it once the node is uncordoned after the success.
func TestWatcherSilences(t *testing.T) {
	ctx := context.Background()
	dyn := watcherSetup(t)
	node := env.nodes[1]
	name := uniqueName("e2e-silence-")

	if err := env.cluster.StopAlertmanager(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.cluster.StartAlertmanager(context.Background()); err != nil {
			t.Errorf("starting the Alertmanager again: %v", err)
		}
	})
	// The node must never be cordoned while the silence cannot be made.
	var cordoned atomic.Bool
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go func() {
		for watchCtx.Err() == nil {
			if n, err := env.client.CoreV1().Nodes().Get(watchCtx, node, metav1.GetOptions{}); err == nil && n.Spec.Unschedulable {
				cordoned.Store(true)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()

	cleanupNodeScript(t, dyn, name, node)
	startWatcher(t, dyn)
	applyNodeScript(ctx, t, dyn, fmt.Sprintf(`
apiVersion: nodeexec.io/v1alpha1
kind: NodeScript
metadata: {name: %s}
spec:
  %s
  script: 'sleep 6; echo "silenced $NODE_NAME"'
  maintenance:
    cordon: true
    silences:
    - url: %s
      matchers: ['alertname="NodeexecSilenceTest"']
      nodeLabel: node
      duration: 10m
      comment: e2e
  retry: {limit: 20, initialBackoff: 2s, maxBackoff: 2s}
`, name, onlyNode(node), env.cluster.AlertmanagerURL()))

	// 1. The Alertmanager is down: SilenceFailed, never cordoned.
	var s nodescripts.NodeState
	if !waitFor(60*time.Second, func() bool {
		s, _ = nodeState(ctx, t, node, name)
		return s.Phase == v1alpha1.PhaseFailed && s.Reason == v1alpha1.ReasonSilenceFailed
	}) {
		t.Fatalf("node %s: %+v, want a SilenceFailed infrastructure failure", node, s)
	}
	if !s.Infrastructure || !strings.Contains(s.Message, "spec.maintenance.silences[0]") {
		t.Errorf("silence failure recorded as %+v", s)
	}
	time.Sleep(3 * time.Second) // a retry or two, still failing
	stopWatch()
	if cordoned.Load() {
		t.Errorf("node %s was cordoned although its silence could not be created", node)
	}

	// 2. The Alertmanager is back: the silence is made, held during the run.
	if err := env.cluster.StartAlertmanager(ctx); err != nil {
		t.Fatal(err)
	}
	var active amSilence
	if !waitFor(60*time.Second, func() bool {
		s, _ = nodeState(ctx, t, node, name)
		if s.Phase != v1alpha1.PhaseRunning || len(s.Silences) == 0 {
			return false
		}
		list, err := amSilences(ctx, name)
		if err != nil {
			return false
		}
		for _, sil := range list {
			if sil.ID == s.Silences[0].ID && sil.Status.State == "active" {
				active = sil
				return true
			}
		}
		return false
	}) {
		t.Fatalf("no active silence in the Alertmanager while node %s runs: state %+v", node, s)
	}
	if _, n := nodeState(ctx, t, node, name); !n.Spec.Unschedulable {
		t.Errorf("node %s not cordoned while its silence is held", node)
	}
	hasNode, hasAlert := false, false
	for _, m := range active.Matchers {
		hasNode = hasNode || (m.Name == "node" && m.Value == node && m.IsEqual && !m.IsRegex)
		hasAlert = hasAlert || (m.Name == "alertname" && m.Value == "NodeexecSilenceTest" && m.IsEqual)
	}
	if !hasNode || !hasAlert || active.Creator != v1alpha1.SilenceCreatedBy || !strings.HasPrefix(active.Comment, "e2e | ") || !strings.Contains(active.Comment, node) {
		t.Errorf("silence %+v: want the matchers alertname and node=%s, createdBy %s, the comment naming the node", active, node, v1alpha1.SilenceCreatedBy)
	}

	// 3. Done: uncordoned, the silence expired and no longer recorded.
	waitNodeScript(ctx, t, dyn, name, 90*time.Second, "complete", func(ns *v1alpha1.NodeScript) bool {
		return ns.Status.Stage == v1alpha1.StageComplete && ns.Status.Succeeded == 1
	})
	if !waitFor(20*time.Second, func() bool {
		s, _ = nodeState(ctx, t, node, name)
		return len(s.Silences) == 0
	}) {
		t.Errorf("node %s still records silences after its maintenance: %+v", node, s.Silences)
	}
	if _, n := nodeState(ctx, t, node, name); n.Spec.Unschedulable {
		t.Errorf("node %s still cordoned after the success", node)
	}
	list, err := amSilences(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	for _, sil := range list {
		if sil.Status.State != "expired" {
			t.Errorf("silence %s is %s after the node's maintenance, want expired", sil.ID, sil.Status.State)
		}
	}
	for _, reason := range []string{v1alpha1.ReasonSilenceFailed, v1alpha1.ReasonSilenceCreated, v1alpha1.ReasonSilenceExpired} {
		events, err := env.client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + node + ",reason=" + reason})
		if err != nil || !strings.Contains(fmt.Sprint(events.Items), name) {
			t.Errorf("no %s Event on %s naming %s: %v", reason, node, name, err)
		}
	}
}
