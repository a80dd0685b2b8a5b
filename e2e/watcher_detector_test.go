//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/internal/testcluster"
	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// unprivilegedCheck is the check script of TestWatcherUnprivilegedCheck:
// it first asserts, from inside, what the pod may not do (exit 3 naming
// it: a check failure, never an answer), then answers kured's question for
// its node: 1 when the node's sentinel is in the mounted directory.
const unprivilegedCheck = `fail() { echo "FAIL: $*"; exit 3; }
test "$$" = 1 || fail "PID 1 is not the check's own shell"
if grep -qs -e kubelet -e containerd /proc/[0-9]*/comm; then fail "sees the node's processes"; fi
test ! -e /host/etc/shadow || fail "sees the node's /etc/shadow"
test "$(id -u):$(id -g)" = 65534:65534 || fail "runs as $(id -u):$(id -g)"
test "$(grep -cE '^Cap(Prm|Eff|Bnd):[[:space:]]+0+$' /proc/self/status)" = 3 || fail "has capabilities: $(grep ^Cap /proc/self/status)"
grep -qE '^NoNewPrivs:[[:space:]]+1$' /proc/self/status || fail "may gain privileges"
grep -qE '^Seccomp:[[:space:]]+2$' /proc/self/status || fail "no seccomp filter"
if cat /sentinel/root-only 2>/dev/null; then fail "reads a root-only file of the node"; fi
if touch /sentinel/written 2>/dev/null; then fail "writes to the node's directory"; fi
if touch /written 2>/dev/null; then fail "writes its root filesystem"; fi
echo "checked $NODE_NAME as $(id -u), PID $$"
if test -e "/sentinel/reboot-required-$NODE_NAME"; then echo "reboot required"; exit 1; fi
echo "no reboot required"; exit 0`

