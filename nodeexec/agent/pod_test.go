package agent

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/internal/golden"
	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/podexec"
	"github.com/nodeexec/nodeexec/nsenter"
)

var testNow = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

func spec() PodSpec {
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
			Now:              testNow,
			Deadline:         testNow.Add(90*time.Second + 500*time.Millisecond),
			Command:          NsenterArgv(nsenter.DefaultNamespaces(), []string{"sh", "-c", "hostname"}),
		},
		HostNetwork: true,
		HostIPC:     true,
	}
}

// TestBuildPodGolden pins the whole pod: node-shell's hostPID privileged pod
// plus what nodeexec adds. Run with -update after a deliberate change.
func TestBuildPodGolden(t *testing.T) {
	tests := map[string]func(*PodSpec){
		"default": func(*PodSpec) {},
		"podnetwork": func(s *PodSpec) {
			s.HostNetwork, s.HostIPC = false, false
			s.ImagePullSecrets, s.Env = nil, nil
			s.PriorityClassName = "system-node-critical"
			s.Command = NsenterArgv([]nsenter.Namespace{nsenter.Mount, nsenter.UTS, nsenter.IPC, nsenter.PID}, []string{"ip", "addr"})
		},
	}
	for name, mutate := range tests {
		t.Run(name, func(t *testing.T) {
			s := spec()
			mutate(&s)
			pod, err := BuildPod(s)
			if err != nil {
				t.Fatal(err)
			}
			golden.CheckYAML(t, "pod-"+name+".yaml", pod)
		})
	}
}

// TestBuildPodProperties checks, independently of the golden files, what the
// mechanism needs: hostPID, privileged, pinned to the node, every taint
// tolerated, the holder, and nodeexec's labels, annotations and deadline.
func TestBuildPodProperties(t *testing.T) {
	for _, host := range []bool{true, false} {
		s := spec()
		s.HostNetwork, s.HostIPC = host, host
		pod, err := BuildPod(s)
		if err != nil {
			t.Fatal(err)
		}
		c := pod.Spec.Containers[0]
		if !pod.Spec.HostPID || pod.Spec.HostNetwork != host || pod.Spec.HostIPC != host {
			t.Errorf("host=%v: hostPID %v hostNetwork %v hostIPC %v", host, pod.Spec.HostPID, pod.Spec.HostNetwork, pod.Spec.HostIPC)
		}
		if c.SecurityContext == nil || !ptr.Deref(c.SecurityContext.Privileged, false) {
			t.Errorf("container is not privileged: %+v", c.SecurityContext)
		}
		if pod.Spec.NodeName != "node-a" || len(pod.Spec.Tolerations) != 1 || pod.Spec.Tolerations[0].Operator != corev1.TolerationOpExists || pod.Spec.Tolerations[0].Key != "" {
			t.Errorf("nodeName %q tolerations %+v: want pinned to node-a, tolerating everything", pod.Spec.NodeName, pod.Spec.Tolerations)
		}
		if diff := cmp.Diff([]string{Path, "agent", "hold", "--duration", "91s"}, c.Command); diff != "" {
			t.Errorf("holder (-want +got):\n%s", diff)
		}
		if pod.Spec.ActiveDeadlineSeconds == nil || *pod.Spec.ActiveDeadlineSeconds != 91 {
			t.Errorf("activeDeadlineSeconds = %v, want 91 (90.5 s rounded up)", pod.Spec.ActiveDeadlineSeconds)
		}
		if !cmp.Equal(pod.Labels, map[string]string{nodeexec.LabelManagedBy: nodeexec.ManagedByValue, nodeexec.LabelRunID: "run1234567"}) {
			t.Errorf("labels = %v", pod.Labels)
		}
		if pod.Annotations[nodeexec.AnnotationNode] != "node-a" || pod.Annotations[nodeexec.AnnotationDeadline] != "2026-11-21T12:01:30Z" ||
			!strings.Contains(pod.Annotations[nodeexec.AnnotationCommand], `"agent","nsenter"`) {
			t.Errorf("annotations = %v", pod.Annotations)
		}
		if ptr.Deref(pod.Spec.AutomountServiceAccountToken, true) {
			t.Error("the pod mounts a service account token")
		}
		if len(pod.Spec.Volumes) != 0 || len(c.VolumeMounts) != 0 {
			t.Errorf("volumes %v mounts %v: the agent needs none (it enters the node's mount namespace)", pod.Spec.Volumes, c.VolumeMounts)
		}
	}
}

