package resident

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/internal/golden"
	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/agent"
	"github.com/nodeexec/nodeexec/nodeexec/spool"
)

func TestBuildGolden(t *testing.T) {
	o, err := Options{InstallID: "install-1", PriorityClassName: "system-node-critical", ImagePullSecrets: []string{"regcred"}}.withDefaults(time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	oe := o
	oe.Transport = TransportExec
	or := o
	or.Transport = TransportRecorded
	sa, role, binding := BuildRecordRBAC(or)
	for name, obj := range map[string]any{"daemonset": BuildDaemonSet(o), "namespace": BuildNamespace(o), "daemonset-transport-exec": BuildDaemonSet(oe),
		"daemonset-transport-recorded": BuildDaemonSet(or), "recorded-serviceaccount": sa, "recorded-role": role, "recorded-rolebinding": binding} {
		t.Run(name, func(t *testing.T) {
			golden.CheckYAML(t, name+".yaml", obj)
		})
	}
}

func TestBuildProperties(t *testing.T) {
	o, err := Options{}.withDefaults(time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	ds := BuildDaemonSet(o)
	ns := BuildNamespace(o)
	p := ds.Spec.Template.Spec
	c := p.Containers[0]
	for name, ok := range map[string]bool{
		"namespace":             ds.Namespace == "nodeexec-agents" && ns.Name == "nodeexec-agents",
		"privileged ns":         ns.Labels[LabelPodSecurity] == "privileged",
		"managed-by everywhere": ds.Labels[nodeexec.LabelManagedBy] == "nodeexec" && ns.Labels[nodeexec.LabelManagedBy] == "nodeexec" && ds.Spec.Template.Labels[nodeexec.LabelManagedBy] == "nodeexec",
		"component":             ds.Spec.Template.Labels[LabelComponent] == "agent" && ds.Labels[LabelComponent] == "agent",
		"install id":            ds.Labels[nodeexec.LabelRunID] == "install-20261121t120000",
		"selector matches":      ds.Spec.Selector.MatchLabels[LabelComponent] == "agent" && len(ds.Spec.Selector.MatchLabels) == 2,
		"hostPID privileged":    p.HostPID && c.SecurityContext.Privileged != nil && *c.SecurityContext.Privileged,
		"serves on loopback":    strings.Join(c.Command, " ") == agent.Path+" agent serve --listen 127.0.0.1:7710" && !p.HostNetwork && len(c.Ports) == 0,
		"advertises its port":   ds.Spec.Template.Annotations[agent.AnnotationServe] == "7710",
		"tolerates all":         len(p.Tolerations) == 1 && p.Tolerations[0].Operator == corev1.TolerationOpExists,
		"every linux node":      len(p.NodeSelector) == 1 && p.NodeSelector[corev1.LabelOSStable] == "linux" && p.Affinity == nil,
		"tiny requests":         c.Resources.Requests.Cpu().MilliValue() == 5,
		"host root":             len(c.VolumeMounts) == 1 && c.VolumeMounts[0].MountPath == agent.HostRoot && c.VolumeMounts[0].ReadOnly,
		"no token":              !*p.AutomountServiceAccountToken,
	} {
		if !ok {
			t.Errorf("%s: not so", name)
		}
	}
	if o.Transport != TransportPortForward {
		t.Errorf("default transport %q, want %q", o.Transport, TransportPortForward)
	}
	for _, bad := range []Options{{Namespace: "Bad_NS"}, {ImagePullPolicy: "Sometimes"}, {InstallID: "a b"}, {Transport: "ssh"}} {
		if _, err := bad.withDefaults(time.Now()); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	// TransportExec: nothing listens, nothing advertised, so the clients'
	// lookup (agentOf) gives ServePort 0 and they use exec
	o.Transport = TransportExec
	ds = BuildDaemonSet(o)
	if c := ds.Spec.Template.Spec.Containers[0]; strings.Join(c.Command, " ") != agent.Path+" agent hold" {
		t.Errorf("TransportExec: command %q, want agent hold", c.Command)
	}
	if _, ok := ds.Spec.Template.Annotations[agent.AnnotationServe]; ok {
		t.Errorf("TransportExec: the pods advertise a port: %v", ds.Spec.Template.Annotations)
	}
}

const agentDSUID = "ds-uid-1"

// agentDS is the agent DaemonSet the agentPods belong to.
func agentDS() *appsv1.DaemonSet {
	o, _ := Options{InstallID: "install-1"}.withDefaults(time.Time{})
	ds := BuildDaemonSet(o)
	ds.UID = agentDSUID
	return ds
}

func agentPod(name, node string, ready bool) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: DefaultNamespace, Labels: map[string]string{nodeexec.LabelManagedBy: "nodeexec", LabelComponent: "agent"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: DaemonSetName, UID: agentDSUID, Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{
			{Name: agent.ContainerName, Ready: ready, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}},
		}},
	}
}

