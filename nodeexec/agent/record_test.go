package agent

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/nodeexec/nodeexec/internal/golden"
)

func TestRecordedCommand(t *testing.T) {
	base := []string{Path, "agent", "nsenter", "--", "id"}
	timed, _ := WithTimeout(base, 30*time.Second)
	spooled, _ := WithSpool(timed, "/run/nodeexec/spool/s1")
	for name, argv := range map[string][]string{"as is": base, "timeout": timed, "spool and timeout": spooled} {
		if d := cmp.Diff(base, recordedCommand(argv)); d != "" {
			t.Errorf("%s: -want +got\n%s", name, d)
		}
	}
	// Only the inserted flags right after the subcommand go: the user's
	// own --timeout stays, and so does the digest's difference.
	user := []string{Path, "agent", "nsenter", "--", "timeout", "--timeout", "5"}
	if d := cmp.Diff(user, recordedCommand(user)); d != "" {
		t.Errorf("user's flags: -want +got\n%s", d)
	}
	if RecordDigest(base, nil) != RecordDigest(spooled, nil) || RecordDigest(base, nil) == RecordDigest(user, nil) ||
		RecordDigest(base, []string{"A"}) == RecordDigest(base, nil) || RecordDigest(base, []string{"A", "B"}) != RecordDigest(base, []string{"B", "A"}) {
		t.Error("RecordDigest: want equal for the same recorded command and env names (any order), different otherwise")
	}
}

func TestBuildRecordGolden(t *testing.T) {
	s := RecordSpec{Name: RecordNamePrefix + "s1", Namespace: "nodeexec-agents", Node: "node-1", Command: []string{Path, "agent", "container-exec", "--env-from-agent", "--", "id"},
		EnvNames: []string{"B", "A"}, RunID: "run1", Holder: "laptop/42"}
	golden.CheckYAML(t, "run-record.yaml", BuildRecord(s, time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)))
}

// recordClient is a fake API holding s's record, created at created (the
// API server's creationTimestamp).
func recordClient(t *testing.T, s RecordSpec, created time.Time) *fake.Clientset {
	t.Helper()
	client := fake.NewClientset()
	client.PrependReactor("create", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		l := a.(k8stesting.CreateAction).GetObject().(*coordinationv1.Lease)
		l.CreationTimestamp = metav1.NewTime(created)
		l.UID = "uid-1"
		return false, nil, nil
	})
	if err := CreateRecord(t.Context(), client, s, created); err != nil {
		t.Fatal(err)
	}
	return client
}

func TestConsumeRecord(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	argv := []string{Path, "agent", "nsenter", "--", "id"}
	spec := RecordSpec{Name: RecordNamePrefix + "s1", Namespace: "ns", Node: "node-1", Command: argv, RunID: "r", Holder: "h"}
	sent, _ := WithSpool(argv, "/run/nodeexec/spool/s1")
	req := WireRequest{Version: WireVersion, Command: sent, Record: spec.Name}

	client := recordClient(t, spec, now.Add(-time.Second))
	if err := ConsumeRecord(t.Context(), client, "ns", spec.Name, "node-1", req, now); err != nil {
		t.Fatalf("a matching record: %v", err)
	}
	if err := ConsumeRecord(t.Context(), client, "ns", spec.Name, "node-1", req, now); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("the same record again: %v, want not found (used)", err)
	}

	other := req
	other.Command = append(append([]string{}, sent[:len(sent)-1]...), "reboot")
	withEnv := req
	withEnv.Env = map[string]string{"LD_PRELOAD": "/x.so"}
	for name, tc := range map[string]struct {
		node    string
		req     WireRequest
		created time.Time
		relabel bool
		want    string
	}{
		"none named":      {node: "node-1", req: WireRequest{Version: WireVersion, Command: sent}, want: "names no run record"},
		"another node":    {node: "node-2", req: req, want: `for node "node-1", not this agent's "node-2"`},
		"another command": {node: "node-1", req: other, want: "holds another command line"},
		"another env":     {node: "node-1", req: withEnv, want: "holds another command line"},
		"stale":           {node: "node-1", req: req, created: now.Add(-DefaultRecordTTL - RecordClockSkew - time.Second), want: "is stale"},
		"not a record":    {node: "node-1", req: req, relabel: true, want: "is not a run record"},
	} {
		t.Run(name, func(t *testing.T) {
			created := tc.created
			if created.IsZero() {
				created = now
			}
			client := recordClient(t, spec, created)
			if tc.relabel {
				l, _ := client.CoordinationV1().Leases("ns").Get(t.Context(), spec.Name, metav1.GetOptions{})
				delete(l.Labels, labelComponent)
				_, _ = client.CoordinationV1().Leases("ns").Update(t.Context(), l, metav1.UpdateOptions{})
			}
			err := ConsumeRecord(t.Context(), client, "ns", tc.req.Record, tc.node, tc.req, now)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
			if tc.req.Record != "" {
				if _, err := client.CoordinationV1().Leases("ns").Get(t.Context(), spec.Name, metav1.GetOptions{}); err != nil {
					t.Errorf("a refused record was deleted: %v", err)
				}
			}
		})
	}
}

func TestCollectRecords(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	client := fake.NewClientset()
	for name, created := range map[string]time.Time{"old": now.Add(-5 * time.Minute), "fresh": now} {
		s := RecordSpec{Name: RecordNamePrefix + name, Namespace: "ns", Node: "n", Command: []string{Path, "agent", "nsenter", "--", "id"}}
		if err := CreateRecord(t.Context(), client, s, created); err != nil {
			t.Fatal(err)
		}
	}
	got, err := CollectRecords(t.Context(), client, "", now)
	if err != nil || len(got) != 1 || got[0] != "ns/"+RecordNamePrefix+"old" {
		t.Errorf("collected %v, %v: want the old record only", got, err)
	}
}
