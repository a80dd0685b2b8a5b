package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/nodeexec/nodeexec/internal/envflag"
	"github.com/nodeexec/nodeexec/nodeexec"
)

// writeKubeconfig writes a kubeconfig for server and points KUBECONFIG at a
// missing file, so that nothing from the environment is used.
func writeKubeconfig(t *testing.T, server string) string {
	t.Helper()
	dir := t.TempDir()
	t.Setenv("KUBECONFIG", filepath.Join(dir, "not-this-one"))
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
	t.Setenv("NODEEXEC_IMAGE", "")
	path := filepath.Join(dir, "kubeconfig")
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: %s
    insecure-skip-tls-verify: true
users:
- name: u
  user:
    token: t0ken
contexts:
- name: ctx
  context:
    cluster: c
    user: u
    namespace: team
current-context: ctx
`, server)
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// fakeAPIServer serves the few API calls the CLI makes before it creates a
// pod, and records every request.
type fakeAPIServer struct {
	*httptest.Server
	nodes []string
	// createErr, when set, refuses every pod create (the preflight dry-run included).
	createErr *apierrors.StatusError

	mu       sync.Mutex
	requests []string
}

func newFakeAPIServer(t *testing.T, nodes []string, createErr *apierrors.StatusError) *fakeAPIServer {
	s := &fakeAPIServer{nodes: nodes, createErr: createErr}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

func (s *fakeAPIServer) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.requests = append(s.requests, r.Method+" "+r.URL.Path)
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/api/v1/nodes":
		sel, err := labels.Parse(r.URL.Query().Get("labelSelector"))
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		list := corev1.NodeList{TypeMeta: metav1.TypeMeta{Kind: "NodeList", APIVersion: "v1"}}
		for _, n := range s.nodes {
			// The nodes have no labels.
			if !sel.Matches(labels.Set{}) {
				continue
			}
			list.Items = append(list.Items, corev1.Node{
				ObjectMeta: metav1.ObjectMeta{Name: n},
				Status:     corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
			})
		}
		_ = json.NewEncoder(w).Encode(list)
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/pods") && s.createErr != nil:
		st := s.createErr.ErrStatus
		st.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
		w.WriteHeader(int(st.Code))
		_ = json.NewEncoder(w).Encode(st)
	default:
		st := apierrors.NewInternalError(fmt.Errorf("the fake API server does not serve %s %s", r.Method, r.URL)).ErrStatus
		st.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
		w.WriteHeader(http.StatusInternalServerError)
		_ = json.NewEncoder(w).Encode(st)
	}
}

func (s *fakeAPIServer) seen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.requests...)
}

type result struct {
	code        int
	out, errOut string
}

// wantRefused checks what every refused input gives: exit status 2 and
// exactly one error line, first on stderr, containing each of want.
func wantRefused(t *testing.T, got result, want ...string) {
	t.Helper()
	if got.code != 2 {
		t.Errorf("exit code %d, want 2; stderr:\n%s", got.code, got.errOut)
	}
	if n := strings.Count(got.errOut, "error: "); n != 1 || !strings.HasPrefix(got.errOut, "error: ") {
		t.Errorf("stderr has %d error lines, want exactly one at the start:\n%s", n, got.errOut)
	}
	for _, s := range want {
		if !strings.Contains(got.errOut, s) {
			t.Errorf("stderr does not contain %q:\n%s", s, got.errOut)
		}
	}
}

func run(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Run(t.Context(), Streams{In: strings.NewReader(stdin), Out: &out, ErrOut: &errOut}, append([]string{"nodeexec"}, args...))
	return result{code: code, out: out.String(), errOut: errOut.String()}
}

func TestRunBadInput(t *testing.T) {
	srv := newFakeAPIServer(t, []string{"n1"}, nil)
	kc := writeKubeconfig(t, srv.URL)
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.sh")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "script.sh")
	if err := os.WriteFile(script, []byte("hostname\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.sh")

	tests := []struct {
		name string
		args []string
		want []string
	}{
		{name: "no targets", args: []string{"run", "--", "true"}, want: []string{"exactly one of", "--node", "--selector", "--all"}},
		{name: "names and all", args: []string{"run", "--node", "n1", "--all", "--", "true"}, want: []string{"exactly one of"}},
		{name: "selector and all", args: []string{"run", "-l", "a=b", "--all", "--", "true"}, want: []string{"exactly one of"}},
		{name: "malformed selector", args: []string{"run", "--selector", "a in (b", "--", "true"}, want: []string{`--selector "a in (b"`, "invalid label selector"}},
		{name: "no command", args: []string{"run", "--node", "n1"}, want: []string{"no command"}},
		{name: "empty program", args: []string{"run", "--node", "n1", "--", ""}, want: []string{"Command[0]"}},
		{name: "unreadable script", args: []string{"run", "--node", "n1", "--script", missing}, want: []string{"--script", "missing.sh"}},
		{name: "empty script", args: []string{"run", "--node", "n1", "--script", empty}, want: []string{"--script", "empty"}},
		{name: "script and command", args: []string{"run", "--node", "n1", "--script", script, "--", "true"}, want: []string{"--script", "not both"}},
		{name: "env without =", args: []string{"run", "--node", "n1", "--env", "FOO", "--", "true"}, want: []string{"--env", `"FOO"`, "KEY=VALUE"}},
		{name: "env without name", args: []string{"run", "--node", "n1", "-e", "=x", "--", "true"}, want: []string{"--env", `"=x"`}},
		{name: "zero timeout", args: []string{"run", "--node", "n1", "--timeout", "0", "--", "true"}, want: []string{"--timeout", "positive"}},
		{name: "negative timeout", args: []string{"run", "--node", "n1", "--timeout", "-5s", "--", "true"}, want: []string{"--timeout -5s"}},
		{name: "zero concurrency", args: []string{"run", "--node", "n1", "--max-concurrency", "0", "--", "true"}, want: []string{"--max-concurrency 0", "positive"}},
		{name: "unknown backend", args: []string{"run", "--node", "n1", "--backend", "ssh", "--", "true"}, want: []string{`unknown --backend "ssh"`, "debugpod"}},
		{name: "bad cpu request", args: []string{"run", "--node", "n1", "--cpu-request", "lots", "--", "true"}, want: []string{`--cpu-request "lots"`}},
		{name: "bad memory request", args: []string{"run", "--node", "n1", "--memory-request", "1 GB", "--", "true"}, want: []string{`--memory-request "1 GB"`}},
		{name: "unknown profile", args: []string{"run", "--node", "n1", "--profile", "superuser", "--", "true"}, want: []string{"profile", "superuser"}},
		{name: "bad pull policy", args: []string{"run", "--node", "n1", "--image-pull-policy", "Sometimes", "--", "true"}, want: []string{"Sometimes"}},
		{name: "bad namespace", args: []string{"-n", "Not_A_Namespace", "run", "--node", "n1", "--", "true"}, want: []string{"namespace", "Not_A_Namespace"}},
		{name: "negative burst", args: []string{"--burst", "-1", "run", "--node", "n1", "--", "true"}, want: []string{"--burst -1"}},
		{name: "unknown flag", args: []string{"run", "--node", "n1", "--frobnicate", "--", "true"}, want: []string{"unknown flag --frobnicate", "run --help"}},
		{name: "malformed timeout", args: []string{"run", "--node", "n1", "--timeout", "soon", "--", "true"}, want: []string{`--timeout "soon": not a duration`, "30s"}},
		{name: "timeout without value", args: []string{"run", "--node", "n1", "--timeout"}, want: []string{"--timeout needs a value", "30s"}},
		{name: "concurrency word", args: []string{"run", "--node", "n1", "--max-concurrency", "lots", "--", "true"}, want: []string{`--max-concurrency "lots": not a whole number`}},
		{name: "concurrency overflow", args: []string{"run", "--node", "n1", "--max-concurrency", "99999999999999999999", "--", "true"}, want: []string{`--max-concurrency "99999999999999999999": out of range`}},
		{name: "bool with a word", args: []string{"run", "--all=maybe", "--", "true"}, want: []string{"--all=maybe", "true or false"}},
		{name: "qps word", args: []string{"--qps", "fast", "run", "--node", "n1", "--", "true"}, want: []string{`--qps "fast": not a number`}},
		{name: "namespace without value", args: []string{"run", "--node", "n1", "-n"}, want: []string{"-n needs a value"}},
		{name: "shell malformed timeout", args: []string{"shell", "n1", "--timeout", "soon"}, want: []string{`--timeout "soon": not a duration`}},
		{name: "agent install malformed timeout", args: []string{"agent", "install", "--timeout", "2"}, want: []string{`--timeout "2": not a duration`}},
		{name: "watch workers word", args: []string{"watch", "--workers", "many"}, want: []string{`--workers "many": not a whole number`}},
		{name: "empty node", args: []string{"run", "--node", "", "--", "true"}, want: []string{`--node ""`, "no node name"}},
		{name: "bad node name", args: []string{"run", "--node", "a b", "--", "true"}, want: []string{`--node "a b"`, "not a node name"}},
		{name: "empty selector", args: []string{"run", "--selector", "", "--", "true"}, want: []string{"--selector is empty"}},
		{name: "batch overflow", args: []string{"run", "--all", "--batch", "4294967297", "--", "true"}, want: []string{`--batch: "4294967297" is too large`}},
		{name: "batch zero", args: []string{"run", "--all", "--batch", "0", "--", "true"}, want: []string{`--batch "0"`, ">= 1"}},
		{name: "batch over 100%", args: []string{"run", "--all", "--batch", "150%", "--", "true"}, want: []string{`--batch "150%"`, "100%"}},
		{name: "max-errors word", args: []string{"run", "--all", "--max-errors", "few", "--", "true"}, want: []string{`--max-errors: "few"`}},
		{name: "empty image", args: []string{"run", "--all", "--image", "", "--", "true"}, want: []string{"--image is empty"}},
		{name: "image with space", args: []string{"run", "--all", "--image", "busy box", "--", "true"}, want: []string{`--image "busy box"`, "image reference"}},
		{name: "uppercase image", args: []string{"run", "--all", "--image", "BusyBox:1", "--", "true"}, want: []string{`--image "BusyBox:1"`}},
		{name: "bad agent image", args: []string{"run", "--all", "--backend", "nsenter", "--agent-image", "x@sha256:12", "--", "true"}, want: []string{`--agent-image "x@sha256:12"`}},
		{name: "bad agent image for debugpod", args: []string{"run", "--all", "--backend", "debugpod", "--agent-image", "a b", "--", "true"}, want: []string{`--agent-image "a b"`}},
		{name: "qps NaN", args: []string{"--qps", "NaN", "run", "--all", "--", "true"}, want: []string{"--qps NaN"}},
		{name: "negative cpu", args: []string{"run", "--all", "--cpu-request", "-1", "--", "true"}, want: []string{`--cpu-request "-1"`, "negative"}},
		{name: "bad priority class", args: []string{"run", "--all", "--priority-class", "Top Prio", "--", "true"}, want: []string{`--priority-class "Top Prio"`}},
		{name: "bad pull secret", args: []string{"run", "--all", "--image-pull-secret", "a_b", "--", "true"}, want: []string{`--image-pull-secret "a_b"`}},
		{name: "env with NUL", args: []string{"run", "--all", "-e", "A=\x00", "--", "true"}, want: []string{"--env"}},
		{name: "flag after the command", args: []string{"run", "--all", "echo", "-n", "hi"}, want: []string{"flag -n after the command \"echo\"", "-- echo -n hi"}},
		{name: "shell flag after the command", args: []string{"shell", "n1", "bash", "--timeout", "5m"}, want: []string{"flag --timeout after the command \"bash\""}},
		{name: "shell negative timeout", args: []string{"shell", "n1", "--timeout", "-1m"}, want: []string{"--timeout -1m0s"}},
		{name: "shell bad node", args: []string{"shell", "N_1"}, want: []string{`node "N_1"`}},
		{name: "shell empty image", args: []string{"shell", "n1", "--image", ""}, want: []string{"--image is empty"}},
		{name: "gc with an argument", args: []string{"gc", "extra"}, want: []string{"gc takes no arguments", "extra"}},
		{name: "status bad name", args: []string{"status", "Fix_It"}, want: []string{`NodeScript NAME "Fix_It"`}},
		{name: "promote bad selector", args: []string{"promote", "fix", "--to", "a in ("}, want: []string{`--to "a in ("`}},
		{name: "promote empty to", args: []string{"promote", "fix", "--to", ""}, want: []string{`--to ""`}},
		{name: "agent install negative timeout", args: []string{"agent", "install", "--timeout", "-1s"}, want: []string{"--timeout -1s"}},
		{name: "agent install bad image", args: []string{"agent", "install", "--agent-image", "a b"}, want: []string{`--agent-image "a b"`}},
		{name: "agent install bad namespace", args: []string{"agent", "install", "--namespace", "Bad_NS"}, want: []string{`--namespace "Bad_NS"`}},
		{name: "run agent image volume without agent", args: []string{"run", "--node", "n1", "--backend", "debugpod", "--no-agent", "--agent-image-volume", "--", "true"}, want: []string{"--agent-image-volume and --no-agent: give one of them"}},
		{name: "run agent image volume other backend", args: []string{"run", "--node", "n1", "--backend", "nsenter", "--agent-image-volume", "--", "true"}, want: []string{"--agent-image-volume"}},
		{name: "agent install bad transport", args: []string{"agent", "install", "--transport", "ssh"}, want: []string{`--transport "ssh": want portforward, recorded or exec`}},
		{name: "agent uninstall zero timeout", args: []string{"agent", "uninstall", "--timeout", "0s"}, want: []string{"--timeout 0s"}},
		{name: "agent uninstall argument", args: []string{"agent", "uninstall", "now"}, want: []string{"uninstall takes no arguments"}},
		{name: "watch bad success lines", args: []string{"watch", "--success-log-lines", "-5"}, want: []string{"--success-log-lines -5"}},
		{name: "watch zero workers", args: []string{"watch", "--workers", "0"}, want: []string{"--workers 0"}},
		{name: "watch negative parallelism", args: []string{"watch", "--create-parallelism", "-2"}, want: []string{"--create-parallelism -2"}},
		{name: "watch negative pod batch period", args: []string{"watch", "--pod-batch-period", "-1s"}, want: []string{"--pod-batch-period -1s"}},
		{name: "watch lease without namespace", args: []string{"watch", "--leader-elect", "--leader-election-namespace="}, want: []string{"--leader-election-namespace"}},
		{name: "watch with an argument", args: []string{"watch", "extra"}, want: []string{"no arguments"}},
		{name: "watch metrics port only", args: []string{"watch", "--metrics-bind-address", "8080"}, want: []string{`--metrics-bind-address "8080"`, "HOST:PORT"}},
		{name: "watch probe port out of range", args: []string{"watch", "--health-probe-bind-address", ":80810"}, want: []string{`--health-probe-bind-address ":80810"`}},
		{name: "watch metrics and probes on one port", args: []string{"watch", "--metrics-bind-address", ":8080", "--health-probe-bind-address", ":8080"}, want: []string{`both ":8080"`}},
		{name: "watch negative collect interval", args: []string{"watch", "--collect-interval", "-1s"}, want: []string{"--collect-interval -1s"}},
		{name: "status without name", args: []string{"status"}, want: []string{"NAME"}},
		{name: "status bad output", args: []string{"status", "x", "-o", "yaml"}, want: []string{`--output "yaml"`}},
		{name: "promote without name", args: []string{"promote", "--to", "all"}, want: []string{"NAME"}},
		{name: "rerun without name", args: []string{"rerun", "--node", "n1"}, want: []string{"rerun needs one NodeScript NAME"}},
		{name: "rerun bad name", args: []string{"rerun", "Fix_It", "--node", "n1"}, want: []string{`NodeScript NAME "Fix_It"`}},
		{name: "rerun no target", args: []string{"rerun", "fix"}, want: []string{"exactly one of", "--node", "--selector", "--all"}},
		{name: "rerun node and selector", args: []string{"rerun", "fix", "--node", "n1", "--selector", "pool=a"}, want: []string{"exactly one of"}},
		{name: "rerun bad node", args: []string{"rerun", "fix", "--node", "N_1"}, want: []string{`--node "N_1"`, "not a node name"}},
		{name: "rerun empty node", args: []string{"rerun", "fix", "--node", ""}, want: []string{`--node ""`}},
		{name: "rerun empty selector", args: []string{"rerun", "fix", "--selector", ""}, want: []string{"--selector is empty"}},
		{name: "rerun malformed selector", args: []string{"rerun", "fix", "--selector", "a in ("}, want: []string{`--selector "a in ("`}},
		{name: "ignore without node", args: []string{"ignore", "fix"}, want: []string{"ignore needs --node NODE"}},
		{name: "ignore bad node", args: []string{"ignore", "fix", "--node", "a b"}, want: []string{`--node "a b"`, "not a node name"}},
		{name: "ignore two names", args: []string{"ignore", "fix", "fix-2", "--node", "n1"}, want: []string{"ignore needs one NodeScript NAME"}},
		{name: "unignore bad name", args: []string{"unignore", "Fix", "--node", "n1"}, want: []string{`NodeScript NAME "Fix"`}},
		{name: "run-now without name", args: []string{"run-now"}, want: []string{"run-now needs one NodeScript NAME"}},
		{name: "run-now negative for", args: []string{"run-now", "fix", "--for", "-1h"}, want: []string{"--for -1h0m0s", "positive"}},
		{name: "run-now zero for", args: []string{"run-now", "fix", "--for", "0s"}, want: []string{"--for 0s"}},
		{name: "run-now malformed for", args: []string{"run-now", "fix", "--for", "tonight"}, want: []string{`--for "tonight"`}},
		{name: "run-now cancel and for", args: []string{"run-now", "fix", "--cancel", "--for", "1h"}, want: []string{"--cancel", "--for"}},
		{name: "apply unreadable file", args: []string{"apply", "-f", missing}, want: []string{"missing.sh"}},
		{name: "apply invalid nodescript", args: []string{"apply", "-f", script}, want: []string{"document 1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := run(t, "", append([]string{"--kubeconfig", kc}, tt.args...)...)
			wantRefused(t, got, tt.want...)
			if got.out != "" {
				t.Errorf("stdout not empty:\n%s", got.out)
			}
		})
	}
	if reqs := srv.seen(); len(reqs) != 0 {
		t.Errorf("bad input reached the API server: %v", reqs)
	}
}

func TestRunUnreachableAPIServer(t *testing.T) {
	kc := writeKubeconfig(t, "https://127.0.0.1:1")
	start := time.Now()
	got := run(t, "", "--kubeconfig", kc, "run", "--all", "--", "true")
	if elapsed := time.Since(start); elapsed > 4*time.Second {
		t.Errorf("took %s to give up on an unreachable API server", elapsed)
	}
	if got.code != 2 {
		t.Errorf("exit code %d, want 2", got.code)
	}
	for _, s := range []string{"error: ", "listing nodes", "127.0.0.1:1"} {
		if !strings.Contains(got.errOut, s) {
			t.Errorf("stderr does not contain %q:\n%s", s, got.errOut)
		}
	}
	if got.out != "" {
		t.Errorf("stdout not empty:\n%s", got.out)
	}
}

func TestRunMissingKubeconfig(t *testing.T) {
	writeKubeconfig(t, "https://127.0.0.1:1")
	got := run(t, "", "--kubeconfig", filepath.Join(t.TempDir(), "nope"), "run", "--all", "--", "true")
	if got.code != 2 || !strings.Contains(got.errOut, "kubeconfig") {
		t.Errorf("exit code %d, stderr %q; want 2 and a kubeconfig error", got.code, got.errOut)
	}
}

func TestRunResolveErrors(t *testing.T) {
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "x",
		errors.New(`violates PodSecurity "baseline:latest": host namespaces (hostNetwork=true), privileged (container "debugger" must not set securityContext.privileged=true)`))
	tests := []struct {
		name      string
		nodes     []string
		createErr *apierrors.StatusError
		args      []string
		want      []string
		wantReqs  []string
	}{
		{
			name: "empty cluster", args: []string{"run", "--all", "--", "true"},
			want: []string{"no nodes matched"}, wantReqs: []string{"GET /api/v1/nodes"},
		},
		{
			name: "selector matches nothing", nodes: []string{"n1"}, args: []string{"run", "-l", "gpu=true", "--", "true"},
			want: []string{"no nodes matched", `"gpu=true"`}, wantReqs: []string{"GET /api/v1/nodes"},
		},
		{
			name: "missing nodes", nodes: []string{"n1"}, args: []string{"run", "--node", "n9,n1", "--node", "n8", "--", "true"},
			want: []string{"node not found", `["n9" "n8"]`}, wantReqs: []string{"GET /api/v1/nodes"},
		},
		{
			name: "pod security refuses the preflight", nodes: []string{"n1", "n2"}, createErr: forbidden,
			args: []string{"run", "--all", "--", "true"},
			want: []string{"forbidden", `namespace "team"`, `level "baseline"`, "kubectl label namespace team pod-security.kubernetes.io/enforce=privileged --overwrite"},
			// The CLI's preflight: namespace labels, 13 access reviews (pods, the run's Lease, exec, events, nodes)
			// (unanswered by this server: inconclusive, not refusals) and the dry-run create.
			wantReqs: slices.Concat([]string{"GET /api/v1/nodes", "GET /api/v1/namespaces/team"},
				slices.Repeat([]string{"POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews"}, 13),
				[]string{"POST /api/v1/namespaces/team/pods"}),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newFakeAPIServer(t, tt.nodes, tt.createErr)
			kc := writeKubeconfig(t, srv.URL)
			got := run(t, "", append([]string{"--kubeconfig", kc}, tt.args...)...)
			if got.code != 2 {
				t.Errorf("exit code %d, want 2; stderr:\n%s", got.code, got.errOut)
			}
			for _, s := range tt.want {
				if !strings.Contains(got.errOut, s) {
					t.Errorf("stderr does not contain %q:\n%s", s, got.errOut)
				}
			}
			// The node list comes first; the preflight's requests (namespace,
			// access reviews, dry-run) go out together, in any order.
			gotReqs := srv.seen()
			if len(gotReqs) > 0 && len(tt.wantReqs) > 0 && gotReqs[0] != tt.wantReqs[0] {
				t.Errorf("first API request %q, want %q", gotReqs[0], tt.wantReqs[0])
			}
			if diff := cmp.Diff(tt.wantReqs, gotReqs, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
				t.Errorf("API requests mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRunHelp(t *testing.T) {
	got := run(t, "", "run", "--help")
	if got.code != 0 {
		t.Errorf("exit code %d, want 0; stderr:\n%s", got.code, got.errOut)
	}
	for _, s := range []string{"--selector", "--max-concurrency", "--script"} {
		if !strings.Contains(got.out, s) {
			t.Errorf("help does not mention %s:\n%s", s, got.out)
		}
	}
}

func TestExitStatus(t *testing.T) {
	ok := nodeexec.NodeResult{Result: nodeexec.Result{Node: "a"}}
	exit3 := nodeexec.NodeResult{Result: nodeexec.Result{Node: "b", ExitCode: 3}, Err: &nodeexec.ExitError{Node: "b", Code: 3}}
	timeout := nodeexec.NodeResult{Result: nodeexec.Result{Node: "c", ExitCode: -1}, Err: fmt.Errorf("x: %w", nodeexec.ErrTimeout)}
	podErr := nodeexec.NodeResult{Result: nodeexec.Result{Node: "d", ExitCode: -1}, Err: &nodeexec.PodError{Reason: "ErrImagePull"}}
	tests := []struct {
		name    string
		results []nodeexec.NodeResult
		want    int
	}{
		{name: "one ok", results: []nodeexec.NodeResult{ok}, want: 0},
		{name: "one exit 3", results: []nodeexec.NodeResult{exit3}, want: 3},
		{name: "one timeout", results: []nodeexec.NodeResult{timeout}, want: 124},
		{name: "one pod error", results: []nodeexec.NodeResult{podErr}, want: 1},
		{name: "several ok", results: []nodeexec.NodeResult{ok, ok}, want: 0},
		{name: "several, one exit 3", results: []nodeexec.NodeResult{ok, exit3}, want: 1},
		{name: "several, one timeout", results: []nodeexec.NodeResult{timeout, ok}, want: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := exitStatus(tt.results)
			got := 0
			var ec exitCoder
			if errors.As(err, &ec) {
				got = ec.code
			} else if err != nil {
				t.Fatalf("exitStatus returned %v, not an exitCoder", err)
			}
			if got != tt.want {
				t.Errorf("exit code %d, want %d", got, tt.want)
			}
		})
	}
}

// A missing image with pull policy Never on every node is bad input: one
// error naming the image flag, the image, the nodes and the fix; on some
// nodes only, the summary's hint says the same.
func TestNeverPull(t *testing.T) {
	never := func(node string) nodeexec.NodeResult {
		return nodeexec.NodeResult{Result: nodeexec.Result{Node: node, ExitCode: -1}, Err: fmt.Errorf("x: %w",
			&nodeexec.PodError{Node: node, Namespace: "default", Pod: "p", Reason: "ErrImageNeverPull", Image: "reg.test/missing:1"})}
	}
	ok := nodeexec.NodeResult{Result: nodeexec.Result{Node: "ok"}}
	skipped := nodeexec.NodeResult{Result: nodeexec.Result{Node: "s", ExitCode: -1}, Err: fmt.Errorf("canary failed: %w", nodeexec.ErrSkipped)}
	pull := nodeexec.NodeResult{Result: nodeexec.Result{Node: "p", ExitCode: -1}, Err: &nodeexec.PodError{Node: "p", Reason: "ErrImagePull", Image: "x:1"}}

	err := neverPullResults([]nodeexec.NodeResult{never("a"), never("b"), skipped}, "debugpod")
	if err == nil {
		t.Fatal("every node ErrImageNeverPull: no error")
	}
	for _, want := range []string{"--image-pull-policy Never", `--image or --agent-image "reg.test/missing:1"`, `nodes "a", "b"`, "IfNotPresent"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("error is more than one line: %v", err)
	}
	if err := neverPullResults([]nodeexec.NodeResult{never("a")}, "nsenter"); err == nil || !strings.Contains(err.Error(), `--agent-image "reg.test/missing:1" is not present on node "a"`) {
		t.Errorf("nsenter: %v, want the --agent-image named", err)
	}
	for name, rs := range map[string][]nodeexec.NodeResult{
		"one node ran":      {never("a"), ok},
		"another failure":   {never("a"), pull},
		"nothing":           nil,
		"all skipped":       {skipped},
		"an ordinary error": {pull},
	} {
		if err := neverPullResults(rs, "debugpod"); err != nil {
			t.Errorf("%s: %v, want nil (not bad input)", name, err)
		}
	}
	h := pullHint(never("a").Err, "run", "debugpod")
	if !strings.Contains(h, `"reg.test/missing:1" is not on node "a"`) || !strings.Contains(h, "--image-pull-policy IfNotPresent") || strings.Contains(h, "--image-pull-secret") {
		t.Errorf("pull hint for ErrImageNeverPull: %q", h)
	}
	// shell: bad input, exit status 2 through Run.
	if err := shellExit(Streams{}, "debugpod", never("a").Err, nil); err == nil || errors.As(err, new(exitCoder)) {
		t.Errorf("shell: %v, want a bad-input error", err)
	}
}

func TestPrintSummary(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var b bytes.Buffer
	printSummary(&b, []nodeexec.NodeResult{
		{Result: nodeexec.Result{Node: "node-a", ExitCode: 0, Started: t0, Finished: t0.Add(1234 * time.Millisecond)}},
		{Result: nodeexec.Result{Node: "b", ExitCode: 3, Started: t0, Finished: t0.Add(2 * time.Second)}, Err: &nodeexec.ExitError{Node: "b", Code: 3}},
		{Result: nodeexec.Result{Node: "c", ExitCode: -1, Started: t0, Finished: t0}, Err: fmt.Errorf("node %q: %w", "c", nodeexec.ErrNodeNotReady)},
	})
	want := "" +
		"NODE    EXIT  DURATION  RESULT\n" +
		"node-a  0     1.23s     ok\n" +
		"b       3     2s        command on node \"b\" exited with code 3\n" +
		"c       -     0s        node \"c\": node is not Ready\n"
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("summary mismatch (-want +got):\n%s", diff)
	}
}

func TestParseEnv(t *testing.T) {
	tests := []struct {
		in      []string
		want    map[string]string
		wantErr bool
	}{
		{in: nil, want: nil},
		{in: []string{"A=1", "B=", "C=x=y"}, want: map[string]string{"A": "1", "B": "", "C": "x=y"}},
		{in: []string{"A=1", "A=2"}, want: map[string]string{"A": "2"}},
		{in: []string{"A"}, wantErr: true},
		{in: []string{"=1"}, wantErr: true},
	}
	for _, tt := range tests {
		got, err := envflag.Parse(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("envflag.Parse(%q) error = %v, want error %v", tt.in, err, tt.wantErr)
			continue
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("envflag.Parse(%q) mismatch (-want +got):\n%s", tt.in, diff)
		}
	}
}

func TestSplitCSV(t *testing.T) {
	got := splitCSV([]string{"a,b", " c ", "", "d,,e,"})
	if diff := cmp.Diff([]string{"a", "b", "c", "d", "e"}, got); diff != "" {
		t.Errorf("splitCSV mismatch (-want +got):\n%s", diff)
	}
	if got := splitCSV(nil); got != nil {
		t.Errorf("splitCSV(nil) = %q, want nil", got)
	}
}

// TestPullHintDebugpodContainers: a debugpod run's pull hint names the flag
// of the image that failed: --image for the debugging container's,
// --agent-image (and --no-agent) for the agent container's.
func TestPullHintDebugpodContainers(t *testing.T) {
	pull := func(msg string) error {
		return fmt.Errorf("x: %w", &nodeexec.PodError{Node: "a", Namespace: "default", Pod: "p", Reason: "ErrImagePull", Image: "reg.test/x:1", Message: msg})
	}
	user := pullHint(pull("failed to pull and unpack image"), "run", "debugpod")
	if !strings.Contains(user, "--image (or $NODEEXEC_IMAGE)") || strings.Contains(user, "--agent-image") {
		t.Errorf("the debugging container's image: %q", user)
	}
	agent := pullHint(pull(`container "nodeexec-agent", which puts the command in place, cannot start: failed to pull`), "run", "debugpod")
	if !strings.Contains(agent, "--agent-image") || !strings.Contains(agent, "--no-agent") {
		t.Errorf("the agent container's image: %q", agent)
	}
	if h := pullHint(pull("failed to pull"), "run", "nsenter"); !strings.Contains(h, "--agent-image") {
		t.Errorf("nsenter: %q", h)
	}
	volume := pullHint(pull(`image volume "nodeexec-agent": failed to pull and unpack image "reg.test/x:1"`), "run", "debugpod")
	if !strings.Contains(volume, "--agent-image-volume") || !strings.Contains(volume, "--agent-image (or") {
		t.Errorf("the agent image volume's image: %q", volume)
	}
}
