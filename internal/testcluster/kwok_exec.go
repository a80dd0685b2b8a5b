package testcluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"debug/elf"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Simulated nodes that answer exec, attach, logs and port-forward (KwokOptions.Exec).
//
// The API server reaches a node's kubelet at its InternalIP and
// status.daemonEndpoints.kubeletEndpoint.Port. With Exec, every simulated node
// reports kwokNodeIP:kwokKubeletPort, where kwok's own server listens (TLS, a
// certificate for kwokNodeIP from the cluster CA, which the API server checks
// with --kubelet-certificate-authority). kwok serves exec and attach by running
// the requested command itself (its ClusterExec), logs and attach from an empty
// file (ClusterLogs, ClusterAttach), and port-forward by dialling one real
// `nodeexec agent serve` (ClusterPortForward): every resident agent pod of every
// simulated node is that one agent.
//
// The commands kwok runs never run in the host's namespaces: kwok and the agent
// run in a sandbox, new mount, PID, UTS and IPC namespaces inside the hub network
// namespace, whose PID 1 is the test cluster's pause (the sandbox's init, so that
// the nsenter agent's `nsenter -t 1` enters the sandbox) and whose root is a tmpfs
// (pivot_root) holding read-only binds of the host's /usr and /etc, the static
// nodeexec binary at /usr/local/bin/nodeexec (where the agent image has it) and
// at /nodeexec-agent/nodeexec (where the debugpod backend's pods have it), the
// agents' spool directory (/tmp/nodeexec/spool) and /host, the node root the
// debug pod chroots into (read-only binds of /usr and /etc again). Its hostname is
// KwokSandboxHostname.
const (
	// KwokSandboxHostname is the hostname of the sandbox the commands of simulated
	// pods run in (KwokOptions.Exec): `hostname` run on any simulated node prints it.
	KwokSandboxHostname = "kwok-sandbox"
	// KwokAgentPort is the port kwok forwards every simulated pod's port-forward to
	// (any pod port): a `nodeexec agent serve --listen 127.0.0.1:KwokAgentPort` in
	// the sandbox.
	KwokAgentPort = 17710

	// Environment variables kwok adds to the commands it runs for exec and attach
	// (KwokOptions.Exec), besides the literal env values of the pod's container
	// (as a kubelet's exec gets the container's environment).
	KwokEnvNodeName     = "KWOK_NODE_NAME"
	KwokEnvPodName      = "KWOK_POD_NAME"
	KwokEnvPodNamespace = "KWOK_POD_NAMESPACE"

	// kwok's TLS server for the API server, inside the hub network namespace
	kwokKubeletPort = 10250
	kwokAgentPath   = "/usr/local/bin/nodeexec"
	// where the debugpod backend's agent container copies nodeexec
	// (agent.CopiedPath), which kwok's simulated container does not run:
	// the sandbox has it from the start
	kwokCopiedAgentDir  = "/nodeexec-agent"
	kwokCopiedAgentPath = kwokCopiedAgentDir + "/nodeexec"
	kwokLogsFile        = "/var/log/kwok/container.log"

	procKwokSandbox = "init-kwok-sandbox"
	procKwokAgent   = "kwok-agent"
)

