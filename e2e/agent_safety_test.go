//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
	"k8s.io/streaming/pkg/httpstream"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/agent"
	"github.com/nodeexec/nodeexec/nodeexec/podexec"
	"github.com/nodeexec/nodeexec/nodeexec/resident"
	"github.com/nodeexec/nodeexec/nodeexec/spool"
)

// installSafetyAgents installs the resident agents in a namespace of their own,
// uninstalled when the test ends, and returns it and the agent of node.
func installSafetyAgents(ctx context.Context, t *testing.T, prefix, node string) (string, resident.Agent) {
	t.Helper()
	ns := prefix + randomSuffix()
	t.Cleanup(func() { _, _, _ = cli(context.WithoutCancel(ctx), "", "agent", "uninstall", "--namespace", ns) })
	if _, stderr, code := cli(ctx, "", "agent", "install", "--namespace", ns, "--agent-image", agentImage(), "--timeout", "2m"); code != 0 {
		t.Fatalf("agent install: exit %d\n%s", code, stderr)
	}
	a, ok, err := resident.FindAgent(ctx, env.client, ns, node)
	if err != nil || !ok || a.ServePort != agent.ServePort {
		t.Fatalf("agent on %s: %+v %v %v", node, a, ok, err)
	}
	return ns, a
}

// agentRequest sends req to the resident agent in pod over the API
// server's port-forward, speaking the agent's protocol (agent.ServePort),
// and returns what came back: the command's output and exit status, or the
// agent's refusal (FrameError).
func agentRequest(ctx context.Context, t *testing.T, ns, pod string, req agent.WireRequest) (stdout, stderr string, code int, refused string) {
	t.Helper()
	conn, err := resident.NewDialer(env.config, env.client.CoreV1().RESTClient()).Dial(ctx, ns, pod)
	if err != nil {
		t.Fatalf("port-forward to %s/%s: %v", ns, pod, err)
	}
	defer conn.Close()
	data := portForwardData(t, conn)
	p, err := agent.EncodeRequest(req)
	if err != nil {
		t.Fatal(err)
	}
	if err := agent.NewFrameWriter(data).Write(agent.FrameRequest, p); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(data)
	var out, errOut bytes.Buffer
	for {
		typ, p, err := agent.ReadFrame(r, nil)
		if err != nil {
			t.Fatalf("reading the agent's answer: %v (stdout %q, stderr %q)", err, out.String(), errOut.String())
		}
		switch typ {
		case agent.FrameStdout:
			out.Write(p)
		case agent.FrameStderr:
			errOut.Write(p)
		case agent.FrameExit:
			code, err := agent.ExitCodeOf(p)
			if err != nil {
				t.Fatal(err)
			}
			return out.String(), errOut.String(), code, ""
		case agent.FrameError:
			return out.String(), errOut.String(), -1, string(p)
		}
	}
}

