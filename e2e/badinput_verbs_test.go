//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// TestBadInputVerbs: bad input to the NodeScript verbs, gc, agent, image
// and version through the real CLI binary against the real cluster, as
// TestBadInput: exit 2, exactly one error line naming the flag, field or
// word and the fix, nothing on stdout, quickly, and nothing created or
// changed (TestBadInput's clusterObjects, and the nodes' annotations).
func TestBadInputVerbs(t *testing.T) {
	ctx := t.Context()
	dyn := watcherSetup(t)
	dir := t.TempDir()
	node := env.nodes[0]

	// A NodeScript with a maintenance window that selects no node.
	const name = "e2e-badinput-verbs"
	ns := &v1alpha1.NodeScript{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "NodeScript"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.NodeScriptSpec{
			NodeSelector: metav1.LabelSelector{MatchLabels: map[string]string{"nodeexec-e2e-verbs": "none"}},
			Script:       "true",
			Window:       &v1alpha1.MaintenanceWindow{Start: "22:00", End: "04:00"},
		},
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(ns)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(v1alpha1.Resource).Create(ctx, &unstructured.Unstructured{Object: m}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = dyn.Resource(v1alpha1.Resource).Delete(context.WithoutCancel(ctx), name, metav1.DeleteOptions{})
	})

	file := func(base, text string) string {
		p := filepath.Join(dir, base)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	doc := func(name, extra string) string {
		return "apiVersion: nodeexec.io/v1alpha1\nkind: NodeScript\nmetadata: {name: " + name + "}\nspec:\n  nodeSelector: {}\n  script: 'true'\n" + extra
	}

	tests := []struct {
		name string
		args []string
		want []string
		not  string // what the error must not say
	}{
		// 2. Accepted silently or mangled before.
		{"apply one name twice", []string{"apply", "-f", file("dup.yaml", doc("e2e-dup", "")+"---\n"+doc("e2e-other", "")+"---\n"+doc("e2e-dup", "  timeout: 5m\n"))},
			[]string{`documents 1 and 3: both are NodeScript "e2e-dup"`, "give each its own metadata.name"}, ""},
		{"apply initialBackoff above maxBackoff", []string{"apply", "-f", file("backoff.yaml", doc("e2e-backoff", "  retry: {initialBackoff: 10m, maxBackoff: 1s}\n"))},
			[]string{"spec.retry.initialBackoff", "must be at most spec.retry.maxBackoff (1s"}, ""},
		{"run-now too long", []string{"run-now", name, "--for", "100000h"}, []string{"--for 100000h0m0s: too long: at most 168h0m0s"}, ""},
		{"ignore a node not selected", []string{"ignore", name, "--node", node},
			[]string{"node " + node + " is not selected by nodescript " + name, `spec.nodeSelector "nodeexec-e2e-verbs=none"`}, ""},
		{"gc in a missing namespace", []string{"gc", "-n", "nodeexec-e2e-no-such-ns"}, []string{`--namespace "nodeexec-e2e-no-such-ns": no such namespace`, "-A"}, ""},
		{"gc -A and -n", []string{"gc", "-A", "-n", "default"}, []string{`--all-namespaces and --namespace "default"`, "give one of them"}, ""},
		{"version extra argument", []string{"version", "--client", "extra"}, []string{`version takes no arguments (got ["extra"])`}, ""},
		// 3. Refused, but unclearly before.
		{"run-now overflow", []string{"run-now", name, "--for", "999999999h"}, []string{"--for 999999999h: too large: at most 168h0m0s"}, "not a duration"},
		{"apply timeout overflow", []string{"apply", "-f", file("timeout.yaml", doc("e2e-timeout", "  timeout: 100000000h\n"))},
			[]string{`spec.timeout: Invalid value: "100000000h": too large: at most ` + v1alpha1.MaxTimeout.String()}, "want a duration"},
		{"apply a ConfigMap", []string{"apply", "-f", file("cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: e2e-cm}\ndata: {k: v}\n")},
			[]string{`kind "ConfigMap": want apiVersion nodeexec.io/v1alpha1, kind NodeScript`}, "unknown field"},
		{"agent unknown subcommand", []string{"agent", "bogus"}, []string{`unknown command "bogus"`, "want install or uninstall"}, "No help topic"},
		{"image unknown subcommand", []string{"image", "bogus"}, []string{`unknown command "bogus"`, "want push"}, "No help topic"},
	}
	before := clusterObjects(ctx, t, dyn)
	annotations := nodeAnnotations(ctx, t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr := refused(ctx, t, tc.args, tc.want...)
			if tc.not != "" && strings.Contains(stdout+stderr, tc.not) {
				t.Errorf("output says %q:\n%s%s", tc.not, stdout, stderr)
			}
		})
	}
	if d := cmp.Diff(before, clusterObjects(ctx, t, dyn)); d != "" {
		t.Errorf("objects changed by bad input (-before +after):\n%s", d)
	}
	if d := cmp.Diff(annotations, nodeAnnotations(ctx, t)); d != "" {
		t.Errorf("node annotations changed by bad input (-before +after):\n%s", d)
	}
	u, err := dyn.Resource(v1alpha1.Resource).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, set := u.GetAnnotations()[v1alpha1.AnnotationRunNow]; set {
		t.Errorf("a refused run-now set %s", v1alpha1.AnnotationRunNow)
	}

	// agent uninstall where there are no agents: nothing removed, and it
	// says so (exit 0: uninstall is idempotent), in a namespace without
	// agents and in one that does not exist.
	for _, c := range []struct{ namespace, want string }{
		{"default", "no resident agents in namespace default (no daemonset nodeexec-agent); nothing removed"},
		{"nodeexec-e2e-no-such-ns", "no resident agents: namespace nodeexec-e2e-no-such-ns does not exist; nothing removed"},
	} {
		stdout, stderr, code := cli(ctx, "", "agent", "uninstall", "--namespace", c.namespace)
		if code != 0 || !strings.Contains(stderr, c.want) || strings.Contains(stderr, "removed (namespace") || stdout != "" {
			t.Errorf("agent uninstall --namespace %s: exit %d, stdout %q, stderr %q; want exit 0 and %q", c.namespace, code, stdout, stderr, c.want)
		}
	}
	if _, err := env.client.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
		t.Errorf("namespace default after agent uninstall: %v", err)
	}
}

