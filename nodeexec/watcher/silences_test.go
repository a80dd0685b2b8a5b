package watcher

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/internal/nodescript"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/internal/golden"
	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// fakeAM is an Alertmanager stand-in (unit tests only): it keeps the
// silences posted, expires them on DELETE, and fails every call (500) while
// down is set. cordoned, when set, is asked at each POST whether the node
// is cordoned already.
type fakeAM struct {
	*httptest.Server
	mu       sync.Mutex
	down     bool
	posted   []postableSilence
	active   map[string]bool
	deleted  []string
	cordoned func() bool
	atPost   []bool
}

func newFakeAM(t *testing.T) *fakeAM {
	am := &fakeAM{active: map[string]bool{}}
	am.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		am.mu.Lock()
		defer am.mu.Unlock()
		if am.down {
			http.Error(w, "unavailable", http.StatusInternalServerError)
			return
		}
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/api/v2/silences":
			var p postableSilence
			b, _ := io.ReadAll(r.Body)
			if err := json.Unmarshal(b, &p); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			id := fmt.Sprintf("id-%d", len(am.posted)+1)
			am.posted = append(am.posted, p)
			am.active[id] = true
			if am.cordoned != nil {
				am.atPost = append(am.atPost, am.cordoned())
			}
			_, _ = fmt.Fprintf(w, `{"silenceID":%q}`, id)
		case r.Method == http.MethodDelete && strings.HasPrefix(r.URL.Path, "/api/v2/silence/"):
			id := strings.TrimPrefix(r.URL.Path, "/api/v2/silence/")
			am.deleted = append(am.deleted, id)
			if _, ok := am.active[id]; !ok {
				http.Error(w, "not found", http.StatusNotFound)
				return
			}
			am.active[id] = false
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(am.Close)
	return am
}

func (am *fakeAM) setDown(d bool) { am.mu.Lock(); am.down = d; am.mu.Unlock() }

func (am *fakeAM) snapshot() (posted int, deleted []string, active []string) {
	am.mu.Lock()
	defer am.mu.Unlock()
	for id, a := range am.active {
		if a {
			active = append(active, id)
		}
	}
	return len(am.posted), append([]string(nil), am.deleted...), active
}

// silenced is NodeScript "fix" under spec.maintenance {cordon} with one
// silence on am (nodeLabel node), retried after 10 s.
func silenced(am *fakeAM, mutate ...func(*v1alpha1.NodeScriptSpec)) *v1alpha1.NodeScript {
	return script(func(s *v1alpha1.NodeScriptSpec) {
		s.Maintenance = &v1alpha1.MaintenanceSpec{Cordon: true, PrePull: ptr.To(false), Silences: []v1alpha1.Silence{{
			URL: am.URL, Matchers: []string{`alertname=~"KubeNodeNotReady|KubeNodeUnreachable"`}, NodeLabel: "node",
		}}}
		s.Retry = v1alpha1.RetryPolicy{Limit: ptr.To[int32](3), InitialBackoff: &metav1.Duration{Duration: 10 * time.Second}, MaxBackoff: &metav1.Duration{Duration: 10 * time.Second}}
		for _, m := range mutate {
			m(s)
		}
	})
}

