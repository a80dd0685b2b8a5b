package watcher

import (
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/internal/golden"
	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// kuredCheck is a NodeScript whose unprivileged check looks for kured's
// reboot sentinel, the node's /var/run mounted at /host/var/run.
func kuredCheck(mutate func(*v1alpha1.NodeScriptSpec)) *v1alpha1.NodeScript {
	ns := &v1alpha1.NodeScript{ObjectMeta: metav1.ObjectMeta{Name: "reboot-if-required", UID: "6c1f0d4e-0000-4000-8000-000000000002"}, Spec: v1alpha1.NodeScriptSpec{
		Script:      "systemctl reboot",
		CheckScript: "test -e /host/var/run/reboot-required && exit 1; exit 0",
		Check: &v1alpha1.CheckSpec{Privileged: ptr.To(false), HostPaths: []v1alpha1.HostPathMount{
			{Path: "/var/run", MountPath: "/host/var/run"}, {Path: "/etc/nodeexec"},
		}},
	}}
	if mutate != nil {
		mutate(&ns.Spec)
	}
	return ns
}

func TestUnprivilegedCheckPodGolden(t *testing.T) {
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name string
		ns   *v1alpha1.NodeScript
	}{
		{"unprivileged-check-debugpod", kuredCheck(func(s *v1alpha1.NodeScriptSpec) {
			s.SecretEnv = []v1alpha1.SecretEnvSource{{Secret: "tokens", Key: "API_TOKEN"}}
			s.ConfigMapEnv = []v1alpha1.ConfigMapEnvSource{{ConfigMap: "settings", Key: "LEVEL"}}
		})},
		// The check pod is the watcher's whatever spec.backend.name is: the
		// nsenter backend's image, namespace and pull secrets, none of its
		// privileges.
		{"unprivileged-check-nsenter", kuredCheck(func(s *v1alpha1.NodeScriptSpec) {
			s.Backend = v1alpha1.BackendSpec{Name: "nsenter", Namespace: "ops", Namespaces: []string{"mnt", "net"},
				Image: "registry.example:5000/ops/tools@sha256:" + strings.Repeat("ab", 32), ImagePullSecrets: []corev1.LocalObjectReference{{Name: "ops-registry"}}}
			s.Timeout = &metav1.Duration{Duration: time.Minute}
			s.Check.HostPaths = nil
		})},
	} {
		t.Run(c.name, func(t *testing.T) {
			if errs := v1alpha1.Validate(c.ns); len(errs) > 0 {
				t.Fatalf("Validate: %v", errs)
			}
			pod, err := buildRunPod(runPodSpec{NodeScript: c.ns, Backend: testBackend(t, c.ns), Node: "node-a.example", Action: v1alpha1.ActionCheck, Attempt: 1, Now: now})
			if err != nil {
				t.Fatal(err)
			}
			golden.CheckYAML(t, c.name+".yaml", pod)
			noPrivilege(t, pod, c.ns.Spec.Check.HostPaths)
		})
	}
}