// kwokExecPatches make kwok's exec behave as a kubelet's (see kwokPatches):
//   - a command's non-zero exit code reaches the client: kwok returns the
//     command's *exec.ExitError wrapped by fmt.Errorf, which cri-streaming's
//     ServeExec does not recognise (it type-asserts k8s.io/utils/exec.ExitError),
//     so stock kwok reports every failing command as an internal error
//     ("error executing command in container: cmd wait: ... exit status 3")
//     with no exit code. nodeexecExitCode (kwokExtraFiles) turns it into one;
//   - a command's stdin is closed when the client's ends (stock kwok never
//     closes it: `cat` would wait forever);
//   - an attach runs the container's command (command and args, as in the
//     pod's spec) the way exec runs a command, as if the client had attached
//     to its main process from its start: `kubectl debug node/N -i -- CMD`
//     (which creates a pod and attaches to it) gets CMD's output and stdin.
//     A container without a command gets kwok's stock attach (its logs file);
//   - the command gets the pod's container's literal env values and
//     KwokEnvNodeName, KwokEnvPodName and KwokEnvPodNamespace: they come from
//     kwok's pod cache, which stock kwok keeps only when it serves metrics
//     (EnablePodCache: enableMetrics), so it is always on.
var kwokExecPatches = []kwokPatch{
	{
		file: "pkg/kwok/cmd/root.go",
		old:  "\t\tEnablePodCache:                        enableMetrics,\n",
		new:  "\t\tEnablePodCache:                        true,\n",
	},
	{
		file: "pkg/kwok/server/debugging_exec.go",
		old:  "\t// Set the environment variables.\n\tif len(execTarget.Local.Envs) != 0 {\n",
		new:  "\tctx = utilsexec.WithEnv(ctx, s.nodeexecPodEnv(podName, podNamespace, container))\n\n\t// Set the environment variables.\n\tif len(execTarget.Local.Envs) != 0 {\n",
	},
	{
		file: "pkg/kwok/server/debugging_exec.go",
		old:  "\t// Execute the command.\n\terr := utilsexec.Exec(ctx, cmd[0], cmd[1:]...)\n\tif err != nil {\n\t\treturn err\n\t}\n",
		new:  "\t// Execute the command.\n\terr := utilsexec.Exec(ctx, cmd[0], cmd[1:]...)\n\tif err != nil {\n\t\treturn nodeexecExitCode(err)\n\t}\n",
	},
	{
		file: "pkg/kwok/server/debugging_exec_other.go",
		old:  "\terr = utilsexec.Exec(ctx, cmd[0], cmd[1:]...)\n\tif err != nil {\n\t\treturn err\n\t}\n",
		new:  "\terr = utilsexec.Exec(ctx, cmd[0], cmd[1:]...)\n\tif err != nil {\n\t\treturn nodeexecExitCode(err)\n\t}\n",
	},
	{
		file: "pkg/kwok/server/debugging_attach.go",
		old:  "\tpodName, podNamespace := pod[0], pod[1]\n\tattach, err := getPodAttach(",
		new:  "\tpodName, podNamespace := pod[0], pod[1]\n\tif err := s.nodeexecAttach(ctx, name, podName, podNamespace, containerName, in, stdout, stderr, tty, resize); err != errNodeexecNoCommand {\n\t\treturn err\n\t}\n\tattach, err := getPodAttach(",
	},
	{
		file: "pkg/utils/exec/exec.go",
		old:  "\t\t\t\t_, _ = io.Copy(inPipe, opt.In)\n",
		new:  "\t\t\t\t_, _ = io.Copy(inPipe, opt.In)\n\t\t\t\t_ = inPipe.Close()\n",
	},
}

