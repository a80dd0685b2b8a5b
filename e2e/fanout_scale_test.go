//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/nodeexec/nodeexec/internal/testcluster"
	"github.com/nodeexec/nodeexec/nodeexec"
)

// fanoutScaleNodes is how many SIMULATED nodes TestFanoutScale runs on.
const fanoutScaleNodes = 200

// fanoutScaleZones are the zones the simulated nodes are spread over; the
// last fanoutScaleUnzoned nodes have no zone label.
var fanoutScaleZones = []string{"e2e-zone-a", "e2e-zone-b", "e2e-zone-c"}

const fanoutScaleUnzoned = 20

// fanoutScaleFailing are the nodes whose command exits with 3.
var fanoutScaleFailing = map[string]bool{"kwok-node-7": true, "kwok-node-150": true}

// TestFanoutScale: `run -l type=kwok` on 200 SIMULATED nodes that answer
// exec (kwok with Exec, commands in its sandbox) through the real API
// server: the default path (nsenter pods) and --use-resident each give
// every node's output and exit code (two nodes fail on purpose);
// --max-per-zone never has more than N live pods of one zone (watched);
// Ctrl-C mid-run returns within 10 s; nothing is left behind. It asserts
// behaviour, not speed (see make bench-fanout-scale for figures).
func TestFanoutScale(t *testing.T) {
	if env.cluster == nil {
		t.Skip("needs the local test cluster to run kwok")
	}
	ctx := t.Context()
	start := time.Now()
	// Heartbeat: without node Leases the node lifecycle controller marks the
	// simulated nodes NotReady 50 s after their creation, and a run skips them.
	k := startKwok(ctx, t, testcluster.KwokOptions{Exec: true, Heartbeat: true, AgentBinary: env.cli, PodStartDelay: 50 * time.Millisecond}, 0)
	names, err := k.CreateNodes(ctx, fanoutScaleNodes, nil)
	if err != nil {
		t.Fatal(err)
	}
	zoneOf := map[string]string{}
	err = forEachNode(ctx, names[:len(names)-fanoutScaleUnzoned], 16, func(ctx context.Context, i int, name string) error {
		z := fanoutScaleZones[i%len(fanoutScaleZones)]
		_, err := env.client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType,
			fmt.Appendf(nil, `{"metadata":{"labels":{%q:%q}}}`, nodeexec.ZoneLabel, z), metav1.PatchOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range names[:len(names)-fanoutScaleUnzoned] {
		zoneOf[n] = fanoutScaleZones[i%len(fanoutScaleZones)]
	}
	t.Logf("%d SIMULATED nodes Ready and labelled %s after the start", len(names), time.Since(start).Round(time.Second))
	// A command that prints the node's name and fails on two nodes.
	script := `echo "out $KWOK_NODE_NAME"; case "$KWOK_NODE_NAME" in kwok-node-7|kwok-node-150) exit 3;; esac`
	// Each run is bounded: a node that does not answer fails (per-node
	// --timeout) rather than holding the suite.
	runCtx := func(t *testing.T) context.Context {
		c, cancel := context.WithTimeout(ctx, 100*time.Second)
		t.Cleanup(cancel)
		return c
	}

	t.Run("default path", func(t *testing.T) {
		t0 := time.Now()
		stdout, stderr, code := cli(runCtx(t), "", "run", "-l", testcluster.KwokNodeSelector, "--max-concurrency", "50", "--timeout", "20s", "-o", "ndjson", "--", "sh", "-c", script)
		t.Logf("SIMULATED: %d nodes, default path, -o ndjson: %s", len(names), time.Since(t0).Round(100*time.Millisecond))
		if code != 1 {
			t.Errorf("exit %d, want 1 (two nodes fail); stderr:\n%s", code, tailLines(stderr, 40))
		}
		checkRecords(t, names, stdout, func(node string) (string, int) {
			if fanoutScaleFailing[node] {
				return "out " + node + "\n", 3
			}
			return "out " + node + "\n", 0
		})
		assertNoKwokPods(ctx, t)
	})

	t.Run("max-per-zone", func(t *testing.T) {
		const perZone = 4
		peaks := watchZonePeaks(ctx, t, zoneOf)
		t0 := time.Now()
		_, stderr, code := cli(runCtx(t), "", "run", "-l", testcluster.KwokNodeSelector, "--max-concurrency", "50", "--timeout", "20s", "--max-per-zone", fmt.Sprint(perZone),
			"--summary-only", "--", "sh", "-c", script)
		t.Logf("SIMULATED: %d nodes, --max-per-zone %d: %s", len(names), perZone, time.Since(t0).Round(100*time.Millisecond))
		if code != 1 {
			t.Errorf("exit %d, want 1; stderr:\n%s", code, tailLines(stderr, 40))
		}
		for _, want := range []string{
			fmt.Sprintf("warning: --max-per-zone %d: %d of %d target nodes have no label %s", perZone, fanoutScaleUnzoned, len(names), nodeexec.ZoneLabel),
			fmt.Sprintf("FAILED: 2 of %d nodes", len(names)),
			fmt.Sprintf("EXIT CODES: 0 on %d nodes, 3 on 2 nodes", len(names)-2),
			"kwok-node-150 ", "kwok-node-7 ",
		} {
			if !strings.Contains(stderr, want) {
				t.Errorf("stderr lacks %q:\n%s", want, tailLines(stderr, 40))
			}
		}
		if strings.Contains(stderr, "[kwok-node-") {
			t.Errorf("--summary-only streamed output:\n%s", tailLines(stderr, 10))
		}
		got := peaks()
		for _, z := range append(fanoutScaleZones, nodeexec.NoZone) {
			if got[z] > perZone {
				t.Errorf("zone %q: %d live pods at once, more than --max-per-zone %d", z, got[z], perZone)
			}
			if got[z] == 0 {
				t.Errorf("zone %q: no pod seen", z)
			}
		}
		t.Logf("most live pods per zone at once: %v", got)
		assertNoKwokPods(ctx, t)
	})

	t.Run("use-resident", func(t *testing.T) {
		// The agents on the simulated nodes; one agent serve in kwok's
		// sandbox answers every port-forward, so there is no per-node
		// variable: every node prints the same and exits 0.
		const ns = "nodeexec-e2e-fanout-agents"
		t.Cleanup(func() {
			if _, stderr, code := cli(context.WithoutCancel(ctx), "", "agent", "uninstall", "--namespace", ns, "--timeout", "2m"); code != 0 {
				t.Errorf("agent uninstall: exit %d\n%s", code, tailLines(stderr, 20))
			}
		})
		t0 := time.Now()
		if _, stderr, code := cli(ctx, "", "agent", "install", "--namespace", ns, "--agent-image", agentImage(), "--timeout", "2m"); code != 0 {
			t.Fatalf("agent install: exit %d\n%s", code, tailLines(stderr, 20))
		}
		t.Logf("SIMULATED: agent install on %d+2 nodes: %s", len(names), time.Since(t0).Round(100*time.Millisecond))
		t0 = time.Now()
		stdout, stderr, code := cli(runCtx(t), "", "run", "-l", testcluster.KwokNodeSelector, "--use-resident", "--resident-namespace", ns, "--max-concurrency", "50", "--timeout", "20s", "-o", "ndjson", "--",
			"sh", "-c", "echo resident; exit 0")
		t.Logf("SIMULATED: %d nodes, --use-resident: %s", len(names), time.Since(t0).Round(100*time.Millisecond))
		if code != 0 {
			t.Errorf("exit %d, want 0; stderr:\n%s", code, tailLines(stderr, 40))
		}
		checkRecords(t, names, stdout, func(string) (string, int) { return "resident\n", 0 })
		assertNoKwokPods(ctx, t)
	})

	t.Run("ctrl-c", func(t *testing.T) {
		cmd := exec.Command(env.cli, "--kubeconfig", env.kubeconfig, "run", "-l", testcluster.KwokNodeSelector, "--max-concurrency", "50", "--", "sleep", "30")
		cmd.Env = append(cmd.Environ(), "NODEEXEC_IMAGE="+env.image)
		var out syncBuffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		// Mid-run: pods exist on many simulated nodes.
		if !waitFor(60*time.Second, func() bool { return len(kwokPods(ctx, t)) >= 40 }) {
			t.Errorf("fewer than 40 pods after 60 s; output:\n%s", tailLines(out.String(), 20))
		}
		if err := cmd.Process.Signal(os.Interrupt); err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		select {
		case <-done:
			t.Logf("SIMULATED: returned %s after Ctrl-C with %d+ pods running", time.Since(t0).Round(10*time.Millisecond), 40)
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Fatalf("still running 10 s after Ctrl-C; output:\n%s", tailLines(out.String(), 20))
		}
		if cmd.ProcessState.ExitCode() == 0 {
			t.Errorf("exit 0 after Ctrl-C, want a failure")
		}
		// Every pod created is deleted (or, when its delete failed,
		// carries a deadline for gc).
		var left []corev1.Pod
		if !waitFor(30*time.Second, func() bool { left = kwokPods(ctx, t); return len(left) == 0 }) {
			for _, p := range left {
				if p.DeletionTimestamp == nil && p.Annotations[nodeexec.AnnotationDeadline] == "" {
					t.Errorf("pod %s left behind without a deadline", p.Name)
				}
			}
			t.Logf("%d pods still present 30 s after Ctrl-C (deleting or collectable)", len(left))
		}
	})
	t.Logf("TestFanoutScale: %s in all (SIMULATED nodes)", time.Since(start).Round(time.Second))
}

// checkRecords checks -o ndjson's output: one record per node, each with
// the output and exit code want gives.
func checkRecords(t *testing.T, names []string, stdout string, want func(node string) (string, int)) {
	t.Helper()
	got := map[string]map[string]any{}
	sc := bufio.NewScanner(strings.NewReader(stdout))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("not a JSON record: %q: %v", sc.Text(), err)
		}
		n, _ := rec["node"].(string)
		if _, dup := got[n]; dup {
			t.Errorf("two records for node %s", n)
		}
		got[n] = rec
	}
	if len(got) != len(names) {
		t.Errorf("%d records, want %d", len(got), len(names))
	}
	bad := 0
	for _, n := range names {
		rec, ok := got[n]
		wantOut, wantCode := want(n)
		switch {
		case !ok:
			t.Errorf("no record for node %s", n)
		case rec["stdout"] != wantOut || int(rec["exitCode"].(float64)) != wantCode:
			t.Errorf("node %s: stdout %q exit %v error %v, want %q and %d", n, rec["stdout"], rec["exitCode"], rec["error"], wantOut, wantCode)
		default:
			continue
		}
		if bad++; bad > 10 {
			t.Fatal("more than 10 nodes wrong")
		}
	}
}

