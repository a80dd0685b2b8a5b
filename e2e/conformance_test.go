//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodeexec/nodeexec/ephemeral"
	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/debugpod"
	"github.com/nodeexec/nodeexec/nodeexec/nsenterpod"
	"github.com/nodeexec/nodeexec/nodeexec/resident"
	"github.com/nodeexec/nodeexec/nodeexec/runtimeexec"
)

// Bounds of the conformance cases.
const (
	// conformanceTimeout is Request.Timeout in the timeout case: long
	// enough for every backend to start the command (a pod, an ephemeral
	// container), so that it is the command that times out.
	conformanceTimeout = 8 * time.Second
	// timeoutSlack is how much later than its Timeout a run may return.
	timeoutSlack = 10 * time.Second
	// cancelBound is how soon after ctx is cancelled a run must return.
	cancelBound = 10 * time.Second
	// releaseBound is how soon after a run returned what it created
	// (pods, processes) must be gone.
	releaseBound = 15 * time.Second
)

// conformanceSubject is one backend as the conformance cases see it.
type conformanceSubject struct {
	b    nodeexec.Backend
	node string // every run's Request.Node, and its Result.Node
	// name, namespace and pod are what every Result must say: Backend,
	// Namespace, and Pod ("" for any non-empty name: a pod per run).
	name, namespace, pod string
	// live lists what the backend's runs created that is still there (pods
	// of the run, ephemeral containers not terminated); perRun is how many
	// of those one running command holds.
	live   func(ctx context.Context, t *testing.T) []string
	perRun int
	// final, when set, checks the subject at the end (after every case).
	final func(t *testing.T)
}