// TestWatcherUnprivilegedCheck: spec.check.privileged: false on the real
// nodes. The test creates a host directory holding kured's sentinel for one
// node (the test cluster's nodes share this machine's filesystem, so the
// file is named for its node) and a root-only file; the check sees the
// directory read-only through spec.check.hostPaths and finds the sentinel
// on that node only, which runs the script (the other is NotNeeded). The
// check asserts from inside that it has its own PID 1, none of the node's
// processes, no /host, user 65534, no capabilities, no new privileges, a
// seccomp filter, cannot read the root-only file nor write anywhere. The
// check pod's spec as the API server stored it holds no privilege; without
// its hostPath volume it is admitted by Pod Security "restricted", and
// with it refused by "baseline" (hostPath).
func TestWatcherUnprivilegedCheck(t *testing.T) {
	ctx := context.Background()
	dyn := watcherSetup(t)
	needs, fine := env.nodes[0], env.nodes[1]
	name := uniqueName("e2e-unpriv-")
	dir, err := os.MkdirTemp("/var/tmp", "nodeexec-e2e-"+name+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "reboot-required-"+needs), []byte("*** System restart required ***\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "root-only"), []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	checks := recordCheckPods(t, name)
	pods := recordPods(t, name)
	startWatcher(t, dyn)
	indented := "    " + strings.ReplaceAll(unprivilegedCheck, "\n", "\n    ")
	applyOnRealNodes(ctx, t, dyn, name, fmt.Sprintf(`  script: 'echo "rebooting $NODE_NAME"'
  recordOutput: true
  checkScript: |
%s
  check:
    privileged: false
    hostPaths: [{path: %s, mountPath: /sentinel}]
`, indented, dir))
	waitNodeScript(ctx, t, dyn, name, 60*time.Second, "complete, 1 succeeded and 1 not needed", func(ns *v1alpha1.NodeScript) bool {
		return ns.Status.Stage == v1alpha1.StageComplete && ns.Status.Succeeded == 1 && ns.Status.NotNeeded == 1 && ns.Status.Nodes == 2
	})
	if s, _ := nodeState(ctx, t, fine, name); s.Phase != v1alpha1.PhaseNotNeeded {
		t.Errorf("node %s (no sentinel): %+v, want NotNeeded", fine, s)
	}
	if s, _ := nodeState(ctx, t, needs, name); s.Phase != v1alpha1.PhaseSucceeded {
		t.Errorf("node %s (sentinel): %+v, want Succeeded", needs, s)
	}
	if got := pods.runs(fine, v1alpha1.ActionRun); len(got) != 0 {
		t.Errorf("run pods on %s, which did not need the script: %v", fine, got)
	}
	if out := nodeOutput(ctx, t, v1alpha1.DefaultNamespace, name, fine, v1alpha1.ActionCheck); !strings.Contains(out, "checked "+fine+" as 65534, PID 1") || !strings.Contains(out, "no reboot required") {
		t.Errorf("check output on %s: %q", fine, out)
	}
	if out := nodeOutput(ctx, t, v1alpha1.DefaultNamespace, name, needs, v1alpha1.ActionRun); !strings.Contains(out, "rebooting "+needs) {
		t.Errorf("run output on %s: %q", needs, out)
	}
	if out, errOut, code := cli(ctx, "", "status", name); code != 0 || !strings.Contains(out, "check: unprivileged") || !strings.Contains(out, dir+" at /sentinel read-only") {
		t.Errorf("nodeexec status: exit %d\n%s%s", code, out, errOut)
	}
	if _, err := os.Stat(filepath.Join(dir, "written")); err == nil {
		t.Error("the check wrote to the host directory")
	}

	// The check pods as the API server stored them.
	got := checks.all()
	if len(got) != 2 {
		t.Fatalf("check pods seen: %d, want 2 (one per node)", len(got))
	}
	for _, p := range got {
		s := p.Spec
		if s.HostPID || s.HostNetwork || s.HostIPC || !ptr.Equal(s.AutomountServiceAccountToken, ptr.To(false)) {
			t.Errorf("check pod %s: hostPID %t hostNetwork %t hostIPC %t token %v", p.Name, s.HostPID, s.HostNetwork, s.HostIPC, s.AutomountServiceAccountToken)
		}
		for _, c := range slices.Concat(s.InitContainers, s.Containers) {
			sc := c.SecurityContext
			if sc == nil || ptr.Deref(sc.Privileged, false) || !ptr.Equal(sc.AllowPrivilegeEscalation, ptr.To(false)) || sc.Capabilities == nil ||
				!slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 || !ptr.Equal(sc.ReadOnlyRootFilesystem, ptr.To(true)) {
				t.Errorf("check pod %s container %s: securityContext %+v", p.Name, c.Name, sc)
			}
			for _, m := range c.VolumeMounts {
				if !m.ReadOnly {
					t.Errorf("check pod %s: mount %s is writable", p.Name, m.MountPath)
				}
			}
		}
		for _, v := range s.Volumes {
			if v.HostPath != nil && v.HostPath.Path != dir {
				t.Errorf("check pod %s mounts the node's %s", p.Name, v.HostPath.Path)
			}
		}
	}
	podSecurityLevels(ctx, t, got[0])
}

// podSecurityLevels asks the API server (dry run) to admit check pod p:
// without its hostPath volumes in a namespace enforcing Pod Security
// "restricted" (admitted), and as it is in the test cluster's "baseline"
// namespace (refused: baseline forbids hostPath volumes).
func podSecurityLevels(ctx context.Context, t *testing.T, p *corev1.Pod) {
	t.Helper()
	fresh := func(ns string) *corev1.Pod {
		q := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: ns, Labels: p.Labels}, Spec: *p.Spec.DeepCopy()}
		return q
	}
	restricted := uniqueName("e2e-restricted-")
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: restricted, Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}}}
	if _, err := env.client.CoreV1().Namespaces().Create(ctx, nsObj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.client.CoreV1().Namespaces().Delete(context.Background(), restricted, metav1.DeleteOptions{})
	})
	noHost := fresh(restricted)
	noHost.Spec.Volumes = nil
	for i := range noHost.Spec.Containers {
		noHost.Spec.Containers[i].VolumeMounts = nil
	}
	// The service account admission plugin waits for the namespace's
	// default ServiceAccount; the pod mounts no token but names it.
	var err error
	waitFor(15*time.Second, func() bool {
		_, err = env.client.CoreV1().Pods(restricted).Create(ctx, noHost, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil || apierrors.IsForbidden(err) && strings.Contains(err.Error(), "violates PodSecurity")
	})
	if err != nil {
		t.Errorf("the check pod without its hostPath volume, in a restricted namespace: %v, want admitted", err)
	}
	_, err = env.client.CoreV1().Pods(testcluster.BaselineNamespace).Create(ctx, fresh(testcluster.BaselineNamespace), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err == nil || !strings.Contains(err.Error(), "hostPath") {
		t.Errorf("the check pod with its hostPath volume, in a baseline namespace: %v, want refused naming hostPath", err)
	}
}

// checkPods records every check pod of a NodeScript as first seen through
// a watch (they are deleted once recorded).
type checkPods struct {
	mu   sync.Mutex
	pods map[string]*corev1.Pod
}

func (c *checkPods) all() []*corev1.Pod {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*corev1.Pod
	for _, p := range c.pods {
		out = append(out, p)
	}
	return out
}

func recordCheckPods(t *testing.T, name string) *checkPods {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	l := &checkPods{pods: map[string]*corev1.Pod{}}
	factory := informers.NewSharedInformerFactoryWithOptions(env.client, 0, informers.WithNamespace(v1alpha1.DefaultNamespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = v1alpha1.LabelNodeScript + "=" + name + "," + v1alpha1.LabelAction + "=" + v1alpha1.ActionCheck
		}))
	inf := factory.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok {
			l.mu.Lock()
			defer l.mu.Unlock()
			if _, seen := l.pods[p.Name]; !seen {
				l.pods[p.Name] = p.DeepCopy()
			}
		}
	}}); err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("check pod informer did not sync")
	}
	t.Cleanup(func() { cancel(); factory.Shutdown() })
	return l
}