// noPrivilege fails t unless pod holds no privilege: no host namespace,
// every container (init, regular, ephemeral) unprivileged with no
// escalation, all capabilities dropped and none added, a read-only root
// filesystem, non-root; the pod non-root as 65534 with seccomp
// RuntimeDefault and no token; every volume a hostPath of mounts (type
// Directory), mounted read-only only.
func noPrivilege(t *testing.T, pod *corev1.Pod, mounts []v1alpha1.HostPathMount) {
	t.Helper()
	s := pod.Spec
	if s.HostPID || s.HostNetwork || s.HostIPC || ptr.Deref(s.ShareProcessNamespace, false) {
		t.Errorf("host namespaces: pid %t net %t ipc %t share %v", s.HostPID, s.HostNetwork, s.HostIPC, s.ShareProcessNamespace)
	}
	if !ptr.Equal(s.AutomountServiceAccountToken, ptr.To(false)) || s.ServiceAccountName != "" {
		t.Errorf("service account %q token %v", s.ServiceAccountName, s.AutomountServiceAccountToken)
	}
	psc := s.SecurityContext
	if psc == nil || !ptr.Equal(psc.RunAsNonRoot, ptr.To(true)) || !ptr.Equal(psc.RunAsUser, ptr.To(checkUser)) || !ptr.Equal(psc.RunAsGroup, ptr.To(checkUser)) ||
		psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault ||
		len(psc.SupplementalGroups) > 0 || psc.FSGroup != nil || len(psc.Sysctls) > 0 || psc.SELinuxOptions != nil || psc.AppArmorProfile != nil {
		t.Errorf("pod securityContext %+v", psc)
	}
	var containers []corev1.Container
	containers = append(containers, s.InitContainers...)
	containers = append(containers, s.Containers...)
	for _, e := range s.EphemeralContainers {
		containers = append(containers, corev1.Container(e.EphemeralContainerCommon))
	}
	if len(containers) != 1 {
		t.Errorf("%d containers, want 1", len(containers))
	}
	hostVolumes := map[string]string{}
	for _, v := range s.Volumes {
		if v.HostPath == nil {
			t.Errorf("volume %s is not a hostPath: %+v", v.Name, v.VolumeSource)
			continue
		}
		if v.HostPath.Type == nil || *v.HostPath.Type != corev1.HostPathDirectory {
			t.Errorf("volume %s: hostPath type %v, want Directory", v.Name, v.HostPath.Type)
		}
		hostVolumes[v.Name] = v.HostPath.Path
	}
	var paths []string
	for _, m := range mounts {
		paths = append(paths, m.Path)
	}
	if got := slices.Sorted(func(yield func(string) bool) {
		for _, p := range hostVolumes {
			if !yield(p) {
				return
			}
		}
	}); !slices.Equal(got, slices.Sorted(slices.Values(paths))) {
		t.Errorf("host paths %v, want %v", got, paths)
	}
	for _, c := range containers {
		sc := c.SecurityContext
		if sc == nil || ptr.Deref(sc.Privileged, false) || !ptr.Equal(sc.AllowPrivilegeEscalation, ptr.To(false)) ||
			sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 ||
			!ptr.Equal(sc.ReadOnlyRootFilesystem, ptr.To(true)) || !ptr.Deref(sc.RunAsNonRoot, true) || ptr.Deref(sc.RunAsUser, checkUser) == 0 ||
			ptr.Deref(sc.RunAsGroup, checkUser) == 0 || sc.ProcMount != nil || sc.SeccompProfile != nil || sc.SELinuxOptions != nil || sc.AppArmorProfile != nil {
			t.Errorf("container %s securityContext %+v", c.Name, sc)
		}
		if len(c.VolumeDevices) > 0 || len(c.Ports) > 0 {
			t.Errorf("container %s: devices %v ports %v", c.Name, c.VolumeDevices, c.Ports)
		}
		for _, m := range c.VolumeMounts {
			if _, ok := hostVolumes[m.Name]; !ok {
				t.Errorf("container %s mounts %s, not a volume of spec.check.hostPaths", c.Name, m.Name)
			}
			if !m.ReadOnly || m.MountPropagation != nil || !ptr.Equal(m.RecursiveReadOnly, ptr.To(corev1.RecursiveReadOnlyIfPossible)) || m.SubPath != "" {
				t.Errorf("container %s mount %+v: want read-only, recursively where possible, no propagation", c.Name, m)
			}
		}
		if c.Name == v1alpha1.CheckContainer && (len(c.Command) != 3 || c.Command[0] != "sh" || c.Command[1] != "-c") {
			t.Errorf("command %q, want sh -c SCRIPT", c.Command)
		}
	}
}

