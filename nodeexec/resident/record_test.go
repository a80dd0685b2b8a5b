package resident

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/nodeexec/nodeexec/internal/agentcmd"
	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/agent"
	"github.com/nodeexec/nodeexec/nodeexec/podexec"
)

// recordedAgent is an agent stand-in that, like a TransportRecorded agent,
// consumes each command's run record (agent.ConsumeRecord, with client, for
// node-1), then prints "hi" and ends as a spooled command does.
func recordedAgent(t *testing.T, client *fake.Clientset, consume func(context.Context, agent.WireRequest) error) *agentcmd.Server {
	t.Helper()
	fakeAgent := spooledAgent(t, t.TempDir(), "", 0)
	if consume == nil {
		consume = func(ctx context.Context, req agent.WireRequest) error {
			return agent.ConsumeRecord(ctx, client, DefaultNamespace, req.Record, "node-1", req, time.Now())
		}
	}
	return &agentcmd.Server{Exe: fakeAgent, Records: consume}
}

// TestWrapRecorded: with an agent that requires run records, the run
// creates the node's record (its command line, node and run ID, the
// client's identity), the agent consumes it and runs the command, and no
// record is left; a refused record fails the run with ErrRecordRefused and
// neither exec nor a pod is tried, and the unused record is deleted.
func TestWrapRecorded(t *testing.T) {
	pod := agentPod("a-1", "node-1", true)
	pod.Annotations = map[string]string{agent.AnnotationServe: "7710", agent.AnnotationRecord: agent.RecordRequired}
	run := func(t *testing.T, consume func(context.Context, agent.WireRequest) error) (*fake.Clientset, *fakeStreamer, *fakeInner, string, error) {
		client := fake.NewClientset(agentDS(), pod.DeepCopy())
		stampCreation(client)
		exec, inner := &fakeStreamer{}, &fakeInner{name: "nsenter"}
		b, err := Wrap(inner, WrapOptions{Client: client, Streamer: exec, Dialer: &fakeDialer{server: recordedAgent(t, client, consume)},
			Commander: fixedCommander{node: "node-1"}, SpoolName: func() string { return "s1" }, RunID: "run1", Holder: "laptop/42"})
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		_, err = b.Run(t.Context(), nodeexec.Request{Command: []string{"id"}, Stdout: &out, Timeout: 10 * time.Second})
		return client, exec, inner, out.String(), err
	}

	t.Run("consumed", func(t *testing.T) {
		var seen agent.WireRequest
		_, exec, inner, out, err := run(t, func(ctx context.Context, req agent.WireRequest) error {
			seen = req
			return nil
		})
		if err != nil || out != "hi\n" || exec.got != nil || inner.ran {
			t.Fatalf("err %v, out %q, exec %+v, inner ran %v", err, out, exec.got, inner.ran)
		}
		if seen.Record != agent.RecordNamePrefix+"s1" {
			t.Errorf("the request named record %q, want %q", seen.Record, agent.RecordNamePrefix+"s1")
		}
	})

	t.Run("checked by the agent", func(t *testing.T) {
		client, exec, inner, out, err := run(t, nil)
		if err != nil || out != "hi\n" || exec.got != nil || inner.ran {
			t.Fatalf("err %v, out %q, exec %+v, inner ran %v", err, out, exec.got, inner.ran)
		}
		var creates, deletes int
		for _, a := range client.Actions() {
			if a.GetResource().Resource != "leases" {
				continue
			}
			switch a.GetVerb() {
			case "create":
				creates++
			case "delete":
				deletes++
			}
		}
		left, _ := client.CoordinationV1().Leases(DefaultNamespace).List(t.Context(), metav1.ListOptions{})
		if creates != 1 || deletes != 1 || len(left.Items) != 0 {
			t.Errorf("%d record creates, %d deletes (want 1 and 1, the agent's), %d left", creates, deletes, len(left.Items))
		}
	})

	t.Run("refused", func(t *testing.T) {
		client, exec, inner, out, err := run(t, func(context.Context, agent.WireRequest) error {
			return errors.New("run record x is for node \"node-2\"")
		})
		if !errors.Is(err, ErrRecordRefused) || !errors.Is(err, podexec.ErrNotStarted) || !strings.Contains(err.Error(), `for node "node-2"`) {
			t.Errorf("err %v: want ErrRecordRefused with the agent's reason", err)
		}
		if out != "" || exec.got != nil || inner.ran {
			t.Errorf("out %q, exec %+v, inner ran %v: want nothing run, no fallback", out, exec.got, inner.ran)
		}
		left, _ := client.CoordinationV1().Leases(DefaultNamespace).List(t.Context(), metav1.ListOptions{})
		if len(left.Items) != 0 {
			t.Errorf("%d records left after a refusal: want the unused one deleted", len(left.Items))
		}
	})
}

// stampCreation has client's creates of Leases set creationTimestamp, as
// the API server does.
func stampCreation(client *fake.Clientset) {
	client.PrependReactor("create", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		l := a.(k8stesting.CreateAction).GetObject().(*coordinationv1.Lease)
		l.CreationTimestamp = metav1.Now()
		return false, nil, nil
	})
}