// The silence is created before the cordon, recorded in the node's state
// through the run, and expired once the node is uncordoned after the success.
func TestSilencesHeldThroughMaintenance(t *testing.T) {
	am := newFakeAM(t)
	ns := silenced(am)
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1"))
	am.cordoned = func() bool {
		n, err := e.cs.CoreV1().Nodes().Get(context.Background(), "n1", metav1.GetOptions{})
		return err != nil || n.Spec.Unschedulable
	}
	e.reconcile()
	run := podName(ns, "n1", v1alpha1.ActionRun, 1)
	s := e.state("n1")
	if !e.node("n1").Spec.Unschedulable || s.Pod != run {
		t.Fatalf("not cordoned and running: %+v", s)
	}
	want := []heldSilence{{URL: am.URL, ID: "id-1", EndsAt: t0.Add(defaultSilenceDuration(&ns.Spec))}}
	if diff := cmp.Diff(want, s.Silences); diff != "" {
		t.Errorf("silences held while running (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]bool{false}, am.atPost); diff != "" {
		t.Errorf("cordoned at the silence's creation (-want +got):\n%s", diff)
	}
	e.checkEvents("started", v1alpha1.ReasonSilenceCreated, v1alpha1.ReasonCordoned)
	e.reconcile() // nothing to expire while the run goes
	if _, deleted, _ := am.snapshot(); len(deleted) != 0 {
		t.Fatalf("expired %v during the run", deleted)
	}
	e.setPod(run, exited(0))
	e.reconcile() // recorded; uncordoned; expired
	e.reconcile()
	if e.node("n1").Spec.Unschedulable {
		t.Error("still cordoned after the success")
	}
	if s := e.state("n1"); s.Phase != v1alpha1.PhaseSucceeded || len(s.Silences) != 0 {
		t.Errorf("after the success: %+v", s)
	}
	if posted, deleted, active := am.snapshot(); posted != 1 || !cmp.Equal(deleted, []string{"id-1"}) || len(active) != 0 {
		t.Errorf("posted %d, deleted %v, active %v; want 1, [id-1], none", posted, deleted, active)
	}
	e.checkEvents("done", v1alpha1.ReasonSucceeded, v1alpha1.ReasonUncordoned, v1alpha1.ReasonSilenceExpired, v1alpha1.ReasonComplete)
	e.reconcile()
	if _, deleted, _ := am.snapshot(); len(deleted) != 1 {
		t.Errorf("expired again: %v", deleted)
	}
}

// silencesRequired (the default): an Alertmanager that fails leaves the
// node in service, Failed with reason SilenceFailed, retried after its
// backoff; once it answers, the retry creates the silence and cordons.
func TestSilencesRequired(t *testing.T) {
	am := newFakeAM(t)
	am.setDown(true)
	ns := silenced(am)
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1"))
	e.reconcile()
	s := e.state("n1")
	if e.node("n1").Spec.Unschedulable || len(e.pods()) != 0 {
		t.Fatalf("cordoned or started (%v) without its silence", e.pods())
	}
	if s.Phase != v1alpha1.PhaseFailed || !s.Infrastructure || s.Reason != v1alpha1.ReasonSilenceFailed || s.Attempts != 1 || s.NextRetry == nil ||
		!strings.Contains(s.Message, "spec.maintenance.silences[0]") || !strings.Contains(s.Message, "500") {
		t.Fatalf("state %+v, want an infrastructure failure SilenceFailed naming the silence", s)
	}
	e.checkEvents("failed", v1alpha1.ReasonSilenceFailed)
	// The node's change reconciles again: before the backoff, nothing.
	if after := e.reconcile(); after <= 0 || after > 12*time.Second {
		t.Errorf("requeued after %s, want the backoff (about 10s)", after)
	}
	if posted, _, _ := am.snapshot(); posted != 0 {
		t.Fatal("posted while down")
	}
	am.setDown(false)
	e.clock.Step(12 * time.Second)
	e.reconcile()
	s = e.state("n1")
	if !e.node("n1").Spec.Unschedulable || s.Pod != podName(ns, "n1", v1alpha1.ActionRun, 2) || len(s.Silences) != 1 {
		t.Fatalf("after the Alertmanager is back: %+v", s)
	}
	e.checkEvents("retried", v1alpha1.ReasonSilenceCreated, v1alpha1.ReasonCordoned)
}

// Of two required silences the second fails: the first is expired again
// and the node does not start.
func TestSilencesRequiredPartial(t *testing.T) {
	am := newFakeAM(t)
	down := newFakeAM(t)
	down.setDown(true)
	ns := silenced(am, func(s *v1alpha1.NodeScriptSpec) {
		s.Maintenance.Silences = append(s.Maintenance.Silences, v1alpha1.Silence{URL: down.URL, NodeLabel: "instance"})
	})
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1"))
	e.reconcile()
	if s := e.state("n1"); s.Reason != v1alpha1.ReasonSilenceFailed || !strings.Contains(s.Message, "silences[1]") || len(s.Silences) != 0 || e.node("n1").Spec.Unschedulable {
		t.Fatalf("state %+v", s)
	}
	if posted, deleted, active := am.snapshot(); posted != 1 || !cmp.Equal(deleted, []string{"id-1"}) || len(active) != 0 {
		t.Errorf("posted %d, deleted %v, active %v: want the first silence expired again", posted, deleted, active)
	}
}

// silencesRequired false: an Event, and the node goes on without it.
func TestSilencesNotRequired(t *testing.T) {
	am := newFakeAM(t)
	am.setDown(true)
	ns := silenced(am, func(s *v1alpha1.NodeScriptSpec) { s.Maintenance.SilencesRequired = ptr.To(false) })
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1"))
	e.reconcile()
	if s := e.state("n1"); !e.node("n1").Spec.Unschedulable || s.Pod != podName(ns, "n1", v1alpha1.ActionRun, 1) || len(s.Silences) != 0 {
		t.Fatalf("state %+v, want cordoned and running without a silence", s)
	}
	e.checkEvents("not required", v1alpha1.ReasonSilenceFailed, v1alpha1.ReasonCordoned)
}

// A restarted watcher (a new one, over the API's state alone) expires the
// silences a node's state records once the node is back in service, keeps
// them while it is in maintenance, and forgets one past its endsAt; an
// expiry that fails is kept and tried again.
func TestSilencesExpiredAfterRestart(t *testing.T) {
	am := newFakeAM(t)
	ns := silenced(am)
	hash := v1alpha1.SpecHash(&ns.Spec)
	// Two silences exist in the Alertmanager, made by an earlier watcher.
	for i := 0; i < 3; i++ {
		if _, err := postSilence(context.Background(), am.URL, postableSilence{}); err != nil {
			t.Fatal(err)
		}
	}
	held := []heldSilence{{URL: am.URL, ID: "id-1", EndsAt: t0.Add(time.Hour)}, {URL: am.URL, ID: "id-2", EndsAt: t0.Add(-time.Minute)}}
	done := nodeState{Hash: hash, Phase: v1alpha1.PhaseSucceeded, ExitCode: ptr.To(0), Since: t0, Attempts: 1, Silences: held}
	running := nodeState{Hash: hash, Phase: v1alpha1.PhaseRunning, Maintenance: v1alpha1.MaintenanceRebooting, RebootIssued: true, BootID: "boot-1", Since: t0, Attempts: 1, CordonedByUs: true,
		Silences: []heldSilence{{URL: am.URL, ID: "id-3", EndsAt: t0.Add(time.Hour)}}}
	am.setDown(true)
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1", withState(done)),
		testNode("n2", withState(running), func(n *corev1.Node) { n.Spec.Unschedulable = true }))
	after := e.reconcile()
	if s := e.state("n1"); !cmp.Equal(s.Silences, held[:1]) {
		t.Errorf("Alertmanager down: n1 records %+v, want id-1 kept (id-2 ended)", s.Silences)
	}
	if after <= 0 || after > silenceRecheck {
		t.Errorf("requeued after %s, want at most %s", after, silenceRecheck)
	}
	e.checkEvents("down", v1alpha1.ReasonSilenceFailed)
	am.setDown(false)
	e.clock.Step(silenceRecheck)
	e.reconcile()
	if s := e.state("n1"); len(s.Silences) != 0 {
		t.Errorf("n1 still records %+v", s.Silences)
	}
	if s := e.state("n2"); len(s.Silences) != 1 {
		t.Errorf("n2, rebooting, lost its silence: %+v", s)
	}
	if _, deleted, active := am.snapshot(); !cmp.Equal(deleted, []string{"id-1"}) || !slices.Contains(active, "id-3") {
		t.Errorf("deleted %v (want id-1 only: id-2 ended by itself), active %v (want id-3 among them)", deleted, active)
	}
	e.checkEvents("back", v1alpha1.ReasonSilenceExpired)
}