// kwokExtraFiles are added to kwok's source (by path in its module).
var kwokExtraFiles = map[string]string{
	"pkg/kwok/server/nodeexec_exec.go": `package server

// Added by nodeexec's test cluster (internal/testcluster/kwok_exec.go).

import (
	"context"
	"errors"
	"io"
	"os/exec"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
)

// errNodeexecNoCommand: the attached container has no command in its spec.
var errNodeexecNoCommand = errors.New("no command in the container's spec")

// nodeexecAttach runs an attached container's command and args (its spec's,
// containers or ephemeral containers) as ExecInContainer runs an exec's.
func (s *Server) nodeexecAttach(ctx context.Context, name, podName, podNamespace, container string, in io.Reader, stdout, stderr io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) error {
	pod := s.nodeexecPod(podName, podNamespace)
	if pod == nil {
		return errNodeexecNoCommand
	}
	var argv []string
	for _, c := range pod.Spec.Containers {
		if c.Name == container {
			argv = append(append(argv, c.Command...), c.Args...)
		}
	}
	for _, c := range pod.Spec.EphemeralContainers {
		if c.Name == container {
			argv = append(append(argv, c.Command...), c.Args...)
		}
	}
	if len(argv) == 0 {
		return errNodeexecNoCommand
	}
	return s.ExecInContainer(ctx, name, "", container, argv, in, stdout, stderr, tty, resize, 0)
}

// nodeexecPod is the pod from kwok's pod cache, or nil when it is not there
// within 10 s. The cache is lazy: the first lookup starts its informer, and a
// pod is found once that informer has listed the pods.
func (s *Server) nodeexecPod(podName, podNamespace string) *corev1.Pod {
	if s.podCacheGetter == nil {
		return nil
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if p, ok := s.podCacheGetter.GetWithNamespace(podName, podNamespace); ok && p != nil {
			return p
		}
		if time.Now().After(deadline) {
			return nil
		}
	}
}

// nodeexecExitError is a command's exit status as cri-streaming's ServeExec
// recognises it (k8s.io/utils/exec.ExitError): it sends the code to the client.
type nodeexecExitError struct {
	err  error
	code int
}

func (e nodeexecExitError) Error() string   { return e.err.Error() }
func (e nodeexecExitError) String() string  { return e.err.Error() }
func (e nodeexecExitError) Exited() bool    { return true }
func (e nodeexecExitError) ExitStatus() int { return e.code }
func (e nodeexecExitError) Unwrap() error   { return e.err }

// nodeexecExitCode returns err as a nodeexecExitError when it holds a command's
// exit status: its exit code, or 128+N when signal N killed it (as a shell
// reports it); other errors as they are.
func nodeexecExitCode(err error) error {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return err
	}
	if ee.Exited() {
		return nodeexecExitError{err: ee, code: ee.ExitCode()}
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return nodeexecExitError{err: ee, code: 128 + int(ws.Signal())}
	}
	return err
}

// nodeexecPodEnv is the environment a kubelet's exec would give a command in the
// pod's container (its literal values; valueFrom is not resolved), plus the
// node's and the pod's names.
func (s *Server) nodeexecPodEnv(podName, podNamespace, container string) []string {
	env := []string{"` + KwokEnvPodName + `=" + podName, "` + KwokEnvPodNamespace + `=" + podNamespace}
	pod := s.nodeexecPod(podName, podNamespace)
	if pod == nil {
		return env
	}
	env = append(env, "` + KwokEnvNodeName + `="+pod.Spec.NodeName)
	var vars []corev1.EnvVar
	for _, c := range pod.Spec.Containers {
		if c.Name == container {
			vars = append(vars, c.Env...)
		}
	}
	for _, c := range pod.Spec.EphemeralContainers {
		if c.Name == container {
			vars = append(vars, c.Env...)
		}
	}
	for _, e := range vars {
		if e.ValueFrom == nil {
			env = append(env, e.Name+"="+e.Value)
		}
	}
	return env
}
`,
}

// kwokExecArgs are kwok's server flags with Exec: TLS on the simulated nodes'
// kubelet endpoint, which node-initialize writes into every node's status.
func kwokExecArgs(stateDir string) []string {
	return []string{
		"--server-address=" + kwokNodeIP + ":" + strconv.Itoa(kwokKubeletPort),
		"--node-port=" + strconv.Itoa(kwokKubeletPort),
		"--tls-cert-file=" + filepath.Join(stateDir, "serving.crt"),
		"--tls-private-key-file=" + filepath.Join(stateDir, "serving.key"),
	}
}

// kwokExecDocs are the kwok resources that make simulated pods answer exec,
// attach, logs and port-forward (for every pod: no selector).
func kwokExecDocs() []map[string]any {
	doc := func(kind string, spec map[string]any) map[string]any {
		return map[string]any{
			"apiVersion": "kwok.x-k8s.io/v1alpha1",
			"kind":       kind,
			"metadata":   map[string]any{"name": "nodeexec"},
			"spec":       spec,
		}
	}
	return []map[string]any{
		// the command as the client gives it, run by kwok in the sandbox
		doc("ClusterExec", map[string]any{"execs": []any{map[string]any{"local": map[string]any{"workDir": "/"}}}}),
		doc("ClusterAttach", map[string]any{"attaches": []any{map[string]any{"logsFile": kwokLogsFile}}}),
		doc("ClusterLogs", map[string]any{"logs": []any{map[string]any{"logsFile": kwokLogsFile, "follow": false}}}),
		// every port of every pod: the one agent in the sandbox
		doc("ClusterPortForward", map[string]any{"forwards": []any{map[string]any{
			"target": map[string]any{"address": "127.0.0.1", "port": KwokAgentPort},
		}}}),
	}
}