// TestApplyRejectsBadCheck: nodeexec apply refuses a bad spec.check before
// anything is applied, naming the field.
func TestApplyRejectsBadCheck(t *testing.T) {
	ctx := context.Background()
	dyn := watcherSetup(t)
	good := "apiVersion: nodeexec.io/v1alpha1\nkind: NodeScript\nmetadata: {name: %s}\nspec:\n  nodeSelector: {}\n  script: 'true'\n  checkScript: 'exit 1'\n"
	cases := []struct{ name, doc, want string }{
		{"hostpaths-privileged", good + "  check: {hostPaths: [{path: /var/run}]}\n", "spec.check.hostPaths"},
		{"root", good + "  check: {privileged: false, hostPaths: [{path: /, mountPath: /host}]}\n", "spec.check.hostPaths[0].path"},
		{"dotdot", good + "  check: {privileged: false, hostPaths: [{path: /var/../etc, mountPath: /host}]}\n", "spec.check.hostPaths[0].path"},
		{"relative-mount", good + "  check: {privileged: false, hostPaths: [{path: /var/run, mountPath: host}]}\n", "spec.check.hostPaths[0].mountPath"},
		{"overlap", good + "  check: {privileged: false, hostPaths: [{path: /var/run, mountPath: /h}, {path: /etc, mountPath: /h/etc}]}\n", "spec.check.hostPaths[1].mountPath"},
		{"nsenter-no-shell", good + "  backend: {name: nsenter}\n  check: {privileged: false}\n", "spec.backend.image"},
		{"no-checkscript", "apiVersion: nodeexec.io/v1alpha1\nkind: NodeScript\nmetadata: {name: %s}\nspec:\n  nodeSelector: {}\n  script: 'true'\n  check: {privileged: false}\n", "spec.check"},
	}
	dir := t.TempDir()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			name := uniqueName("e2e-badcheck-")
			file := filepath.Join(dir, c.name+".yaml")
			if err := os.WriteFile(file, []byte(fmt.Sprintf(c.doc, name)), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, errOut, code := cli(ctx, "", "apply", "-f", file); code == 0 || !strings.Contains(errOut, c.want) {
				t.Errorf("apply: exit %d, stderr %q; want a failure naming %s", code, errOut, c.want)
			}
			if _, err := dyn.Resource(v1alpha1.Resource).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("nodescript %s exists after a refused apply", name)
				_ = dyn.Resource(v1alpha1.Resource).Delete(ctx, name, metav1.DeleteOptions{})
			}
		})
	}
}
