package resident

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"

	"github.com/nodeexec/nodeexec/internal/agentcmd"
	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/agent"
)

// runcNoBinary is what an exec of the agent's command line returns when
// the agent's binary is gone from its container (containerd and runc).
const runcNoBinary = `error executing remote command: Internal error occurred: error executing command in container: failed to exec in container: failed to start exec "0f1e": OCI runtime exec failed: exec failed: unable to start container process: exec: "/usr/local/bin/nodeexec": stat /usr/local/bin/nodeexec: no such file or directory: unknown`

func TestCannotExec(t *testing.T) {
	for msg, want := range map[string]bool{
		runcNoBinary: true,
		strings.ReplaceAll(runcNoBinary, "stat /usr/local/bin/nodeexec: no such file or directory", "permission denied"):          true,
		`exec: "/usr/local/bin/nodeexec": exec format error`:                                                                      true,
		`OCI runtime exec failed: exec failed: unable to start container process: exec: "sh": executable file not found in $PATH`: false, // not the agent
		"read tcp 127.0.0.1:1->127.0.0.1:2: connection reset by peer":                                                             false,
		"nodeexec agent: /usr/local/bin/nodeexec: no such file or directory":                                                      true,
	} {
		if got := cannotExec(errors.New(msg)); got != want {
			t.Errorf("cannotExec(%q) = %v, want %v", msg, got, want)
		}
	}
	if cannotExec(utilexec.CodeExitError{Err: errors.New(runcNoBinary), Code: 127}) {
		t.Error("an exit status taken for an agent that cannot execute its binary")
	}
	if cannotExec(nil) {
		t.Error("nil")
	}
}

// countingStreamer fails every exec with err, and counts them.
type countingStreamer struct {
	err error
	mu  sync.Mutex
	n   int
}

func (s *countingStreamer) Exec(context.Context, string, string, *corev1.PodExecOptions, remotecommand.StreamOptions) error {
	s.mu.Lock()
	s.n++
	s.mu.Unlock()
	return s.err
}

// TestWrapAgentUnusable: a resident agent that cannot execute its binary
// is known at the first attempt, reported (naming the node, the agent pod
// and the cause), and the run gets the wrapped backend's pod: no retrying
// until the run's timeout.
func TestWrapAgentUnusable(t *testing.T) {
	serving := agentPod("a-1", "node-1", true)
	serving.Annotations = map[string]string{agent.AnnotationServe: "7710"}
	for name, tc := range map[string]struct {
		pod       *corev1.Pod
		dialer    Dialer
		wantExecs int
	}{
		// Over exec: the container runtime cannot start the binary.
		"exec": {pod: agentPod("a-1", "node-1", true), wantExecs: 1},
		// Through the listener: the agent cannot start its binary, and exec
		// (which would fail the same) is not tried.
		"port-forward": {pod: serving, dialer: &fakeDialer{server: &agentcmd.Server{Exe: filepath.Join(t.TempDir(), "gone")}}},
	} {
		t.Run(name, func(t *testing.T) {
			exec := &countingStreamer{err: errors.New(runcNoBinary)}
			inner := &fakeInner{name: "nsenter"}
			var warnings []string
			var mu sync.Mutex
			b, err := Wrap(inner, WrapOptions{Client: fake.NewClientset(agentDS(), tc.pod), Streamer: exec, Dialer: tc.dialer,
				Commander: fixedCommander{node: "node-1"}, SpoolName: func() string { return "s1" },
				Warn: func(msg string) { mu.Lock(); warnings = append(warnings, msg); mu.Unlock() }})
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			_, err = b.Run(t.Context(), nodeexec.Request{Command: []string{"id"}, Timeout: 5 * time.Second})
			if took := time.Since(start); err != nil || !inner.ran || took > 2*time.Second {
				t.Errorf("err %v, the pod ran %v, after %s: want the pod at once", err, inner.ran, took)
			}
			if exec.n != tc.wantExecs {
				t.Errorf("%d execs into the agent pod, want %d", exec.n, tc.wantExecs)
			}
			if len(warnings) != 1 || !strings.Contains(warnings[0], DefaultNamespace+"/a-1") || !strings.Contains(warnings[0], `"node-1"`) ||
				!strings.Contains(warnings[0], "no such file or directory") || !strings.Contains(warnings[0], "with a pod") {
				t.Errorf("warnings %q: want one naming the agent pod, the node and the cause", warnings)
			}
		})
	}
}