func TestFind(t *testing.T) {
	client := fake.NewClientset(agentDS(), agentPod("a-1", "node-1", true), agentPod("a-2", "node-2", false))
	if pod, ok, err := Find(t.Context(), client, "", "node-1"); err != nil || !ok || pod != "a-1" {
		t.Errorf("node-1: %q %v %v", pod, ok, err)
	}
	if _, ok, err := Find(t.Context(), client, "", "node-2"); err != nil || ok {
		t.Errorf("node-2 (not ready): %v %v", ok, err)
	}
	if _, ok, err := Find(t.Context(), client, "", "node-3"); err != nil || ok {
		t.Errorf("node-3 (none): %v %v", ok, err)
	}
	// A pod with the agent labels that the agent DaemonSet does not control
	// cannot pose as an agent.
	impostor := agentPod("evil", "node-3", true)
	impostor.OwnerReferences = nil
	forged := agentPod("evil-2", "node-4", true)
	forged.OwnerReferences[0].UID = "other-uid"
	client = fake.NewClientset(agentDS(), impostor, forged)
	for _, node := range []string{"node-3", "node-4"} {
		if pod, ok, err := Find(t.Context(), client, "", node); err != nil || ok {
			t.Errorf("%s: an impostor pod was accepted: %q %v %v", node, pod, ok, err)
		}
	}
	// Without the DaemonSet there is no agent, whatever the pods say.
	if _, ok, err := Find(t.Context(), fake.NewClientset(agentPod("a-1", "node-1", true)), "", "node-1"); err != nil || ok {
		t.Errorf("no daemonset: %v %v", ok, err)
	}
}

// TestReadyNodes: the same rules as Find, for every node at once.
func TestReadyNodes(t *testing.T) {
	impostor := agentPod("evil", "node-3", true)
	impostor.OwnerReferences = nil
	client := fake.NewClientset(agentDS(), agentPod("a-1", "node-1", true), agentPod("a-2", "node-2", false), impostor)
	got, err := ReadyNodes(t.Context(), client, "")
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]bool{"node-1": true}; !reflect.DeepEqual(got, want) {
		t.Errorf("ReadyNodes = %v, want %v (not ready and impostor pods left out)", got, want)
	}
	if got, err := ReadyNodes(t.Context(), fake.NewClientset(agentPod("a-1", "node-1", true)), ""); err != nil || len(got) != 0 {
		t.Errorf("no daemonset: %v %v", got, err)
	}
}

// fakeInner records whether the wrapped backend ran.
type fakeInner struct {
	name string
	ran  bool
}

func (f *fakeInner) Name() string { return f.name }
func (f *fakeInner) Run(_ context.Context, req nodeexec.Request) (nodeexec.Result, error) {
	f.ran = true
	return nodeexec.Result{Node: req.Node, Backend: f.name}, nil
}

type fixedCommander struct {
	node    string
	rawArgv []string
	err     error
}

func (c fixedCommander) argv() []string {
	if c.rawArgv != nil {
		return c.rawArgv
	}
	return []string{agent.Path, "agent", "nsenter", "--", "id"}
}

func (c fixedCommander) AgentCommand(context.Context, nodeexec.Request) (string, []string, error) {
	return c.node, c.argv(), c.err
}

type fakeStreamer struct {
	got    *corev1.PodExecOptions
	pod    string
	stderr string
	err    error
}