// The privileged check (the default) and every other action's pod are the
// backend's, as before spec.check: spec.check.privileged: false changes
// the check's pod only.
func TestUnprivilegedCheckLeavesOtherPods(t *testing.T) {
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	unpriv := kuredCheck(nil)
	plain := kuredCheck(func(s *v1alpha1.NodeScriptSpec) { s.Check = nil })
	for _, action := range []string{v1alpha1.ActionRun, v1alpha1.ActionReboot} {
		a, err := buildRunPod(runPodSpec{NodeScript: unpriv, Backend: testBackend(t, unpriv), Node: "n1", Action: action, Attempt: 2, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		b, err := buildRunPod(runPodSpec{NodeScript: plain, Backend: testBackend(t, plain), Node: "n1", Action: action, Attempt: 2, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(b.Spec, a.Spec); diff != "" {
			t.Errorf("%s pod with spec.check.privileged false differs from the backend's (-want +got):\n%s", action, diff)
		}
	}
	for _, ns := range []*v1alpha1.NodeScript{plain, kuredCheck(func(s *v1alpha1.NodeScriptSpec) { s.Check.Privileged, s.Check.HostPaths = ptr.To(true), nil })} {
		p, err := buildRunPod(runPodSpec{NodeScript: ns, Backend: testBackend(t, ns), Node: "n1", Action: v1alpha1.ActionCheck, Attempt: 1, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		if c := p.Spec.Containers[0]; c.SecurityContext == nil || !ptr.Deref(c.SecurityContext.Privileged, false) || !p.Spec.HostPID {
			t.Errorf("check %+v: the privileged check's pod is not the backend's privileged pod: %+v", ns.Spec.Check, p.Spec)
		}
	}
	// The image is the run's (the admission policy's): an unknown backend
	// name is refused naming it.
	bad := kuredCheck(func(s *v1alpha1.NodeScriptSpec) { s.Backend.Name = "ssh" })
	if _, err := unprivilegedCheckPod(&bad.Spec, nodeexecRequest("n1", "true"), "p", now); err == nil || !strings.Contains(err.Error(), "spec.backend.name") {
		t.Errorf("unknown backend: %v", err)
	}
	if _, err := unprivilegedCheckPod(&unpriv.Spec, nodeexecRequest("", "true"), "p", now); err == nil || !strings.Contains(err.Error(), "spec.check") {
		t.Errorf("no node: %v", err)
	}
}

// Reconcile on fakes with spec.check.privileged false: the watcher creates
// the unprivileged check pod; its exit codes keep their meaning (1: the
// backend's privileged run pod follows; 0: NotNeeded; 2: CheckFailed).
func TestReconcileUnprivilegedCheck(t *testing.T) {
	ns := script(func(s *v1alpha1.NodeScriptSpec) {
		s.CheckScript = "test -e /host/var/run/reboot-required && exit 1; exit 0"
		s.Check = &v1alpha1.CheckSpec{Privileged: ptr.To(false), HostPaths: []v1alpha1.HostPathMount{{Path: "/var/run", MountPath: "/host/var/run"}}}
		s.Rollout.Canary = ptr.To[int32](0)
		s.Rollout.MaxConcurrency = ptr.To(intstr.FromInt32(3))
	})
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1"), testNode("n2"), testNode("n3"))
	e.reconcile()
	for _, n := range []string{"n1", "n2", "n3"} {
		p, err := e.cs.CoreV1().Pods(v1alpha1.DefaultNamespace).Get(e.ctx, podName(ns, n, v1alpha1.ActionCheck, 1), metav1.GetOptions{})
		if err != nil {
			t.Fatalf("node %s: no check pod: %v (pods %v)", n, err, e.pods())
		}
		if p.Spec.Containers[0].Name != v1alpha1.CheckContainer {
			t.Errorf("node %s: check pod container %s", n, p.Spec.Containers[0].Name)
		}
		noPrivilege(t, p, ns.Spec.Check.HostPaths)
	}
	e.setPod(podName(ns, "n1", v1alpha1.ActionCheck, 1), exited(1))
	e.setPod(podName(ns, "n2", v1alpha1.ActionCheck, 1), exited(0))
	e.reconcile()
	run, err := e.cs.CoreV1().Pods(v1alpha1.DefaultNamespace).Get(e.ctx, podName(ns, "n1", v1alpha1.ActionRun, 2), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("no run pod on n1 after its check exited 1: %v (pods %v)", err, e.pods())
	}
	if c := run.Spec.Containers[0]; c.SecurityContext == nil || !ptr.Deref(c.SecurityContext.Privileged, false) {
		t.Errorf("the run pod is not the backend's: %+v", run.Spec)
	}
	if s := e.state("n2"); s.Phase != v1alpha1.PhaseNotNeeded {
		t.Errorf("n2 after exit 0: %+v, want NotNeeded", s)
	}
	e.setPod(podName(ns, "n3", v1alpha1.ActionCheck, 1), exited(2))
	e.reconcile()
	if s := e.state("n3"); s.Phase != v1alpha1.PhaseFailed || s.Reason != v1alpha1.ReasonCheckFailed {
		t.Errorf("n3 after exit 2: %+v, want Failed CheckFailed", s)
	}
	for _, n := range []string{"n2", "n3"} {
		if slices.Contains(e.pods(), podName(ns, n, v1alpha1.ActionRun, 2)) {
			t.Errorf("a run pod on %s", n)
		}
	}
}

func nodeexecRequest(node, script string) nodeexec.Request {
	return nodeexec.Request{Node: node, Script: script, Timeout: time.Minute}
}

// FuzzUnprivilegedCheck: whatever spec.check.hostPaths Validate accepts,
// the unprivileged check pod holds no privilege, mounts exactly those
// directories read-only, and no two mount paths overlap (nor / or the
// container's /proc, /sys, /dev); Validate's refusals name a field.
func FuzzUnprivilegedCheck(f *testing.F) {
	for _, s := range [][4]string{
		{"/var/run", "/host/var/run", "/etc", ""},
		{"/", "/host", "", ""},
		{"/var/../etc", "/h", "/a", "/h/a"},
		{"var/run", "", "/proc", ""},
		{"/a//b", "/m/", "/x", "/m"},
		{"/a\x00", "/dev/x", "/sys", "/sysx"},
	} {
		f.Add(s[0], s[1], s[2], s[3])
	}
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, path1, mount1, path2, mount2 string) {
		ns := kuredCheck(nil)
		ns.Spec.Check.HostPaths = []v1alpha1.HostPathMount{{Path: path1, MountPath: mount1}}
		if path2 != "" || mount2 != "" {
			ns.Spec.Check.HostPaths = append(ns.Spec.Check.HostPaths, v1alpha1.HostPathMount{Path: path2, MountPath: mount2})
		}
		if errs := v1alpha1.Validate(ns); len(errs) > 0 {
			checkNamesFields(t, errs)
			return
		}
		pod, err := buildRunPod(runPodSpec{NodeScript: ns, Backend: testBackend(t, ns), Node: "n1", Action: v1alpha1.ActionCheck, Attempt: 1, Now: now})
		if err != nil {
			t.Fatalf("accepted by Validate, refused by RunPod: %v", err)
		}
		noPrivilege(t, pod, ns.Spec.Check.HostPaths)
		overlaps := func(a, b string) bool { return a == b || strings.HasPrefix(a, b+"/") || strings.HasPrefix(b, a+"/") }
		var mounts []string
		for _, m := range pod.Spec.Containers[0].VolumeMounts {
			p := m.MountPath
			if p == "/" || !strings.HasPrefix(p, "/") || path.Clean(p) != p || slices.Contains(strings.Split(p, "/"), "..") {
				t.Errorf("mount path %q: not absolute and clean, or /", p)
			}
			for _, other := range append(mounts, "/proc", "/sys", "/dev") {
				if overlaps(p, other) {
					t.Errorf("mount path %q overlaps %q", p, other)
				}
			}
			mounts = append(mounts, p)
		}
	})
}
