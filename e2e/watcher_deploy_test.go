//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/nodeexec/nodeexec/nodeexec/resident"
	"github.com/nodeexec/nodeexec/nodeexec/watcher"
	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// TestDeployedWatcher installs deploy/ (kustomize: CRD, privileged
// namespace, least-privilege RBAC, a two-replica Deployment of the locally
// built controller image with leader election), checks that one replica
// holds the Lease, and that the in-cluster watcher, with only its RBAC,
// applies a NodeScript to the real nodes. The Deployment and RBAC are
// removed afterwards (the CRD and namespace stay for the other tests).
//
// With it, the install orders of the watcher and the resident agents: agents
// installed before deploy/ keep running through it and after deploy/'s
// Deployment and RBAC are removed; agents installed after it, in their own
// namespace or in the watcher's nodeexec-system, are uninstalled without
// touching the watcher or its namespace.
func TestDeployedWatcher(t *testing.T) {
	ctx := context.Background()
	dyn := watcherSetup(t)
	// Agents first (their default namespace), then deploy/.
	agentsFirst := "nodeexec-e2e-agents-" + randomSuffix()
	t.Cleanup(func() { _, _, _ = cli(context.Background(), "", "agent", "uninstall", "--namespace", agentsFirst) })
	if _, stderr, code := cli(ctx, "", "agent", "install", "--namespace", agentsFirst, "--agent-image", agentImage(), "--timeout", "2m"); code != 0 {
		t.Fatalf("agent install before deploy/: exit %d\n%s", code, stderr)
	}
	removeDeploy := applyKustomization(ctx, t, dyn, "../deploy", func() {
		_ = env.client.CoordinationV1().Leases(watcher.DefaultNamespace).Delete(context.Background(), "nodeexec-watcher", metav1.DeleteOptions{})
		waitFor(60*time.Second, func() bool {
			l, err := env.client.CoreV1().Pods(watcher.DefaultNamespace).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=nodeexec-watcher"})
			return err == nil && len(l.Items) == 0
		})
	})
	applied := true
	t.Cleanup(func() {
		if applied {
			removeDeploy()
		}
	})

	var (
		dep *appsv1.Deployment
		err error
	)
	if !waitFor(90*time.Second, func() bool {
		dep, err = env.client.AppsV1().Deployments(watcher.DefaultNamespace).Get(ctx, "nodeexec-watcher", metav1.GetOptions{})
		return err == nil && dep.Status.AvailableReplicas == 2
	}) {
		t.Fatalf("deployment not available: %+v (%v)", dep.Status, err)
	}
	var holder string
	if !waitFor(60*time.Second, func() bool {
		l, err := env.client.CoordinationV1().Leases(watcher.DefaultNamespace).Get(ctx, "nodeexec-watcher", metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return false
		}
		holder = *l.Spec.HolderIdentity
		return strings.HasPrefix(holder, "nodeexec-watcher-")
	}) {
		t.Fatalf("no replica holds the lease (holder %q)", holder)
	}
	t.Logf("lease held by %s", holder)

	name := uniqueName("e2e-deployed-")
	cleanupNodeScript(t, dyn, name)
	applyNodeScript(ctx, t, dyn, fmt.Sprintf(`
apiVersion: nodeexec.io/v1alpha1
kind: NodeScript
metadata: {name: %s}
spec:
  %s
  script: 'echo "deployed watcher on $NODE_NAME"'
  backend: {name: nsenter}
  recordOutput: true
  rollout: {canary: 1, maxConcurrency: 2}
`, name, realNodes))
	waitNodeScript(ctx, t, dyn, name, 90*time.Second, "complete by the deployed watcher", func(ns *v1alpha1.NodeScript) bool {
		return ns.Status.Stage == watcher.StageComplete && ns.Status.Succeeded == 2
	})
	for _, n := range env.nodes[:2] {
		if s, _ := nodeState(ctx, t, n, name); s.Phase != watcher.PhaseSucceeded || nodeOutput(ctx, t, watcher.DefaultNamespace, name, n, watcher.ActionRun) != "deployed watcher on "+n+"\n" {
			t.Errorf("node %s: state %+v", n, s)
		}
	}

	watcherUp := func(after string) {
		t.Helper()
		d, err := env.client.AppsV1().Deployments(watcher.DefaultNamespace).Get(ctx, "nodeexec-watcher", metav1.GetOptions{})
		if err != nil || d.DeletionTimestamp != nil || d.Status.AvailableReplicas != 2 {
			t.Errorf("after %s: the watcher's Deployment: %v %+v", after, err, d.Status)
		}
		n, err := env.client.CoreV1().Namespaces().Get(ctx, watcher.DefaultNamespace, metav1.GetOptions{})
		if err != nil || n.DeletionTimestamp != nil {
			t.Errorf("after %s: namespace %s: %v (deleting: %v)", after, watcher.DefaultNamespace, err, err == nil && n.DeletionTimestamp != nil)
		}
	}
	agentsUp := func(ns, when string) {
		t.Helper()
		ds, err := env.client.AppsV1().DaemonSets(ns).Get(ctx, resident.DaemonSetName, metav1.GetOptions{})
		if err != nil || ds.DeletionTimestamp != nil || ds.Status.DesiredNumberScheduled == 0 || ds.Status.NumberAvailable != ds.Status.DesiredNumberScheduled {
			t.Errorf("%s: agents in %s: %v", when, ns, err)
		}
	}
	agentsUp(agentsFirst, "after deploy/ was applied")
	// Agents after deploy/: in their own namespace, and in the watcher's.
	for _, ns := range []string{"nodeexec-e2e-agents-" + randomSuffix(), watcher.DefaultNamespace} {
		t.Cleanup(func() { _, _, _ = cli(context.Background(), "", "agent", "uninstall", "--namespace", ns) })
		if _, stderr, code := cli(ctx, "", "agent", "install", "--namespace", ns, "--agent-image", agentImage(), "--timeout", "2m"); code != 0 {
			t.Fatalf("agent install in %s after deploy/: exit %d\n%s", ns, code, stderr)
		}
		agentsUp(ns, "after install")
		watcherUp("agent install in " + ns)
		if _, stderr, code := cli(ctx, "", "agent", "uninstall", "--namespace", ns); code != 0 {
			t.Fatalf("agent uninstall in %s: exit %d\n%s", ns, code, stderr)
		}
		watcherUp("agent uninstall in " + ns)
	}
	// Removing deploy/ leaves the agents installed before it running.
	removeDeploy()
	applied = false
	agentsUp(agentsFirst, "after deploy/ was removed")
	if _, stderr, code := cli(ctx, "", "agent", "uninstall", "--namespace", agentsFirst); code != 0 {
		t.Fatalf("agent uninstall in %s: exit %d\n%s", agentsFirst, code, stderr)
	}
}