func (s *fakeStreamer) Exec(_ context.Context, _, pod string, opts *corev1.PodExecOptions, streams remotecommand.StreamOptions) error {
	s.got, s.pod = opts, pod
	_, _ = streams.Stdout.Write([]byte("out\n"))
	_, _ = streams.Stderr.Write([]byte(s.stderr))
	if slices.Contains(opts.Command, "--spool") {
		// The agent's end mark, as a spooled agent writes it.
		end := spool.End{Stdout: 4, Stderr: int64(len(s.stderr))}
		var ce utilexec.CodeExitError
		if errors.As(s.err, &ce) {
			end.Code = ce.Code
		}
		_, _ = streams.Stderr.Write(end.Trailer())
	}
	return s.err
}

func TestWrap(t *testing.T) {
	client := fake.NewClientset(agentDS(), agentPod("a-1", "node-1", true))
	tests := map[string]struct {
		inner     string
		cmd       fixedCommander
		streamErr error
		stderr    string
		wantInner bool
		wantErr   error
		wantCode  int
	}{
		"resident":            {inner: "nsenter", cmd: fixedCommander{node: "node-1"}, wantCode: 0},
		"no agent on node":    {inner: "nsenter", cmd: fixedCommander{node: "node-2"}, wantInner: true},
		"unsupported":         {inner: "nsenter", cmd: fixedCommander{err: nodeexec.ErrUnsupported}, wantInner: true},
		"commander error":     {inner: "runtime", cmd: fixedCommander{err: nodeexec.ErrPodNotFound}, wantErr: nodeexec.ErrPodNotFound, wantCode: -1},
		"nsenter exit 125":    {inner: "nsenter", cmd: fixedCommander{node: "node-1"}, streamErr: utilexec.CodeExitError{Err: errors.New("x"), Code: 125}, wantCode: 125},
		"exit code":           {inner: "nsenter", cmd: fixedCommander{node: "node-1"}, streamErr: utilexec.CodeExitError{Err: errors.New("x"), Code: 3}, wantCode: 3},
		"not the agent":       {inner: "nsenter", cmd: fixedCommander{node: "node-1", rawArgv: []string{"timeout", "15", "id"}}, wantErr: errNotAgent, wantCode: -1},
		"runtime agent error": {inner: "runtime", cmd: fixedCommander{node: "node-1", rawArgv: agent.ContainerExecArgv(agent.ContainerExecArgs{ContainerID: "containerd://c", Argv: []string{"id"}})}, stderr: "nodeexec agent: not found\n", streamErr: utilexec.CodeExitError{Err: errors.New("x"), Code: 125}, wantErr: agent.ErrNotRun, wantCode: 125},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			inner := &fakeInner{name: tt.inner}
			s := &fakeStreamer{err: tt.streamErr, stderr: tt.stderr}
			b, err := Wrap(inner, WrapOptions{Client: client, Streamer: s, Commander: tt.cmd, SpoolName: func() string { return "s1" }})
			if err != nil {
				t.Fatal(err)
			}
			res, err := b.Run(t.Context(), nodeexec.Request{Command: []string{"id"}, Timeout: 10 * time.Second})
			if inner.ran != tt.wantInner {
				t.Errorf("inner ran = %v, want %v", inner.ran, tt.wantInner)
			}
			if tt.wantInner {
				return
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("err = %v, want %v", err, tt.wantErr)
			}
			if res.ExitCode != tt.wantCode || nodeexec.ExitCode(err) != max(tt.wantCode, 0) && tt.wantErr == nil {
				t.Errorf("exit code %d (err %v), want %d", res.ExitCode, err, tt.wantCode)
			}
			if tt.wantCode >= 0 {
				sub, rest := "nsenter", "-- id"
				if tt.cmd.rawArgv != nil {
					sub, rest = tt.cmd.rawArgv[2], strings.Join(tt.cmd.rawArgv[3:], " ")
				}
				if s.pod != "a-1" || strings.Join(s.got.Command, " ") != agent.Path+" agent "+sub+" --spool /tmp/nodeexec/spool/s1 --timeout 15s "+rest || s.got.Container != "agent" {
					t.Errorf("exec in %q: %+v", s.pod, s.got)
				}
				if res.Pod != "a-1" || res.Namespace != DefaultNamespace || res.Backend != tt.inner || res.FirstOutput.IsZero() {
					t.Errorf("result %+v", res)
				}
			}
		})
	}
	if _, err := Wrap(&fakeInner{name: "debugpod"}, WrapOptions{Client: client, Streamer: &fakeStreamer{}}); err == nil {
		t.Error("Wrap accepted a backend that is not a Commander")
	}
	// A spool name that is not one path element: nothing runs.
	for _, name := range []string{"../../usr/local/new", "", "..", "a/b"} {
		s := &fakeStreamer{}
		b, err := Wrap(&fakeInner{name: "nsenter"}, WrapOptions{Client: client, Streamer: s, Commander: fixedCommander{node: "node-1"}, SpoolName: func() string { return name }})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.Run(t.Context(), nodeexec.Request{Command: []string{"id"}}); !errors.Is(err, spool.ErrBadDir) || s.got != nil {
			t.Errorf("SpoolName %q: %v, exec %+v; want spool.ErrBadDir and no exec", name, err, s.got)
		}
	}
}

