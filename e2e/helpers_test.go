//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/debugpod"
)

// backend returns a debugpod backend on the suite's cluster.
func backend(t *testing.T, mutate func(*debugpod.Options)) *debugpod.Backend {
	t.Helper()
	o := debugpod.Options{Client: env.client, Config: env.config, Image: env.image}
	if mutate != nil {
		mutate(&o)
	}
	b, err := debugpod.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func runner(t *testing.T, b nodeexec.Backend) *nodeexec.Runner {
	t.Helper()
	r, err := nodeexec.NewRunner(nodeexec.RunnerOptions{Client: env.client, Backend: b})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// syncBuffer is a bytes.Buffer safe for a writer and a concurrent reader.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// waitFor polls cond every 50 ms until it holds or timeout passes.
func waitFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return cond()
}

// runPods lists the pods of one backend's run.
func runPods(ctx context.Context, t *testing.T, ns, runID string) []string {
	t.Helper()
	list, err := env.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: nodeexec.LabelRunID + "=" + runID})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range list.Items {
		names = append(names, p.Name)
	}
	return names
}

// assertRunPodsGone fails unless the run's pods are gone within 15 s.
func assertRunPodsGone(ctx context.Context, t *testing.T, ns, runID string) {
	t.Helper()
	var left []string
	if !waitFor(15*time.Second, func() bool { left = runPods(ctx, t, ns, runID); return len(left) == 0 }) {
		t.Errorf("pods of run %s still present: %v", runID, left)
	}
}

// managedPodCount counts pods labelled managed-by=nodeexec in every namespace.
func managedPodCount(ctx context.Context, t *testing.T) int {
	t.Helper()
	list, err := env.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: nodeexec.LabelManagedBy + "=" + nodeexec.ManagedByValue})
	if err != nil {
		t.Fatal(err)
	}
	return len(list.Items)
}

// cli runs the nodeexec binary with the suite's kubeconfig and image.
func cli(ctx context.Context, stdin string, args ...string) (stdout, stderr string, code int) {
	cmd := exec.CommandContext(ctx, env.cli, append([]string{"--kubeconfig", env.kubeconfig}, args...)...)
	cmd.Env = append(cmd.Environ(), "NODEEXEC_IMAGE="+env.image)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	err := cmd.Run()
	code = 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		code = -1
		e.WriteString(err.Error())
	}
	return o.String(), e.String(), code
}
