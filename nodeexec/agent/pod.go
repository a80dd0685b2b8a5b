package agent

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/podexec"
	"github.com/nodeexec/nodeexec/nodeexec/spool"
	"github.com/nodeexec/nodeexec/nsenter"
)

// ContainerName is the name of the container in the backend's pods.
const ContainerName = "agent"

// Path is where the agent image holds the nodeexec binary.
const Path = "/usr/local/bin/nodeexec"

// SpoolPath is where the agent image holds nodeexec-spool, the small
// program (a few MB, no client library) that runs `agent run` and `agent
// attach` command lines in the user's image for the debugpod backend:
// `agent copy` copies it rather than nodeexec when it is there, and an
// image volume's command lines run it (ImageVolumePath). Images built by
// `nodeexec image push` from a nodeexec binary without nodeexec-spool beside
// it lack it.
const SpoolPath = "/usr/local/bin/nodeexec-spool"

// Target is the PID whose namespaces the agent enters: PID 1 of the
// node, which a hostPID pod sees as PID 1 (the node's init).
const Target = 1

// PodBase is podexec.PodBase, the part every pod spec of nodeexec has (node,
// name, namespace, run ID, image, pull policy and secrets, priority class,
// requests, environment, deadline, command annotation), here so that a
// PodSpec is built with this package alone.
type PodBase = podexec.PodBase

// PodSpec is everything BuildPod needs; it holds no client.
type PodSpec struct {
	// PodBase is the pod's node (spec.nodeName), name, namespace, run ID,
	// image (the agent image: nodeexec at Path, nothing else needed), pull
	// policy and secrets, priority class, requests, environment (the agent
	// passes Env on to the command), deadline and command annotation.
	PodBase
	// HostNetwork and HostIPC put the pod in the node's network and IPC
	// namespaces (hostPID is always set). They matter only for the namespaces
	// the agent does not enter.
	HostNetwork, HostIPC bool
}

// BuildPod returns the agent pod, as kubectl-node-shell builds its pod:
// pinned to the node with spec.nodeName, tolerating every taint, hostPID,
// privileged (setns needs CAP_SYS_ADMIN and access to /proc/1/ns), and
// hostNetwork/hostIPC as s says; plus the managed-by and run-ID labels, the
// node, deadline and command annotations, activeDeadlineSeconds, no service
// account token, small requests, and a holder process (HoldArgv: the agent
// itself waits until the deadline or SIGTERM, so the image needs no sleep
// nor shell) in place of the command, which is run over exec with NsenterArgv.
// It is a pure function; errors name the invalid fields.
func BuildPod(s PodSpec) (*corev1.Pod, error) {
	pod, err := podexec.HolderPod(podexec.HolderPodSpec{PodBase: s.PodBase, Container: ContainerName})
	if err != nil {
		return nil, err
	}
	pod.Spec.Containers[0].Command = HoldArgv(time.Duration(*pod.Spec.ActiveDeadlineSeconds) * time.Second)
	pod.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
	pod.Spec.HostPID = true
	pod.Spec.HostNetwork = s.HostNetwork
	pod.Spec.HostIPC = s.HostIPC
	return pod, nil
}

// HoldArgv is the holder process of the agent pods: the agent waiting until
// d has passed (0: forever) or it gets SIGTERM, then exiting 0, in place of
// `sleep`; unlike sleep as PID 1 it ends at once when the pod is deleted.
//
//	/usr/local/bin/nodeexec agent hold --duration 630s
func HoldArgv(d time.Duration) []string {
	argv := []string{Path, "agent", "hold"}
	if d > 0 {
		argv = append(argv, "--duration", strconv.FormatInt(int64(d.Round(time.Second)/time.Second), 10)+"s")
	}
	return argv
}

// NsenterArgv is what runs in the agent container over exec: the agent, which
// enters the namespaces of the node's PID 1 and runs argv there:
//
//	/usr/local/bin/nodeexec agent nsenter --target 1 --namespaces mnt,uts,... -- argv...
func NsenterArgv(namespaces []nsenter.Namespace, argv []string) []string {
	return append([]string{Path, "agent", "nsenter",
		"--target", strconv.Itoa(Target),
		"--namespaces", nsenter.JoinNamespaces(namespaces),
		"--"}, argv...)
}