// kwokPods lists nodeexec's pods on simulated nodes (any namespace).
func kwokPods(ctx context.Context, t testing.TB) []corev1.Pod {
	t.Helper()
	list, err := env.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: nodeexec.LabelManagedBy + "=" + nodeexec.ManagedByValue + ",app.kubernetes.io/component!=agent"})
	if err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if strings.HasPrefix(p.Spec.NodeName, testcluster.KwokNodePrefix) {
			out = append(out, p)
		}
	}
	return out
}

// assertNoKwokPods fails unless no nodeexec pod is left on the simulated
// nodes within 30 s.
func assertNoKwokPods(ctx context.Context, t *testing.T) {
	t.Helper()
	var left []corev1.Pod
	if !waitFor(30*time.Second, func() bool { left = kwokPods(ctx, t); return len(left) == 0 }) {
		t.Errorf("%d nodeexec pods left on simulated nodes, e.g. %s", len(left), left[0].Name)
	}
}

// watchZonePeaks watches nodeexec's pods on the simulated nodes and
// returns a function giving, for the run with the most pods (the one under
// test; pods of other runs are left out), the most live pods (created, not
// yet being deleted) of each zone at once.
func watchZonePeaks(ctx context.Context, t *testing.T, zoneOf map[string]string) func() map[string]int {
	t.Helper()
	w, err := env.client.CoreV1().Pods("").Watch(ctx, metav1.ListOptions{LabelSelector: nodeexec.LabelManagedBy + "=" + nodeexec.ManagedByValue})
	if err != nil {
		t.Fatal(err)
	}
	type key struct{ run, zone string }
	var mu sync.Mutex
	live := map[string]key{} // pod UID -> its run and zone
	now, peak, pods := map[key]int{}, map[key]int{}, map[string]int{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || !strings.HasPrefix(p.Spec.NodeName, testcluster.KwokNodePrefix) || p.Labels["app.kubernetes.io/component"] == "agent" {
				continue
			}
			uid := string(p.UID)
			mu.Lock()
			k, counted := live[uid]
			gone := ev.Type == watch.Deleted || p.DeletionTimestamp != nil
			switch {
			case !gone && !counted:
				k = key{p.Labels[nodeexec.LabelRunID], zoneOf[p.Spec.NodeName]}
				live[uid] = k
				pods[k.run]++
				now[k]++
				peak[k] = max(peak[k], now[k])
			case gone && counted:
				now[k]--
				delete(live, uid)
			}
			mu.Unlock()
		}
	}()
	return func() map[string]int {
		w.Stop()
		<-done
		mu.Lock()
		defer mu.Unlock()
		run := ""
		for r, n := range pods {
			if n > pods[run] {
				run = r
			}
		}
		if len(pods) > 1 {
			t.Logf("pods of %d runs seen; counting run %s (%d pods)", len(pods), run, pods[run])
		}
		out := map[string]int{}
		for k, n := range peak {
			if k.run == run {
				out[k.zone] = n
			}
		}
		return out
	}
}

// forEachNode calls f for every name, workers at a time; the first error
// is returned.
func forEachNode(ctx context.Context, names []string, workers int, f func(ctx context.Context, i int, name string) error) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	sem := make(chan struct{}, workers)
	for i, n := range names {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := f(ctx, i, n); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return first
}

// tailLines returns the last n lines of s.
func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
