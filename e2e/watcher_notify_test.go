//go:build e2e

package e2e

import (
	"context"
	"crypto/hmac"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeexec/nodeexec/nodeexec/watcher"
	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// hookReceiver is the webhook receiver the e2e test serves on loopback
// (the watcher runs in this process): it keeps each payload whose
// signature is valid under key, and counts the others.
type hookReceiver struct {
	key    []byte
	mu     sync.Mutex
	got    map[string][]watcher.NotificationPayload // by path
	forged int
	url    string
}

func newHookReceiver(t *testing.T, key string) *hookReceiver {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &hookReceiver{key: []byte(key), got: map[string][]watcher.NotificationPayload{}, url: "http://" + l.Addr().String()}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		defer r.mu.Unlock()
		sig := req.Header.Get(v1alpha1.HeaderSignature)
		var p watcher.NotificationPayload
		if req.Method != http.MethodPost || req.Header.Get("Content-Type") != "application/json" || json.Unmarshal(body, &p) != nil ||
			(sig != "" && !hmac.Equal([]byte(sig), []byte(watcher.Sign(r.key, body)))) {
			r.forged++
			http.Error(w, "bad request or signature", http.StatusUnauthorized)
			return
		}
		if sig == "" {
			p.Message = "UNSIGNED " + p.Message
		}
		r.got[req.URL.Path] = append(r.got[req.URL.Path], p)
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return r
}

// events are the events received on path, each "Event[/node]".
func (r *hookReceiver) events(path string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, p := range r.got[path] {
		out = append(out, strings.TrimSuffix(p.Event+"/"+p.Node, "/"))
	}
	return out
}

// notificationsTotal is nodeexec_watcher_notifications_total{nodescript,
// event, result} in reg.
func notificationsTotal(t *testing.T, reg prometheus.Gatherer, name, event, result string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "nodeexec_watcher_notifications_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			ls := map[string]string{}
			for _, l := range m.GetLabel() {
				ls[l.GetName()] = l.GetValue()
			}
			if ls["nodescript"] == name && ls["event"] == event && ls["result"] == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// TestWatcherNotify: a NodeScript whose script fails on one of the two
// nodes (no error budget) sends its receiver Started, NodeFailed (that
// node) and Halted, signed with the Secret's key; a second NodeScript, one
// of whose two receivers is down, completes on both nodes as it would
// without notify, its live receiver gets Started and Completed, and the
// dead one's failures are NotificationFailed Events and the metric.
func TestWatcherNotify(t *testing.T) {
	ctx := context.Background()
	dyn := watcherSetup(t)
	t0 := time.Now()
	failing, ok := uniqueName("e2e-notify-halt-"), uniqueName("e2e-notify-ok-")
	cleanupNodeScript(t, dyn, failing)
	cleanupNodeScript(t, dyn, ok)
	key := "e2e-hmac-" + failing
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: failing, Namespace: v1alpha1.DefaultNamespace}, Data: map[string][]byte{"hmac": []byte(key)}}
	if _, err := env.client.CoreV1().Secrets(v1alpha1.DefaultNamespace).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.client.CoreV1().Secrets(v1alpha1.DefaultNamespace).Delete(context.Background(), secret.Name, metav1.DeleteOptions{})
	})
	rec := newHookReceiver(t, key)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + l.Addr().String() + "/down"
	_ = l.Close() // nothing listens there: connection refused

	reg := prometheus.NewRegistry()
	startWatcherWith(t, watcher.Options{Client: env.client, Dynamic: dyn, Resync: 2 * time.Second, Metrics: reg,
		NotifyAttempts: 2, NotifyBackoff: 500 * time.Millisecond})
	bad := env.nodes[1]
	applyNodeScript(ctx, t, dyn, fmt.Sprintf(`
apiVersion: nodeexec.io/v1alpha1
kind: NodeScript
metadata: {name: %s}
spec:
  %s
  script: '[ "$%s" != %q ]'
  rollout: {canary: 0, maxConcurrency: 2, maxFailures: 0}
  notify:
  - webhook: {url: %q, secretRef: {name: %s, key: hmac}}
`, failing, realNodes, v1alpha1.EnvNode, bad, rec.url+"/halt", secret.Name))
	applyNodeScript(ctx, t, dyn, fmt.Sprintf(`
apiVersion: nodeexec.io/v1alpha1
kind: NodeScript
metadata: {name: %s}
spec:
  %s
  script: 'true'
  rollout: {canary: 0, maxConcurrency: 2}
  notify:
  - webhook: {url: %q}
  - webhook: {url: %q, secretRef: {name: %s, key: hmac}, events: [Started, Completed]}
`, ok, realNodes, down, rec.url+"/ok", secret.Name))

	halted := waitNodeScript(ctx, t, dyn, failing, 60*time.Second, "halted by the failure", func(ns *v1alpha1.NodeScript) bool {
		return ns.Status.Stage == v1alpha1.StageHalted
	})
	done := waitNodeScript(ctx, t, dyn, ok, 60*time.Second, "complete on both nodes", func(ns *v1alpha1.NodeScript) bool {
		return ns.Status.Stage == v1alpha1.StageComplete
	})
	if done.Status.Succeeded != 2 || done.Status.Failed != 0 {
		t.Errorf("%s with a receiver down: status %+v, want 2 succeeded as without notify", ok, done.Status)
	}
	for _, n := range env.nodes[:2] {
		if s, _ := nodeState(ctx, t, n, ok); s.Phase != v1alpha1.PhaseSucceeded {
			t.Errorf("%s on %s: state %+v, want Succeeded", ok, n, s)
		}
	}
	if halted.Status.Failed != 1 {
		t.Errorf("%s: status %+v, want 1 failed", failing, halted.Status)
	}
	want := map[string][]string{
		"/halt": {v1alpha1.NotifyStarted + "/" + env.nodes[0], v1alpha1.NotifyNodeFailed + "/" + bad, v1alpha1.NotifyHalted},
		"/ok":   {v1alpha1.NotifyStarted + "/" + env.nodes[0], v1alpha1.NotifyCompleted},
	}
	if !waitFor(20*time.Second, func() bool {
		return len(rec.events("/halt")) >= 3 && len(rec.events("/ok")) >= 2
	}) {
		t.Errorf("received %v, want %v", rec.got, want)
	}
	for path, w := range want {
		got := rec.events(path)
		// The first node started may be either: Started names one of them.
		if len(got) > 0 && strings.HasPrefix(got[0], v1alpha1.NotifyStarted+"/") && slices.Contains(env.nodes[:2], strings.TrimPrefix(got[0], v1alpha1.NotifyStarted+"/")) {
			got[0] = w[0]
		}
		if !slices.Equal(got, w) {
			t.Errorf("%s received %v, want %v", path, got, w)
		}
	}
	rec.mu.Lock()
	for _, p := range append(rec.got["/halt"], rec.got["/ok"]...) {
		if p.APIVersion != v1alpha1.NotificationAPIVersion || p.Kind != v1alpha1.NotificationKind || strings.HasPrefix(p.Message, "UNSIGNED") || p.SpecHash == "" {
			t.Errorf("payload %+v: want signed, %s %s", p, v1alpha1.NotificationAPIVersion, v1alpha1.NotificationKind)
		}
		if p.Event == v1alpha1.NotifyHalted && (p.Stage != v1alpha1.StageHalted || p.Counts.Failed != 1 || p.Message == "") {
			t.Errorf("Halted payload %+v", p)
		}
	}
	if rec.forged != 0 {
		t.Errorf("%d requests with a bad signature or body", rec.forged)
	}
	rec.mu.Unlock()

	// The dead receiver: NotificationFailed, the metric, status and nodeexec status.
	waitEvent(ctx, t, "NodeScript", ok, v1alpha1.ReasonNotificationFailed)
	if !waitFor(20*time.Second, func() bool {
		return notificationsTotal(t, reg, ok, v1alpha1.NotifyCompleted, "failed") == 1
	}) {
		t.Errorf("nodeexec_watcher_notifications_total{nodescript=%s,event=Completed,result=failed} = %v, want 1", ok,
			notificationsTotal(t, reg, ok, v1alpha1.NotifyCompleted, "failed"))
	}
	if got := notificationsTotal(t, reg, ok, v1alpha1.NotifyCompleted, "delivered"); got != 1 {
		t.Errorf("Completed delivered to the live receiver: metric %v, want 1", got)
	}
	ns := waitNodeScript(ctx, t, dyn, ok, 20*time.Second, "status.notifications shows both targets", func(ns *v1alpha1.NodeScript) bool {
		st := ns.Status.Notifications
		return len(st) == 2 && strings.Contains(st[0].LastError, "giving up") && st[1].LastEvent == v1alpha1.NotifyCompleted
	})
	if st := ns.Status.Notifications; st[0].LastDelivered != nil || !slices.Equal(st[1].Sent, []string{v1alpha1.NotifyStarted, v1alpha1.NotifyCompleted}) {
		t.Errorf("status.notifications %+v", st)
	}
	out, _, _ := cli(ctx, "", "status", ok)
	if !strings.Contains(out, "notify "+down+": sent Started,Completed; failed") {
		t.Errorf("nodeexec status lacks the failing target:\n%s", out)
	}
	t.Logf("TestWatcherNotify took %s", time.Since(t0).Round(time.Millisecond))
}