// nodeAnnotations are the real nodes' annotations, by node.
func nodeAnnotations(ctx context.Context, t *testing.T) map[string]map[string]string {
	t.Helper()
	out := map[string]map[string]string{}
	for _, n := range env.nodes {
		node, err := env.client.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out[n] = node.Annotations
	}
	return out
}

// TestWatchUnreachable: `nodeexec watch` against an API server that does
// not answer says so, naming the server, within seconds (it printed
// nothing, even at -v 2), and one Ctrl-C stops it within 5s (it took 30s
// or more: client-go's reflector sleeps out its backoff after a refused
// connection without looking at its context).
func TestWatchUnreachable(t *testing.T) {
	unreachable, addr := unreachableKubeconfig(t, t.TempDir())
	w := startWatch(t, unreachable)
	if !w.waitFor(5*time.Second, addr) {
		t.Errorf("nothing naming the API server %s within 5s; stderr:\n%s", addr, w.stderr())
	}
	w.interrupt(t, 5*time.Second)
}

// TestWatchInterruptedAfterServerLost: a watcher whose API server went away
// after its caches synced (its informers backing off) stops within 5s of
// one Ctrl-C. The API server is reached through a TCP proxy that the test
// closes.
func TestWatchInterruptedAfterServerLost(t *testing.T) {
	ctx := t.Context()
	dyn := watcherSetup(t)
	target, err := hostPort(env.config.Host)
	if err != nil {
		t.Fatal(err)
	}
	p := newTCPProxy(t, target)
	cfg, err := clientcmd.LoadFromFile(env.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	host, _, _ := net.SplitHostPort(target)
	for _, c := range cfg.Clusters {
		c.Server, c.TLSServerName = "https://"+p.addr(), host
	}
	kc := filepath.Join(t.TempDir(), "proxied.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, kc); err != nil {
		t.Fatal(err)
	}
	list, err := dyn.Resource(v1alpha1.Resource).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) > 0 {
		t.Skipf("NodeScripts exist (%d): a watcher would act on them", len(list.Items))
	}
	w := startWatch(t, kc, "--collect-interval", "0")
	if !w.waitFor(60*time.Second, "caches synced") {
		t.Fatalf("the watcher did not sync through the proxy within 60s; stderr:\n%s", w.stderr())
	}
	p.close()
	// The informers' watches end; their new ones are refused, and they back
	// off longer each time (0.8s, 1.6s, 3.2s, 6.4s, 12.8s...).
	time.Sleep(15 * time.Second)
	w.interrupt(t, 5*time.Second)
}

