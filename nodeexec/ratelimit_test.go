package nodeexec_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/podexec"
)

// throttlingServer answers like an API server under Priority and Fairness:
// the first `throttle` requests of each kind (method and path) get 429 with
// Retry-After and APF's Status body; then list/get/create/delete succeed
// and a streaming upgrade gets 404 (an ordinary refusal: the test server
// speaks no streaming protocol).
type throttlingServer struct {
	*httptest.Server
	throttle   int
	retryAfter string // the Retry-After header; "" for none
	// rejectWebSocket answers WebSocket upgrades 400, as an API server
	// without WebSocket streaming, so that clients fall back to SPDY.
	rejectWebSocket bool

	mu    sync.Mutex
	seen  map[string]int // "METHOD path" -> requests
	times map[string][]time.Time
}

func newThrottlingServer(t *testing.T, throttle int, retryAfter string) *throttlingServer {
	s := &throttlingServer{throttle: throttle, retryAfter: retryAfter, seen: map[string]int{}, times: map[string][]time.Time{}}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

func (s *throttlingServer) count(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[key]
}

func writeStatus(w http.ResponseWriter, st metav1.Status) {
	st.Kind, st.APIVersion = "Status", "v1"
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(int(st.Code))
	_ = json.NewEncoder(w).Encode(st)
}

func (s *throttlingServer) serve(w http.ResponseWriter, r *http.Request) {
	key := r.Method + " " + r.URL.Path
	s.mu.Lock()
	s.seen[key]++
	n := s.seen[key]
	s.times[key] = append(s.times[key], time.Now())
	s.mu.Unlock()
	ws := strings.EqualFold(r.Header.Get("Upgrade"), "websocket")
	if ws && s.rejectWebSocket {
		writeStatus(w, metav1.Status{Status: metav1.StatusFailure, Code: http.StatusBadRequest, Reason: metav1.StatusReasonBadRequest, Message: "no websocket here"})
		return
	}
	if n <= s.throttle {
		if s.retryAfter != "" {
			w.Header().Set("Retry-After", s.retryAfter)
		}
		w.Header().Set("X-Kubernetes-PF-FlowSchema-UID", "test-flowschema")
		secs := 0
		fmt.Sscan(s.retryAfter, &secs)
		writeStatus(w, metav1.Status{Status: metav1.StatusFailure, Code: http.StatusTooManyRequests, Reason: metav1.StatusReasonTooManyRequests,
			Message: "Too many requests, please try again later.", Details: &metav1.StatusDetails{RetryAfterSeconds: int32(secs)}})
		return
	}
	if strings.HasSuffix(r.URL.Path, "/exec") || strings.HasSuffix(r.URL.Path, "/portforward") {
		writeStatus(w, metav1.Status{Status: metav1.StatusFailure, Code: http.StatusNotFound, Reason: metav1.StatusReasonNotFound, Message: `pods "p" not found`})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	pod := &corev1.Pod{TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"}, ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default"}}
	switch r.Method {
	case http.MethodGet:
		if strings.HasSuffix(r.URL.Path, "/pods") {
			_ = json.NewEncoder(w).Encode(&corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}, Items: []corev1.Pod{*pod}})
			return
		}
		_ = json.NewEncoder(w).Encode(pod)
	case http.MethodPost:
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(pod)
	case http.MethodDelete:
		writeStatus(w, metav1.Status{Status: metav1.StatusSuccess, Code: http.StatusOK})
	}
}