// TestBackendConformance runs every backend, and the resident wrapper over
// the nsenter and runtime backends, through the nodeexec.Backend contract
// (nodeexec/types.go) with the same cases: exit codes, standard input,
// stdout and stderr apart, short output never lost, timeout, cancellation;
// after each case, nothing the run created is left (its pods deleted, its
// ephemeral containers terminated, its processes gone from the node; the
// resident agents stay, and no pod is created).
func TestBackendConformance(t *testing.T) {
	ctx := t.Context()
	last := env.nodes[len(env.nodes)-1]
	// The resident agents, installed once (by the first resident subject
	// to ask; the other waits for it) and uninstalled at the end of the test.
	var (
		agentsMu   sync.Mutex
		agentsNS   string
		agentsErr  error
		agentsDone bool
	)
	agents := func(t *testing.T) string {
		agentsMu.Lock()
		defer agentsMu.Unlock()
		if !agentsDone {
			agentsNS, agentsErr = installAgents(ctx, t)
			agentsDone = true
		}
		if agentsErr != nil {
			t.Fatal(agentsErr)
		}
		return agentsNS
	}
	uninstall := func() {
		agentsMu.Lock()
		defer agentsMu.Unlock()
		if agentsNS == "" {
			return
		}
		if err := resident.Uninstall(context.WithoutCancel(ctx), env.client, resident.Options{Namespace: agentsNS, Timeout: 2 * time.Minute}); err != nil {
			t.Errorf("uninstalling the resident agents: %v", err)
		}
	}
	t.Cleanup(uninstall)

	subjects := []struct {
		name  string
		setup func(t *testing.T) conformanceSubject
	}{
		{"debugpod", func(t *testing.T) conformanceSubject {
			b := backend(t, nil)
			return podSubject(b, env.nodes[0], debugpod.Name, b.RunID())
		}},
		{"nsenter", func(t *testing.T) conformanceSubject {
			b := nsenterBackend(t, nil)
			return podSubject(b, env.nodes[1], nsenterpod.Name, b.RunID())
		}},
		{"runtime", func(t *testing.T) conformanceSubject {
			target := rtTargetPod(ctx, t, last, "exec sleep 3600", true)
			b := runtimeBackend(t, target, nil)
			return podSubject(b, last, runtimeexec.Name, b.RunID())
		}},
		{"ephemeral", func(t *testing.T) conformanceSubject {
			target := targetPod(ctx, t, []string{"sleep", "3600"})
			b := ephemeralBackend(t, target, nil)
			return conformanceSubject{
				b: b, node: target.Spec.NodeName, name: ephemeral.Name, namespace: target.Namespace, pod: target.Name,
				// Ephemeral containers cannot be removed: each run's must
				// have terminated.
				live: func(ctx context.Context, t *testing.T) []string {
					statuses, _ := runContainers(ctx, t, target, b.RunID())
					var live []string
					for _, s := range statuses {
						if s.State.Terminated == nil {
							live = append(live, "ephemeral container "+s.Name)
						}
					}
					return live
				},
				perRun: 1,
			}
		}},
		{"resident over nsenter", func(t *testing.T) conformanceSubject {
			inner := nsenterBackend(t, nil)
			return residentSubject(ctx, t, inner, inner.RunID(), agents(t), env.nodes[0])
		}},
		{"resident over runtime", func(t *testing.T) conformanceSubject {
			target := rtTargetPod(ctx, t, last, "exec sleep 3600", true)
			inner := runtimeBackend(t, target, nil)
			return residentSubject(ctx, t, inner, inner.RunID(), agents(t), last)
		}},
	}

	cases := []struct {
		name string
		run  func(ctx context.Context, t *testing.T, s conformanceSubject)
	}{
		{"exit code", conformExitCode},
		{"stdin", conformStdin},
		{"stdout and stderr apart", conformStreams},
		{"short output never lost", conformShortOutput},
		{"timeout", conformTimeout},
		{"cancel", conformCancel},
	}

	// The subjects run at once: each has its own run ID (its pods, its
	// ephemeral containers), its own target pods and sleep markers, and the
	// resident subjects their own node's agent, so no case sees another
	// subject's runs; the cases of one subject run in turn. Not t.Parallel,
	// which -test.parallel (GOMAXPROCS, 2 here) would hold to two at a time:
	// the subjects mostly wait for pods, agents and timeouts.
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, subj := range subjects {
		wg.Go(func() {
			t.Run(subj.name, func(t *testing.T) {
				start := time.Now()
				s := subj.setup(t)
				for _, c := range cases {
					t.Run(c.name, func(t *testing.T) {
						c.run(ctx, t, s)
						// Whatever the case did, the run released what it created.
						var left []string
						if !waitFor(releaseBound, func() bool { left = s.live(ctx, t); return len(left) == 0 }) {
							t.Errorf("still there %s after the run: %v", releaseBound, left)
						}
					})
				}
				if s.final != nil {
					s.final(t)
				}
				t.Logf("%s: %s", subj.name, time.Since(start).Round(time.Millisecond))
			})
		})
	}
}

// podSubject is a backend that creates a pod labelled with runID per run,
// in "default".
func podSubject(b nodeexec.Backend, node, name, runID string) conformanceSubject {
	return conformanceSubject{
		b: b, node: node, name: name, namespace: "default",
		live: func(ctx context.Context, t *testing.T) []string {
			return runPods(ctx, t, "default", runID)
		},
		perRun: 1,
	}
}