// portForwardData opens the port-forward's error and data streams to the
// agent's port, as kubectl port-forward does, and returns the data stream.
func portForwardData(t *testing.T, conn httpstream.Connection) httpstream.Stream {
	t.Helper()
	h := http.Header{}
	h.Set(corev1.StreamType, corev1.StreamTypeError)
	h.Set(corev1.PortHeader, strconv.Itoa(agent.ServePort))
	h.Set(corev1.PortForwardRequestIDHeader, "0")
	errStream, err := conn.CreateStream(h)
	if err != nil {
		t.Fatal(err)
	}
	errStream.Close()
	go func() { _, _ = io.Copy(io.Discard, errStream) }()
	h.Set(corev1.StreamType, corev1.StreamTypeData)
	data, err := conn.CreateStream(h)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// execAgent runs argv in the agent container of pod over exec and returns
// its output and exit status (-1 with the error when it has none).
func execAgent(ctx context.Context, ns, pod string, argv []string) (stdout, stderr string, code int, err error) {
	var out, errOut bytes.Buffer
	err = podexec.NewStreamer(env.config, env.client.CoreV1().RESTClient()).Exec(ctx, ns, pod,
		&corev1.PodExecOptions{Container: agent.ContainerName, Command: argv, Stdout: true, Stderr: true},
		remotecommand.StreamOptions{Stdout: &out, Stderr: &errOut})
	var ce utilexec.CodeExitError
	switch {
	case err == nil:
		return out.String(), errOut.String(), 0, nil
	case errors.As(err, &ce):
		return out.String(), errOut.String(), ce.Code, nil
	}
	return out.String(), errOut.String(), -1, err
}

// TestAgentSpoolSafety: a resident agent refuses a --spool outside its
// spools' parent — through its listener (the request is refused, nothing
// started) and over exec (its subcommands exit 125 naming the fix) — and
// nothing is created or swept: with `--spool /usr/local/NEW`, the agent
// once removed its own /usr/local/bin. `attach` on a directory that is not
// a spool (/dev) ends at once. Afterwards the agent still runs commands.
func TestAgentSpoolSafety(t *testing.T) {
	ctx := t.Context()
	node := env.nodes[0]
	ns, a := installSafetyAgents(ctx, t, "nodeexec-e2e-safe-", node)
	root := "/proc/" + agentPID(t, a.Pod) + "/root" // the agent container's filesystem, seen from this machine
	if _, err := os.Stat(root + agent.Path); err != nil {
		t.Fatalf("the agent's binary before the test: %v", err)
	}
	marker := "spool-safety-" + randomSuffix()
	nsenterWith := func(spoolArgs ...string) []string {
		return append(append([]string{agent.Path, "agent", "nsenter"}, spoolArgs...), "--target", "1", "--", "sh", "-c", "echo "+marker+" > /tmp/"+marker)
	}
	hostile := [][]string{
		{"--spool", "/usr/local/new-" + marker},
		{"--spool=/x-" + marker},
		{"-spool", "/"},
		{"--spool", spool.DefaultParent + "/../../../usr/local/new-" + marker},
		{"--spool", spool.DefaultParent + "/a/b"},
	}
	for _, sp := range hostile {
		// The listener: refused before anything starts.
		_, _, code, refused := agentRequest(ctx, t, ns, a.Pod, agent.WireRequest{Version: agent.WireVersion, Command: nsenterWith(sp...)})
		if code != -1 || !strings.Contains(refused, "--spool") || !strings.Contains(refused, spool.DefaultParent+"/NAME") {
			t.Errorf("listener, %q: exit %d, refusal %q; want the request refused naming %s/NAME", sp, code, refused, spool.DefaultParent)
		}
		// Exec: the agent's subcommand refuses it, exit 125.
		stdout, stderr, code, err := execAgent(ctx, ns, a.Pod, nsenterWith(sp...))
		if err != nil || code != 125 || !strings.Contains(stderr, "--spool") || strings.Contains(stdout, marker) {
			t.Errorf("exec, %q: exit %d (%v), stdout %q, stderr %q; want 125 and the refusal", sp, code, err, stdout, stderr)
		}
	}
	for _, mode := range []string{"--stop", "--check"} {
		start := time.Now()
		_, stderr, code, err := execAgent(ctx, ns, a.Pod, []string{agent.Path, "agent", "attach", "--spool", "/dev", mode})
		if err != nil || code != 125 || !strings.Contains(stderr, "--spool") || time.Since(start) > 20*time.Second {
			t.Errorf("attach --spool /dev %s: exit %d (%v) after %s, stderr %q; want 125 at once", mode, code, err, time.Since(start), stderr)
		}
	}
	// Nothing ran, nothing was created, nothing was swept.
	if _, err := os.Stat("/tmp/" + marker); err == nil {
		t.Errorf("a refused command ran (/tmp/%s exists on the node)", marker)
	}
	for _, p := range []string{"/usr/local/new-" + marker, "/x-" + marker} {
		if _, err := os.Stat(root + p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s in the agent container: %v, want it never created", p, err)
		}
	}
	for _, p := range []string{agent.Path, "/host", "/usr/local/bin"} {
		if _, err := os.Stat(root + p); err != nil {
			t.Errorf("%s in the agent container after the requests: %v", p, err)
		}
	}
	// The agent still runs commands, through its listener and its own spool.
	stdout, stderr, code := cli(ctx, "", "-v", "1", "run", "--node", node, "--backend", "nsenter", "--use-resident", "--resident-namespace", ns, "--no-prefix", "--", "echo", "still-"+marker)
	if code != 0 || stdout != "still-"+marker+"\n" || !strings.Contains(stderr, "using the resident agent") {
		t.Errorf("a run after the refusals: exit %d, stdout %q\nstderr: %s", code, stdout, stderr)
	}
}

// TestAgentRuntimeEnv: `run --backend runtime -e KEY=VALUE` gives the
// command the variable, and the value is on no command line: not in the
// exec requests the API server records (its audit log holds each exec's
// URL, command included), nor in the node's process list while the command
// runs — with the runtime backend's own pod and through a resident agent.
// The pod backend's pod carries it in its environment, which an audit
// policy that records pod bodies (the test cluster's) holds, as it would a
// `kubectl run --env`; the resident run creates no pod.
func TestAgentRuntimeEnv(t *testing.T) {
	ctx := t.Context()
	node := env.nodes[len(env.nodes)-1]
	target := rtTargetPod(ctx, t, node, "exec sleep 3600", true)
	secret := "SECRETVAL-" + randomSuffix()
	ns, _ := installSafetyAgents(ctx, t, "nodeexec-e2e-rtenv-", node)
	var auditFrom int64
	if env.cluster != nil {
		fi, err := os.Stat(env.cluster.AuditLog())
		if err != nil {
			t.Fatal(err)
		}
		auditFrom = fi.Size()
	}
	for _, resident := range []bool{false, true} {
		args := []string{"-v", "1", "run", "--backend", "runtime", "--pod", "default/" + target.Name, "--no-prefix",
			"--runtime-endpoint", "/run/nodeexec-testcluster/containerd-" + node + ".sock", "-e", "SECRETVAL=" + secret}
		if resident {
			args = append(args, "--use-resident", "--resident-namespace", ns)
		}
		args = append(args, "--", "sh", "-c", `echo "got=$SECRETVAL"; sleep 3`)
		// While the command runs, the node's processes (this machine's: the
		// test cluster's nodes share its kernel) never show the value.
		var seen []string
		var mu sync.Mutex
		done := make(chan struct{})
		go func() {
			for {
				select {
				case <-done:
					return
				case <-time.After(50 * time.Millisecond):
				}
				for _, p := range scanProc("/proc", secret) {
					if _, line, _ := strings.Cut(p, ": "); !strings.HasPrefix(line, env.cli+" ") { // the CLI itself was given it
						mu.Lock()
						seen = append(seen, p)
						mu.Unlock()
					}
				}
			}
		}()
		stdout, stderr, code := cli(ctx, "", args...)
		close(done)
		if code != 0 || stdout != "got="+secret+"\n" {
			t.Errorf("resident %v: exit %d, stdout %q (want the variable's value)\nstderr: %s", resident, code, stdout, stderr)
		}
		if resident != strings.Contains(stderr, "using the resident agent") {
			t.Errorf("resident %v: the log does not say so:\n%s", resident, stderr)
		}
		mu.Lock()
		if len(seen) > 0 {
			t.Errorf("resident %v: the value is in the node's process list: %q", resident, seen)
		}
		mu.Unlock()
	}
	if env.cluster == nil {
		return
	}
	// The audit log: the runs' execs are recorded.
	var execs int
	if !waitFor(10*time.Second, func() bool {
		b, err := os.ReadFile(env.cluster.AuditLog())
		if err != nil || int64(len(b)) < auditFrom {
			return false
		}
		log := string(b[auditFrom:])
		execs = strings.Count(log, "container-exec")
		return execs > 0 && strings.Contains(log, `"subresource":"portforward"`)
	}) {
		t.Fatalf("the audit log does not show the runs' exec and port-forward (%d execs of container-exec)", execs)
	}
	b, err := os.ReadFile(env.cluster.AuditLog())
	if err != nil {
		t.Fatal(err)
	}
	// The value is on no exec's, attach's or port-forward's record. The one
	// place it may be is the pod backend's pod (resident false): its
	// environment, which the test cluster's policy records with the pod's
	// body (Request level), as it would a `kubectl run --env`; the resident
	// run creates no pod.
	var inPodSpec int
	for _, line := range strings.Split(string(b[auditFrom:]), "\n") {
		if !strings.Contains(line, secret) {
			continue
		}
		var e auditEvent
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("audit log line: %v", err)
		}
		if e.Verb == "create" && e.resource() == "pods" && !strings.Contains(e.RequestURI, secret) && strings.Contains(string(e.RequestObject), "NODEEXEC_EXEC_ENV") {
			inPodSpec++
			continue
		}
		t.Errorf("the value is in the API server's audit log: %s", line)
	}
	if inPodSpec > 1 {
		t.Errorf("the value is in %d pod specs in the audit log, want at most the pod backend's one", inPodSpec)
	}
}

