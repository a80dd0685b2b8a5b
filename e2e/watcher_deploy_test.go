//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/nodescripts"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/nodeexec/nodeexec/nodeexec/resident"
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
		_ = env.client.CoordinationV1().Leases(v1alpha1.DefaultNamespace).Delete(context.Background(), "nodeexec-watcher", metav1.DeleteOptions{})
		waitFor(60*time.Second, func() bool {
			l, err := env.client.CoreV1().Pods(v1alpha1.DefaultNamespace).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=nodeexec-watcher"})
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
		dep, err = env.client.AppsV1().Deployments(v1alpha1.DefaultNamespace).Get(ctx, "nodeexec-watcher", metav1.GetOptions{})
		return err == nil && dep.Status.AvailableReplicas == 2
	}) {
		t.Fatalf("deployment not available: %+v (%v)", dep.Status, err)
	}
	var holder string
	if !waitFor(60*time.Second, func() bool {
		l, err := env.client.CoordinationV1().Leases(v1alpha1.DefaultNamespace).Get(ctx, "nodeexec-watcher", metav1.GetOptions{})
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
		return ns.Status.Stage == v1alpha1.StageComplete && ns.Status.Succeeded == 2
	})
	for _, n := range env.nodes[:2] {
		if s, _ := nodeState(ctx, t, n, name); s.Phase != v1alpha1.PhaseSucceeded || nodeOutput(ctx, t, v1alpha1.DefaultNamespace, name, n, v1alpha1.ActionRun) != "deployed watcher on "+n+"\n" {
			t.Errorf("node %s: state %+v", n, s)
		}
		// The NodeScript's Node condition, under deploy/'s nodes/status right.
		if !waitFor(15*time.Second, func() bool {
			c := nodeCondition(ctx, t, n, name)
			return c != nil && c.Reason == v1alpha1.ConditionApplied
		}) {
			t.Errorf("node %s: no condition %s Applied (%+v)", n, nodescripts.ConditionType(name), nodeCondition(ctx, t, n, name))
		}
	}
	// Events about cluster-scoped objects land in default: the watcher's
	// Role there lets it record them.
	waitEvent(ctx, t, "NodeScript", name, v1alpha1.ReasonComplete)
	drainUnderDeployedAccount(ctx, t, dyn, holder)

	watcherUp := func(after string) {
		t.Helper()
		d, err := env.client.AppsV1().Deployments(v1alpha1.DefaultNamespace).Get(ctx, "nodeexec-watcher", metav1.GetOptions{})
		if err != nil || d.DeletionTimestamp != nil || d.Status.AvailableReplicas != 2 {
			t.Errorf("after %s: the watcher's Deployment: %v %+v", after, err, d.Status)
		}
		n, err := env.client.CoreV1().Namespaces().Get(ctx, v1alpha1.DefaultNamespace, metav1.GetOptions{})
		if err != nil || n.DeletionTimestamp != nil {
			t.Errorf("after %s: namespace %s: %v (deleting: %v)", after, v1alpha1.DefaultNamespace, err, err == nil && n.DeletionTimestamp != nil)
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
	for _, ns := range []string{"nodeexec-e2e-agents-" + randomSuffix(), v1alpha1.DefaultNamespace} {
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

// drainUnderDeployedAccount: a NodeScript fails on one node (not the
// leader's) running a DaemonSet's pod and a ReplicaSet's; with onFailure
// cordon and drain, the deployed watcher, with only deploy/'s RBAC, cordons
// and drains it: the ReplicaSet's pod is evicted, the DaemonSet's stays, the node's state
// says Drained and an Event records it. The node is uncordoned and the pods
// deleted afterwards.
func drainUnderDeployedAccount(ctx context.Context, t *testing.T, dyn dynamic.Interface, holder string) {
	t.Helper()
	// Drain the node the leader does not run on, so that the drain does
	// not evict the replica running it (a standby replica may be evicted:
	// the Deployment starts it again on the other node).
	start := time.Now()
	defer func() { t.Logf("drain under the deployed account: %s in all", time.Since(start).Round(time.Second)) }()
	leaderPod, err := env.client.CoreV1().Pods(v1alpha1.DefaultNamespace).Get(ctx, strings.SplitN(holder, "_", 2)[0], metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the leader's pod (holder %s): %v", holder, err)
	}
	node := env.nodes[0]
	if leaderPod.Spec.NodeName == node {
		node = env.nodes[1]
	}
	ns := tempNamespace(ctx, t, "nodeexec-e2e-drain-", nil)
	// On the node: a DaemonSet's pod, and a ReplicaSet's (drain, like
	// kubectl drain without --force, refuses pods that no controller would
	// recreate).
	template := func(app string) corev1.PodTemplateSpec {
		return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": app}}, Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "main", Image: env.image, ImagePullPolicy: corev1.PullIfNotPresent, Command: []string{"sleep", "3600"}}},
			// sleep, as PID 1, ignores SIGTERM: stop at once.
			TerminationGracePeriodSeconds: ptr.To(int64(1)),
			AutomountServiceAccountToken:  ptr.To(false),
			Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}},
			}}},
		}}
	}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "drain-ds", Namespace: ns}, Spec: appsv1.DaemonSetSpec{
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "drain-ds"}}, Template: template("drain-ds"),
	}}
	if _, err := env.client.AppsV1().DaemonSets(ns).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "drain-rs", Namespace: ns}, Spec: appsv1.ReplicaSetSpec{
		Replicas: ptr.To(int32(1)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "drain-rs"}}, Template: template("drain-rs"),
	}}
	if _, err := env.client.AppsV1().ReplicaSets(ns).Create(ctx, rs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	running := map[string]corev1.Pod{} // app label -> its pod
	if !waitFor(60*time.Second, func() bool {
		l, err := env.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil || len(l.Items) != 2 {
			return false
		}
		for _, p := range l.Items {
			if p.Status.Phase != corev1.PodRunning || p.Spec.NodeName != node {
				return false
			}
			running[p.Labels["app"]] = p
		}
		return len(running) == 2
	}) {
		t.Fatalf("the DaemonSet's and the ReplicaSet's pods are not both Running on %s", node)
	}

	name := uniqueName("e2e-drain-")
	cleanupNodeScript(t, dyn, name, node)
	t0 := time.Now()
	applyNodeScript(ctx, t, dyn, fmt.Sprintf(`
apiVersion: nodeexec.io/v1alpha1
kind: NodeScript
metadata: {name: %s}
spec:
  nodeSelector: {matchLabels: {kubernetes.io/hostname: %s}}
  script: 'echo "broken on $NODE_NAME" >&2; exit 1'
  backend: {name: nsenter}
  onFailure: {cordon: true, drain: true, drainTimeout: 60s}
`, name, node))
	var s nodescripts.NodeState
	if !waitFor(60*time.Second, func() bool {
		s, _ = nodeState(ctx, t, node, name)
		return s.Drain != ""
	}) || s.Drain != v1alpha1.ReasonDrained {
		t.Fatalf("node %s: drain %q, want %q; state %+v", node, s.Drain, v1alpha1.ReasonDrained, s)
	}
	if _, n := nodeState(ctx, t, node, name); !s.Cordoned || !s.CordonedByUs || !n.Spec.Unschedulable || s.Phase != v1alpha1.PhaseFailed {
		t.Errorf("node %s: state %+v, unschedulable %t; want failed, cordoned by nodeexec", node, s, n.Spec.Unschedulable)
	}
	if p, err := env.client.CoreV1().Pods(ns).Get(ctx, running["drain-rs"].Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the ReplicaSet's pod on the drained node was not evicted: %v, %+v", err, p.Status)
	}
	dsPod := running["drain-ds"]
	if p, err := env.client.CoreV1().Pods(ns).Get(ctx, dsPod.Name, metav1.GetOptions{}); err != nil || p.UID != dsPod.UID || p.DeletionTimestamp != nil {
		t.Errorf("the DaemonSet's pod %s did not stay through the drain: %v", dsPod.Name, err)
	}
	waitEvent(ctx, t, "Node", node, v1alpha1.ReasonDrained)
	t.Logf("%s failed, cordoned and drained %s after %s", name, node, time.Since(t0).Round(time.Second))

	// Clean up now rather than at the end: the rest of the test wants both
	// nodes schedulable and both replicas up.
	if err := dyn.Resource(v1alpha1.Resource).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Errorf("deleting nodescript %s: %v", name, err)
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:null}},"spec":{"unschedulable":null}}`, nodescripts.StateAnnotation(name))
	if _, err := env.client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Errorf("uncordoning %s: %v", node, err)
	}
	for _, err := range []error{
		env.client.AppsV1().DaemonSets(ns).Delete(ctx, ds.Name, metav1.DeleteOptions{}),
		env.client.AppsV1().ReplicaSets(ns).Delete(ctx, rs.Name, metav1.DeleteOptions{}),
	} {
		if err != nil {
			t.Errorf("deleting the DaemonSet and ReplicaSet: %v", err)
		}
	}
	if !waitFor(60*time.Second, func() bool {
		d, err := env.client.AppsV1().Deployments(v1alpha1.DefaultNamespace).Get(ctx, "nodeexec-watcher", metav1.GetOptions{})
		return err == nil && d.Status.AvailableReplicas == 2 && d.Status.UpdatedReplicas == 2 && d.Status.Replicas == 2
	}) {
		t.Fatal("the watcher's Deployment is not back to 2 available replicas after the drain")
	}
}

// waitEvent waits for an Event recorded by the watcher about the
// cluster-scoped object kind/name with reason, in namespace default.
func waitEvent(ctx context.Context, t *testing.T, kind, name, reason string) {
	t.Helper()
	sel := fields.Set{"involvedObject.kind": kind, "involvedObject.name": name, "reason": reason, "source": "nodeexec-watcher"}.AsSelector().String()
	if !waitFor(30*time.Second, func() bool {
		l, err := env.client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: sel})
		return err == nil && len(l.Items) > 0
	}) {
		t.Errorf("no Event %s in namespace default (%s)", reason, sel)
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
