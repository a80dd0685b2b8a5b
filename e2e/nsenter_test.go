//go:build e2e

package e2e

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/agent"
	"github.com/nodeexec/nodeexec/nodeexec/nsenterpod"
	"github.com/nodeexec/nodeexec/nsenter"
)

// agentImage is the nsenter backend's image: built and imported by TestMain
// on the local test cluster, else NODEEXEC_E2E_AGENT_IMAGE.
func agentImage() string {
	if v := os.Getenv("NODEEXEC_E2E_AGENT_IMAGE"); v != "" {
		return v
	}
	return agent.DefaultImage
}

// nsenterBackend returns an nsenter backend on the suite's cluster.
func nsenterBackend(t *testing.T, mutate func(*nsenterpod.Options)) *nsenterpod.Backend {
	t.Helper()
	o := nsenterpod.Options{PodOptions: nsenterpod.PodOptions{Client: env.client, Config: env.config, Image: agentImage()}}
	if mutate != nil {
		mutate(&o)
	}
	b, err := nsenterpod.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// nodeLines collects, from Runner output prefixed "[node] ", each node's
// lines "key=value" into a map per node.
func nodeLines(out string) map[string]map[string]string {
	m := map[string]map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		node, rest, ok := strings.Cut(strings.TrimPrefix(line, "["), "] ")
		if !ok || !strings.HasPrefix(line, "[") {
			continue
		}
		k, v, ok := strings.Cut(rest, "=")
		if !ok {
			continue
		}
		if m[node] == nil {
			m[node] = map[string]string{}
		}
		m[node][k] = strings.TrimSpace(v)
	}
	return m
}