// watchProcess is a `nodeexec watch` started by startWatch.
type watchProcess struct {
	cmd  *exec.Cmd
	done chan error
	mu   sync.Mutex
	err  strings.Builder
}

// startWatch starts `nodeexec --kubeconfig kc watch -v 2 args...`; it is
// killed when the test ends if still running.
func startWatch(t *testing.T, kc string, args ...string) *watchProcess {
	t.Helper()
	w := &watchProcess{done: make(chan error, 1)}
	w.cmd = exec.Command(env.cli, append([]string{"--kubeconfig", kc, "watch", "-v", "2"}, args...)...)
	stderr, err := w.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			w.mu.Lock()
			w.err.WriteString(sc.Text() + "\n")
			w.mu.Unlock()
		}
		_, _ = io.Copy(io.Discard, stderr)
		w.done <- w.cmd.Wait()
	}()
	t.Cleanup(func() {
		if w.cmd.ProcessState == nil {
			_ = w.cmd.Process.Kill()
		}
	})
	return w
}

func (w *watchProcess) stderr() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err.String()
}

// waitFor reports whether stderr says s within d.
func (w *watchProcess) waitFor(d time.Duration, s string) bool {
	return waitFor(d, func() bool { return strings.Contains(w.stderr(), s) })
}

// interrupt sends SIGINT and fails the test unless the process exits
// within d, without panicking.
func (w *watchProcess) interrupt(t *testing.T, d time.Duration) {
	t.Helper()
	start := time.Now()
	if err := w.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-w.done:
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Errorf("watch: %v", err)
		}
		t.Logf("exited %s after SIGINT (%v)", time.Since(start).Round(10*time.Millisecond), err)
	case <-time.After(d):
		t.Errorf("still running %s after SIGINT; stderr:\n%s", d, w.stderr())
		_ = w.cmd.Process.Kill()
		<-w.done
	}
	if s := w.stderr(); strings.Contains(s, "panic:") || strings.Contains(s, "goroutine ") {
		t.Errorf("panicked:\n%s", s)
	}
}

// hostPort is the HOST:PORT of an https URL.
func hostPort(u string) (string, error) {
	hp := strings.TrimSuffix(strings.TrimPrefix(u, "https://"), "/")
	if _, _, err := net.SplitHostPort(hp); err != nil {
		return "", err
	}
	return hp, nil
}

// tcpProxy forwards connections from a local port to target until closed;
// closing it also cuts every connection it forwards.
type tcpProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
}

func newTCPProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{ln: ln, target: target}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(u, c); u.Close() }()
			go func() { _, _ = io.Copy(c, u); c.Close() }()
		}
	}()
	t.Cleanup(p.close)
	return p
}

func (p *tcpProxy) addr() string { return p.ln.Addr().String() }

func (p *tcpProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}
