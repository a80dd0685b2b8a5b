//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/nodeexec/agent"
	"github.com/nodeexec/nodeexec/nodeexec/resident"
)

// residentUser creates a ServiceAccount (in default) that may get and list
// nodes cluster-wide and do what rules say in the agents' namespace
// agentNS, and returns a kubeconfig authenticating as it. Everything is
// deleted when the test ends.
func residentUser(ctx context.Context, t *testing.T, agentNS string, rules []rbacv1.PolicyRule) string {
	t.Helper()
	name := uniqueName("nodeexec-e2e-ru-")
	cleanupCtx := context.WithoutCancel(ctx)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err := env.client.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	must(err)
	t.Cleanup(func() {
		_ = env.client.CoreV1().ServiceAccounts("default").Delete(cleanupCtx, name, metav1.DeleteOptions{})
	})
	subject := []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: "default"}}
	_, err = env.client.RbacV1().Roles(agentNS).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{})
	must(err)
	_, err = env.client.RbacV1().RoleBindings(agentNS).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name}, Subjects: subject,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
	}, metav1.CreateOptions{})
	must(err)
	_, err = env.client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list"}}},
	}, metav1.CreateOptions{})
	must(err)
	t.Cleanup(func() { _ = env.client.RbacV1().ClusterRoles().Delete(cleanupCtx, name, metav1.DeleteOptions{}) })
	_, err = env.client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name}, Subjects: subject,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
	}, metav1.CreateOptions{})
	must(err)
	t.Cleanup(func() { _ = env.client.RbacV1().ClusterRoleBindings().Delete(cleanupCtx, name, metav1.DeleteOptions{}) })
	tok, err := env.client.CoreV1().ServiceAccounts("default").CreateToken(ctx, name,
		&authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](900)}}, metav1.CreateOptions{})
	must(err)
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: env.config.Host, CertificateAuthority: env.config.CAFile, CertificateAuthorityData: env.config.CAData}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: tok.Status.Token}
	kc.Contexts["x"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u", Namespace: "default"}
	kc.CurrentContext = "x"
	path := filepath.Join(t.TempDir(), name+".kubeconfig")
	must(clientcmd.WriteToFile(*kc, path))
	return path
}

