//go:build e2e

// End-to-end test of simulated nodes that answer exec and port-forward
// (KwokOptions.Exec): `nodeexec run` with the default (nsenter) backend, the
// debug pod and the resident agents reaches them through the real API server.
//
//	go test -tags e2e -count=1 -run TestKwokExec -v ./internal/testcluster/
//
// NODEEXEC_KWOK_AGENT_BINARY names a static nodeexec binary to use (the test
// builds ./cmd/nodeexec otherwise).
package testcluster

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeexec/nodeexec/internal/agentimage"
	"github.com/nodeexec/nodeexec/nodeexec/agent"
)

func TestKwokExec(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 9*time.Minute)
	defer cancel()
	bin := os.Getenv("NODEEXEC_KWOK_AGENT_BINARY")
	if bin == "" {
		var err error
		if bin, err = agentimage.BuildBinary(ctx, "../..", t.TempDir()); err != nil {
			t.Fatal(err)
		}
	}
	c, cs := kwokCluster(t, ctx)
	t0 := time.Now()
	k, err := c.StartKwok(ctx, KwokOptions{Exec: true, AgentBinary: bin, PodStartDelay: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { kwokDown(t, c) })
	if _, err := k.CreateNodes(ctx, 3, nil); err != nil {
		t.Fatal(err)
	}
	t.Logf("kwok with exec and 3 simulated nodes Ready in %s", time.Since(t0).Round(time.Millisecond))
	// kwok's address in the hub is never the source of a connection to a real
	// node: the API server's new connections to another node's kubelet (after
	// that kubelet restarted) timed out when it was.
	t.Run("real-nodes-reachable", func(t *testing.T) {
		for i := 2; i <= len(c.Nodes()); i++ {
			n := c.r.l.node(i)
			out, err := c.r.run(ctx, "ip", "-n", hubNetns, "route", "get", n.IP)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out, " src "+c.r.l.node(1).IP+" ") {
				t.Errorf("the hub's route to %s (%s): %q, want the source %s", n.Name, n.IP, strings.TrimSpace(out), c.r.l.node(1).IP)
			}
			dctx, dcancel := context.WithTimeout(ctx, 5*time.Second)
			conn, err := netnsDialer(netnsPath(hubNetns))(dctx, "tcp", n.IP+":10250")
			dcancel()
			if err != nil {
				t.Errorf("a new connection from the API server's network namespace to %s's kubelet: %v", n.Name, err)
				continue
			}
			conn.Close()
		}
	})

	kubeconfig := c.Kubeconfig()
	run := func(stdin string, args ...string) (stdout, stderr string, code int) {
		t.Helper()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
		cmd.Stdin = strings.NewReader(stdin)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code = 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("nodeexec %s: %v", strings.Join(args, " "), err)
		}
		t.Logf("nodeexec %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, out.String(), errb.String())
		return out.String(), errb.String(), code
	}
	hostPIDNS, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		t.Fatal(err)
	}
	// what a command on a simulated node sees: the sandbox, never the host
	probe := `echo "host=$(hostname) uts1=$(nsenter -t 1 -u hostname) init=$(cat /proc/1/comm) pidns=$(readlink /proc/self/ns/pid) node=$KWOK_NODE_NAME"`
	checkSandbox := func(what, out, node string) {
		t.Helper()
		for _, want := range []string{"host=" + KwokSandboxHostname, "uts1=" + KwokSandboxHostname, "init=sbin-init", "node=" + node} {
			if !strings.Contains(out, want) {
				t.Errorf("%s: output lacks %q:\n%s", what, want, out)
			}
		}
		if !strings.Contains(out, "pidns=pid:[") || strings.Contains(out, "pidns="+hostPIDNS) {
			t.Errorf("%s: the command ran in the host's PID namespace %s:\n%s", what, hostPIDNS, out)
		}
	}

	t.Run("nsenter", func(t *testing.T) {
		out, _, code := run("", "run", "--no-prefix", "--node", "kwok-node-1", "--", "sh", "-c", probe)
		if code != 0 {
			t.Errorf("exit %d, want 0", code)
		}
		checkSandbox("nsenter", out, "kwok-node-1")
		// a real exit code; the holder pod stays Running longer than
		// PodCompleteAfter (1 s) while its exec runs
		out, _, code = run("", "run", "--no-prefix", "--node", "kwok-node-2", "--", "sh", "-c", "sleep 2; echo slept; exit 3")
		if code != 3 || !strings.Contains(out, "slept") {
			t.Errorf("exit %d, output %q: want 3 and slept", code, out)
		}
		// stdin reaches the command, and its end too (cat returns)
		out, _, code = run("hello from stdin\n", "run", "--no-prefix", "-i", "--node", "kwok-node-3", "--", "cat")
		if code != 0 || !strings.Contains(out, "hello from stdin") {
			t.Errorf("stdin: exit %d, output %q", code, out)
		}
	})
	t.Run("debugpod", func(t *testing.T) {
		out, _, code := run("", "run", "--no-prefix", "--backend", "debugpod", "--node", "kwok-node-2", "--", "sh", "-c", probe+"; exit 4")
		if code != 4 {
			t.Errorf("exit %d, want 4", code)
		}
		checkSandbox("debugpod", out, "kwok-node-2")
	})
	t.Run("fanout", func(t *testing.T) {
		out, _, code := run("", "run", "-l", KwokNodeSelector, "--", "sh", "-c", `echo "on $KWOK_NODE_NAME"; test "$KWOK_NODE_NAME" != kwok-node-2`)
		if code == 0 {
			t.Error("exit 0 with kwok-node-2 failing")
		}
		for i := 1; i <= 3; i++ {
			if !strings.Contains(out, "on "+KwokNodeName(i)) {
				t.Errorf("no output from %s:\n%s", KwokNodeName(i), out)
			}
		}
	})
	t.Run("resident", func(t *testing.T) {
		ns := "kwok-e2e-agents"
		t.Cleanup(func() {
			run("", "agent", "uninstall", "--namespace", ns)
		})
		// the agents of the real nodes run nodeexec's image: this binary's,
		// pushed here as the e2e tests push it (on a new machine nothing has yet)
		img, err := agentimage.ImageFromFile(bin)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.PushImage(ctx, agent.DefaultImage, img); err != nil {
			t.Fatal(err)
		}
		if _, _, code := run("", "agent", "install", "--namespace", ns, "--timeout", "2m"); code != 0 {
			t.Fatalf("agent install: exit %d", code)
		}
		out, _, code := run("", "run", "--no-prefix", "--use-resident", "--node", "kwok-node-3", "--", "sh", "-c", probe+"; exit 5")
		if code != 5 {
			t.Errorf("exit %d, want 5", code)
		}
		// one agent serves every simulated node: no per-node environment
		for _, want := range []string{"host=" + KwokSandboxHostname, "uts1=" + KwokSandboxHostname, "init=sbin-init"} {
			if !strings.Contains(out, want) {
				t.Errorf("resident: output lacks %q:\n%s", want, out)
			}
		}
	})

	// nothing left: every pod the runs created on simulated nodes is gone
	err = poll(ctx, 30*time.Second, 200*time.Millisecond, "run pods gone", func(ctx context.Context) (bool, error) {
		pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: KwokPodLabel + "=" + KwokPodLabelValue})
		if err != nil {
			return false, err
		}
		var left []string
		for _, p := range pods.Items {
			if strings.HasPrefix(p.Spec.NodeName, KwokNodePrefix) && p.Labels["app.kubernetes.io/component"] != "agent" {
				left = append(left, p.Namespace+"/"+p.Name)
			}
		}
		return len(left) == 0, fmt.Errorf("left: %v", left)
	})
	if err != nil {
		t.Error(err)
	}
}
