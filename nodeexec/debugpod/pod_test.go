package debugpod

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	psaapi "k8s.io/pod-security-admission/api"
	psapolicy "k8s.io/pod-security-admission/policy"

	"github.com/nodeexec/nodeexec/internal/golden"
	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/agent"
	"github.com/nodeexec/nodeexec/nodeexec/podexec"
)

func spec(profile string) PodSpec {
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	return PodSpec{
		PodBase: PodBase{
			Node:             "node-a",
			Name:             "nodeexec-node-a-x2x2x",
			Namespace:        "default",
			RunID:            "run1234567",
			Image:            DefaultImage,
			ImagePullPolicy:  corev1.PullIfNotPresent,
			ImagePullSecrets: []string{"regcred"},
			Requests:         podexec.DefaultRequests(),
			Env:              map[string]string{"B": "2", "A": "1"},
			Now:              now,
			Deadline:         now.Add(90*time.Second + 500*time.Millisecond),
			Command:          []string{"chroot", "/host", "sh", "-c", "hostname"},
		},
		Profile: profile,
	}
}

// TestBuildPodGolden pins the whole pod for every profile: kubectl's profile
// changes plus what nodeexec adds. Run with -update after a deliberate change.
func TestBuildPodGolden(t *testing.T) {
	for _, profile := range Profiles() {
		t.Run(profile, func(t *testing.T) {
			pod, err := BuildPod(spec(profile))
			if err != nil {
				t.Fatal(err)
			}
			golden.CheckYAML(t, profile+".yaml", pod)
		})
	}
}

// TestBuildPodAgentGolden pins the pod of a run under the agent: the
// agent container first, its emptyDir mounted read-only in the debugging
// container, the default-container annotation; the profile's changes stay
// on the debugging container alone.
func TestBuildPodAgentGolden(t *testing.T) {
	for _, profile := range []string{"sysadmin", "restricted"} {
		t.Run(profile, func(t *testing.T) {
			s := spec(profile)
			s.AgentImage = "registry.example/nodeexec:0.2.0"
			pod, err := BuildPod(s)
			if err != nil {
				t.Fatal(err)
			}
			golden.CheckYAML(t, profile+"-agent.yaml", pod)
			a := pod.Spec.Containers[0]
			if a.Name != AgentContainerName || pod.Spec.Containers[1].Name != ContainerName {
				t.Fatalf("containers %q, %q: want the agent container first", a.Name, pod.Spec.Containers[1].Name)
			}
			if sc := a.SecurityContext; sc == nil || sc.Privileged != nil || !*sc.RunAsNonRoot || *sc.AllowPrivilegeEscalation || !*sc.ReadOnlyRootFilesystem {
				t.Errorf("agent container security context %+v: want non-root, no privilege, read-only root", sc)
			}
			without, err := BuildPod(spec(profile))
			if err != nil {
				t.Fatal(err)
			}
			// Apart from the mount, the debugging container is the one without the agent.
			d := pod.Spec.Containers[1].DeepCopy()
			d.VolumeMounts = d.VolumeMounts[:len(d.VolumeMounts)-1]
			if len(d.VolumeMounts) == 0 {
				d.VolumeMounts = nil
			}
			if diff := cmp.Diff(without.Spec.Containers[0], *d); diff != "" {
				t.Errorf("debugging container changed by the agent (-without +with):\n%s", diff)
			}
		})
	}
}