// WithTimeout returns a copy of the agent command line argv (NsenterArgv's,
// or any `Path agent SUBCOMMAND ...` whose subcommand has --timeout:
// nsenter, container-exec) with `--timeout D` (whole seconds, rounded up)
// inserted after the subcommand: the agent then ends the command's process
// group after d, and exits 124. ok is false, and argv returned as is, when
// argv is not such a command line.
func WithTimeout(argv []string, d time.Duration) (out []string, ok bool) {
	if !isAgentArgv(argv) {
		return argv, false
	}
	secs := int64(math.Ceil(d.Seconds()))
	out = append(slices.Clone(argv[:3]), "--timeout", strconv.FormatInt(secs, 10)+"s")
	return append(out, argv[3:]...), true
}

// SpoolMissingExitCode is the exit status of CheckSpoolArgv's command when
// the spool does not exist.
const SpoolMissingExitCode = 3

// WithSpool returns a copy of the agent command line argv (as for
// WithTimeout) with `--spool DIR` inserted after the subcommand: the
// agent then keeps the command's output and exit status in dir, in the agent
// container, so that a client whose stream was cut gets them with
// AttachArgv (see package nodeexec/spool). ok is false, and argv returned as
// is, when argv is not an agent command line.
func WithSpool(argv []string, dir string) (out []string, ok bool) {
	return withSpoolAt(Path, argv, dir)
}

// withSpoolAt is WithSpool for the nodeexec binary at bin.
func withSpoolAt(bin string, argv []string, dir string) (out []string, ok bool) {
	if !isAgentArgvAt(bin, argv) {
		return argv, false
	}
	out = append(slices.Clone(argv[:3]), "--spool", dir)
	return append(out, argv[3:]...), true
}

// AttachArgv is the command line that streams the spool in dir from the
// offsets (bytes of stdout and stderr the client already received) and
// exits with the command's status:
//
//	/usr/local/bin/nodeexec agent attach --spool DIR --stdout-offset N --stderr-offset M
func AttachArgv(dir string, stdoutOffset, stderrOffset int64) []string {
	return attachArgv(Path, dir, stdoutOffset, stderrOffset)
}

func attachArgv(bin, dir string, stdoutOffset, stderrOffset int64) []string {
	return []string{bin, "agent", "attach", "--spool", dir,
		"--stdout-offset", strconv.FormatInt(stdoutOffset, 10), "--stderr-offset", strconv.FormatInt(stderrOffset, 10)}
}

// CheckSpoolArgv is the command line that exits 0 when dir is a spool and
// SpoolMissingExitCode when it is not.
//
//	/usr/local/bin/nodeexec agent attach --spool DIR --check
func CheckSpoolArgv(dir string) []string { return checkSpoolArgv(Path, dir) }

func checkSpoolArgv(bin, dir string) []string {
	return []string{bin, "agent", "attach", "--spool", dir, "--check"}
}

// StopSpoolArgv is the command line that ends the command running under the
// spool in dir (SIGTERM to its agent, see spool.Stop) and exits 0 once its
// exit status is recorded:
//
//	/usr/local/bin/nodeexec agent attach --spool DIR --stop
func StopSpoolArgv(dir string) []string { return stopSpoolArgv(Path, dir) }

func stopSpoolArgv(bin, dir string) []string {
	return []string{bin, "agent", "attach", "--spool", dir, "--stop"}
}

// isAgentArgv reports whether argv is `Path agent SUBCOMMAND ...`.
func isAgentArgv(argv []string) bool { return isAgentArgvAt(Path, argv) }

// isAgentArgvAt reports whether argv is `bin agent SUBCOMMAND ...`.
func isAgentArgvAt(bin string, argv []string) bool {
	return len(argv) >= 3 && argv[0] == bin && argv[1] == "agent" && !strings.HasPrefix(argv[2], "-")
}