// TestApplyRejectsBadNotify: nodeexec apply refuses a webhook URL that is
// not absolute http(s), an unknown event and a secretRef without key,
// naming the field, and applies nothing.
func TestApplyRejectsBadNotify(t *testing.T) {
	ctx := context.Background()
	dyn := watcherSetup(t)
	good := "apiVersion: nodeexec.io/v1alpha1\nkind: NodeScript\nmetadata: {name: %s}\nspec:\n  nodeSelector: {}\n  script: 'true'\n"
	cases := []struct{ name, notify, want string }{
		{"relative-url", "  notify: [{webhook: {url: /hook}}]\n", "spec.notify[0].webhook.url"},
		{"ftp-url", "  notify: [{webhook: {url: 'ftp://hooks.example/x'}}]\n", "spec.notify[0].webhook.url"},
		{"unknown-event", "  notify: [{webhook: {url: 'https://hooks.example/x', events: [Started, Finished]}}]\n", "spec.notify[0].webhook.events[1]"},
		{"secretref-no-key", "  notify: [{webhook: {url: 'https://hooks.example/x', secretRef: {name: hooks}}}]\n", "spec.notify[0].webhook.secretRef.key"},
	}
	dir := t.TempDir()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			name := uniqueName("e2e-bad-")
			file := dir + "/" + c.name + ".yaml"
			body := fmt.Sprintf(good, name+"-ok") + "---\n" + fmt.Sprintf(good, name) + c.notify
			if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			out, errOut, code := cli(ctx, "", "apply", "-f", file)
			if code == 0 || !strings.Contains(errOut, c.want) {
				t.Errorf("apply: exit %d, stderr %q; want a failure naming %s", code, errOut, c.want)
			}
			for _, n := range []string{name, name + "-ok"} {
				if _, err := dyn.Resource(v1alpha1.Resource).Get(ctx, n, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
					t.Errorf("nodescript %s exists after a refused apply (stdout %q)", n, out)
					_ = dyn.Resource(v1alpha1.Resource).Delete(ctx, n, metav1.DeleteOptions{})
				}
			}
		})
	}
}