func TestBuildPodInvalid(t *testing.T) {
	tests := map[string]struct {
		mutate func(*PodSpec)
		want   string
	}{
		"no node":       {func(s *PodSpec) { s.Node = "" }, "Node is empty"},
		"no image":      {func(s *PodSpec) { s.Image = "" }, "Image is empty"},
		"no run id":     {func(s *PodSpec) { s.RunID = "" }, "RunID must be set"},
		"past deadline": {func(s *PodSpec) { s.Deadline = s.Now }, "Deadline must be after Now"},
		"bad secret":    {func(s *PodSpec) { s.ImagePullSecrets = []string{"Bad_Name"} }, `image pull secret "Bad_Name"`},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			s := spec()
			tt.mutate(&s)
			_, err := BuildPod(s)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestAgentArgv(t *testing.T) {
	got := NsenterArgv([]nsenter.Namespace{nsenter.Mount, nsenter.Net}, []string{"sh", "-c", "echo --namespaces"})
	want := []string{"/usr/local/bin/nodeexec", "agent", "nsenter", "--target", "1", "--namespaces", "mnt,net", "--", "sh", "-c", "echo --namespaces"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestSpoolFor: the spooled command line and the command lines that check,
// resume and stop its spool all name the same directory; a TTY run has none.
func TestSpoolFor(t *testing.T) {
	argv := NsenterArgv(nsenter.DefaultNamespaces(), []string{"id"})
	got, r := SpoolFor(argv, "s1", nodeexec.Request{Command: []string{"id"}})
	dir := "/tmp/nodeexec/spool/s1"
	want := append([]string{Path, "agent", "nsenter", "--spool", dir}, argv[3:]...)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("command line (-want +got):\n%s", diff)
	}
	if r == nil {
		t.Fatal("no Resume")
	}
	for name, pair := range map[string][2][]string{
		"check":  {{Path, "agent", "attach", "--spool", dir, "--check"}, r.Check},
		"attach": {{Path, "agent", "attach", "--spool", dir, "--stdout-offset", "3", "--stderr-offset", "4"}, r.Attach(3, 4)},
		"stop":   {{Path, "agent", "attach", "--spool", dir, "--stop"}, r.Stop},
	} {
		if diff := cmp.Diff(pair[0], pair[1]); diff != "" {
			t.Errorf("%s (-want +got):\n%s", name, diff)
		}
	}
	if got, r := SpoolFor(argv, "s1", nodeexec.Request{Command: []string{"id"}, TTY: true}); r != nil || !cmp.Equal(got, argv) {
		t.Errorf("TTY: %q, %+v; want the command line as is and no Resume", got, r)
	}
}

func TestContainerExecArgv(t *testing.T) {
	got := ContainerExecArgv(ContainerExecArgs{ContainerID: "containerd://abc", Endpoints: []string{"/run/x.sock"}, Namespaces: []nsenter.Namespace{nsenter.Mount, nsenter.Net},
		NoProcFallback: true, Env: map[string]string{"B": "2", "A": "1 1"}, Argv: []string{"sh", "-c", "echo --"}})
	want := []string{Path, "agent", "container-exec", "--container-id", "containerd://abc", "--runtime-endpoint", "/run/x.sock",
		"--namespaces", "mnt,net", "--no-proc-fallback", "--env-from-agent", "--", "sh", "-c", "echo --"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	// Without variables, no flag.
	got = ContainerExecArgv(ContainerExecArgs{ContainerID: "containerd://abc", Namespaces: []nsenter.Namespace{nsenter.Mount}, Argv: []string{"id"}})
	want = []string{Path, "agent", "container-exec", "--container-id", "containerd://abc", "--namespaces", "mnt", "--", "id"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("no env (-want +got):\n%s", diff)
	}
}

func TestExecEnv(t *testing.T) {
	env := map[string]string{"A": "1 1", "OPTS": "a=1,b=2", "NL": "x\ny", "D": "pa$$word"}
	got, err := DecodeExecEnv(EncodeExecEnv(env))
	if err != nil || !cmp.Equal(got, env) {
		t.Errorf("round trip: %v %v", got, err)
	}
	for _, bad := range []string{`[]`, `{"":"x"}`, `{"A=B":"x"}`, `{"A":"x\u0000y"}`, `nope`} {
		if _, err := DecodeExecEnv(bad); err == nil {
			t.Errorf("DecodeExecEnv(%s) accepted", bad)
		}
	}
}

func TestNotRunError(t *testing.T) {
	tail := &TailWriter{}
	_, _ = tail.Write([]byte("some output\nnodeexec agent: container not found: no runtime socket answered\n"))
	err := NotRunError(&nodeexec.ExitError{Node: "n", Code: ErrorExitCode}, tail)
	if !errors.Is(err, ErrNotRun) || !strings.Contains(err.Error(), "no runtime socket answered") {
		t.Errorf("NotRunError = %v", err)
	}
	other := &nodeexec.ExitError{Node: "n", Code: 3}
	if err := NotRunError(other, tail); err != other {
		t.Errorf("exit 3 changed to %v", err)
	}
	if err := NotRunError(nil, tail); err != nil {
		t.Errorf("nil changed to %v", err)
	}
}

func TestReportsNotRun(t *testing.T) {
	exec := ContainerExecArgv(ContainerExecArgs{ContainerID: "containerd://abc", Argv: []string{"true"}})
	spooled, ok := WithSpool(exec, "/tmp/s")
	if !ok {
		t.Fatal("WithSpool refused the container-exec command line")
	}
	for _, argv := range [][]string{exec, spooled} {
		if !ReportsNotRun(argv) {
			t.Errorf("ReportsNotRun(%q) = false", argv)
		}
	}
	for _, argv := range [][]string{NsenterArgv(nsenter.DefaultNamespaces(), []string{"true"}), {"sh", "-c", "container-exec"}, nil} {
		if ReportsNotRun(argv) {
			t.Errorf("ReportsNotRun(%q) = true", argv)
		}
	}
}
