package watcher

import (
	"bytes"
	"encoding/json"
	"io"
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
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// receiver is an httptest webhook receiver (unit tests only): it keeps
// each request, answering fail's status while fail > 0 (counting down).
type receiver struct {
	mu   sync.Mutex
	got  []*http.Request
	body [][]byte
	fail int
	srv  *httptest.Server
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		defer r.mu.Unlock()
		r.got, r.body = append(r.got, req), append(r.body, b)
		if r.fail > 0 {
			r.fail--
			http.Error(w, "not now", http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// events are the events received, in order.
func (r *receiver) events() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, q := range r.got {
		out = append(out, q.Header.Get(v1alpha1.HeaderEvent))
	}
	return out
}

const hmacKey = "s3cret"

func hmacSecret() *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "hooks", Namespace: v1alpha1.DefaultNamespace}, Data: map[string][]byte{"hmac": []byte(hmacKey)}}
}

// notifyScript is "fix" with one canary, then all nodes at once, and
// spec.notify to url (signed with hmacSecret).
func notifyScript(url string, mutate ...func(*v1alpha1.NodeScriptSpec)) *v1alpha1.NodeScript {
	return script(func(s *v1alpha1.NodeScriptSpec) {
		one, all := int32(1), intstr.FromString("100%")
		s.Rollout.Canary, s.Rollout.MaxConcurrency = &one, &all
		s.Notify = []v1alpha1.Notification{{Webhook: &v1alpha1.WebhookNotification{URL: url, SecretRef: &v1alpha1.NotifySecretRef{Name: "hooks", Key: "hmac"}}}}
		for _, m := range mutate {
			m(s)
		}
	})
}

// withNotifier gives e's controller a notifier, as run does.
func (e *env) withNotifier() *notifier {
	e.c.notify = newNotifier(e.c.w, e.events, e.queue.Add)
	e.t.Cleanup(e.c.notify.queue.ShutDown)
	return e.c.notify
}

// deliver makes one attempt of each delivery queued now.
func (e *env) deliver() {
	e.t.Helper()
	for e.c.notify.queue.Len() > 0 {
		e.c.notify.processNext(e.ctx)
	}
}

// finishRunning ends every running pod of "fix" with code, per node.
func (e *env) finishRunning(codes map[string]int32, nodes ...string) {
	e.t.Helper()
	for _, n := range nodes {
		if s := e.state(n); s.Phase == v1alpha1.PhaseRunning {
			e.setPod(s.Pod, exited(codes[n]))
		}
	}
}

// checkGolden compares body, indented, with testdata/notify/name.json;
// NODEEXEC_UPDATE_GOLDEN=1 writes it.
func checkGolden(t *testing.T, name string, body []byte) {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Indent(&buf, body, "", "  "); err != nil {
		t.Fatalf("%s: not JSON: %v: %s", name, err, body)
	}
	buf.WriteByte('\n')
	path := filepath.Join("testdata", "notify", name+".json")
	if os.Getenv("NODEEXEC_UPDATE_GOLDEN") == "1" {
		_ = os.MkdirAll(filepath.Dir(path), 0o755)
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (NODEEXEC_UPDATE_GOLDEN=1 writes it)", err)
	}
	if diff := cmp.Diff(string(want), buf.String()); diff != "" {
		t.Errorf("%s payload (-golden +got):\n%s", name, diff)
	}
}

