package cli

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	authv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/nodeexec/nodeexec/internal/durationcheck"
	"github.com/nodeexec/nodeexec/nodeexec"
)

// TestRunInputRefused: bad input to run and shell that used to be accepted
// (or crashed, or was refused only by the cluster) gives exit status 2 and
// one error line naming the flag, before any request reaches the API
// server.
func TestRunInputRefused(t *testing.T) {
	srv := newFakeAPIServer(t, []string{"n1"}, nil)
	kc := writeKubeconfig(t, srv.URL)
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	binary := write("binary.sh", []byte("\x7fELF\x02\x01\x01\x00\x00"))
	nul := write("nul.sh", []byte("echo hi\x00there\n"))
	latin1 := write("latin1.sh", []byte("echo caf\xe9\n"))
	big := write("big.sh", []byte(strings.Repeat("#", 128<<10)))

	tests := []struct {
		name string
		args []string
		want []string
	}{
		// 1: the ephemeral shell's targets.
		{"shell ephemeral container without pod", []string{"shell", "n1", "--backend", "ephemeral", "--container", "app"}, []string{"--container goes with --pod"}},
		{"shell ephemeral malformed pod", []string{"shell", "n1", "--backend", "ephemeral", "--pod", "a/b/c"}, []string{`--pod "a/b/c"`, "NAMESPACE/NAME"}},
		// 2: accepted silently or mangled.
		{"env name starting with a digit", []string{"run", "--all", "-e", "1BAD=x", "--", "true"}, []string{`--env "1BAD=x"`, "not a valid variable name", "letters, digits and _"}},
		{"env name with a space", []string{"run", "--all", "-e", "A B=x", "--", "true"}, []string{`--env "A B=x"`, "not a valid variable name"}},
		{"env given twice", []string{"run", "--all", "-e", "A=x", "-e", "A=y", "--", "true"}, []string{`--env "A=y"`, `already set by -e "A=x"`, "once"}},
		{"retries above the maximum", []string{"run", "--all", "--retries", "1000", "--", "true"}, []string{"--retries 1000", "too large, at most 10"}},
		{"tail-bytes above the maximum", []string{"run", "--all", "--tail-bytes", "99999999999", "--", "true"}, []string{"--tail-bytes 99999999999", "too large, at most 1048576"}},
		{"no-proc-fallback with nsenter", []string{"run", "--all", "--backend", "nsenter", "--no-proc-fallback", "--", "true"}, []string{"--no-proc-fallback is for --backend runtime", "--backend nsenter does not use it"}},
		{"runtime-endpoint with debugpod", []string{"run", "--all", "--profile", "general", "--runtime-endpoint", "/x.sock", "--", "true"}, []string{"--runtime-endpoint is for --backend runtime"}},
		{"use-resident with debugpod", []string{"run", "--all", "--backend", "debugpod", "--use-resident", "--", "true"}, []string{"--use-resident is for --backend nsenter or runtime"}},
		{"shell pod with debugpod", []string{"shell", "n1", "--pod", "web-1"}, []string{"--pod is for --backend ephemeral or runtime", "--backend debugpod"}},
		{"shell container with nsenter", []string{"shell", "n1", "--backend", "nsenter", "--container", "app"}, []string{"--container is for --backend ephemeral or runtime"}},
		{"shell use-resident with debugpod", []string{"shell", "n1", "--use-resident"}, []string{"--use-resident is for --backend nsenter or runtime", "--backend debugpod"}},
		{"shell two nodes", []string{"shell", "n1", "other-node"}, []string{"shell takes one node", "other-node", "the command goes after --"}},
		{"negative verbosity", []string{"-v", "-1", "run", "--all", "--", "true"}, []string{"-v -1", "0 or more"}},
		{"shell negative verbosity", []string{"-v", "-1", "shell", "n1"}, []string{"-v -1", "0 or more"}},
		// 3: refused only after a Lease or pod was created.
		{"timeout above the pod deadline limit", []string{"run", "--all", "--timeout", "1000000h", "--", "true"}, []string{"--timeout 1000000h0m0s", "too large, at most 596523h13m7s"}},
		{"shell timeout above the pod deadline limit", []string{"shell", "n1", "--timeout", "1000000h"}, []string{"--timeout 1000000h0m0s", "too large, at most 596523h13m7s"}},
		{"upper-case agent image", []string{"run", "--all", "--agent-image", "UPPER/x", "--", "true"}, []string{`--agent-image "UPPER/x"`, "not a valid image reference", "lowercase"}},
		{"upper-case image", []string{"shell", "n1", "--image", "Team/tool:1"}, []string{`--image "Team/tool:1"`, "lowercase"}},
		{"binary script", []string{"run", "--all", "--script", binary}, []string{"--script", "binary.sh", "binary file", "NUL byte at 7"}},
		{"script with NUL", []string{"run", "--all", "--script", nul}, []string{"--script", "nul.sh", "NUL byte at 7"}},
		{"script not UTF-8", []string{"run", "--all", "--script", latin1}, []string{"--script", "latin1.sh", "not text"}},
		{"script of 128 KiB", []string{"run", "--all", "--script", big}, []string{"--script", "big.sh", "131072 bytes", "too large, at most 131071", "E2BIG"}},
		{"argument of 128 KiB", []string{"run", "--all", "--", "echo", strings.Repeat("x", 128<<10)}, []string{"Command[1]", "E2BIG"}},
		// 4: refused but unclear.
		{"timeout overflow", []string{"run", "--all", "--timeout", "9999999999h", "--", "true"}, []string{"--timeout 9999999999h", "too large, at most 596523h13m7s"}},
		{"shell timeout overflow", []string{"shell", "n1", "--timeout", "9999999999h"}, []string{"--timeout 9999999999h", "too large, at most 596523h13m7s"}},
		{"runtime with env-from-secret", []string{"run", "--backend", "runtime", "--pod", "web-1", "--env-from-secret", "creds", "--", "true"}, []string{"--env-from-secret", "--backend runtime", "-e KEY=VALUE"}},
		{"shell runtime without pod", []string{"shell", "n1", "--backend", "runtime"}, []string{"--backend runtime needs --pod [NAMESPACE/]NAME"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := run(t, "", append([]string{"--kubeconfig", kc}, tt.args...)...)
			checkOneError(t, got, tt.want)
		})
	}
	if reqs := srv.seen(); len(reqs) != 0 {
		t.Errorf("bad input reached the API server: %v", reqs)
	}
}

