package watcher

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/internal/nodescript"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

func TestOutputRecordName(t *testing.T) {
	if got := nodescript.OutputRecordName("fix", "node-1"); got != "fix.node-1" {
		t.Errorf("short: %q", got)
	}
	long := strings.Repeat("a", 63) + "." + strings.Repeat("b", 200)
	got := nodescript.OutputRecordName(strings.Repeat("n", 63), long)
	if msgs := validation.IsDNS1123Subdomain(got); len(msgs) > 0 || !strings.HasPrefix(got, strings.Repeat("n", 63)+".h-") {
		t.Errorf("long: %q: %v", got, msgs)
	}
	if nodescript.OutputRecordName("x", long) == nodescript.OutputRecordName("x", long+"c") {
		t.Error("two long node names share a record name")
	}
}

func TestWriteOutputRecord(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 23, 18, 0, 0, 0, time.UTC)
	ns := &v1alpha1.NodeScript{ObjectMeta: metav1.ObjectMeta{Name: "fix", UID: "u1"}, Spec: v1alpha1.NodeScriptSpec{RecordOutput: true, Backend: v1alpha1.BackendSpec{Namespace: "ops"}}}
	cs := fake.NewSimpleClientset()
	get := func() *corev1.ConfigMap {
		t.Helper()
		cm, err := cs.CoreV1().ConfigMaps("ops").Get(ctx, "fix.n1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return cm
	}
	if err := writeOutputRecord(ctx, cs, ns, "n1", "h1", v1alpha1.ActionRun, "token=abc\n"+strings.Repeat("out\n", 2000), now); err != nil {
		t.Fatal(err)
	}
	cm := get()
	want := &corev1.ConfigMap{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{
			Name: "fix.n1", Namespace: "ops",
			Labels:          map[string]string{"app.kubernetes.io/managed-by": "nodeexec", v1alpha1.LabelNodeScript: "fix"},
			Annotations:     map[string]string{v1alpha1.AnnotationNode: "n1", v1alpha1.AnnotationSpecHash: "h1", v1alpha1.AnnotationRecordedAt: "2026-11-23T18:00:00Z"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "nodeexec.io/v1alpha1", Kind: "NodeScript", Name: "fix", UID: "u1"}},
		},
		Data: map[string]string{v1alpha1.ActionRun: strings.Repeat("out\n", v1alpha1.MaxRecordedOutput/4-1)}, // the end, from a line start
	}
	if diff := cmp.Diff(want, cm); diff != "" {
		t.Errorf("record (-want +got):\n%s", diff)
	}
	// Another action of the same spec hash keeps the first.
	if err := writeOutputRecord(ctx, cs, ns, "n1", "h1", v1alpha1.ActionVerify, "verify says password: x", now); err != nil {
		t.Fatal(err)
	}
	if d := get().Data; len(d) != 2 || d[v1alpha1.ActionVerify] != "verify says password: [REDACTED]" {
		t.Errorf("after verify: %q", d)
	}
	// A new spec hash starts a new record.
	if err := writeOutputRecord(ctx, cs, ns, "n1", "h2", v1alpha1.ActionRun, "second", now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if cm := get(); !cmp.Equal(cm.Data, map[string]string{v1alpha1.ActionRun: "second"}) || cm.Annotations[v1alpha1.AnnotationSpecHash] != "h2" {
		t.Errorf("after a new hash: %v %q", cm.Annotations, cm.Data)
	}
	if got := nodescript.OutputOf([]corev1.ConfigMap{*get()}, "n1"); got[v1alpha1.ActionRun] != "second" {
		t.Errorf("outputOf: %v", got)
	}
}

func TestStateBounded(t *testing.T) {
	huge := strings.Repeat("é", 10<<10)
	s := nodeState{
		Hash: strings.Repeat("h", 16), Phase: v1alpha1.PhaseRolledBack, ExitCode: ptr.To(-2147483648), Attempts: 1 << 30,
		Infrastructure: true, NextRetry: ptr.To(time.Now()), Since: time.Now(), Verified: true, CordonedByUs: true,
		BootID: strings.Repeat("b", 36), Pod: strings.Repeat("p", 253), Reason: huge, Message: huge,
		Rollback: v1alpha1.PhaseSucceeded, RollbackExitCode: ptr.To(-2147483648), Cordoned: true, Drain: huge,
	}
	enc := s.Encode()
	if len(enc) > nodescript.MaxStateBytes {
		t.Errorf("encoded state is %d bytes; want at most %d", len(enc), nodescript.MaxStateBytes)
	}
	back, err := decodeState(map[string]string{stateAnnotation("x"): enc}, "x")
	if err != nil || !strings.Contains(back.Message, "é…é") || len(back.Message) > 768 {
		t.Errorf("decoded: %v %q", err, back.Message)
	}
	// JSON escapes: 6 bytes for each of these.
	s.Message, s.Reason, s.Drain = strings.Repeat("<\x01", 2000), strings.Repeat("&", 500), strings.Repeat(">", 500)
	if enc := s.Encode(); len(enc) > nodescript.MaxStateBytes {
		t.Errorf("escaped: encoded state is %d bytes; want at most %d", len(enc), nodescript.MaxStateBytes)
	}
	// A short message is kept whole; a long one keeps its start and its end.
	msg := pullMessage("registry.example/a:1", strings.Repeat("x", 2000))
	if got := nodescript.Truncate(msg, 768); !strings.HasPrefix(got, `image "registry.example/a:1"`) || !strings.HasSuffix(got, "spec.backend.imagePullSecrets)") || len(got) > 768 {
		t.Errorf("truncated pull message: %q", got)
	}
}
