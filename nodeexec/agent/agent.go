// Package agent holds what nodeexec's agent pods share: the agent image and
// the version of its command line, the command lines themselves (`nodeexec
// agent nsenter`, `hold`, the spool and `attach`), the privileged hostPID pod
// that holds the agent (BuildPod), the node's root filesystem mount, and the
// agent's own failure (ErrNotRun). The nsenter and runtime backends and the
// resident agents build on it; it imports no backend, and no backend imports
// another.
//
// The program that runs inside these pods is the nodeexec binary's hidden
// `agent` command (package internal/agentcmd); Path is where the image holds it.
package agent

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/nodeexec"
)

// Version versions the agent's command line (`nodeexec agent nsenter
// --target PID --namespaces LIST -- CMD...`), which the backends and the
// image must agree on. It is bumped, and with it DefaultImage's tag, whenever
// that interface changes.
const Version = "0.2.0"

// DefaultImage is the agent image: the static nodeexec binary at Path and
// nothing else (FROM scratch). No public registry serves it: push it to
// yours with `nodeexec image push REGISTRY/REPOSITORY` and set the backend's
// Options.Image to the digest reference it prints (the local test cluster's
// registry serves this name: `make agent-image`). Never ":latest", so that
// the default pull policy IfNotPresent applies.
const DefaultImage = "nodeexec.local/agent:" + Version

// HostRoot is where an agent pod that needs it (the runtime backend's, the
// resident agents') mounts the node's root filesystem (hostPath "/",
// read-only): the agent dials the container runtime's sockets under it.
const HostRoot = "/host"

// HostRootVolume is the name of that volume.
const HostRootVolume = "host-root"

// HostRootVolumeSource is the hostPath volume of the node's root ("/").
func HostRootVolumeSource() corev1.Volume {
	return corev1.Volume{Name: HostRootVolume, VolumeSource: corev1.VolumeSource{
		HostPath: &corev1.HostPathVolumeSource{Path: "/", Type: ptr.To(corev1.HostPathDirectory)},
	}}
}

// HostRootMount mounts HostRootVolume read-only at HostRoot. The bind is
// recursive, so sockets in /run (a tmpfs of its own) are seen, also ones
// created after the start (a restarted runtime). There is no mount
// propagation: HostToContainer would require "/" to be a shared or slave
// mount on the node, which it is not everywhere.
func HostRootMount() corev1.VolumeMount {
	return corev1.VolumeMount{
		Name:      HostRootVolume,
		MountPath: HostRoot,
		ReadOnly:  true,
	}
}

// ErrorExitCode is the agent's exit status when it could not run the
// command at all (container lookup or namespace entry failed), as docker
// run's 125; the reason is on its stderr. 126 and 127 keep their shell
// meanings (not executable, not found).
const ErrorExitCode = 125

// ErrNotRun: the agent ran but could not run the command (the container
// runtime did not know the container and the /proc scan failed, or entering
// its namespaces failed); the message is the agent's. Test with errors.Is.
var ErrNotRun = errors.New("the agent could not run the command")

// NotRunError turns the agent's ErrorExitCode into an error wrapping
// ErrNotRun with the agent's message (the last line of its stderr, from
// tail); other errors are returned unchanged.
func NotRunError(err error, tail *TailWriter) error {
	var ee *nodeexec.ExitError
	if !errors.As(err, &ee) || ee.Code != ErrorExitCode {
		return err
	}
	msg := tail.LastLine()
	if msg == "" {
		msg = fmt.Sprintf("exit code %d and no message", ErrorExitCode)
	}
	return fmt.Errorf("%w on node %q: %s", ErrNotRun, ee.Node, msg)
}

// TailWriter passes writes to W (when non-nil) and keeps the last 4 KiB.
type TailWriter struct {
	W   io.Writer
	mu  sync.Mutex
	buf []byte
}

// Write implements io.Writer.
func (t *TailWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > 4096 {
		t.buf = t.buf[len(t.buf)-4096:]
	}
	t.mu.Unlock()
	if t.W == nil {
		return len(p), nil
	}
	return t.W.Write(p)
}

// LastLine is the last non-empty line written.
func (t *TailWriter) LastLine() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := strings.Split(strings.TrimRight(string(t.buf), "\n"), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}