// A rollout whose canary fails sends Started, NodeFailed and Halted; one
// that succeeds sends Started and Completed: each payload is its golden
// file, signed with the Secret's key, posted as application/json.
func TestNotifyPayloads(t *testing.T) {
	rec := newReceiver(t)
	for _, tc := range []struct {
		name string
		code int32
		want []string
	}{
		{"halted", 3, []string{v1alpha1.NotifyStarted, v1alpha1.NotifyNodeFailed, v1alpha1.NotifyHalted}},
		{"completed", 0, []string{v1alpha1.NotifyStarted, v1alpha1.NotifyCompleted}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec.mu.Lock()
			rec.got, rec.body = nil, nil
			rec.mu.Unlock()
			ns := notifyScript(rec.srv.URL + "/hook")
			e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1"), testNode("n2"), hmacSecret())
			e.withNotifier()
			for range 4 {
				e.reconcile()
				e.deliver()
				e.clock.Step(time.Minute)
				e.finishRunning(map[string]int32{"n1": tc.code, "n2": tc.code}, "n1", "n2")
			}
			if diff := cmp.Diff(tc.want, rec.events()); diff != "" {
				t.Fatalf("events received (-want +got):\n%s", diff)
			}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			for i, req := range rec.got {
				ev := req.Header.Get(v1alpha1.HeaderEvent)
				if req.Method != http.MethodPost || req.URL.Path != "/hook" || req.Header.Get("Content-Type") != "application/json" {
					t.Errorf("%s: %s %s, Content-Type %q", ev, req.Method, req.URL.Path, req.Header.Get("Content-Type"))
				}
				if got, want := req.Header.Get(v1alpha1.HeaderSignature), Sign([]byte(hmacKey), rec.body[i]); got != want || !strings.HasPrefix(got, "sha256=") {
					t.Errorf("%s: signature %q, want %q", ev, got, want)
				}
				if req.Header.Get(v1alpha1.HeaderDelivery) == "" {
					t.Errorf("%s: no %s header", ev, v1alpha1.HeaderDelivery)
				}
				checkGolden(t, tc.name+"-"+ev, rec.body[i])
			}
			// The status records what was sent and delivered.
			e.reconcile()
			st := e.nodeScript().Status.Notifications
			if len(st) != 1 || st[0].URL != ns.Spec.Notify[0].Webhook.URL || st[0].LastEvent != tc.want[len(tc.want)-1] || st[0].LastDelivered == nil || st[0].LastError != "" {
				t.Errorf("status.notifications: %+v", st)
			}
			if got := testutil.ToFloat64(e.c.w.metrics.notifications.WithLabelValues("fix", v1alpha1.NotifyStarted, "delivered")); got != 1 {
				t.Errorf("delivered Started metric %v, want 1", got)
			}
		})
	}
}

// Sign is GitHub's X-Hub-Signature-256 scheme.
func TestSign(t *testing.T) {
	// HMAC-SHA256("key", "The quick brown fox jumps over the lazy dog"), RFC 4231-style known value.
	got := Sign([]byte("key"), []byte("The quick brown fox jumps over the lazy dog"))
	if want := "sha256=f7bc83f430538424b13298e6aa6fb143ef4d59a14946175997479dbc2d1a3cd8"; got != want {
		t.Errorf("Sign = %s, want %s", got, want)
	}
}

// A failed POST is retried after 1s, 2s, ... on the watcher's clock; the
// status shows the error, then the delivery.
func TestNotifyRetryBackoff(t *testing.T) {
	rec := newReceiver(t)
	rec.fail = 2
	e := newEnv(t, []*v1alpha1.NodeScript{notifyScript(rec.srv.URL)}, testNode("n1"), hmacSecret())
	n := e.withNotifier()
	e.reconcile() // Started
	e.deliver()
	if got := len(rec.events()); got != 1 {
		t.Fatalf("%d attempts, want 1", got)
	}
	e.reconcile()
	if st := e.nodeScript().Status.Notifications; len(st) != 1 || !strings.Contains(st[0].LastError, "attempt 1 of 8") || st[0].LastDelivered != nil {
		t.Errorf("after a failed attempt, status.notifications %+v", st)
	}
	waitQueued := func(want int) {
		t.Helper()
		deadline := time.Now().Add(2 * time.Second)
		for n.queue.Len() != want && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if got := n.queue.Len(); got != want {
			t.Fatalf("%d deliveries queued, want %d", got, want)
		}
	}
	for i, wait := range []time.Duration{time.Second, 2 * time.Second} {
		e.clock.Step(wait - time.Millisecond)
		time.Sleep(20 * time.Millisecond)
		waitQueued(0)
		e.clock.Step(time.Millisecond)
		waitQueued(1)
		e.deliver()
		if got := len(rec.events()); got != i+2 {
			t.Fatalf("%d attempts, want %d", got, i+2)
		}
	}
	e.reconcile()
	if st := e.nodeScript().Status.Notifications; len(st) != 1 || st[0].LastError != "" || st[0].LastEvent != v1alpha1.NotifyStarted || st[0].LastDelivered == nil {
		t.Errorf("after the delivery, status.notifications %+v", st)
	}
}

