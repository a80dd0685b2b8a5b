//go:build e2e

package e2e

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeexec/nodeexec/nodeexec/agent"
	"github.com/nodeexec/nodeexec/nodeexec/resident"
	"github.com/nodeexec/nodeexec/nsenter"
)

// TestResidentRecorded: agents installed with --transport recorded start a
// port-forwarded command only with its run record:
//   - a user who may create leases in the agents' namespace runs over the
//     port-forward (exit status and output kept), and no record is left;
//   - a user who may not, but may exec, runs over exec (whose audit event
//     holds the command line);
//   - a shell (TTY, TERM) through the recorded agent;
//   - a client killed mid-run: the command runs to its end, no process of
//     it is left, no record, and the audit log keeps the record's create
//     (who ran what, where);
//   - by hand, speaking the agent's protocol through a port-forward: a
//     request naming no record, a record for another node, for another
//     command line, or one used already is refused, saying which, and
//     nothing runs; the matching record runs the command once.
func TestResidentRecorded(t *testing.T) {
	ctx := t.Context()
	ns := "nodeexec-e2e-rec-" + randomSuffix()
	node := env.nodes[0]
	t.Cleanup(func() { _, _, _ = cli(context.WithoutCancel(ctx), "", "agent", "uninstall", "--namespace", ns) })
	if _, stderr, code := cli(ctx, "", "agent", "install", "--namespace", ns, "--transport", "recorded", "--agent-image", agentImage(), "--timeout", "2m"); code != 0 {
		t.Fatalf("agent install --transport recorded: exit %d\n%s", code, stderr)
	}
	a, ok, err := resident.FindAgent(ctx, env.client, ns, node)
	if err != nil || !ok || !a.RequiresRecord || a.ServePort != agent.ServePort {
		t.Fatalf("agent on %s: %+v %v %v", node, a, ok, err)
	}
	host, _ := os.Hostname()
	run := func(args ...string) []string {
		return append([]string{"-v", "1", "run", "--node", node, "--use-resident", "--resident-namespace", ns, "--no-prefix"}, args...)
	}
	find := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list"}},
		{APIGroups: []string{"apps"}, Resources: []string{"daemonsets"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"pods/portforward"}, Verbs: []string{"create", "get"}},
	}
	recordsLeft := func(t *testing.T) {
		t.Helper()
		left, err := env.client.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=" + agent.ComponentRunRecord})
		if err != nil || len(left.Items) != 0 {
			t.Errorf("run records left: %v %v", left, err)
		}
	}

	t.Run("recorded", func(t *testing.T) {
		kc := residentUser(ctx, t, ns, append(find, rbacv1.PolicyRule{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"create", "delete"}}))
		stdout, stderr, code := cliAs(ctx, kc, "", run("--", "sh", "-c", "cat /etc/hostname; echo to-stderr >&2; exit 5")...)
		if code != 5 || stdout != host+"\n" || !strings.Contains(stderr, "to-stderr") {
			t.Errorf("exit %d (want 5), stdout %q\nstderr: %s", code, stdout, stderr)
		}
		if !strings.Contains(stderr, `"servePort"=7710`) || strings.Contains(stderr, "using exec") || strings.Contains(stderr, "created pod") {
			t.Errorf("not the port-forward path:\n%s", stderr)
		}
		recordsLeft(t)
	})

	t.Run("no lease rights: exec", func(t *testing.T) {
		kc := residentUser(ctx, t, ns, append(find, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods/exec"}, Verbs: []string{"create", "get"}}))
		stdout, stderr, code := cliAs(ctx, kc, "", run("--", "sh", "-c", "cat /etc/hostname; exit 6")...)
		if code != 6 || stdout != host+"\n" || !strings.Contains(stderr, "using exec") || !strings.Contains(stderr, "creating run record") {
			t.Errorf("exit %d (want 6), stdout %q, want the exec fallback after the forbidden record\nstderr: %s", code, stdout, stderr)
		}
		recordsLeft(t)
	})

	t.Run("shell", func(t *testing.T) {
		// A terminal session: its record, its TERM, its exit status.
		s, logFile := startResidentShell(t, node, ns)
		endResidentShell(t, s, logFile)
		recordsLeft(t)
	})

	t.Run("client killed", func(t *testing.T) {
		// Killed mid-run: the command runs to its end in the agent, no
		// process of it is left, its record was consumed, and the audit
		// log still says who ran what, where (the record's create).
		var offset int64
		if env.cluster != nil {
			st, err := os.Stat(env.cluster.AuditLog())
			if err != nil {
				t.Fatal(err)
			}
			offset = st.Size()
		}
		token := killClientMidRun(ctx, t, "reckill", run)
		recordsLeft(t)
		if env.cluster == nil {
			return
		}
		found := false
		for _, e := range auditEventsOf(t, offset, "") {
			if e.Verb == "create" && e.ObjectRef.Resource == "leases" && e.ObjectRef.Namespace == ns && strings.Contains(string(e.RequestObject), token) &&
				strings.Contains(string(e.RequestObject), `"nodeexec.io/node":"`+node+`"`) {
				found = true
			}
		}
		if !found {
			t.Errorf("no audit event of the killed run's record (a lease create in %s naming node %s and holding %s)", ns, node, token)
		}
	})

	t.Run("refused by hand", func(t *testing.T) {
		token := "recorded" + randomSuffix()
		marker := "/tmp/" + token
		t.Cleanup(func() { os.Remove(marker) })
		argv := agent.NsenterArgv(nsenter.DefaultNamespaces(), []string{"sh", "-c", "echo " + token + " >> " + marker})
		other := agent.NsenterArgv(nsenter.DefaultNamespaces(), []string{"sh", "-c", "echo other"})
		record := func(node string, argv []string) string {
			name := agent.RecordNamePrefix + randomSuffix()
			s := agent.RecordSpec{Name: name, Namespace: ns, Node: node, Command: argv, RunID: "e2e", Holder: "e2e"}
			if err := agent.CreateRecord(ctx, env.client, s, time.Now()); err != nil {
				t.Fatal(err)
			}
			return name
		}
		good := record(node, argv)
		for _, tc := range []struct {
			name, record, want string
		}{
			{"none named", "", "names no run record"},
			{"never created", agent.RecordNamePrefix + "nosuch", "not found"},
			{"another node", record("some-other-node", argv), `is for node "some-other-node"`},
			{"another command line", record(node, other), "holds another command line"},
			{"the matching record", good, ""},
			{"used already", good, "not found (never created, or used already)"},
		} {
			_, _, code, refused := agentRequest(ctx, t, ns, a.Pod, agent.WireRequest{Version: agent.WireVersion, Command: argv, Record: tc.record})
			if tc.want == "" {
				if code != 0 || refused != "" {
					t.Errorf("%s: exit %d, refused %q: want the command run", tc.name, code, refused)
				}
				continue
			}
			if !strings.HasPrefix(refused, agent.RecordRefusedPrefix) || !strings.Contains(refused, tc.want) {
				t.Errorf("%s: exit %d, refused %q: want %q", tc.name, code, refused, tc.want)
			}
		}
		b, _ := os.ReadFile(marker)
		if n := strings.Count(string(b), token); n != 1 {
			t.Errorf("the command ran %d times, want once (the matching record's):\n%s", n, b)
		}
	})
}
