//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// auditEvent is what TestAuditTrail reads of an audit.k8s.io/v1 Event.
type auditEvent struct {
	Verb       string `json:"verb"`
	RequestURI string `json:"requestURI"`
	User       struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
	} `json:"objectRef"`
	RequestObject json.RawMessage `json:"requestObject"`
}

// resource is objectRef's resource/subresource.
func (e auditEvent) resource() string {
	if e.ObjectRef.Subresource != "" {
		return e.ObjectRef.Resource + "/" + e.ObjectRef.Subresource
	}
	return e.ObjectRef.Resource
}

// auditEventsOf returns the events of user in the API server's audit log
// after offset bytes; every user's for "".
func auditEventsOf(t *testing.T, offset int64, user string) []auditEvent {
	t.Helper()
	f, err := os.Open(env.cluster.AuditLog())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Seek(offset, 0); err != nil {
		t.Fatal(err)
	}
	var events []auditEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		if user != "" && !strings.Contains(sc.Text(), `"username":"`+user+`"`) {
			continue
		}
		var e auditEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("audit log line: %v", err)
		}
		if user == "" || e.User.Username == user {
			events = append(events, e)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return events
}

// TestAuditTrail answers a security team's first question, "who ran what,
// where", from the API server's audit log alone, for each way nodeexec
// reaches a node. One user (a client certificate of its own) runs a command
// with a marker of its own on each path; the test then reads that user's
// audit events and says, per path, which request names the node's pod and
// which one holds the command (the marker): an exec's requestURI
// (command= parameters), a pod's or an ephemeral container's spec (recorded
// at the Request level, as the test cluster's policy does for pods and
// pods/ephemeralcontainers), or none.
//
// The resident agents' default transport, a port-forward, records the user
// and the agent pod but not the command: that is the gap `agent install
// --transport exec` and `--transport recorded` close, checked here too:
// with recorded agents the run's record (a Lease create, its body at the
// Request level) holds the command line and the node, under the user's
// name, next to the port-forward; the agent consumed it (none is left). A shell's typed commands are
// in no audit record (the login shell's command line is): shell --record
// keeps them on the client (TestShellInteractive).
//
// The watcher: the user applies a NodeScript whose script holds the
// marker; its create is recorded with its body (the script), under the
// user's name, and the pod the watcher then creates on the node, under the
// watcher's identity, holds the script too: the NodeScript's name links
// the two (the pod's nodeexec.io/nodescript label).
func TestAuditTrail(t *testing.T) {
	if env.cluster == nil {
		t.Fatal("TestAuditTrail reads the local test cluster's audit log: run it without NODEEXEC_E2E_KUBECONFIG")
	}
	ctx := t.Context()
	node := env.nodes[0]
	user := uniqueName("audit-e2e-")
	kubeconfig, _, err := env.cluster.AuditedUser(ctx, user, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ns := tempNamespace(ctx, t, "nodeexec-e2e-audit-", nil)
	target := startTargetPod(ctx, t, ns, node, "audit-target", "exec sleep 3600")
	// three sets of resident agents: the default transport, exec and recorded
	agentsPF, agentsExec, agentsRec := uniqueName("nodeexec-e2e-apf-"), uniqueName("nodeexec-e2e-aex-"), uniqueName("nodeexec-e2e-arc-")
	for _, a := range []struct{ ns, transport string }{{agentsPF, "portforward"}, {agentsExec, "exec"}, {agentsRec, "recorded"}} {
		t.Cleanup(func() { cli(context.WithoutCancel(ctx), "", "agent", "uninstall", "--namespace", a.ns) })
		if _, stderr, code := cli(ctx, "", "agent", "install", "--namespace", a.ns, "--transport", a.transport, "--timeout", "3m"); code != 0 {
			t.Fatalf("agent install --transport %s: exit %d: %s", a.transport, code, stderr)
		}
	}
	start, err := os.Stat(env.cluster.AuditLog())
	if err != nil {
		t.Fatal(err)
	}

	type path struct {
		name  string
		stdin string
		args  []string
		// where the command must be recorded: "exec" (an exec's
		// requestURI), "spec" (a pod's or an ephemeral container's
		// recorded body), or "" (nowhere: the gaps, documented)
		where string
	}
	marker := func(p string) string { return "mark-" + p + "-" + strings.TrimPrefix(user, "audit-e2e-") }
	paths := []path{
		{name: "nsenter", where: "spec", args: []string{"run", "-n", ns, "--node", node, "--", "echo", marker("nsenter")}},
		{name: "runtime", where: "spec", args: []string{"run", "-n", ns, "--backend", "runtime", "--pod", ns + "/" + target.Name, "--", "echo", marker("runtime")}},
		{name: "debugpod", where: "spec", args: []string{"run", "-n", ns, "--backend", "debugpod", "--node", node, "--", "echo", marker("debugpod")}},
		{name: "ephemeral", where: "spec", args: []string{"run", "-n", ns, "--backend", "ephemeral", "--pod", ns + "/" + target.Name, "--", "echo", marker("ephemeral")}},
		{name: "resident-portforward", where: "", args: []string{"run", "--use-resident", "--resident-namespace", agentsPF, "--node", node, "--", "echo", marker("resident-portforward")}},
		{name: "resident-exec", where: "exec", args: []string{"run", "--use-resident", "--resident-namespace", agentsExec, "--node", node, "--", "echo", marker("resident-exec")}},
		{name: "resident-recorded", where: "record", args: []string{"run", "--use-resident", "--resident-namespace", agentsRec, "--node", node, "--", "echo", marker("resident-recorded")}},
		{name: "shell", where: "", stdin: "echo " + marker("shell") + "\n", args: []string{"shell", "-n", ns, node}},
	}
	for _, p := range paths {
		stdout, stderr, code := cliAs(ctx, kubeconfig, p.stdin, p.args...)
		if code != 0 || !strings.Contains(stdout, marker(p.name)) {
			t.Fatalf("%s: exit %d, stdout %q, stderr %q", p.name, code, stdout, stderr)
		}
	}
	// the watcher: the user's NodeScript, run by the watcher
	dyn := watcherSetup(t)
	startWatcher(t, dyn)
	script := uniqueName("e2e-audit-")
	cleanupNodeScript(t, dyn, script)
	doc := fmt.Sprintf("apiVersion: nodeexec.io/v1alpha1\nkind: NodeScript\nmetadata: {name: %s}\nspec:\n  nodeSelector: {matchLabels: {kubernetes.io/hostname: %s}}\n  script: \"echo %s\"\n",
		script, node, marker("watcher"))
	if _, stderr, code := cliAs(ctx, kubeconfig, doc, "apply", "-f", "-"); code != 0 {
		t.Fatalf("watcher: apply: exit %d: %s", code, stderr)
	}
	waitNodeScript(ctx, t, dyn, script, 90*time.Second, "ran on the node", func(ns *v1alpha1.NodeScript) bool { return ns.Status.Succeeded == 1 })
	paths = append(paths, path{name: "watcher", where: "spec"})

	// the audit log's answer, per path
	// the log is written as requests end: wait until every recorded
	// marker is there (at most 15 s)
	var events, watcherPods []auditEvent
	waitFor(15*time.Second, func() bool {
		events = auditEventsOf(t, start.Size(), user)
		watcherPods = nil
		for _, e := range auditEventsOf(t, start.Size(), "") {
			if e.User.Username != user && e.resource() == "pods" && e.Verb == "create" && strings.Contains(string(e.RequestObject), marker("watcher")) {
				watcherPods = append(watcherPods, e)
			}
		}
		all := string(mustJSON(events))
		if len(watcherPods) == 0 {
			return false
		}
		for _, p := range paths {
			if p.where != "" && !strings.Contains(all, marker(p.name)) {
				return false
			}
		}
		return true
	})
	var report strings.Builder
	fmt.Fprintf(&report, "%-22s %-7s %-30s %-56s %s\n", "PATH", "VERB", "RESOURCE", "OBJECT", "COMMAND RECORDED")
	for _, p := range paths {
		m := marker(p.name)
		var where []string
		var podEvents, portForwards int
		for _, e := range events {
			// pods and their subresources; of pods themselves only the
			// writes (exec, attach and port-forward upgrade as "get")
			if !strings.HasPrefix(e.resource(), "pods") && e.resource() != "nodescripts" && e.resource() != "leases" || e.resource() == "pods" && (e.Verb == "list" || e.Verb == "watch" || e.Verb == "get") {
				continue
			}
			inURI := strings.Contains(e.RequestURI, m)
			inBody := strings.Contains(string(e.RequestObject), m)
			// the events of this path: those that hold its marker, and the
			// resident port-forwards (which hold none) of its agents
			mine := inURI || inBody || (e.resource() == "pods/portforward" &&
				(p.name == "resident-portforward" && e.ObjectRef.Namespace == agentsPF || p.name == "resident-recorded" && e.ObjectRef.Namespace == agentsRec))
			if !mine {
				continue
			}
			podEvents++
			if e.resource() == "pods/portforward" {
				portForwards++
			}
			rec := "no"
			switch {
			case inURI:
				rec = "yes, requestURI"
				where = append(where, "exec")
			case inBody && e.resource() == "leases":
				rec = "yes, requestObject (run record)"
				where = append(where, "record")
				if e.ObjectRef.Namespace != agentsRec || !strings.Contains(string(e.RequestObject), `"nodeexec.io/node":"`+node+`"`) {
					t.Errorf("%s: the run record %s/%s is not in the agents' namespace %s or does not name node %s: %s", p.name, e.ObjectRef.Namespace, e.ObjectRef.Name, agentsRec, node, e.RequestObject)
				}
			case inBody:
				rec = "yes, requestObject"
				where = append(where, "spec")
			}
			fmt.Fprintf(&report, "%-22s %-7s %-30s %-56s %s\n", p.name, e.Verb, e.resource(), e.ObjectRef.Namespace+"/"+e.ObjectRef.Name, rec)
		}
		switch {
		case p.where == "" && len(where) > 0:
			t.Errorf("%s: the command is in the audit log (%v): the documented gap is closed, update the test and docs/security.md", p.name, where)
		case p.where != "" && !slices.Contains(where, p.where):
			t.Errorf("%s: no audit event of %s holds the command (%s); recorded: %v", p.name, user, p.where, where)
		}
		if p.name == "resident-portforward" && podEvents == 0 {
			t.Errorf("resident-portforward: no pods/portforward event of %s on the agents in %s", user, agentsPF)
		}
		if p.name == "resident-recorded" {
			// through the port-forward (not exec's fallback), and the record used up
			if slices.Contains(where, "exec") || portForwards == 0 {
				t.Errorf("resident-recorded: want the run over pods/portforward, not exec (recorded: %v)", where)
			}
			left, err := env.client.CoordinationV1().Leases(agentsRec).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=run-record"})
			if err != nil || len(left.Items) != 0 {
				t.Errorf("resident-recorded: run records left in %s after the run: %v %v", agentsRec, left, err)
			}
		}
		if p.name == "shell" && podEvents != 0 {
			t.Errorf("shell: a typed command is in the audit log")
		}
		if p.name == "watcher" {
			// the pod the watcher created for the user's NodeScript, under its own name
			for _, e := range watcherPods {
				fmt.Fprintf(&report, "%-22s %-7s %-30s %-56s %s (user %s)\n", "watcher's pod", e.Verb, e.resource(), e.ObjectRef.Namespace+"/"+e.ObjectRef.Name, "yes, requestObject", e.User.Username)
				if !strings.Contains(string(e.RequestObject), script) {
					t.Errorf("watcher: its pod %s does not name the NodeScript %s", e.ObjectRef.Name, script)
				}
			}
			if len(watcherPods) == 0 {
				t.Errorf("watcher: no pod create holds the NodeScript's script")
			}
		}
	}
	t.Logf("the audit log of user %s:\n%s", user, report.String())
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}