// A receiver that is down: each delivery gives up after NotifyAttempts,
// with a NotificationFailed Event and the metric; the rollout does exactly
// what it does without spec.notify.
func TestNotifyReceiverDownChangesNothing(t *testing.T) {
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	run := func(ns *v1alpha1.NodeScript) (*env, [][]string, []string) {
		e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1"), testNode("n2"), testNode("n3"), hmacSecret())
		e.withNotifier()
		e.c.w.o.NotifyAttempts = 1
		var calls [][]string
		var states []string
		for range 5 {
			e.reconcile()
			var cs []string
			for _, c := range e.calls[""] {
				if !strings.Contains(c, "secrets") {
					cs = append(cs, c)
				}
			}
			slices.Sort(cs) // creates are made in parallel
			calls = append(calls, cs)
			e.deliver()
			e.clock.Step(time.Minute)
			e.finishRunning(map[string]int32{"n2": 1}, "n1", "n2", "n3")
		}
		for _, n := range []string{"n1", "n2", "n3"} {
			s := e.state(n)
			states = append(states, n+" "+s.Phase)
		}
		return e, calls, states
	}
	budget := func(s *v1alpha1.NodeScriptSpec) {
		two := intstr.FromInt32(2)
		s.Rollout.Canary, s.Rollout.MaxFailures = ptrInt32(0), &two
	}
	plain := notifyScript("http://unused", budget)
	plain.Spec.Notify = nil
	ePlain, callsPlain, statesPlain := run(plain)
	eDown, callsDown, statesDown := run(notifyScript(down.URL, budget))
	if diff := cmp.Diff(callsPlain, callsDown); diff != "" {
		t.Errorf("API calls per reconcile (-without notify +receiver down):\n%s", diff)
	}
	if diff := cmp.Diff(statesPlain, statesDown); diff != "" {
		t.Errorf("node states (-without notify +receiver down):\n%s", diff)
	}
	sp, sd := ePlain.nodeScript().Status, eDown.nodeScript().Status
	if sp.Stage != v1alpha1.StageComplete || sd.Stage != sp.Stage || sd.Failed != sp.Failed || sd.Succeeded != sp.Succeeded {
		t.Errorf("status without notify %+v, receiver down %+v", sp, sd)
	}
	if st := sd.Notifications; len(st) != 1 || !strings.Contains(st[0].LastError, "giving up") {
		t.Errorf("status.notifications %+v", st)
	}
	var failed []string
	for _, ev := range eDown.recorded() {
		if strings.Contains(ev, v1alpha1.ReasonNotificationFailed) {
			failed = append(failed, ev)
		}
	}
	if len(failed) != 3 { // Started, NodeFailed, Completed
		t.Errorf("NotificationFailed Events: %q, want 3", failed)
	}
	for _, ev := range []string{v1alpha1.NotifyStarted, v1alpha1.NotifyNodeFailed, v1alpha1.NotifyCompleted} {
		if got := testutil.ToFloat64(eDown.c.w.metrics.notifications.WithLabelValues("fix", ev, "failed")); got != 1 {
			t.Errorf("metric %s failed = %v, want 1", ev, got)
		}
	}
}