// checkOneError fails unless got is exit status 2 with exactly one error
// line, containing every string of want, and nothing on stdout.
func checkOneError(t *testing.T, got result, want []string) {
	t.Helper()
	if got.code != 2 {
		t.Errorf("exit code %d, want 2; stderr:\n%s", got.code, got.errOut)
	}
	if n := strings.Count(got.errOut, "error: "); n != 1 || !strings.HasPrefix(got.errOut, "error: ") || strings.Count(strings.TrimSpace(got.errOut), "\n") != 0 {
		t.Errorf("stderr has %d error messages, want exactly one line:\n%s", n, got.errOut)
	}
	for _, s := range want {
		if !strings.Contains(got.errOut, s) {
			t.Errorf("stderr does not contain %q:\n%s", s, got.errOut)
		}
	}
	if got.out != "" {
		t.Errorf("stdout not empty:\n%s", got.out)
	}
}

// TestRunInputAccepted: what the checks above must still let through.
func TestRunInputAccepted(t *testing.T) {
	for _, tt := range []struct {
		name string
		err  error
	}{
		{"env names", func() error {
			_, err := parseEnv([]string{"A=1", "_b=2", "PATH_2=x=y", "lower=", "OPTS=a=1,b=2"})
			return err
		}()},
		{"largest script", func() error {
			f := filepath.Join(t.TempDir(), "s.sh")
			if err := os.WriteFile(f, []byte(strings.Repeat("#", nodeexec.MaxArgBytes)), 0o600); err != nil {
				return err
			}
			_, err := readScript(f)
			return err
		}()},
		{"registry host", checkImage("image", "Registry.Example:5000/team/x:1")},
		{"localhost", checkImage("image", "localhost/x")},
	} {
		if tt.err != nil {
			t.Errorf("%s: %v", tt.name, tt.err)
		}
	}
	if !durationcheck.Overflows("9999999999h") || durationcheck.Overflows("soon") || durationcheck.Overflows("1h") || durationcheck.Overflows("h") {
		t.Error("durationOverflows: wrong answer for 9999999999h, soon, 1h or h")
	}
}