// TestNsenterHostView: on every node (through the Runner), the command sees
// the node's /etc/hostname and the node's PID 1 (its init), exactly what a
// kubectl-debug sysadmin pod sees through /host and hostPID, and not the
// pod's own (the pod's /etc/hostname holds the pod name, its holder is sleep).
func TestNsenterHostView(t *testing.T) {
	ctx := t.Context()
	// The reference: kubectl debug's view of the node, per node.
	ref := backend(t, nil)
	var refOut, refErr syncBuffer
	results, err := runner(t, ref).Run(ctx, nodeexec.Targets{All: true}, nodeexec.Request{
		Command: []string{"sh", "-c", `echo hostname=$(cat /host/etc/hostname); echo init=$(tr '\0' ' ' </proc/1/cmdline)`},
		Stdout:  &refOut, Stderr: &refErr,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		if r.Err != nil {
			t.Fatalf("reference run on %s: %v; stderr:\n%s", r.Node, r.Err, refErr.String())
		}
	}
	want := nodeLines(refOut.String())

	b := nsenterBackend(t, nil)
	var out, errOut syncBuffer
	results, err = runner(t, b).Run(ctx, nodeexec.Targets{All: true}, nodeexec.Request{
		Script: `echo hostname=$(cat /etc/hostname); echo init=$(tr '\0' ' ' </proc/1/cmdline); echo uts=$(hostname); echo self=$(readlink /proc/self/ns/pid)`,
		Stdout: &out, Stderr: &errOut,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != len(env.nodes) {
		t.Fatalf("got %d results for %d nodes", len(results), len(env.nodes))
	}
	got := nodeLines(out.String())
	for _, r := range results {
		if r.Err != nil || r.ExitCode != 0 || r.Backend != nsenterpod.Name || r.Pod == "" {
			t.Errorf("node %s: exit %d err %v result %+v; stderr:\n%s", r.Node, r.ExitCode, r.Err, r.Result, errOut.String())
			continue
		}
		g, w := got[r.Node], want[r.Node]
		if g["hostname"] == "" || g["hostname"] != w["hostname"] || g["hostname"] == r.Pod {
			t.Errorf("node %s: /etc/hostname = %q, want the node's %q (not the pod name %q)", r.Node, g["hostname"], w["hostname"], r.Pod)
		}
		if g["init"] == "" || g["init"] != w["init"] || strings.HasPrefix(g["init"], "sleep") {
			t.Errorf("node %s: /proc/1/cmdline = %q, want the node's init %q", r.Node, g["init"], w["init"])
		}
		if g["uts"] != g["hostname"] {
			t.Errorf("node %s: hostname(1) = %q, want the node's %q (uts entered)", r.Node, g["uts"], g["hostname"])
		}
		t.Logf("node %s: hostname %s, PID 1 %q, pid ns %s", r.Node, g["hostname"], g["init"], g["self"])
	}
	if t.Failed() {
		t.Logf("output:\n%s\nreference:\n%s", out.String(), refOut.String())
	}
	assertRunPodsGone(ctx, t, "default", b.RunID())
	assertRunPodsGone(ctx, t, "default", ref.RunID())
}

// TestNsenterNamespaceSelection: with the pod on its own network
// (HostNetwork false), leaving net out of the namespaces shows the pod's
// interfaces (eth0 with a pod IP, not the node IP); entering net shows the
// node's IP. On every node, through the Runner.
func TestNsenterNamespaceSelection(t *testing.T) {
	ctx := t.Context()
	nodeIPs := map[string]string{}
	for _, n := range env.nodes {
		node, err := env.client.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range node.Status.Addresses {
			if a.Type == "InternalIP" {
				nodeIPs[n] = a.Address
			}
		}
	}
	// ip is the node's (mnt is entered); -o: one line per address.
	probe := `ip -4 -o addr show | awk '{print "addr=" $2 "," $4}' | tr '\n' ' ' | sed 's/^/ips=/'; echo`
	for _, tc := range []struct {
		name       string
		namespaces []nsenter.Namespace
		nodeNet    bool
	}{
		{"mnt,uts,ipc,pid", []nsenter.Namespace{nsenter.Mount, nsenter.UTS, nsenter.IPC, nsenter.PID}, false},
		{"default", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := nsenterBackend(t, func(o *nsenterpod.Options) {
				o.Namespaces = tc.namespaces
				o.HostNetwork = new(bool)
			})
			var out, errOut syncBuffer
			results, err := runner(t, b).Run(ctx, nodeexec.Targets{All: true}, nodeexec.Request{Script: probe, Stdout: &out, Stderr: &errOut})
			if err != nil {
				t.Fatal(err)
			}
			got := nodeLines(out.String())
			for _, r := range results {
				if r.Err != nil {
					t.Errorf("node %s: %v; stderr:\n%s", r.Node, r.Err, errOut.String())
					continue
				}
				ips := got[r.Node]["ips"]
				hasNodeIP := strings.Contains(ips, ","+nodeIPs[r.Node]+"/")
				hasEth0 := strings.Contains(ips, "addr=eth0,")
				if tc.nodeNet && !hasNodeIP {
					t.Errorf("node %s: net entered, but the node IP %s is not among %q", r.Node, nodeIPs[r.Node], ips)
				}
				if !tc.nodeNet && (hasNodeIP || !hasEth0) {
					t.Errorf("node %s: net not entered: want the pod's eth0 and not the node IP %s; got %q", r.Node, nodeIPs[r.Node], ips)
				}
				t.Logf("node %s: %s", r.Node, ips)
			}
			assertRunPodsGone(ctx, t, "default", b.RunID())
		})
	}
}

// TestNsenterExitCodeAndStdin: standard input reaches the node's command,
// and its exit code comes back (library and CLI).
func TestNsenterExitCodeAndStdin(t *testing.T) {
	ctx := t.Context()
	b := nsenterBackend(t, nil)
	var out, errOut syncBuffer
	res, err := b.Run(ctx, nodeexec.Request{
		Node:    env.nodes[0],
		Command: []string{"sh", "-c", "read line; echo got=$line; echo oops >&2; exit 3"},
		Stdin:   strings.NewReader("hello from stdin\n"),
		Stdout:  &out, Stderr: &errOut,
	})
	var ee *nodeexec.ExitError
	if !errors.As(err, &ee) || ee.Code != 3 || res.ExitCode != 3 {
		t.Errorf("err = %v, exit %d; want *ExitError code 3", err, res.ExitCode)
	}
	if out.String() != "got=hello from stdin\n" || errOut.String() != "oops\n" {
		t.Errorf("stdout %q stderr %q", out.String(), errOut.String())
	}
	assertRunPodsGone(ctx, t, "default", b.RunID())

	args := []string{"run", "--backend", "nsenter", "--node", env.nodes[1], "--agent-image", agentImage(), "--namespaces", "mnt,uts", "-i", "--", "sh", "-c", "cat; exit 3"}
	stdout, stderr, code := cli(ctx, "piped\n", args...)
	if code != 3 || stdout != fmt.Sprintf("[%s] piped\n", env.nodes[1]) {
		t.Errorf("CLI: exit %d stdout %q, want 3 and the piped line; stderr:\n%s", code, stdout, stderr)
	}
}

// TestNsenterBadNamespace: an unknown namespace name is refused with an
// error naming it and the valid names, before the cluster is contacted (so
// nothing is created): the CLI gives the same error, exit 2, even against an
// unreachable API server.
func TestNsenterBadNamespace(t *testing.T) {
	ctx := t.Context()
	if _, err := nsenterpod.New(nsenterpod.Options{PodOptions: nsenterpod.PodOptions{Client: env.client, Config: env.config}, Namespaces: []nsenter.Namespace{nsenter.Mount, "netz"}}); err == nil ||
		!strings.Contains(err.Error(), `"netz"`) || !strings.Contains(err.Error(), "mnt, uts, ipc, net, pid") {
		t.Errorf("New: err = %v, want one naming \"netz\" and the valid names", err)
	}
	unreachable := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(unreachable, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, prefix := range [][]string{nil, {"--kubeconfig", unreachable}} {
		args := append(prefix, "run", "--backend", "nsenter", "--node", env.nodes[0], "--namespaces", "mnt,netz", "--", "true")
		stdout, stderr, code := cli(ctx, "", args...)
		if code != 2 || stdout != "" || !strings.Contains(stderr, `--namespaces: unknown namespace "netz"`) || !strings.Contains(stderr, "mnt, uts, ipc, net, pid") {
			t.Errorf("%v: exit %d stdout %q stderr %q; want exit 2 and an error naming \"netz\" and the valid names", args, code, stdout, stderr)
		}
	}
}

// TestNsenterCLI: `nodeexec run --backend nsenter --all` runs on every node
// and reports each node's hostname from its own UTS namespace.
func TestNsenterCLI(t *testing.T) {
	ctx := t.Context()
	stdout, stderr, code := cli(ctx, "", "run", "--backend", "nsenter", "--agent-image", agentImage(), "--all", "--", "cat", "/etc/hostname")
	if code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	for _, n := range env.nodes {
		// The pod's own /etc/hostname would hold its name, nodeexec-<node>-<suffix>.
		_, line, ok := strings.Cut(stdout, "["+n+"] ")
		line, _, _ = strings.Cut(line, "\n")
		if !ok || line == "" || strings.HasPrefix(line, "nodeexec-"+n+"-") {
			t.Errorf("node %s: want its /etc/hostname, got %q in:\n%s", n, line, stdout)
		}
	}
}

// TestNsenterPodSecurity: in a namespace enforcing Pod Security "baseline"
// the privileged hostPID pod is refused, before (Preflight, a dry-run) and at
// creation (Run), with an error wrapping ErrForbidden; no pod remains.
func TestNsenterPodSecurity(t *testing.T) {
	ctx := t.Context()
	b := nsenterBackend(t, func(o *nsenterpod.Options) { o.Namespace = "nodeexec-baseline" })
	if err := b.Preflight(ctx, env.nodes[0]); !errors.Is(err, nodeexec.ErrForbidden) || !strings.Contains(err.Error(), "baseline") {
		t.Errorf("Preflight: err = %v, want ErrForbidden naming the baseline level", err)
	}
	if _, err := b.Run(ctx, nodeexec.Request{Node: env.nodes[0], Command: []string{"true"}}); !errors.Is(err, nodeexec.ErrForbidden) {
		t.Errorf("Run: err = %v, want ErrForbidden", err)
	}
	assertRunPodsGone(ctx, t, "nodeexec-baseline", b.RunID())
}