func ptrInt32(v int32) *int32 { return &v }

// Started, Halted and Completed are sent once per spec hash, also by a
// watcher started again (a new notifier) that reads the status; a new spec
// hash starts again.
func TestNotifyOncePerHashAcrossRestart(t *testing.T) {
	rec := newReceiver(t)
	ns := notifyScript(rec.srv.URL, func(s *v1alpha1.NodeScriptSpec) {
		s.Notify[0].Webhook.Events = []string{v1alpha1.NotifyStarted, v1alpha1.NotifyCompleted}
	})
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1"), hmacSecret())
	e.withNotifier()
	e.reconcile()
	e.deliver()
	e.withNotifier() // a restart: nothing in memory
	e.reconcile()
	e.deliver()
	if diff := cmp.Diff([]string{v1alpha1.NotifyStarted}, rec.events()); diff != "" {
		t.Errorf("after a restart (-want +got):\n%s", diff)
	}
	if st := e.nodeScript().Status.Notifications; len(st) != 1 || !slices.Equal(st[0].Sent, []string{v1alpha1.NotifyStarted}) {
		t.Errorf("status.notifications %+v", st)
	}
	e.clock.Step(time.Minute)
	e.finishRunning(nil, "n1")
	e.reconcile()
	e.deliver()
	e.withNotifier()
	e.reconcile()
	e.reconcile()
	e.deliver()
	if diff := cmp.Diff([]string{v1alpha1.NotifyStarted, v1alpha1.NotifyCompleted}, rec.events()); diff != "" {
		t.Errorf("complete (-want +got):\n%s", diff)
	}
	e.setSpec(func(s *v1alpha1.NodeScriptSpec) { s.Script = "echo v2" })
	e.reconcile()
	e.deliver()
	if diff := cmp.Diff([]string{v1alpha1.NotifyStarted, v1alpha1.NotifyCompleted, v1alpha1.NotifyStarted}, rec.events()); diff != "" {
		t.Errorf("a new spec hash (-want +got):\n%s", diff)
	}
}

// A redirect to another host is not followed (the signed body stays where
// spec.notify says); one to the same host is.
func TestNotifyRedirects(t *testing.T) {
	other := newReceiver(t)
	same := newReceiver(t)
	var redirector *httptest.Server
	redirector = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/away":
			http.Redirect(w, r, other.srv.URL+"/x", http.StatusTemporaryRedirect)
		case "/here":
			http.Redirect(w, r, "/final", http.StatusTemporaryRedirect)
		case "/final":
			w.WriteHeader(http.StatusNoContent)
		}
	}))
	t.Cleanup(redirector.Close)
	_ = same
	e := newEnv(t, []*v1alpha1.NodeScript{notifyScript(redirector.URL + "/away")}, testNode("n1"), hmacSecret())
	n := e.withNotifier()
	e.c.w.o.NotifyAttempts = 1
	e.reconcile()
	e.deliver()
	if got := other.events(); len(got) != 0 {
		t.Errorf("the other host received %v", got)
	}
	e.reconcile()
	if st := e.nodeScript().Status.Notifications; len(st) != 1 || !strings.Contains(st[0].LastError, "not followed") {
		t.Errorf("status.notifications %+v", st)
	}
	d := &delivery{ref: e.nodeScript(), url: redirector.URL + "/here", event: "Started", body: []byte("{}")}
	if err := n.send(e.ctx, d); err != nil {
		t.Errorf("same-host redirect: %v", err)
	}
}

// A Secret without the key fails the delivery, naming it.
func TestNotifySecretMissingKey(t *testing.T) {
	rec := newReceiver(t)
	s := hmacSecret()
	s.Data = map[string][]byte{"other": []byte("x")}
	e := newEnv(t, []*v1alpha1.NodeScript{notifyScript(rec.srv.URL)}, testNode("n1"), s)
	e.withNotifier()
	e.c.w.o.NotifyAttempts = 1
	e.reconcile()
	e.deliver()
	if got := rec.events(); len(got) != 0 {
		t.Errorf("sent unsigned: %v", got)
	}
	e.reconcile()
	if st := e.nodeScript().Status.Notifications; len(st) != 1 || !strings.Contains(st[0].LastError, `has no key "hmac"`) {
		t.Errorf("status.notifications %+v", st)
	}
}