// clusterAPI is a fake API server for the checks that read the cluster
// before anything is created: nodes (2 CPUs, 4Gi each), namespaces (all
// but "missing" exist), PriorityClasses (only "exists" and
// system-node-critical), pods (web-1 in "team", on n2; no resident agent),
// SelfSubjectAccessReviews (all allowed) and dry-run pod creates. Anything
// else, a create above all, fails the test.
type clusterAPI struct {
	*httptest.Server
	t        *testing.T
	mu       sync.Mutex
	requests []string
}

func newClusterAPI(t *testing.T) *clusterAPI {
	s := &clusterAPI{t: t}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

func (s *clusterAPI) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.requests = append(s.requests, r.Method+" "+r.URL.Path)
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	reply := func(code int, obj any) {
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(obj)
	}
	notFound := func(gr schema.GroupResource, name string) {
		st := apierrors.NewNotFound(gr, name).ErrStatus
		st.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
		reply(http.StatusNotFound, st)
	}
	p, get, post := r.URL.Path, r.Method == http.MethodGet, r.Method == http.MethodPost
	switch {
	case get && p == "/api/v1/nodes":
		list := corev1.NodeList{TypeMeta: metav1.TypeMeta{Kind: "NodeList", APIVersion: "v1"}}
		for _, n := range []string{"n1", "n2"} {
			list.Items = append(list.Items, corev1.Node{
				ObjectMeta: metav1.ObjectMeta{Name: n},
				Status: corev1.NodeStatus{
					Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
					Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi")},
				},
			})
		}
		reply(http.StatusOK, list)
	case get && p == "/api/v1/namespaces/missing":
		notFound(schema.GroupResource{Resource: "namespaces"}, "missing")
	case get && strings.HasPrefix(p, "/api/v1/namespaces/") && strings.Count(p, "/") == 4:
		reply(http.StatusOK, corev1.Namespace{TypeMeta: metav1.TypeMeta{Kind: "Namespace", APIVersion: "v1"}, ObjectMeta: metav1.ObjectMeta{Name: p[len("/api/v1/namespaces/"):]}})
	case get && p == "/api/v1/namespaces/team/pods/web-1":
		reply(http.StatusOK, corev1.Pod{
			TypeMeta:   metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
			ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "team"},
			Spec:       corev1.PodSpec{NodeName: "n2", Containers: []corev1.Container{{Name: "app"}}},
			Status:     corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}},
		})
	case get && p == "/api/v1/namespaces/nodeexec-agents/pods":
		reply(http.StatusOK, corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}})
	case get && strings.HasPrefix(p, "/apis/apps/v1/namespaces/nodeexec-agents/daemonsets/"):
		notFound(schema.GroupResource{Group: "apps", Resource: "daemonsets"}, p[strings.LastIndex(p, "/")+1:])
	case get && p == "/apis/scheduling.k8s.io/v1/priorityclasses/exists":
		reply(http.StatusOK, schedulingv1.PriorityClass{TypeMeta: metav1.TypeMeta{Kind: "PriorityClass", APIVersion: "scheduling.k8s.io/v1"}, ObjectMeta: metav1.ObjectMeta{Name: "exists"}})
	case get && strings.HasPrefix(p, "/apis/scheduling.k8s.io/v1/priorityclasses/"):
		notFound(schema.GroupResource{Group: "scheduling.k8s.io", Resource: "priorityclasses"}, p[strings.LastIndex(p, "/")+1:])
	case get && p == "/apis/scheduling.k8s.io/v1/priorityclasses":
		list := schedulingv1.PriorityClassList{TypeMeta: metav1.TypeMeta{Kind: "PriorityClassList", APIVersion: "scheduling.k8s.io/v1"}}
		for _, n := range []string{"system-node-critical", "exists"} {
			list.Items = append(list.Items, schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: n}})
		}
		reply(http.StatusOK, list)
	case post && p == "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews":
		reply(http.StatusCreated, authv1.SelfSubjectAccessReview{
			TypeMeta: metav1.TypeMeta{Kind: "SelfSubjectAccessReview", APIVersion: "authorization.k8s.io/v1"},
			Status:   authv1.SubjectAccessReviewStatus{Allowed: true},
		})
	case post && p == "/api/v1/namespaces/missing/pods" && r.URL.Query().Get("dryRun") == "All":
		notFound(schema.GroupResource{Resource: "namespaces"}, "missing")
	case post && strings.HasSuffix(p, "/pods") && r.URL.Query().Get("dryRun") == "All":
		reply(http.StatusCreated, corev1.Pod{TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"}, ObjectMeta: metav1.ObjectMeta{Name: "dry-run"}})
	default:
		s.t.Errorf("the fake API server got %s %s: nothing may be created", r.Method, r.URL)
		st := apierrors.NewInternalError(nil).ErrStatus
		st.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
		reply(http.StatusInternalServerError, st)
	}
}