// heldPodExprs keep a stage off nodeexec's pods that wait for an exec or a
// port-forward rather than run to completion: the resident agents (label
// app.kubernetes.io/component=agent, `nodeexec agent serve`: a DaemonSet's pod
// that ended would be recreated, over and over) always; with exec also the
// nsenter and runtime agents' holders (`nodeexec agent hold`) and the debug
// pod's (`sleep N`).
func heldPodExprs(exec bool) []any {
	exprs := []any{map[string]any{"key": `.metadata.labels["app.kubernetes.io/component"]`, "operator": "NotIn", "values": []any{"agent"}}}
	if exec {
		exprs = append(exprs,
			map[string]any{"key": ".spec.containers[0].command[2]", "operator": "NotIn", "values": []any{"hold"}},
			map[string]any{"key": ".spec.containers[0].command[0]", "operator": "NotIn", "values": []any{"sleep"}})
	}
	return exprs
}

// checkAgentBinary checks that path is a static Linux ELF executable (the agent
// image's binary: nothing else is in the sandbox's /usr/local/bin).
func checkAgentBinary(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("testcluster: kwok AgentBinary %q: %w: give a static nodeexec binary (make build: bin/nodeexec)", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("testcluster: kwok AgentBinary %q is dynamically linked: build it with CGO_ENABLED=0 (make build)", path)
		}
	}
	return nil
}

// kwokSandboxScript sets up the sandbox inside the new namespaces (run by sh as
// PID 1 of the new PID namespace) and execs the init. Arguments: the root
// directory (an empty directory of the host: the tmpfs is mounted on it in the
// sandbox's mount namespace only), the nodeexec binary, the pause binary, kwok's
// state directory and kwok's binary (both bound at the same paths inside).
const kwokSandboxScript = `set -eu
R=$1 AGENT=$2 PAUSE=$3 STATE=$4 KWOK=$5
echo ` + KwokSandboxHostname + ` > /proc/sys/kernel/hostname
mount -t tmpfs -o mode=0755,size=512m nodeexec-kwok-sandbox "$R"
rootfs() {
	for d in bin sbin lib lib32 lib64 libx32 usr etc; do
		if [ -L "/$d" ]; then ln -s "$(readlink "/$d")" "$1/$d"
		elif [ -d "/$d" ]; then mkdir "$1/$d"; mount --rbind "/$d" "$1/$d"; mount -o remount,bind,ro "$1/$d"
		fi
	done
	mkdir -p "$1/proc" "$1/dev" "$1/tmp" "$1/run" "$1/root" "$1/var/tmp" "$1/var/log"
	chmod 1777 "$1/tmp" "$1/var/tmp"
	mount --rbind /dev "$1/dev"
}
rootfs "$R"
mkdir -p "$R/host"
mount -t tmpfs -o mode=0755,size=64m nodeexec-kwok-host "$R/host"
rootfs "$R/host"
mount -t tmpfs -o mode=0755,size=1m nodeexec-kwok-bin "$R/usr/local/bin"
touch "$R` + kwokAgentPath + `"
mount --bind "$AGENT" "$R` + kwokAgentPath + `"
mkdir -p "$R` + kwokCopiedAgentDir + `"
touch "$R` + kwokCopiedAgentPath + `"
mount --bind "$AGENT" "$R` + kwokCopiedAgentPath + `"
mkdir -p "$R$STATE" "$R$(dirname "$KWOK")" "$R$(dirname ` + kwokLogsFile + `)" "$R/tmp/nodeexec/spool"
mount --bind "$STATE" "$R$STATE"
mount -o remount,bind,ro "$R$STATE"
touch "$R$KWOK" "$R` + kwokLogsFile + `"
mount --bind "$KWOK" "$R$KWOK"
cp "$PAUSE" "$R/sbin-init"
mkdir "$R/.old"
cd "$R"
pivot_root . .old
cd /
mount -t proc proc /proc
mount -t proc proc /host/proc
umount -l /.old
rmdir /.old
exec /sbin-init
`

// kwokSandboxRoot is the host directory the sandbox's root tmpfs is mounted on
// (inside the sandbox's mount namespace only: on the host it stays empty).
func (l layout) kwokSandboxRoot() string { return filepath.Join(l.kwokStateDir(), "sandbox-root") }

