//go:build e2e

package e2e

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/debugpod"
)

// TestBadInput: each mistake gives a clear error naming the problem, exit
// status 2, and creates nothing.
func TestBadInput(t *testing.T) {
	ctx := t.Context()
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
	tests := map[string]struct {
		args []string
		want string
	}{
		"unknown node":        {[]string{"run", "--node", "no-such-node", "--", "true"}, `node not found: ["no-such-node"]`},
		"selector no match":   {[]string{"run", "--selector", "nodeexec-e2e=nothing", "--", "true"}, `label selector "nodeexec-e2e=nothing" matched no node`},
		"malformed selector":  {[]string{"run", "--selector", "a in (b", "--", "true"}, `invalid label selector "a in (b"`},
		"unknown profile":     {[]string{"run", "--all", "--profile", "admin", "--", "true"}, `unknown profile "admin": want one of legacy, general, baseline, restricted, netadmin, sysadmin`},
		"empty command":       {[]string{"run", "--all"}, "no command"},
		"unreadable script":   {[]string{"run", "--all", "--script", "/nonexistent/fix.sh"}, "cannot read --script file: open /nonexistent/fix.sh: no such file or directory"},
		"no target":           {[]string{"run", "--", "true"}, "exactly one of: node names (--node), a label selector (--selector), or all nodes (--all)"},
		"unreachable server":  {[]string{"--kubeconfig", unreachable, "run", "--all", "--", "true"}, "listing nodes: Get \"https://127.0.0.1:1/api/v1/nodes"},
		"bad timeout":         {[]string{"run", "--all", "--timeout", "0s", "--", "true"}, "--timeout 0s: give a positive duration"},
		"bad max-concurrency": {[]string{"run", "--all", "--max-concurrency", "0", "--", "true"}, "--max-concurrency 0: give a positive number"},
	}
	before := managedPodCount(ctx, t)
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			stdout, stderr, code := cli(ctx, "", tc.args...)
			if code != 2 || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want exit 2 and an error containing %q", code, stderr, tc.want)
			}
			if stdout != "" {
				t.Errorf("stdout %q, want nothing", stdout)
			}
			if took := time.Since(start); took > 10*time.Second {
				t.Errorf("took %s: bad input must fail fast", took)
			}
		})
	}
	if after := managedPodCount(ctx, t); after != before {
		t.Errorf("managed pods: %d before, %d after bad input", before, after)
	}

	// The same through the library: sentinels callers branch on.
	b := backend(t, nil)
	r := runner(t, b)
	if _, err := r.Run(ctx, nodeexec.Targets{Nodes: []string{"no-such-node"}}, nodeexec.Request{Command: []string{"true"}}); !errors.Is(err, nodeexec.ErrNodeNotFound) {
		t.Errorf("unknown node: err %v, want ErrNodeNotFound", err)
	}
	if _, err := r.Run(ctx, nodeexec.Targets{Selector: "nodeexec-e2e=nothing"}, nodeexec.Request{Command: []string{"true"}}); !errors.Is(err, nodeexec.ErrNoNodes) {
		t.Errorf("selector: err %v, want ErrNoNodes", err)
	}
}

// TestPodSecurityRefusal: a namespace enforcing baseline refuses the
// sysadmin pod; nodeexec says which level and how to fix it, before
// creating anything.
func TestPodSecurityRefusal(t *testing.T) {
	ctx := t.Context()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name:   "nodeexec-e2e-baseline",
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "baseline"},
	}}
	if _, err := env.client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.client.CoreV1().Namespaces().Delete(context.WithoutCancel(ctx), ns.Name, metav1.DeleteOptions{})
	})
	_, stderr, code := cli(ctx, "", "-n", ns.Name, "run", "--all", "--", "true")
	// The preflight refuses before anything is created: which level the
	// namespace enforces, what the profile needs, what fits, how to relabel.
	for _, want := range []string{
		`namespace "nodeexec-e2e-baseline" enforces Pod Security level "baseline"`,
		`backend debugpod with profile sysadmin needs "privileged"`,
		"--profile baseline or --profile restricted fits this namespace",
		"kubectl label namespace nodeexec-e2e-baseline pod-security.kubernetes.io/enforce=privileged",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if code != 2 {
		t.Errorf("exit %d, want 2", code)
	}
	b := backend(t, func(o *debugpod.Options) { o.Namespace = ns.Name })
	if _, err := runner(t, b).Run(ctx, nodeexec.Targets{All: true}, nodeexec.Request{Command: []string{"true"}}); !errors.Is(err, nodeexec.ErrForbidden) {
		t.Errorf("library: err %v, want ErrForbidden", err)
	}
	pods, err := env.client.CoreV1().Pods(ns.Name).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 0 {
		t.Errorf("%d pods created in the refusing namespace", len(pods.Items))
	}
	// baseline fits: the same namespace runs the baseline profile.
	if stdout, stderr, code := cli(ctx, "", "-n", ns.Name, "run", "--node", env.nodes[0], "--profile", "baseline", "--", "echo", "fits"); code != 0 || !strings.Contains(stdout, "fits") {
		t.Errorf("baseline profile in a baseline namespace: exit %d stdout %q stderr %q", code, stdout, stderr)
	}
}