// TestRunInputRefusedByTheCluster: bad input only the cluster's state
// shows (a missing namespace or PriorityClass, a request above every
// node's allocatable, a pod on another node) is refused with one error
// naming the flag, after reads and dry-runs only.
func TestRunInputRefusedByTheCluster(t *testing.T) {
	srv := newClusterAPI(t)
	kc := writeKubeconfig(t, srv.URL)
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"missing namespace", []string{"-n", "missing", "run", "--node", "n1", "--", "true"}, []string{`-n/--namespace "missing": namespace not found`, "create it"}},
		{"shell missing namespace", []string{"-n", "missing", "shell", "n1"}, []string{`-n/--namespace "missing": namespace not found`}},
		{"missing priority class", []string{"run", "--all", "--priority-class", "nope", "--", "true"}, []string{`--priority-class "nope": the PriorityClass does not exist`, "exists, system-node-critical"}},
		{"shell missing priority class", []string{"shell", "n1", "--priority-class", "nope"}, []string{`--priority-class "nope": the PriorityClass does not exist`}},
		{"cpu request above allocatable", []string{"run", "--all", "--cpu-request", "1000000", "--", "true"}, []string{"--cpu-request 1000000", `node "n1"`, "allocatable cpu: 2", "at most 2"}},
		{"memory request above allocatable", []string{"run", "--node", "n2", "--memory-request", "5Gi", "--", "true"}, []string{"--memory-request 5Gi", `node "n2"`, "allocatable memory: 4Gi"}},
		{"shell cpu request above allocatable", []string{"shell", "n1", "--cpu-request", "3"}, []string{"--cpu-request 3", `node "n1"`, "allocatable cpu: 2"}},
		{"shell ephemeral without a resident agent", []string{"shell", "n1", "--backend", "ephemeral"}, []string{`no ready resident agent on node "n1"`, "give --pod"}},
		{"shell ephemeral pod on another node", []string{"shell", "n1", "--backend", "ephemeral", "--pod", "web-1"}, []string{`--pod "web-1" runs on node "n2", not "n1"`, "shell n2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := run(t, "", append([]string{"--kubeconfig", kc}, tt.args...)...)
			checkOneError(t, got, tt.want)
		})
	}
	// What fits passes these checks (it then fails on the create the fake
	// refuses): an existing class, a request within the allocatable.
	got := run(t, "", "--kubeconfig", kc, "run", "--node", "n1", "--priority-class", "exists", "--cpu-request", "2", "--explain", "--", "true")
	if got.code != 0 {
		t.Errorf("fitting request, existing class: exit %d, stderr:\n%s", got.code, got.errOut)
	}
}
