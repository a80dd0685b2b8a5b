//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// TestWatcherScriptFrom: spec.scriptFrom on both real nodes.
//   - configMapKeyRef: the ConfigMap's script runs; editing the ConfigMap
//     changes the spec hash and runs the new script on both nodes again.
//   - secretKeyRef: the Secret's script runs (evaluated from a secretKeyRef
//     variable), and a marker only in the script is nowhere in the node
//     annotations, the NodeScript or its Events.
func TestWatcherScriptFrom(t *testing.T) {
	ctx := context.Background()
	dyn := watcherSetup(t)
	startWatcher(t, dyn)
	cms := env.client.CoreV1().ConfigMaps(v1alpha1.DefaultNamespace)
	secrets := env.client.CoreV1().Secrets(v1alpha1.DefaultNamespace)

	t.Run("configmap", func(t *testing.T) {
		name := uniqueName("e2e-cmscript-")
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: v1alpha1.DefaultNamespace}, Data: map[string]string{"run.sh": `echo "v1 on $NODE_NAME"`}}
		if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cms.Delete(context.Background(), name, metav1.DeleteOptions{}) })
		controlledFrom(ctx, t, dyn, name, fmt.Sprintf("{configMapKeyRef: {name: %s, key: run.sh}}", name))
		h1 := complete(ctx, t, dyn, name, 2).Status.SpecHash
		for _, node := range env.nodes[:2] {
			if out := nodeOutput(ctx, t, v1alpha1.DefaultNamespace, name, node, v1alpha1.ActionRun); !strings.Contains(out, "v1 on "+node) {
				t.Errorf("%s: output %q", node, out)
			}
		}
		cm.Data["run.sh"] = `echo "v2 on $NODE_NAME"`
		if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		ns := waitNodeScript(ctx, t, dyn, name, 90*time.Second, "complete with the edited script", func(ns *v1alpha1.NodeScript) bool {
			return ns.Status.SpecHash != h1 && ns.Status.Stage == v1alpha1.StageComplete && ns.Status.Succeeded == 2
		})
		for _, node := range env.nodes[:2] {
			s, _ := nodeState(ctx, t, node, name)
			if out := nodeOutput(ctx, t, v1alpha1.DefaultNamespace, name, node, v1alpha1.ActionRun); s.Hash != ns.Status.SpecHash || !strings.Contains(out, "v2 on "+node) {
				t.Errorf("%s: state %+v, output %q; want the edited script's run", node, s, out)
			}
		}
	})

	t.Run("secret", func(t *testing.T) {
		name := uniqueName("e2e-secscript-")
		marker := "only-in-the-secret-" + name
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: v1alpha1.DefaultNamespace},
			StringData: map[string]string{"run.sh": fmt.Sprintf(`X=%s; echo "secret script ran on $NODE_NAME (${#X} bytes)"`, marker)}}
		if _, err := secrets.Create(ctx, sec, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = secrets.Delete(context.Background(), name, metav1.DeleteOptions{}) })
		controlledFrom(ctx, t, dyn, name, fmt.Sprintf("{secretKeyRef: {name: %s, key: run.sh}}", name))
		ns := complete(ctx, t, dyn, name, 2)
		for _, node := range env.nodes[:2] {
			out := nodeOutput(ctx, t, v1alpha1.DefaultNamespace, name, node, v1alpha1.ActionRun)
			if !strings.Contains(out, fmt.Sprintf("secret script ran on %s (%d bytes)", node, len(marker))) {
				t.Errorf("%s: output %q", node, out)
			}
			_, n := nodeState(ctx, t, node, name)
			if b, _ := json.Marshal(n.Annotations); strings.Contains(string(b), marker) {
				t.Errorf("the script is in node %s's annotations", node)
			}
		}
		if b, _ := json.Marshal(ns); strings.Contains(string(b), marker) {
			t.Error("the script is in the NodeScript")
		}
		events, err := env.client.CoreV1().Events("").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if b, _ := json.Marshal(events); strings.Contains(string(b), marker) {
			t.Error("the script is in an Event")
		}
	})
}

// controlledFrom applies NodeScript name on both real nodes, two at a
// time, with output records and spec.scriptFrom from.
func controlledFrom(ctx context.Context, t *testing.T, dyn dynamic.Interface, name, from string) {
	t.Helper()
	applyOnRealNodes(ctx, t, dyn, name, fmt.Sprintf(`  recordOutput: true
  scriptFrom: %s
`, from))
}

// TestWatcherConfigMapEnv: spec.configMapEnv gives the scripts variables
// from ConfigMaps, one by key and one whole, read by the kubelet.
func TestWatcherConfigMapEnv(t *testing.T) {
	ctx := context.Background()
	dyn := watcherSetup(t)
	startWatcher(t, dyn)
	cms := env.client.CoreV1().ConfigMaps(v1alpha1.DefaultNamespace)
	name := uniqueName("e2e-cmenv-")
	for cm, data := range map[string]map[string]string{name + "-one": {"LEVEL": "debug", "IGNORED": "x"}, name + "-all": {"REGION": "eu-1", "ZONE": "b"}} {
		if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: cm, Namespace: v1alpha1.DefaultNamespace}, Data: data}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cms.Delete(context.Background(), cm, metav1.DeleteOptions{}) })
	}
	printer := uniqueName("e2e-cmenv-print-")
	applyOnRealNodes(ctx, t, dyn, printer, fmt.Sprintf(`  recordOutput: true
  script: 'echo "level=$LEVEL region=$REGION zone=$ZONE ignored=${IGNORED:-unset}"'
  configMapEnv: [{configMap: %s-one, key: LEVEL}, {configMap: %s-all}]
`, name, name))
	complete(ctx, t, dyn, printer, 2)
	for _, node := range env.nodes[:2] {
		if out := nodeOutput(ctx, t, v1alpha1.DefaultNamespace, printer, node, v1alpha1.ActionRun); !strings.Contains(out, "level=debug region=eu-1 zone=b ignored=unset") {
			t.Errorf("%s: output %q", node, out)
		}
	}
}