// applyKustomization builds the kustomization in dir and applies each object
// (server-side apply), and returns a function that deletes what it applied
// (not CRDs and Namespaces), then calls after (may be nil).
func applyKustomization(ctx context.Context, t *testing.T, dyn dynamic.Interface, dir string, after func()) (remove func()) {
	t.Helper()
	resources, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(env.client.Discovery()))
	var applied []*unstructured.Unstructured
	for _, r := range resources.Resources() {
		m, err := r.Map()
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{Object: m}
		gvk := u.GroupVersionKind()
		mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("%s: %v", gvk, err)
		}
		ri := dyn.Resource(mapping.Resource)
		var client interface {
			Apply(context.Context, string, *unstructured.Unstructured, metav1.ApplyOptions, ...string) (*unstructured.Unstructured, error)
		} = ri
		if u.GetNamespace() != "" {
			client = ri.Namespace(u.GetNamespace())
		}
		if _, err := client.Apply(ctx, u.GetName(), u, metav1.ApplyOptions{FieldManager: "nodeexec-e2e", Force: true}); err != nil {
			t.Fatalf("applying %s %s: %v", gvk.Kind, u.GetName(), err)
		}
		if k := gvk.Kind; k != "CustomResourceDefinition" && k != "Namespace" {
			applied = append(applied, u)
		}
	}
	return func() {
		for _, u := range applied {
			gvk := u.GroupVersionKind()
			mapping, _ := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
			ri := dyn.Resource(mapping.Resource)
			if u.GetNamespace() != "" {
				_ = ri.Namespace(u.GetNamespace()).Delete(context.Background(), u.GetName(), metav1.DeleteOptions{})
			} else {
				_ = ri.Delete(context.Background(), u.GetName(), metav1.DeleteOptions{})
			}
		}
		if after != nil {
			after()
		}
	}
}