// TestBuildPodAgentImageVolumeGolden pins the pod of a run under the agent
// from an image volume: one container, the agent image mounted read-only
// at agent.CopiedDir, nothing else changed; and the pod passes the
// restricted Pod Security level with the restricted profile.
func TestBuildPodAgentImageVolumeGolden(t *testing.T) {
	for _, profile := range []string{"sysadmin", "restricted"} {
		t.Run(profile, func(t *testing.T) {
			s := spec(profile)
			s.AgentImage, s.AgentImageVolume = "registry.example/nodeexec:0.2.0", true
			pod, err := BuildPod(s)
			if err != nil {
				t.Fatal(err)
			}
			golden.CheckYAML(t, profile+"-agent-image-volume.yaml", pod)
			if profile == "restricted" {
				ev, err := psapolicy.NewEvaluator(psapolicy.DefaultChecks(), nil)
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range ev.EvaluatePod(psaapi.LevelVersion{Level: psaapi.LevelRestricted, Version: psaapi.LatestVersion()}, &pod.ObjectMeta, &pod.Spec) {
					if !r.Allowed {
						t.Errorf("Pod Security restricted refuses the pod: %s (%s)", r.ForbiddenReason, r.ForbiddenDetail)
					}
				}
			}
			if len(pod.Spec.Containers) != 1 || pod.Spec.Containers[0].Name != ContainerName {
				t.Fatalf("containers %+v: want the debugging container alone", pod.Spec.Containers)
			}
			v := pod.Spec.Volumes[len(pod.Spec.Volumes)-1]
			if v.Image == nil || v.Image.Reference != s.AgentImage || v.Image.PullPolicy != s.ImagePullPolicy {
				t.Errorf("volume %+v: want an image volume of %s", v, s.AgentImage)
			}
			without, err := BuildPod(spec(profile))
			if err != nil {
				t.Fatal(err)
			}
			d := pod.Spec.Containers[0].DeepCopy()
			m := d.VolumeMounts[len(d.VolumeMounts)-1]
			if m.MountPath != agent.CopiedDir || !m.ReadOnly {
				t.Errorf("mount %+v: want read-only at %s", m, agent.CopiedDir)
			}
			d.VolumeMounts = d.VolumeMounts[:len(d.VolumeMounts)-1]
			if len(d.VolumeMounts) == 0 {
				d.VolumeMounts = nil
			}
			if diff := cmp.Diff(without.Spec.Containers[0], *d); diff != "" {
				t.Errorf("debugging container changed by the agent's volume (-without +with):\n%s", diff)
			}
		})
	}
}