// startKwokSandbox starts the sandbox's init (a recorded process, so `testcluster
// down` stops it with the nodes' inits) and waits until it runs.
func (r *runner) startKwokSandbox(ctx context.Context, agentBin, pauseBin, kwokBin string) (procRecord, error) {
	if rec, err := r.l.readProc(procKwokSandbox); err == nil && rec.alive() {
		return rec, nil
	}
	root := r.l.kwokSandboxRoot()
	if err := os.MkdirAll(root, 0o755); err != nil {
		return procRecord{}, fmt.Errorf("kwok sandbox: %w", err)
	}
	argv := []string{"unshare", "--pid", "--fork", "--mount", "--uts", "--ipc", "--propagation", "private", "--",
		"sh", "-c", kwokSandboxScript, "kwok-sandbox", root, agentBin, pauseBin, r.l.kwokStateDir(), kwokBin}
	rec, err := r.startDaemon(procKwokSandbox, nsTarget{Netns: netnsPath(hubNetns)}, argv, true)
	if err != nil {
		return rec, err
	}
	logPath := filepath.Join(r.l.logs, procKwokSandbox+".log")
	err = poll(ctx, 20*time.Second, 20*time.Millisecond, "kwok sandbox init", func(context.Context) (bool, error) {
		if !rec.alive() {
			return false, errors.New("the sandbox's setup failed")
		}
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", rec.PID))
		return err == nil && strings.HasSuffix(exe, "/sbin-init"), err
	})
	if err != nil {
		r.stopProcs(5*time.Second, procKwokSandbox)
		return rec, fmt.Errorf("kwok sandbox: %w (log %s: %s)", err, logPath, tail(logPath, 5))
	}
	return rec, nil
}

// inKwokSandbox is argv run inside the sandbox of init (all its namespaces).
func inKwokSandbox(init procRecord, argv []string) []string {
	return append([]string{"nsenter", "-t", strconv.Itoa(init.PID), "-m", "-u", "-i", "-n", "-p", "--"}, argv...)
}

// ensureKwokNodeIP gives the hub network namespace kwokNodeIP (on lo), where kwok
// serves the simulated nodes' kubelet endpoint.
//
// The address has scope host: the API server and kwok, both in the hub, reach it,
// and the kernel never picks it as the source address of a connection that
// leaves the hub. With scope global it was picked for every new connection to
// another real node (lo comes first, and the routes to the nodes name no
// source), which has no route back to it: after its kubelet restarted, the API
// server's exec, attach, logs and port-forward to that node timed out dialling
// it. An address of an earlier build (scope global) is replaced.
func (r *runner) ensureKwokNodeIP(ctx context.Context) error {
	out, err := r.run(ctx, "ip", "-n", hubNetns, "-o", "addr", "show", "dev", "lo")
	if err != nil {
		return err
	}
	addr := kwokNodeIP + "/32"
	if strings.Contains(out, " "+addr+" scope host ") {
		return nil
	}
	if strings.Contains(out, " "+addr+" ") {
		if err := r.ip(ctx, "-n", hubNetns, "addr", "del", addr, "dev", "lo"); err != nil {
			return err
		}
	}
	return r.ip(ctx, "-n", hubNetns, "addr", "add", addr, "dev", "lo", "scope", "host")
}

// kwokServingCert writes kwok's serving certificate (for kwokNodeIP, from the
// cluster CA) into dir as serving.crt and serving.key.
func (r *runner) kwokServingCert(dir string) error {
	c, err := ensureCA(r.l.pki)
	if err != nil {
		return err
	}
	return c.ensureCert(dir, certSpec{Name: "serving", CommonName: "kwok", Server: true, IPs: []string{kwokNodeIP}})
}

// kwokHealthClient returns the URL of kwok's /healthz and a client for it,
// dialling inside the hub network namespace.
func (r *runner) kwokHealthClient(exec bool) (string, *http.Client, error) {
	tr := &http.Transport{DialContext: netnsDialer(netnsPath(hubNetns))}
	if !exec {
		return "http://" + kwokServerAddr + "/healthz", &http.Client{Timeout: 2 * time.Second, Transport: tr}, nil
	}
	pem, err := os.ReadFile(filepath.Join(r.l.pki, "ca.crt"))
	if err != nil {
		return "", nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return "https://" + kwokNodeIP + ":" + strconv.Itoa(kwokKubeletPort) + "/healthz", &http.Client{Timeout: 2 * time.Second, Transport: tr}, nil
}