// residentSubject wraps inner (whose pods carry runID) with the resident
// agents of namespace ns: every run must go to node's agent pod, and none
// may create a pod (a watch sees even one created and deleted at once).
func residentSubject(ctx context.Context, t *testing.T, inner nodeexec.Backend, runID, ns, node string) conformanceSubject {
	t.Helper()
	agent, ok, err := resident.Find(ctx, env.client, ns, node)
	if err != nil || !ok {
		t.Fatalf("no resident agent on %s: %v", node, err)
	}
	w, err := resident.Wrap(inner, resident.WrapOptions{Client: env.client, Config: env.config, Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	created := podCreations(ctx, t, runID)
	return conformanceSubject{
		b: w, node: node, name: inner.Name(), namespace: ns, pod: agent,
		live: func(ctx context.Context, t *testing.T) []string {
			return runPods(ctx, t, "", runID)
		},
		perRun: 0,
		final: func(t *testing.T) {
			if pods := created(); len(pods) != 0 {
				t.Errorf("runs through the resident agent created pods: %v", pods)
			}
			// The agent stays, the same pod: the runs did not disturb it.
			if now, ok, err := resident.Find(ctx, env.client, ns, node); err != nil || !ok || now != agent {
				t.Errorf("resident agent on %s after the runs: %q (ok %v, err %v), want %q still there", node, now, ok, err, agent)
			}
		},
	}
}

// installAgents installs the resident agents in a namespace of their own
// (other tests' agents are not disturbed) and returns it, also when the
// install failed part-way; the caller uninstalls them.
func installAgents(ctx context.Context, t *testing.T) (string, error) {
	t.Helper()
	ns := "nodeexec-e2e-conf-" + randomSuffix()
	start := time.Now()
	if err := resident.Install(ctx, env.client, resident.Options{Namespace: ns, Image: agentImage(), Timeout: 2 * time.Minute}); err != nil {
		return ns, fmt.Errorf("installing the resident agents: %w", err)
	}
	t.Logf("resident agents installed in %s in %s", ns, time.Since(start).Round(time.Millisecond))
	return ns, nil
}

// checkResult checks what every Result must say.
func checkResult(t *testing.T, s conformanceSubject, res nodeexec.Result) {
	t.Helper()
	if res.Node != s.node || res.Backend != s.name || res.Namespace != s.namespace || res.Pod == "" || (s.pod != "" && res.Pod != s.pod) {
		t.Errorf("result names node %q, backend %q, pod %s/%s; want node %q, backend %q, pod %s/%s", res.Node, res.Backend, res.Namespace, res.Pod,
			s.node, s.name, s.namespace, orAny(s.pod))
	}
	if res.Started.IsZero() || res.Finished.Before(res.Started) {
		t.Errorf("result started %s, finished %s", res.Started, res.Finished)
	}
}

func orAny(pod string) string {
	if pod == "" {
		return "(any)"
	}
	return pod
}

// conformExitCode: a non-zero exit is the command's code, as an *ExitError
// (not an infrastructure error); a zero exit is no error.
func conformExitCode(ctx context.Context, t *testing.T, s conformanceSubject) {
	res, err := s.b.Run(ctx, nodeexec.Request{Node: s.node, Command: []string{"sh", "-c", "exit 7"}, Timeout: 2 * time.Minute})
	var ee *nodeexec.ExitError
	if !errors.As(err, &ee) || ee.Code != 7 || ee.Node != s.node || res.ExitCode != 7 || nodeexec.ExitCode(err) != 7 {
		t.Errorf("exit 7: err %v, result exit code %d; want an *ExitError with code 7 on %s", err, res.ExitCode, s.node)
	}
	checkResult(t, s, res)
	res, err = s.b.Run(ctx, nodeexec.Request{Node: s.node, Command: []string{"true"}, Timeout: 2 * time.Minute})
	if err != nil || res.ExitCode != 0 {
		t.Errorf("true: err %v, result exit code %d; want no error and 0", err, res.ExitCode)
	}
	checkResult(t, s, res)
}

// conformStdin: Request.Stdin reaches the command byte for byte (every byte
// value, a last line without a newline) and it sees EOF after it.
func conformStdin(ctx context.Context, t *testing.T, s conformanceSubject) {
	var in bytes.Buffer
	in.WriteString("line one\nline two\n")
	for i := range 64 << 10 {
		in.WriteByte(byte(i * 7))
	}
	in.WriteString("\nthe last line, without a newline")
	want := in.String()
	var out, errOut syncBuffer
	res, err := s.b.Run(ctx, nodeexec.Request{Node: s.node, Command: []string{"cat"}, Stdin: strings.NewReader(want), Stdout: &out, Stderr: &errOut, Timeout: 2 * time.Minute})
	if err != nil {
		t.Fatalf("cat: %v; stderr %q", err, errOut.String())
	}
	if got := out.String(); got != want {
		t.Errorf("cat: %d bytes back for %d sent, differing from byte %d; tail %q, want tail %q", len(got), len(want), firstDiff(got, want), tail(got), tail(want))
	}
	checkResult(t, s, res)
}

func firstDiff(a, b string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func tail(s string) string {
	if len(s) > 40 {
		return s[len(s)-40:]
	}
	return s
}

// conformStreams: stdout and stderr arrive apart, exactly.
func conformStreams(ctx context.Context, t *testing.T, s conformanceSubject) {
	var out, errOut syncBuffer
	res, err := s.b.Run(ctx, nodeexec.Request{Node: s.node, Command: []string{"sh", "-c", "echo out; echo err >&2"}, Stdout: &out, Stderr: &errOut, Timeout: 2 * time.Minute})
	if err != nil || out.String() != "out\n" || errOut.String() != "err\n" {
		t.Errorf("err %v, stdout %q, stderr %q; want stdout \"out\\n\" and stderr \"err\\n\"", err, out.String(), errOut.String())
	}
	checkResult(t, s, res)
}

// conformShortOutput: a command that prints and exits at once always
// delivers its output, on both streams, run after run (the race that loses
// kubectl debug's output).
func conformShortOutput(ctx context.Context, t *testing.T, s conformanceSubject) {
	for i := range 5 {
		var out, errOut syncBuffer
		_, err := s.b.Run(ctx, nodeexec.Request{Node: s.node, Command: []string{"sh", "-c", fmt.Sprintf("echo hi-%d; echo err-%d >&2", i, i)}, Stdout: &out, Stderr: &errOut, Timeout: 2 * time.Minute})
		if wantOut, wantErr := fmt.Sprintf("hi-%d\n", i), fmt.Sprintf("err-%d\n", i); err != nil || out.String() != wantOut || errOut.String() != wantErr {
			t.Errorf("run %d: err %v, stdout %q, stderr %q; want %q and %q", i, err, out.String(), errOut.String(), wantOut, wantErr)
		}
	}
}

// sleeper returns a command that says "started" and then sleeps for a
// duration that no other process on the node has in its command line (the
// marker processesWith looks for), in the background while sh waits (ending
// sh alone would leave the sleep behind), and the marker.
func sleeper() ([]string, string) {
	marker := "sleep " + strconv.Itoa(6000+rand.IntN(3000))
	return []string{"sh", "-c", "echo started; " + marker + " & wait; echo after"}, marker
}

// conformTimeout: a command outliving Request.Timeout ends soon after it
// with an error wrapping ErrTimeout (status 124, not the command's exit),
// and its processes are gone from the node.
func conformTimeout(ctx context.Context, t *testing.T, s conformanceSubject) {
	cmd, marker := sleeper()
	var out syncBuffer
	start := time.Now()
	res, err := s.b.Run(ctx, nodeexec.Request{Node: s.node, Command: cmd, Stdout: &out, Timeout: conformanceTimeout})
	took := time.Since(start)
	var ee *nodeexec.ExitError
	if !errors.Is(err, nodeexec.ErrTimeout) || errors.As(err, &ee) || nodeexec.ExitCode(err) != nodeexec.ExitTimeout {
		t.Errorf("err %v; want one wrapping ErrTimeout (exit status %d)", err, nodeexec.ExitTimeout)
	}
	if took > conformanceTimeout+timeoutSlack {
		t.Errorf("returned %s after the start, with a %s timeout", took.Round(time.Millisecond), conformanceTimeout)
	}
	if out.String() != "started\n" {
		t.Errorf("stdout %q, want \"started\\n\" (the command must have started before its timeout)", out.String())
	}
	checkResult(t, s, res)
	t.Logf("timed out after %s", took.Round(time.Millisecond))
	assertProcessesGone(ctx, t, s.node, marker)
}

// conformCancel: cancelling ctx mid-command ends the run at once with
// context.Canceled, and its processes are gone from the node.
func conformCancel(ctx context.Context, t *testing.T, s conformanceSubject) {
	cmd, marker := sleeper()
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var out syncBuffer
	type outcome struct {
		res nodeexec.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := s.b.Run(rctx, nodeexec.Request{Node: s.node, Command: cmd, Stdout: &out, Timeout: 5 * time.Minute})
		done <- outcome{res, err}
	}()
	if !waitFor(time.Minute, func() bool { return strings.Contains(out.String(), "started") }) {
		cancel()
		<-done
		t.Fatalf("command did not start; stdout %q", out.String())
	}
	if live := s.live(ctx, t); len(live) != s.perRun {
		t.Errorf("while the command runs: %v, want %d", live, s.perRun)
	}
	cancel()
	start := time.Now()
	select {
	case o := <-done:
		if !errors.Is(o.err, context.Canceled) || nodeexec.ExitCode(o.err) == 0 {
			t.Errorf("err %v, want context.Canceled", o.err)
		}
		checkResult(t, s, o.res)
		t.Logf("returned %s after the cancellation", time.Since(start).Round(time.Millisecond))
	case <-time.After(cancelBound):
		t.Fatalf("Run did not return within %s of the cancellation", cancelBound)
	}
	assertProcessesGone(ctx, t, s.node, marker)
}

// assertProcessesGone fails unless, within releaseBound, no process on node
// has marker in its command line.
func assertProcessesGone(ctx context.Context, t *testing.T, node, marker string) {
	t.Helper()
	var left []string
	if !waitFor(releaseBound, func() bool { left = processesWith(ctx, t, node, marker); return len(left) == 0 }) {
		t.Errorf("processes of the run still there %s after it returned: %q", releaseBound, left)
	}
}

// processesWith lists the processes on node whose command line contains
// marker, as "PID: command line". The local test cluster's nodes are this
// machine (each node's PID namespace is a child of ours): /proc shows them
// all. On another cluster a debugpod pod (hostPID) on node reads its /proc.
func processesWith(ctx context.Context, t *testing.T, node, marker string) []string {
	t.Helper()
	if env.cluster != nil {
		return scanProc("/proc", marker)
	}
	var out, errOut syncBuffer
	// The script does not hold the marker: only the command lines it prints do.
	_, err := backend(t, nil).Run(ctx, nodeexec.Request{Node: node, Timeout: time.Minute, Stdout: &out, Stderr: &errOut,
		Command: []string{"sh", "-c", `for f in /proc/[0-9]*/cmdline; do p=${f#/proc/}; printf '%s: ' "${p%/cmdline}"; tr '\0' ' ' <"$f" 2>/dev/null; echo; done`}})
	if err != nil {
		t.Fatalf("listing the processes of %s: %v; stderr %q", node, err, errOut.String())
	}
	var found []string
	for line := range strings.SplitSeq(out.String(), "\n") {
		if strings.Contains(line, marker) {
			found = append(found, strings.TrimSpace(line))
		}
	}
	return found
}

// scanProc lists the processes in the proc filesystem at root whose command
// line contains marker.
func scanProc(root, marker string) []string {
	entries, err := os.ReadDir(root)
	if err != nil {
		return []string{"(reading " + root + ": " + err.Error() + ")"}
	}
	var found []string
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(root, e.Name(), "cmdline"))
		if err != nil {
			continue // gone meanwhile
		}
		if line := strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " ")); strings.Contains(line, marker) {
			found = append(found, e.Name()+": "+line)
		}
	}
	return found
}