func TestInstallUninstallFake(t *testing.T) {
	client := fake.NewClientset()
	// The fake has no DaemonSet controller: Install's wait times out, having created both objects.
	err := Install(t.Context(), client, Options{Timeout: time.Second})
	if err == nil || !strings.Contains(err.Error(), "0 of 0 agents available") {
		t.Errorf("Install on a fake cluster: %v", err)
	}
	if _, err := client.AppsV1().DaemonSets(DefaultNamespace).Get(t.Context(), DaemonSetName, metav1.GetOptions{}); err != nil {
		t.Errorf("daemonset: %v", err)
	}
	if err := Uninstall(t.Context(), client, Options{Timeout: 5 * time.Second}); err != nil {
		t.Errorf("Uninstall: %v", err)
	}
	if _, err := client.CoreV1().Namespaces().Get(t.Context(), DefaultNamespace, metav1.GetOptions{}); err == nil {
		t.Error("namespace left")
	}
	// A namespace that enforces a Pod Security level below privileged is
	// refused, naming the label that fixes it; nothing is created there.
	if _, err := client.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "baseline",
		Labels: map[string]string{LabelPodSecurity: "baseline"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := Install(t.Context(), client, Options{Namespace: "baseline", Timeout: time.Second}); err == nil ||
		!strings.Contains(err.Error(), `enforces Pod Security level "baseline"`) || !strings.Contains(err.Error(), "kubectl label namespace baseline pod-security.kubernetes.io/enforce=privileged --overwrite") {
		t.Errorf("Install into a baseline namespace: %v", err)
	}
	if _, err := client.AppsV1().DaemonSets("baseline").Get(t.Context(), DaemonSetName, metav1.GetOptions{}); err == nil {
		t.Error("DaemonSet created in the refused namespace")
	}
	// A namespace nodeexec did not create (made beforehand, say, for a pull
	// secret) is used, and kept by Uninstall.
	if _, err := client.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "theirs"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// (No agent becomes available on a fake clientset: the wait times out,
	// which rolls nothing back.)
	_ = Install(t.Context(), client, Options{Namespace: "theirs", Timeout: time.Second})
	if _, err := client.AppsV1().DaemonSets("theirs").Get(t.Context(), DaemonSetName, metav1.GetOptions{}); err != nil {
		t.Errorf("Install into a namespace nodeexec did not create: no DaemonSet: %v", err)
	}
	if err := Uninstall(t.Context(), client, Options{Namespace: "theirs", Timeout: 2 * time.Second}); err != nil {
		t.Errorf("Uninstall of a foreign namespace: %v", err)
	}
	if _, err := client.CoreV1().Namespaces().Get(t.Context(), "theirs", metav1.GetOptions{}); err != nil {
		t.Errorf("foreign namespace deleted: %v", err)
	}
}

type preflightInner struct {
	fakeInner
	called []string
}

func (p *preflightInner) Preflight(_ context.Context, node string) error {
	p.called = append(p.called, node)
	return errors.New("would be refused")
}

// TestWrapPreflight: no dry run of a pod where a resident agent will run the command.
func TestWrapPreflight(t *testing.T) {
	client := fake.NewClientset(agentDS(), agentPod("a-1", "node-1", true))
	inner := &preflightInner{fakeInner: fakeInner{name: "nsenter"}}
	b, err := Wrap(inner, WrapOptions{Client: client, Streamer: &fakeStreamer{}, Commander: fixedCommander{}})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Preflight(t.Context(), "node-1"); err != nil || len(inner.called) != 0 {
		t.Errorf("node with an agent: %v, inner called %v", err, inner.called)
	}
	if err := b.Preflight(t.Context(), "node-2"); err == nil || len(inner.called) != 1 {
		t.Errorf("node without an agent: %v, inner called %v", err, inner.called)
	}
	if b.Unwrap() != inner {
		t.Error("Unwrap")
	}
}

// hangingStreamer runs the command line of a run until ctx ends (it says
// "started" first) and records every other exec, with whether its context
// was live.
type hangingStreamer struct {
	mu     sync.Mutex
	others []*corev1.PodExecOptions
	live   []bool
}

func (s *hangingStreamer) Exec(ctx context.Context, _, _ string, opts *corev1.PodExecOptions, streams remotecommand.StreamOptions) error {
	if slices.Contains(opts.Command, "nsenter") {
		_, _ = streams.Stdout.Write([]byte("started\n"))
		<-ctx.Done()
		return ctx.Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.others = append(s.others, opts)
	s.live = append(s.live, ctx.Err() == nil)
	return nil
}

// TestWrapStopsAbandonedRun: a cancelled or timed-out run has the agent
// stop its command (the spool's stop command line, in the agent container,
// over a live context) before Run returns; a TTY run has no spool to stop.
func TestWrapStopsAbandonedRun(t *testing.T) {
	client := fake.NewClientset(agentDS(), agentPod("a-1", "node-1", true))
	stop := agent.StopSpoolArgv("/tmp/nodeexec/spool/s1")
	for name, tt := range map[string]struct {
		timeout  time.Duration
		cancel   bool // once the command started
		tty      bool
		wantErr  error
		wantStop bool
	}{
		"cancelled": {timeout: time.Minute, cancel: true, wantErr: context.Canceled, wantStop: true},
		"timed out": {timeout: 50 * time.Millisecond, wantErr: nodeexec.ErrTimeout, wantStop: true},
		"tty":       {timeout: time.Minute, cancel: true, tty: true, wantErr: context.Canceled},
	} {
		t.Run(name, func(t *testing.T) {
			s := &hangingStreamer{}
			b, err := Wrap(&fakeInner{name: "nsenter"}, WrapOptions{Client: client, Streamer: s, Commander: fixedCommander{node: "node-1"}, SpoolName: func() string { return "s1" }})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			out := &notifyWriter{ch: make(chan struct{})}
			if tt.cancel {
				go func() { <-out.ch; cancel() }()
			}
			_, err = b.Run(ctx, nodeexec.Request{Command: []string{"id"}, Stdout: out, TTY: tt.tty, Timeout: tt.timeout})
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("err %v, want %v", err, tt.wantErr)
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			if !tt.wantStop {
				if len(s.others) != 0 {
					t.Errorf("execs after the run: %+v, want none", s.others)
				}
				return
			}
			if len(s.others) != 1 || !slices.Equal(s.others[0].Command, stop) || s.others[0].Container != agent.ContainerName || !s.live[0] {
				t.Fatalf("execs after the run: %+v (context live %v), want one running %q in the agent container", s.others, s.live, stop)
			}
		})
	}
}

// notifyWriter closes ch at its first write: the run's command started.
type notifyWriter struct {
	once sync.Once
	ch   chan struct{}
}

func (w *notifyWriter) Write(p []byte) (int, error) {
	w.once.Do(func() { close(w.ch) })
	return len(p), nil
}