// throttledConfig is the client configuration nodeexec.ClientOptions gives
// for the server.
func throttledConfig(t *testing.T, s *throttlingServer) (*rest.Config, kubernetes.Interface) {
	t.Helper()
	isolateKubeconfig(t)
	kc := fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: %q}}]\nusers: [{name: u, user: {token: x}}]\n"+
		"contexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n", s.URL)
	p := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(p, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, _, err := nodeexec.ClientOptions{Kubeconfig: p, QPS: -1}.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	cs, err := nodeexec.Clientset(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, cs
}

// TestTooManyRequestsRetried: every call a run makes, throttled twice with
// 429 + Retry-After, succeeds (or reaches the server's real answer) on the
// third request: create, get, list, delete by client-go's own retries; the
// exec upgrade, WebSocket and SPDY, by UpgradeRetries. Without it the
// WebSocket 429 made the executor fall back to SPDY and the SPDY 429 failed
// the node.
func TestTooManyRequestsRetried(t *testing.T) {
	const throttle = 2
	s := newThrottlingServer(t, throttle, "0")
	cfg, cs := throttledConfig(t, s)
	ctx := t.Context()
	pods := cs.CoreV1().Pods("default")
	calls := []struct {
		key  string
		call func() error
	}{
		{"POST /api/v1/namespaces/default/pods", func() error {
			_, err := pods.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}}, metav1.CreateOptions{})
			return err
		}},
		{"GET /api/v1/namespaces/default/pods/p", func() error { _, err := pods.Get(ctx, "p", metav1.GetOptions{}); return err }},
		{"GET /api/v1/namespaces/default/pods", func() error { _, err := pods.List(ctx, metav1.ListOptions{}); return err }},
		{"DELETE /api/v1/namespaces/default/pods/p", func() error { return pods.Delete(ctx, "p", metav1.DeleteOptions{}) }},
	}
	for _, c := range calls {
		if err := c.call(); err != nil {
			t.Errorf("%s: %v, want success after %d throttled attempts", c.key, err, throttle)
		}
		if n := s.count(c.key); n != throttle+1 {
			t.Errorf("%s: %d requests, want %d", c.key, n, throttle+1)
		}
	}

	// The exec upgrade, as podexec makes it (WebSocket, SPDY fallback).
	exec := func(t *testing.T) error {
		return podexec.NewStreamer(cfg, cs.CoreV1().RESTClient()).Exec(ctx, "default", "p",
			&corev1.PodExecOptions{Container: "c", Command: []string{"true"}, Stdout: true}, remotecommand.StreamOptions{Stdout: &strings.Builder{}})
	}
	// After the WebSocket upgrade's real answer (404) podexec falls back
	// to SPDY, which is throttled too: 3 POSTs as well.
	t.Run("websocket", func(t *testing.T) {
		err := exec(t)
		if err == nil || !strings.Contains(err.Error(), `pods "p" not found`) {
			t.Errorf("exec: %v, want the server's answer after the 429s (404 here)", err)
		}
		if n := s.count("GET /api/v1/namespaces/default/pods/p/exec"); n != throttle+1 {
			t.Errorf("%d WebSocket upgrades, want %d", n, throttle+1)
		}
	})
	t.Run("spdy", func(t *testing.T) {
		s.mu.Lock()
		s.rejectWebSocket = true
		s.seen = map[string]int{}
		s.mu.Unlock()
		err := exec(t)
		if err == nil || !strings.Contains(err.Error(), `pods "p" not found`) {
			t.Errorf("exec: %v, want the server's answer after the 429s", err)
		}
		if n := s.count("POST /api/v1/namespaces/default/pods/p/exec"); n != throttle+1 {
			t.Errorf("%d SPDY upgrades, want %d", n, throttle+1)
		}
	})
}

// TestUpgradeRetriesWaitsRetryAfter: the pause between attempts is the
// server's Retry-After; a cancelled context ends the wait.
func TestUpgradeRetriesWaitsRetryAfter(t *testing.T) {
	s := newThrottlingServer(t, 1, "1")
	cfg, cs := throttledConfig(t, s)
	key := "GET /api/v1/namespaces/default/pods/p/exec"
	err := podexec.NewStreamer(cfg, cs.CoreV1().RESTClient()).Exec(t.Context(), "default", "p",
		&corev1.PodExecOptions{Container: "c", Command: []string{"true"}, Stdout: true}, remotecommand.StreamOptions{Stdout: &strings.Builder{}})
	if err == nil || !strings.Contains(err.Error(), `pods "p" not found`) {
		t.Fatalf("exec: %v, want 404 after one 429", err)
	}
	s.mu.Lock()
	ts := s.times[key]
	s.mu.Unlock()
	if len(ts) != 2 {
		t.Fatalf("%d attempts, want 2", len(ts))
	}
	if d := ts[1].Sub(ts[0]); d < 900*time.Millisecond || d > 5*time.Second {
		t.Errorf("retried after %s, want the Retry-After of 1s", d)
	}

	// Throttled for ever, Retry-After 30 s: cancelling returns at once.
	s2 := newThrottlingServer(t, 1000, "30")
	cfg2, cs2 := throttledConfig(t, s2)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = podexec.NewStreamer(cfg2, cs2.CoreV1().RESTClient()).Exec(ctx, "default", "p",
		&corev1.PodExecOptions{Container: "c", Command: []string{"true"}, Stdout: true}, remotecommand.StreamOptions{Stdout: &strings.Builder{}})
	if err == nil || !errors.Is(err, context.DeadlineExceeded) && !strings.Contains(err.Error(), "context deadline exceeded") {
		t.Errorf("exec: %v, want the context's end", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("returned after %s, want soon after the context ended", d)
	}
}