// The body of POST /api/v2/silences, pinned: Alertmanager's documented JSON
// (matchers with isRegex and isEqual, startsAt, endsAt, createdBy, comment).
func TestSilencePayloadGolden(t *testing.T) {
	ns := script(func(s *v1alpha1.NodeScriptSpec) {
		s.Maintenance = &v1alpha1.MaintenanceSpec{Cordon: true, PrePull: ptr.To(false), Drain: &v1alpha1.DrainSpec{}}
		s.Reboot = v1alpha1.RebootIfRequired
	})
	sp := v1alpha1.Silence{URL: "http://am:9093", Comment: "kernel upgrade",
		Matchers: []string{`alertname=~"KubeNodeNotReady|KubeNodeUnreachable"`, `severity!="info"`, `job!~"kube-.*"`}, NodeLabel: "instance"}
	p, err := silencePayload(ns, sp, "node-1", "0123456789abcdef", 2, t0)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.MarshalIndent(p, "", "  ")
	golden.Check(t, "silence-payload.json", append(b, '\n'))
	// The default: drain 5m + run 10m + reboot 15m + 10m.
	if got := p.EndsAt.Sub(p.StartsAt); got != 40*time.Minute {
		t.Errorf("default duration %s, want 40m", got)
	}
	sp.Duration = &metav1.Duration{Duration: time.Hour}
	if p, _ := silencePayload(ns, sp, "node-1", "0123456789abcdef", 2, t0); p.EndsAt.Sub(p.StartsAt) != time.Hour {
		t.Errorf("duration 1h gave %s", p.EndsAt.Sub(p.StartsAt))
	}
}

// The node's state holds MaxSilences silences on URLs of
// MaxSilenceURLBytes within MaxStateBytes, whatever else it carries.
func TestSilencesStateFits(t *testing.T) {
	s := nodeState{Hash: strings.Repeat("h", 16), Phase: v1alpha1.PhaseFailed, ExitCode: ptr.To(1), Attempts: 99, AttemptsBefore: 98, Infrastructure: true,
		NextRetry: ptr.To(t0), Since: t0, Maintenance: v1alpha1.MaintenanceRebooting, RebootIssued: true, Checked: true, Verified: true, CordonedByUs: true,
		BootID: strings.Repeat("b", 36), Pod: strings.Repeat("p", 63), Reason: strings.Repeat("\"", 200), Message: strings.Repeat("\"", 2000),
		Rollback: v1alpha1.PhaseFailed, RollbackExitCode: ptr.To(1), Cordoned: true, Drain: strings.Repeat("\"", 500)}
	for i := 0; i < v1alpha1.MaxSilences; i++ {
		s.Silences = append(s.Silences, heldSilence{URL: "http://" + strings.Repeat("u", v1alpha1.MaxSilenceURLBytes-7), ID: strings.Repeat("i", 36), EndsAt: t0})
	}
	if n := len(s.Encode()); n > nodescript.MaxStateBytes {
		t.Errorf("encoded state %d bytes, more than %d", n, nodescript.MaxStateBytes)
	}
	back, err := decodeState(map[string]string{stateAnnotation("fix"): s.Encode()}, "fix")
	if err != nil || !cmp.Equal(back.Silences, s.Silences) {
		t.Errorf("silences not kept: %v %+v", err, back.Silences)
	}
}