// TestResidentPortForward: resident agents listen on loopback inside their
// pods and are reached through the API server's port-forward:
//   - a user who may port-forward to the agents but not exec into them
//     runs commands (exit code, stdout and stderr apart, stdin), creating
//     no pod — the port-forward path, no exec;
//   - the listener is on the pod's loopback only: not on the pod's IP;
//   - a user with pods/exec but no pods/portforward still runs (exec);
//   - an agent that does not listen where its pod says falls back to exec;
//   - a client killed mid-run: the command runs to its end, and no process
//     of it is left;
//   - an interactive shell through the agent: a TTY of the terminal's size,
//     resized with it, and the exit status.
func TestResidentPortForward(t *testing.T) {
	ctx := t.Context()
	ns := "nodeexec-e2e-pf-" + randomSuffix()
	node := env.nodes[0]
	t.Cleanup(func() { _, _, _ = cli(context.WithoutCancel(ctx), "", "agent", "uninstall", "--namespace", ns) })
	if _, stderr, code := cli(ctx, "", "agent", "install", "--namespace", ns, "--agent-image", agentImage(), "--timeout", "2m"); code != 0 {
		t.Fatalf("agent install: exit %d\n%s", code, stderr)
	}
	a, ok, err := resident.FindAgent(ctx, env.client, ns, node)
	if err != nil || !ok || a.ServePort != agent.ServePort {
		t.Fatalf("agent on %s: %+v %v %v", node, a, ok, err)
	}
	host, _ := os.Hostname()
	run := func(args ...string) []string {
		return append([]string{"-v", "1", "run", "--node", node, "--backend", "nsenter", "--use-resident", "--resident-namespace", ns, "--no-prefix"}, args...)
	}
	find := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list"}},
		{APIGroups: []string{"apps"}, Resources: []string{"daemonsets"}, Verbs: []string{"get"}},
	}

	t.Run("port-forward only", func(t *testing.T) {
		kc := residentUser(ctx, t, ns, append(find, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods/portforward"}, Verbs: []string{"create", "get"}}))
		before := managedPodCount(ctx, t)
		stdout, stderr, code := cliAs(ctx, kc, "", run("--", "sh", "-c", "cat /etc/hostname; echo to-stderr >&2; exit 5")...)
		if code != 5 || stdout != host+"\n" || !strings.Contains(stderr, "to-stderr") || strings.Contains(stdout, "to-stderr") {
			t.Errorf("exit %d (want 5), stdout %q (want %q)\nstderr: %s", code, stdout, host+"\n", stderr)
		}
		if !strings.Contains(stderr, `"servePort"=7710`) || strings.Contains(stderr, "using exec") || strings.Contains(stderr, "created pod") {
			t.Errorf("not the port-forward path:\n%s", stderr)
		}
		stdout, stderr, code = cliAs(ctx, kc, "line one\nline two\n", run("-i", "--", "sh", "-c", "wc -l; exit 0")...)
		if code != 0 || strings.TrimSpace(stdout) != "2" {
			t.Errorf("stdin: exit %d stdout %q\n%s", code, stdout, stderr)
		}
		// 30 runs of short output: none lost.
		for i := range 30 {
			stdout, stderr, code := cliAs(ctx, kc, "", run("--", "echo", fmt.Sprint("short-", i))...)
			if code != 0 || stdout != fmt.Sprintf("short-%d\n", i) {
				t.Fatalf("short output run %d: exit %d stdout %q\n%s", i, code, stdout, stderr)
			}
		}
		if after := managedPodCount(ctx, t); after != before {
			t.Errorf("runs through the agent created pods: %d managed pods before, %d after", before, after)
		}
	})

	t.Run("loopback only", func(t *testing.T) {
		pod, err := env.client.CoreV1().Pods(ns).Get(ctx, a.Pod, metav1.GetOptions{})
		if err != nil || pod.Status.PodIP == "" || pod.Spec.HostNetwork || len(pod.Spec.Containers[0].Ports) != 0 {
			t.Fatalf("agent pod: %v, IP %q, hostNetwork %v, ports %v", err, pod.Status.PodIP, pod.Spec.HostNetwork, pod.Spec.Containers[0].Ports)
		}
		// The kernel's table of the pod's network namespace: one listener on
		// the agent's port, bound to 127.0.0.1, none on the pod's IP or on
		// every address.
		listening := readFileIn(t, "/proc/"+agentPID(t, a.Pod)+"/net/tcp")
		if !strings.Contains(listening, fmt.Sprintf("0100007F:%04X", agent.ServePort)) {
			t.Errorf("no listener on 127.0.0.1:%d in the agent pod:\n%s", agent.ServePort, listening)
		}
		if strings.Contains(listening, fmt.Sprintf("00000000:%04X", agent.ServePort)) {
			t.Errorf("the agent listens on every address:\n%s", listening)
		}
	})

	t.Run("exec only", func(t *testing.T) {
		kc := residentUser(ctx, t, ns, append(find, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods/exec"}, Verbs: []string{"create", "get"}}))
		stdout, stderr, code := cliAs(ctx, kc, "", run("--", "sh", "-c", "cat /etc/hostname; exit 6")...)
		if code != 6 || stdout != host+"\n" || !strings.Contains(stderr, "using exec") {
			t.Errorf("exit %d (want 6), stdout %q\nstderr: %s", code, stdout, stderr)
		}
	})

	t.Run("client killed", func(t *testing.T) {
		killClientMidRun(ctx, t, "pfkill", run)
	})

	t.Run("shell", func(t *testing.T) {
		s, logFile := startResidentShell(t, node, ns)
		s.typeLine("echo SIZE=$(stty size | tr ' ' x)")
		s.waitScreen(10*time.Second, `(?m)^SIZE=40x120\s*$`)
		s.tmux("resize-window", "-t", s.name, "-x", "100", "-y", "30")
		time.Sleep(300 * time.Millisecond)
		s.typeLine("echo NEWSIZE=$(stty size | tr ' ' x)")
		s.waitScreen(10*time.Second, `(?m)^NEWSIZE=30x100\s*$`)
		endResidentShell(t, s, logFile)
	})

	t.Run("not listening falls back to exec", func(t *testing.T) {
		// The pods say the agent listens where it does not.
		patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{%q:"7799"}}}}}`, agent.AnnotationServe)
		if _, err := env.client.AppsV1().DaemonSets(ns).Patch(ctx, resident.DaemonSetName, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		if !waitFor(90*time.Second, func() bool {
			a, ok, err := resident.FindAgent(ctx, env.client, ns, node)
			return err == nil && ok && a.ServePort == 7799
		}) {
			t.Fatal("no agent pod with the patched annotation became ready")
		}
		stdout, stderr, code := cli(ctx, "", run("--", "sh", "-c", "cat /etc/hostname; exit 7")...)
		if code != 7 || stdout != host+"\n" || !strings.Contains(stderr, "does not listen on its port") || !strings.Contains(stderr, "using exec") {
			t.Errorf("exit %d (want 7), stdout %q\nstderr: %s", code, stdout, stderr)
		}
	})
}

// startResidentShell starts `nodeexec -v 1 shell NODE --backend nsenter
// --use-resident --resident-namespace NS` in a terminal (tmux), its log in
// a file whose path it returns, and waits for the prompt.
func startResidentShell(t *testing.T, node, ns string) (*tmuxSession, string) {
	t.Helper()
	logFile := filepath.Join(t.TempDir(), "shell.log")
	s := startTmux(t, fmt.Sprintf("sh -c '%s --kubeconfig %s -v 1 shell %s --backend nsenter --use-resident --resident-namespace %s 2>%s; echo EXIT=$?; sleep 600'",
		env.cli, env.kubeconfig, node, ns, logFile))
	s.waitScreen(30*time.Second, promptRE)
	return s, logFile
}

// endResidentShell checks that the terminal's TERM reached the shell, exits
// it with status 3, and checks from the client's log that the session went
// through the agent's listener (no pod created, no record refused).
func endResidentShell(t *testing.T, s *tmuxSession, logFile string) {
	t.Helper()
	s.typeLine("echo TERM=$TERM")
	s.waitScreen(10*time.Second, `(?m)^TERM=[a-z]`)
	s.typeLine("exit 3")
	s.waitScreen(20*time.Second, `(?m)^EXIT=3\s*$`)
	if log, _ := os.ReadFile(logFile); !strings.Contains(string(log), `"servePort"=7710`) || strings.Contains(string(log), "created pod") || strings.Contains(string(log), "refused") {
		t.Errorf("the shell did not go through the resident agent's listener:\n%s", log)
	}
}

// agentPID is the host PID of the agent pod's main process (`agent serve`).
func agentPID(t *testing.T, pod string) string {
	t.Helper()
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		cmdline, err := os.ReadFile(d + "/cmdline")
		if err != nil || !strings.Contains(string(cmdline), "agent\x00serve") {
			continue
		}
		env, err := os.ReadFile(d + "/environ")
		if err == nil && strings.Contains(string(env), "HOSTNAME="+pod+"\x00") {
			return filepath.Base(d)
		}
	}
	t.Fatalf("no `agent serve` process of pod %s on this machine", pod)
	return ""
}

func readFileIn(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// killClientMidRun runs `nodeexec run(-- sh -c ...)` with a command that
// prints "started", sleeps 3 s and then writes a token of prefix to a
// marker file, SIGKILLs the client after the first output, and checks that
// the command ran to its end in the agent and that no process of it is
// left. It returns the token (in the command line).
func killClientMidRun(ctx context.Context, t *testing.T, prefix string, run func(args ...string) []string) string {
	t.Helper()
	token := prefix + randomSuffix()
	marker := "/tmp/" + token
	t.Cleanup(func() { os.Remove(marker) })
	cmd := exec.CommandContext(ctx, env.cli, append([]string{"--kubeconfig", env.kubeconfig}, run("--", "sh", "-c", "echo started; sleep 3; echo "+token+" > "+marker)...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if n, _ := out.Read(buf); !strings.Contains(string(buf[:n]), "started") {
		t.Fatalf("first output %q", buf[:n])
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	if !waitFor(15*time.Second, func() bool { b, err := os.ReadFile(marker); return err == nil && strings.Contains(string(b), token) }) {
		t.Error("the command did not run to its end after its client was killed")
	}
	// The test cluster's nodes share this machine's kernel: /proc shows them.
	if !waitFor(10*time.Second, func() bool { return len(scanProc("/proc", token)) == 0 }) {
		t.Errorf("processes left: %q", scanProc("/proc", token))
	}
	return token
}