// SpoolFor returns the command line that runs the agent command line argv
// for req under a spool named name in the agent container
// (spool.Path(name): spool.DefaultParent/name, WithSpool; name must pass
// spool.CheckName, or the agent refuses the command line), and the podexec.Resume that reads
// that spool after a cut stream (and stops its command, StopSpoolArgv). For a request with a TTY (an interactive
// session, which cannot be resumed) or a command line that is not the
// agent's, it returns argv and nil.
func SpoolFor(argv []string, name string, req nodeexec.Request) ([]string, *podexec.Resume) {
	return SpoolAt(Path, argv, name, req)
}

// SpoolAt is SpoolFor for the nodeexec binary at bin rather than Path:
// argv is `bin agent SUBCOMMAND ...` (RunArgv's, for the debugpod
// backend's copy at CopiedPath), and the Resume's command lines run bin
// too.
func SpoolAt(bin string, argv []string, name string, req nodeexec.Request) ([]string, *podexec.Resume) {
	if req.TTY {
		return argv, nil
	}
	dir := spool.Path(name)
	out, ok := withSpoolAt(bin, argv, dir)
	if !ok {
		return argv, nil
	}
	return out, &podexec.Resume{
		Check:        checkSpoolArgv(bin, dir),
		CheckMissing: SpoolMissingExitCode,
		Attach: func(stdoutOffset, stderrOffset int64) []string {
			return attachArgv(bin, dir, stdoutOffset, stderrOffset)
		},
		Stop: stopSpoolArgv(bin, dir),
	}
}

// CopiedDir is where the debugpod backend's agent container puts the
// program its command lines run (CopyArgv) for the user's container, which
// mounts the same emptyDir volume there; CopiedPath is the program:
// nodeexec-spool (SpoolPath in the image), or the nodeexec binary when the
// image has no nodeexec-spool. Both run RunArgv's and SpoolAt's command
// lines.
const (
	CopiedDir  = "/nodeexec-agent"
	CopiedPath = CopiedDir + "/nodeexec"
	// ImageVolumePath is the program when the agent image itself is
	// mounted at CopiedDir (an image volume, debugpod.Options.AgentImageVolume):
	// SpoolPath inside it.
	ImageVolumePath = CopiedDir + SpoolPath
)

// CopyArgv is the command of the debugpod backend's agent container: it
// copies nodeexec-spool (SpoolPath), else the nodeexec binary, to to
// (CopiedPath), whole or not at all, and exits 0.
//
//	/usr/local/bin/nodeexec agent copy --to /nodeexec-agent/nodeexec
func CopyArgv(to string) []string { return []string{Path, "agent", "copy", "--to", to} }

// RunArgv is the command line that runs argv as it is, in the container it
// is run in, under the nodeexec binary at bin (the debugpod backend:
// CopiedPath in the user's image); SpoolAt adds the spool:
//
//	BIN agent run -- argv...
//
// The command sees the container's root, user, environment and working
// directory, as it would run directly; its exit status is the agent's.
func RunArgv(bin string, argv []string) []string {
	return append([]string{bin, "agent", "run", "--"}, argv...)
}

// ContainerExecArgs are the parts of the runtime backend's agent command line
// (ContainerExecArgv).
type ContainerExecArgs struct {
	// ContainerID is the target's runtime ID ("containerd://...").
	ContainerID string
	// Endpoints are extra runtime sockets (host paths).
	Endpoints []string
	// Namespaces to enter.
	Namespaces []nsenter.Namespace
	// NoProcFallback turns off the agent's /proc/*/cgroup scan.
	NoProcFallback bool
	// Env is set on top of the target container's environment. It is
	// never on the command line: ContainerExecArgv gives EnvFromAgentFlag,
	// and the caller puts EncodeExecEnv(Env) in the agent's environment as
	// ExecEnvVar (the runtime backend's pod: its container's environment;
	// a resident agent: WireRequest.Env).
	Env map[string]string
	// Argv is the command.
	Argv []string
}