// An infrastructure failure with retries left is not NodeFailed; the one
// past spec.retry.limit is.
func TestNotifyInfrastructurePastRetries(t *testing.T) {
	rec := newReceiver(t)
	ns := notifyScript(rec.srv.URL, func(s *v1alpha1.NodeScriptSpec) {
		one := int32(1)
		s.Retry.Limit = &one
		s.Notify[0].Webhook.Events = []string{v1alpha1.NotifyNodeFailed}
	})
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1"), hmacSecret())
	e.withNotifier()
	e.reconcile()
	for attempt := 1; attempt <= 2; attempt++ {
		e.setPod(podName(ns, "n1", v1alpha1.ActionRun, attempt), waiting("ErrImagePull"))
		e.reconcile()
		e.deliver()
		want := 0
		if attempt == 2 {
			want = 1
		}
		if got := len(rec.events()); got != want {
			t.Fatalf("attempt %d: %d NodeFailed sent, want %d", attempt, got, want)
		}
		e.clock.Step(time.Hour)
		e.reconcile()
	}
}

// A reconcile that reads a status older than the last write (the informer
// lags) keeps what was sent: the watcher remembers its last write.
func TestNotifySentSurvivesStaleCache(t *testing.T) {
	rec := newReceiver(t)
	e := newEnv(t, []*v1alpha1.NodeScript{notifyScript(rec.srv.URL)}, testNode("n1"), hmacSecret())
	e.withNotifier()
	e.sync()
	stale, _, _ := e.scriptCache.GetByKey("fix")
	e.reconcile()
	e.deliver()
	e.sync()
	if err := e.scriptCache.Update(stale); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.reconcile(e.ctx, "fix"); err != nil {
		t.Fatal(err)
	}
	if st := e.nodeScript().Status.Notifications; len(st) != 1 || !slices.Equal(st[0].Sent, []string{v1alpha1.NotifyStarted}) {
		t.Errorf("after a stale read, status.notifications %+v", st)
	}
	e.reconcile()
	e.deliver()
	if diff := cmp.Diff([]string{v1alpha1.NotifyStarted}, rec.events()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// A NodeScript gone from the API leaves nothing behind in the notifier
// (outcomes, Sent lists) nor in nodeexec_watcher_notifications_total.
func TestNotifyForgetsDeletedNodeScript(t *testing.T) {
	rec := newReceiver(t)
	e := newEnv(t, []*v1alpha1.NodeScript{notifyScript(rec.srv.URL)}, testNode("n1"), hmacSecret())
	n := e.withNotifier()
	e.sync()
	e.reconcile()
	e.deliver()
	n.mu.Lock()
	before := len(n.sent) + len(n.outcomes)
	n.mu.Unlock()
	if before == 0 || testutil.CollectAndCount(e.c.w.metrics.notifications) == 0 {
		t.Fatalf("nothing recorded after a delivery (sent+outcomes %d): the test proves nothing", before)
	}
	obj, _, _ := e.scriptCache.GetByKey("fix")
	if err := e.scriptCache.Delete(obj); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.reconcile(e.ctx, "fix"); err != nil {
		t.Fatal(err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.sent)+len(n.outcomes)+len(n.failed) != 0 {
		t.Errorf("after deletion the notifier keeps sent %v outcomes %v failed %v", n.sent, n.outcomes, n.failed)
	}
	if c := testutil.CollectAndCount(e.c.w.metrics.notifications); c != 0 {
		t.Errorf("after deletion nodeexec_watcher_notifications_total has %d series", c)
	}
}
