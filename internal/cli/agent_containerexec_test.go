package cli

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const testCID = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// selfRuntime is a CRI server that reports every container as running with
// this test process's PID.
type selfRuntime struct {
	runtimeapi.UnimplementedRuntimeServiceServer
}

func (selfRuntime) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{RuntimeName: "selfrt", RuntimeVersion: "v1"}, nil
}

func (selfRuntime) ContainerStatus(_ context.Context, req *runtimeapi.ContainerStatusRequest) (*runtimeapi.ContainerStatusResponse, error) {
	return &runtimeapi.ContainerStatusResponse{
		Status: &runtimeapi.ContainerStatus{Id: req.ContainerId, State: runtimeapi.ContainerState_CONTAINER_RUNNING},
		Info:   map[string]string{"info": `{"pid":` + strconv.Itoa(os.Getpid()) + `}`},
	}, nil
}

func runContainerExec(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Run(t.Context(), Streams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut},
		append([]string{"nodeexec", "agent", "container-exec"}, args...))
	return code, out.String(), errOut.String()
}

func TestAgentContainerExecValidation(t *testing.T) {
	empty := t.TempDir()
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no id", []string{"--", "true"}, 2, `Required flag "container-id" not set`},
		{"bad id", []string{"--container-id", "nothex", "--", "true"}, 125, `nodeexec agent: invalid container ID "nothex"`},
		{"no command", []string{"--container-id", testCID}, 125, "no command"},
		{"bad namespaces", []string{"--container-id", testCID, "--namespaces", "mnt,netz", "--", "true"}, 125, `unknown namespace "netz"`},
		{"bad env", []string{"--container-id", testCID, "-e", "=x", "--", "true"}, 125, "=x"},
		{"not found", []string{"--container-id", testCID, "--host-root", empty, "--runtime-endpoint", "/run/none.sock", "--no-proc-fallback", "--", "true"}, 125,
			"container not found: container " + testCID + ": no runtime socket answered for it (/run/none.sock: absent;"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runContainerExec(t, tc.args...)
			if code != tc.code || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", code, stderr, tc.code, tc.want)
			}
		})
	}
}

// TestAgentContainerExecRuns: with a CRI socket (under --host-root) that
// reports this process as the container, the command runs in its UTS
// namespace (our own: entering it is allowed), gets -e on top of the
// container's environment, and its exit code is the agent's; -v names the socket.
func TestAgentContainerExecRuns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root (setns needs CAP_SYS_ADMIN)")
	}
	root, err := os.MkdirTemp("", "cx")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	if err := os.MkdirAll(filepath.Join(root, "run"), 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", filepath.Join(root, "run/rt.sock"))
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(s, selfRuntime{})
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)

	code, stdout, stderr := runContainerExec(t, "-v", "--container-id", "containerd://"+testCID, "--host-root", root,
		"--runtime-endpoint", "/run/rt.sock", "--namespaces", "uts", "-e", "CX_VAR=v 1", "--", "sh", "-c", `echo "$CX_VAR"; test -n "$PATH"; exit 5`)
	if code != 5 || stdout != "v 1\n" {
		t.Errorf("exit %d, stdout %q, stderr %q; want 5 and \"v 1\"", code, stdout, stderr)
	}
	if want := "PID " + strconv.Itoa(os.Getpid()) + " from selfrt v1 at /run/rt.sock"; !strings.Contains(stderr, want) {
		t.Errorf("-v: stderr %q lacks %q", stderr, want)
	}
	code, _, stderr = runContainerExec(t, "--container-id", testCID, "--host-root", root, "--runtime-endpoint", "/run/rt.sock", "--namespaces", "uts", "--", "true")
	if code != 0 || stderr != "" {
		t.Errorf("without -v: exit %d, stderr %q", code, stderr)
	}
}

// TestAgentHold: the resident agent's holder waits until its context ends
// (SIGTERM, in the binary) and exits 0.
func TestAgentHold(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan int, 1)
	go func() {
		done <- Run(ctx, Streams{In: strings.NewReader(""), Out: &bytes.Buffer{}, ErrOut: &bytes.Buffer{}}, []string{"nodeexec", "agent", "hold"})
	}()
	select {
	case code := <-done:
		t.Fatalf("hold returned %d before its context ended", code)
	case <-time.After(200 * time.Millisecond):
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("hold exited %d after the context ended; want 0", code)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("hold did not return after its context ended")
	}
}