// ContainerExecArgv is what runs in the agent container over exec:
//
//	/usr/local/bin/nodeexec agent container-exec --container-id ID
//	    [--runtime-endpoint PATH]... --namespaces LIST [--no-proc-fallback]
//	    [--env-from-agent] -- argv...
//
// with --env-from-agent when a.Env is set: the variables' names and values
// are not on it (see ExecEnvVar).
func ContainerExecArgv(a ContainerExecArgs) []string {
	out := []string{Path, "agent", "container-exec", "--container-id", a.ContainerID}
	for _, ep := range a.Endpoints {
		out = append(out, "--runtime-endpoint", ep)
	}
	nss := make([]string, len(a.Namespaces))
	for i, n := range a.Namespaces {
		nss[i] = string(n)
	}
	out = append(out, "--namespaces", strings.Join(nss, ","))
	if a.NoProcFallback {
		out = append(out, "--no-proc-fallback")
	}
	if len(a.Env) > 0 {
		out = append(out, EnvFromAgentFlag)
	}
	return append(append(out, "--"), a.Argv...)
}

// WithEnvFromAgent returns a copy of the agent command line argv
// (NsenterArgv's) with EnvFromAgentFlag inserted after the subcommand: the
// agent adds the variables of its ExecEnvVar to the command's environment
// (a resident agent's listener sets it from WireRequest.Env). A pure
// function.
func WithEnvFromAgent(argv []string) []string {
	if !isAgentArgv(argv) {
		return slices.Clone(argv)
	}
	return append(append(slices.Clone(argv[:3]), EnvFromAgentFlag), argv[3:]...)
}

// NsenterEnvFromAgent reports whether argv is an nsenter command line that
// WithEnvFromAgent made: one an agent from before AnnotationNsenterEnv
// cannot run. A pure function.
func NsenterEnvFromAgent(argv []string) bool {
	return isAgentArgv(argv) && argv[2] == "nsenter" && len(argv) > 3 && argv[3] == EnvFromAgentFlag
}

// ExecEnvVar is the variable of the agent's own environment that carries a
// request's variables (nodeexec.Request.Env, -e) to `agent container-exec
// --env-from-agent` (EnvFromAgentFlag): a JSON object of names to values
// (EncodeExecEnv). The runtime backend's agent pod has it in its
// container's environment; a resident agent sets it in the environment of
// the process it starts for a request (WireRequest.Env). The values are
// never on a command line: not in the exec request's URL (the API server's
// audit log), nor in the node's process list.
const ExecEnvVar = "NODEEXEC_EXEC_ENV"

// EnvFromAgentFlag is container-exec's flag that adds the variables of
// ExecEnvVar to the container's environment.
const EnvFromAgentFlag = "--env-from-agent"

// EncodeExecEnv is ExecEnvVar's value for env: a JSON object.
func EncodeExecEnv(env map[string]string) string {
	b, _ := json.Marshal(env) // a map of strings always encodes
	return string(b)
}

// DecodeExecEnv parses ExecEnvVar's value and checks its variables
// (CheckExecEnv).
func DecodeExecEnv(v string) (map[string]string, error) {
	var env map[string]string
	if err := json.Unmarshal([]byte(v), &env); err != nil {
		return nil, fmt.Errorf("%s: want a JSON object of names to values: %w", ExecEnvVar, err)
	}
	return env, CheckExecEnv(env)
}

// CheckExecEnv checks that env's names are non-empty and hold no '=' or
// NUL, and that its values hold no NUL: what an environment can hold.
func CheckExecEnv(env map[string]string) error {
	for _, k := range slices.Sorted(maps.Keys(env)) {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return fmt.Errorf("environment variable name %q: give a non-empty name without '=' or NUL", k)
		}
		if strings.ContainsRune(env[k], 0) {
			return fmt.Errorf("environment variable %s: its value holds a NUL byte, which no environment variable can hold", k)
		}
	}
	return nil
}

// ReportsNotRun is whether the agent command line argv reports with
// ErrorExitCode that it could not run the command, so that NotRunError
// applies: ContainerExecArgv's does; for NsenterArgv's, 125 may also be the
// command's own exit code.
func ReportsNotRun(argv []string) bool {
	return len(argv) > 2 && argv[0] == Path && argv[1] == "agent" && argv[2] == "container-exec"
}