// TestBuildPodProfiles checks the properties each profile is known for, as
// kubectl documents them, independently of the golden files.
func TestBuildPodProfiles(t *testing.T) {
	type props struct {
		hostNS, hostRoot, privileged, nonRoot bool
		addCaps                               []corev1.Capability
	}
	tests := map[string]props{
		"legacy":     {hostNS: true, hostRoot: true},
		"general":    {hostNS: true, hostRoot: true},
		"baseline":   {},
		"restricted": {nonRoot: true},
		"netadmin":   {hostNS: true, addCaps: []corev1.Capability{"NET_ADMIN", "NET_RAW"}},
		"sysadmin":   {hostNS: true, hostRoot: true, privileged: true},
	}
	for profile, want := range tests {
		t.Run(profile, func(t *testing.T) {
			pod, err := BuildPod(spec(profile))
			if err != nil {
				t.Fatal(err)
			}
			c := pod.Spec.Containers[0]
			var got props
			got.hostNS = pod.Spec.HostPID && pod.Spec.HostNetwork && pod.Spec.HostIPC
			for _, m := range c.VolumeMounts {
				if m.MountPath == HostRoot {
					got.hostRoot = true
				}
			}
			if sc := c.SecurityContext; sc != nil {
				got.privileged = sc.Privileged != nil && *sc.Privileged
				got.nonRoot = sc.RunAsNonRoot != nil && *sc.RunAsNonRoot
				if sc.Capabilities != nil {
					got.addCaps = sc.Capabilities.Add
				}
			}
			if diff := cmp.Diff(want, got, cmp.AllowUnexported(props{})); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if got.hostRoot != MountsHostRoot(profile) {
				t.Errorf("MountsHostRoot(%q) = %v, but the pod mounts /host: %v", profile, MountsHostRoot(profile), got.hostRoot)
			}
			// What nodeexec adds, for every profile.
			if pod.Labels[nodeexec.LabelManagedBy] != nodeexec.ManagedByValue || pod.Labels[nodeexec.LabelRunID] != "run1234567" {
				t.Errorf("labels = %v", pod.Labels)
			}
			if pod.Spec.ActiveDeadlineSeconds == nil || *pod.Spec.ActiveDeadlineSeconds != 91 {
				t.Errorf("activeDeadlineSeconds = %v, want 91 (90.5 s rounded up)", pod.Spec.ActiveDeadlineSeconds)
			}
			if diff := cmp.Diff([]string{"sleep", "91"}, c.Command); diff != "" {
				t.Errorf("holder command (-want +got):\n%s", diff)
			}
			if pod.Spec.NodeName != "node-a" || pod.Spec.RestartPolicy != corev1.RestartPolicyNever {
				t.Errorf("nodeName=%q restartPolicy=%q", pod.Spec.NodeName, pod.Spec.RestartPolicy)
			}
			if diff := cmp.Diff([]corev1.Toleration{{Operator: corev1.TolerationOpExists}}, pod.Spec.Tolerations); diff != "" {
				t.Errorf("tolerations (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBuildPodErrors(t *testing.T) {
	tests := map[string]struct {
		mutate func(*PodSpec)
		want   string
	}{
		"unknown profile": {func(s *PodSpec) { s.Profile = "admin" }, `unknown profile "admin": want one of legacy, general, baseline, restricted, netadmin, sysadmin`},
		"no node":         {func(s *PodSpec) { s.Node = "" }, "Node is empty"},
		"no image":        {func(s *PodSpec) { s.Image = "" }, "Image is empty"},
		"deadline":        {func(s *PodSpec) { s.Deadline = s.Now }, "Deadline must be after Now"},
		"bad secret":      {func(s *PodSpec) { s.ImagePullSecrets = []string{"Bad_Name"} }, `image pull secret "Bad_Name" is not a valid secret name`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := spec(DefaultProfile)
			tc.mutate(&s)
			_, err := BuildPod(s)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("BuildPod error = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestNewValidation(t *testing.T) {
	client := fake.NewClientset()
	tests := map[string]struct {
		o    Options
		want string
	}{
		"no client":      {Options{}, "Options.Client is nil"},
		"no config":      {Options{PodOptions: podexec.PodOptions{Client: client}}, "Options.Config is nil"},
		"bad profile":    {Options{PodOptions: podexec.PodOptions{Client: client, Streamer: nopStreamer{}}, Profile: "root"}, `unknown profile "root"`},
		"bad policy":     {Options{PodOptions: podexec.PodOptions{Client: client, Streamer: nopStreamer{}, ImagePullPolicy: "Sometimes"}}, `invalid image pull policy "Sometimes"`},
		"bad namespace":  {Options{PodOptions: podexec.PodOptions{Client: client, Streamer: nopStreamer{}, Namespace: "Not_OK"}}, `invalid namespace "Not_OK"`},
		"bad run ID":     {Options{PodOptions: podexec.PodOptions{Client: client, Streamer: nopStreamer{}, RunID: "no spaces"}}, `invalid RunID "no spaces"`},
		"defaults apply": {Options{PodOptions: podexec.PodOptions{Client: client, Streamer: nopStreamer{}}}, ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			b, err := New(tc.o)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if b.o.Profile != DefaultProfile || b.o.Image != DefaultImage || b.o.Namespace != DefaultNamespace || b.o.ImagePullPolicy != corev1.PullIfNotPresent || len(b.RunID()) != 10 {
					t.Errorf("defaults not applied: %+v", b.o)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New error = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestArgv(t *testing.T) {
	tests := []struct {
		profile string
		req     nodeexec.Request
		want    []string
	}{
		{"sysadmin", nodeexec.Request{Script: "echo hi"}, []string{"chroot", "/host", "sh", "-c", "echo hi"}},
		{"general", nodeexec.Request{Script: "echo hi"}, []string{"chroot", "/host", "sh", "-c", "echo hi"}},
		{"baseline", nodeexec.Request{Script: "echo hi"}, []string{"sh", "-c", "echo hi"}},
		{"netadmin", nodeexec.Request{Script: "echo hi"}, []string{"sh", "-c", "echo hi"}},
		{"sysadmin", nodeexec.Request{Command: []string{"uname", "-r"}}, []string{"uname", "-r"}},
	}
	for _, tc := range tests {
		b, err := New(Options{PodOptions: podexec.PodOptions{Client: fake.NewClientset(), Streamer: nopStreamer{}}, Profile: tc.profile})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tc.want, b.Argv(tc.req)); diff != "" {
			t.Errorf("%s %+v (-want +got):\n%s", tc.profile, tc.req, diff)
		}
	}
}

// TestLaunchAgentImageVolume: with the agent image mounted the command
// runs nodeexec-spool inside it (agent.ImageVolumePath) under its spool,
// with no stager to wait for; otherwise the agent container's copy. Auto
// (the default) mounts it on the nodes shown (ObserveNodes) that have image
// volumes with a runtime it knows, and copies on the others and on nodes
// never shown.
func TestLaunchAgentImageVolume(t *testing.T) {
	node := func(name, kubelet, runtime string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{KubeletVersion: kubelet, ContainerRuntimeVersion: runtime}}}
	}
	nodes := []*corev1.Node{
		node("new", "v1.37.1", "containerd://2.3.7"),
		node("old", "v1.37.1", "containerd://1.6.20"),
		node("old-kubelet", "v1.34.4", "containerd://2.3.7"),
		node("crio", "v1.36.0", "cri-o://1.33.1"),
		node("other", "v1.37.1", "someruntime://0.1"),
	}
	for _, tc := range []struct {
		mode   ImageVolumeMode
		node   string
		volume bool
	}{
		{ImageVolumeNever, "new", false},
		{ImageVolumeAlways, "old", true},
		{ImageVolumeAlways, "unseen", true},
		{ImageVolumeAuto, "new", true},
		{ImageVolumeAuto, "crio", true},
		{ImageVolumeAuto, "old", false},
		{ImageVolumeAuto, "old-kubelet", false},
		{ImageVolumeAuto, "other", false},
		{ImageVolumeAuto, "unseen", false},
	} {
		b, err := New(Options{PodOptions: podexec.PodOptions{Client: fake.NewClientset(), Streamer: nopStreamer{}}, AgentImageVolume: tc.mode})
		if err != nil {
			t.Fatal(err)
		}
		b.ObserveNodes(nodes)
		l, err := b.launch(nodeexec.Request{Node: tc.node, Command: []string{"id"}})
		if err != nil {
			t.Fatal(err)
		}
		bin, stager := agent.CopiedPath, AgentContainerName
		if tc.volume {
			bin, stager = agent.ImageVolumePath, ""
		}
		if len(l.Argv) < 3 || l.Argv[0] != bin || l.Argv[2] != "run" || l.Stager != stager || l.Resume == nil || l.Resume.Attach(0, 0)[0] != bin {
			t.Errorf("%q on %s: argv %q, stager %q, resume %+v; want %s", tc.mode, tc.node, l.Argv, l.Stager, l.Resume, bin)
		}
		if n := len(l.Pod.Spec.Containers); (n == 1) != tc.volume {
			t.Errorf("%q on %s: %d containers", tc.mode, tc.node, n)
		}
	}
	if _, err := New(Options{PodOptions: podexec.PodOptions{Client: fake.NewClientset(), Streamer: nopStreamer{}}, AgentImageVolume: "sometimes"}); err == nil || !strings.Contains(err.Error(), "AgentImageVolume") {
		t.Errorf("AgentImageVolume \"sometimes\": %v, want an error naming the field", err)
	}
}

func TestImageVolumeSupport(t *testing.T) {
	for _, tc := range []struct {
		kubelet, runtime, want string
	}{
		{"v1.37.1", "containerd://2.3.7", ""},
		{"v1.35.0", "containerd://2.1.0", ""},
		{"v1.37.1", "cri-o://1.31.2", ""},
		{"v1.37.1", "someruntime://0.1", ""},
		{"v1.37.1", "containerd://1.6.20", "containerd://1.6.20 has no image volumes (containerd 2.1 or later)"},
		{"v1.37.1", "containerd://2.0.5", "containerd 2.1 or later"},
		{"v1.37.1", "cri-o://1.30.4", "cri-o 1.31 or later"},
		{"v1.34.4", "containerd://2.3.7", "kubelet v1.34.4 has no image volumes"},
	} {
		err := ImageVolumeSupport(corev1.NodeSystemInfo{KubeletVersion: tc.kubelet, ContainerRuntimeVersion: tc.runtime})
		if (tc.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %s: %v, want %q", tc.kubelet, tc.runtime, err, tc.want)
		}
	}
}

// TestPreflightImageVolume: --agent-image-volume on a node whose runtime
// has no image volumes is refused before anything is created.
func TestPreflightImageVolume(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}, Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{KubeletVersion: "v1.37.1", ContainerRuntimeVersion: "containerd://1.6.20"}}}
	client := fake.NewClientset(node)
	b, err := New(Options{PodOptions: podexec.PodOptions{Client: client, Streamer: nopStreamer{}}, AgentImageVolume: ImageVolumeAlways})
	if err != nil {
		t.Fatal(err)
	}
	err = b.Preflight(t.Context(), "node-a")
	if !errors.Is(err, ErrNoImageVolumes) || !strings.Contains(err.Error(), "containerd://1.6.20") || !strings.Contains(err.Error(), "drop --agent-image-volume") {
		t.Errorf("err %v", err)
	}
	for _, a := range client.Actions() {
		if a.GetVerb() == "create" {
			t.Errorf("created something: %v", a)
		}
	}
}
