package podexec_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/podexec"
)

func TestNewPodBackendDefaults(t *testing.T) {
	o := podexec.PodOptions{Client: fake.NewClientset(), Config: &rest.Config{Host: "https://127.0.0.1:1"}}
	if _, err := podexec.NewPodBackend("b", "img:1", &o); err != nil {
		t.Fatal(err)
	}
	if o.Namespace != podexec.DefaultNamespace || o.Image != "img:1" || o.ImagePullPolicy != corev1.PullIfNotPresent ||
		len(o.RunID) != podexec.RunIDLength || len(o.NameSuffix()) != podexec.NameSuffixLength || o.Clock == nil || o.Streamer == nil {
		t.Errorf("defaults not applied: %+v", o)
	}
	if diff := cmp.Diff(podexec.DefaultRequests(), o.Requests); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
	set := podexec.PodOptions{Client: fake.NewClientset(), Streamer: &fakeStreamer{}, Namespace: "ops", Image: "mine", ImagePullPolicy: corev1.PullNever, RunID: "r1"}
	if _, err := podexec.NewPodBackend("b", "img:1", &set); err != nil || set.Namespace != "ops" || set.Image != "mine" || set.ImagePullPolicy != corev1.PullNever || set.RunID != "r1" {
		t.Errorf("NewPodBackend(%+v) = %v: given values must be kept", set, err)
	}

	for name, tt := range map[string]struct {
		mutate func(*podexec.PodOptions)
		want   string
	}{
		"no client":     {func(o *podexec.PodOptions) { o.Client = nil }, "mybackend: Options.Client is nil"},
		"no config":     {func(o *podexec.PodOptions) { o.Config = nil }, "mybackend: Options.Config is nil"},
		"bad namespace": {func(o *podexec.PodOptions) { o.Namespace = "Not_OK" }, `mybackend: invalid namespace "Not_OK"`},
		"bad policy":    {func(o *podexec.PodOptions) { o.ImagePullPolicy = "Sometimes" }, `mybackend: invalid image pull policy "Sometimes"`},
		"bad run ID":    {func(o *podexec.PodOptions) { o.RunID = "no spaces" }, `mybackend: invalid RunID "no spaces"`},
	} {
		t.Run(name, func(t *testing.T) {
			o := podexec.PodOptions{Client: fake.NewClientset(), Config: &rest.Config{}}
			tt.mutate(&o)
			if _, err := podexec.NewPodBackend("mybackend", "img", &o); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("NewPodBackend: %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// newPodBackend returns a PodBackend on a fake client whose pods are those
// of the executor tests (namespace, run ID), and the streamer it runs with.
func newPodBackend(t *testing.T) (*podexec.PodBackend, *fake.Clientset, *fakeStreamer) {
	t.Helper()
	cs, s := fake.NewClientset(), &fakeStreamer{}
	o := podexec.PodOptions{Client: cs, Streamer: s, Namespace: testNS, RunID: testRunID, Clock: clocktesting.NewFakeClock(t0)}
	b, err := podexec.NewPodBackend(testBackend, "img", &o)
	if err != nil {
		t.Fatal(err)
	}
	if b.RunID() != testRunID {
		t.Errorf("RunID() = %q, want %q", b.RunID(), testRunID)
	}
	return b, cs, s
}

func TestPodBackendRun(t *testing.T) {
	b, cs, s := newPodBackend(t)
	var built nodeexec.Request
	res, err := b.Run(t.Context(), nodeexec.Request{Node: testNode, Command: []string{"id"}}, func(req nodeexec.Request) (podexec.Launch, error) {
		built = req
		return podexec.Launch{Pod: testPod("p1", runningStatus()), Container: testContainer, Argv: []string{"echo", "hi"}}, nil
	})
	if err != nil || res.ExitCode != 0 || res.Backend != testBackend || res.Pod != "p1" || res.Node != testNode {
		t.Fatalf("Run = %+v, %v", res, err)
	}
	if built.Node != testNode || len(built.Command) != 1 {
		t.Errorf("build got %+v", built)
	}
	if len(s.calls) != 1 || s.calls[0].Pod != "p1" || s.calls[0].Opts.Container != testContainer || strings.Join(s.calls[0].Opts.Command, " ") != "echo hi" {
		t.Errorf("exec calls %+v", s.calls)
	}
	if _, err := cs.CoreV1().Pods(testNS).Get(t.Context(), "p1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("pod p1 left after the run: %v", err)
	}
}

// TestPodBackendRunRefuses: a request without a node, an invalid request
// and a failed build end the run before any API call.
func TestPodBackendRunRefuses(t *testing.T) {
	errBuild := errors.New("no pod for you")
	for name, tt := range map[string]struct {
		req  nodeexec.Request
		want string
	}{
		"no node":     {nodeexec.Request{Command: []string{"id"}}, "test: Request.Node is empty"},
		"no command":  {nodeexec.Request{Node: testNode}, "no command"},
		"build fails": {nodeexec.Request{Node: testNode, Command: []string{"id"}}, errBuild.Error()},
	} {
		t.Run(name, func(t *testing.T) {
			b, cs, _ := newPodBackend(t)
			res, err := b.Run(t.Context(), tt.req, func(nodeexec.Request) (podexec.Launch, error) { return podexec.Launch{}, errBuild })
			want := nodeexec.Result{Node: tt.req.Node, ExitCode: -1, Backend: testBackend, Started: t0, Finished: t0}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Run error %v, want one containing %q", err, tt.want)
			}
			if diff := cmp.Diff(want, res); diff != "" {
				t.Errorf("result (-want +got):\n%s", diff)
			}
			if n := len(cs.Actions()); n != 0 {
				t.Errorf("%d API calls: %v", n, cs.Actions())
			}
		})
	}
}

func TestPodBackendPreflight(t *testing.T) {
	b, cs, s := newPodBackend(t)
	build := func(req nodeexec.Request) (podexec.Launch, error) {
		if req.Node != testNode || strings.Join(req.Command, " ") != "true" {
			t.Errorf("Preflight built %+v, want `true` on %s", req, testNode)
		}
		return podexec.Launch{Pod: testPod("p1", corev1.PodStatus{}), Container: testContainer, Argv: req.Command}, nil
	}
	if err := b.Preflight(t.Context(), testNode, build); err != nil {
		t.Fatal(err)
	}
	var creates []metav1.CreateOptions
	for _, a := range cs.Actions() {
		if c, ok := a.(k8stesting.CreateActionImpl); ok {
			creates = append(creates, c.CreateOptions)
		}
	}
	if diff := cmp.Diff([]metav1.CreateOptions{{DryRun: []string{metav1.DryRunAll}}}, creates); diff != "" || len(s.calls) != 0 {
		t.Errorf("creates (-want +got), want one dry run and no exec (%d):\n%s", len(s.calls), diff)
	}

	cs.PrependReactor("create", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(corev1.Resource("pods"), "p1", errors.New(`violates PodSecurity "baseline:latest": privileged`))
	})
	if err := b.Preflight(t.Context(), testNode, build); !errors.Is(err, nodeexec.ErrForbidden) || !strings.Contains(err.Error(), `level "baseline`) {
		t.Errorf("forbidden: %v, want ErrForbidden naming the level", err)
	}
	if err := b.Preflight(t.Context(), "", build); err == nil || !strings.Contains(err.Error(), "Request.Node is empty") {
		t.Errorf("no node: %v", err)
	}
}