// failingDialer refuses every port-forward, as for a user without
// pods/portforward: the resident agent is reached over exec.
type failingDialer struct{}

func (failingDialer) Dial(context.Context, string, string) (httpstream.Connection, error) {
	return nil, errors.New("port-forward refused (test)")
}

// TestAgentUnusableFallsBack: a resident agent whose binary is gone from
// its container (as when it was swept away) cannot run anything. A run
// with --use-resident learns it at the first attempt — over exec (the
// container runtime cannot start the binary) and through the agent's
// listener (the agent says so) — says so, naming the agent pod and the
// cause, and runs the command with a pod instead of retrying until its
// timeout.
func TestAgentUnusableFallsBack(t *testing.T) {
	ctx := t.Context()
	node := env.nodes[0]
	host, _ := os.Hostname()
	ns, a := installSafetyAgents(ctx, t, "nodeexec-e2e-gone-", node)
	if err := os.Remove("/proc/" + agentPID(t, a.Pod) + "/root" + agent.Path); err != nil {
		t.Fatalf("removing the agent's binary from its container: %v", err)
	}

	// Library, over exec only.
	ne := nsenterBackend(t, nil)
	var warnings []string
	var mu sync.Mutex
	w, err := resident.Wrap(ne, resident.WrapOptions{Client: env.client, Config: env.config, Namespace: ns, Dialer: failingDialer{},
		Warn: func(msg string) { mu.Lock(); warnings = append(warnings, msg); mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	var out syncBuffer
	start := time.Now()
	res, err := w.Run(ctx, nodeexec.Request{Node: node, Command: []string{"cat", "/etc/hostname"}, Stdout: &out, Timeout: 10 * time.Minute})
	took := time.Since(start)
	if err != nil || out.String() != host+"\n" || res.Pod == a.Pod || res.Pod == "" || took > 90*time.Second {
		t.Errorf("over exec: err %v, stdout %q, pod %q (the agent's is %s), after %s; want the command run by a pod of its own, at once", err, out.String(), res.Pod, a.Pod, took)
	}
	mu.Lock()
	if len(warnings) != 1 || !strings.Contains(warnings[0], ns+"/"+a.Pod) || !strings.Contains(warnings[0], "no such file or directory") {
		t.Errorf("over exec: warnings %q; want one naming the agent pod and the cause", warnings)
	}
	mu.Unlock()
	assertRunPodsGone(ctx, t, "default", ne.RunID())

	// CLI, through the listener. The agent may hold one warm process
	// started before its binary went, which runs one request; after that it
	// can start nothing.
	warned := false
	for i := 0; i < 3 && !warned; i++ {
		start := time.Now()
		stdout, stderr, code := cli(ctx, "", "run", "--node", node, "--backend", "nsenter", "--use-resident", "--resident-namespace", ns, "--no-prefix", "--timeout", "10m", "--", "cat", "/etc/hostname")
		took := time.Since(start)
		if code != 0 || stdout != host+"\n" || took > 90*time.Second {
			t.Fatalf("run %d: exit %d, stdout %q, after %s\nstderr: %s", i, code, stdout, took, stderr)
		}
		warned = strings.Contains(stderr, fmt.Sprintf("warning: resident agent %s/%s on node %q cannot run its binary", ns, a.Pod, node)) &&
			strings.Contains(stderr, agent.CannotExecPrefix) && strings.Contains(stderr, "with a pod instead")
	}
	if !warned {
		t.Error("no run said that the agent cannot run its binary")
	}
}
