package cri

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const (
	id1 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	id2 = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"
)

// fakeRuntime answers ContainerStatus from a table of containers.
type fakeRuntime struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	containers map[string]fakeContainer
	calls      chan *runtimeapi.ContainerStatusRequest
}

type fakeContainer struct {
	state runtimeapi.ContainerState
	info  string // the verbose "info" JSON; omitted when empty
}

func (f *fakeRuntime) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{RuntimeName: "fakerd", RuntimeVersion: "v9.9"}, nil
}

func (f *fakeRuntime) ContainerStatus(_ context.Context, req *runtimeapi.ContainerStatusRequest) (*runtimeapi.ContainerStatusResponse, error) {
	if f.calls != nil {
		f.calls <- req
	}
	c, ok := f.containers[req.ContainerId]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "an error occurred when try to find container %q: not found", req.ContainerId)
	}
	resp := &runtimeapi.ContainerStatusResponse{Status: &runtimeapi.ContainerStatus{Id: req.ContainerId, State: c.state}}
	if req.Verbose && c.info != "" {
		resp.Info = map[string]string{"info": c.info}
	}
	return resp, nil
}

// serve starts f on a unix socket at root+path and returns path.
func serve(t *testing.T, root, path string, f *fakeRuntime) string {
	t.Helper()
	full := filepath.Join(root, path)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", full)
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(s, f)
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)
	return path
}

// shortTemp is a temporary directory with a short path: unix socket paths are
// limited to 108 bytes, which t.TempDir() can exceed.
func shortTemp(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "cri")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func running(pid string) fakeContainer {
	return fakeContainer{state: runtimeapi.ContainerState_CONTAINER_RUNNING, info: `{"sandboxID":"abc","pid":` + pid + `,"runtimeSpec":{}}`}
}

func TestParseID(t *testing.T) {
	for in, want := range map[string]string{
		"containerd://" + id1: id1,
		"cri-o://" + id1:      id1,
		id1:                   id1,
		id1[:12]:              id1[:12],
	} {
		got, err := ParseID(in)
		if err != nil || got != want {
			t.Errorf("ParseID(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "containerd://", "xyz", id1[:11], strings.ToUpper(id1), id1 + "0", "docker://../../etc"} {
		if _, err := ParseID(in); !errors.Is(err, ErrInvalidID) {
			t.Errorf("ParseID(%q) error = %v; want ErrInvalidID", in, err)
		}
	}
}

func TestLookupCRI(t *testing.T) {
	root := shortTemp(t)
	// The first socket does not know the container, the second does: the
	// lookup goes on past a NotFound and reports the socket that answered.
	calls := make(chan *runtimeapi.ContainerStatusRequest, 10)
	a := serve(t, root, "/run/a/a.sock", &fakeRuntime{containers: map[string]fakeContainer{id2: running("7")}, calls: calls})
	b := serve(t, root, "/run/b.sock", &fakeRuntime{containers: map[string]fakeContainer{id1: running("4242")}, calls: calls})
	res, err := Lookup(t.Context(), Options{
		ContainerID:        "containerd://" + id1,
		Endpoints:          []string{"/run/missing.sock", "unix://" + a, b},
		NoDefaultEndpoints: true,
		HostRoot:           root,
		NoProcFallback:     true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.PID != 4242 || res.Method != MethodCRI || res.Endpoint != b || res.Runtime != "fakerd v9.9" || res.ID != id1 {
		t.Errorf("Lookup = %+v; want PID 4242 via %s", res, b)
	}
	var eps []string
	for _, at := range res.Attempts {
		eps = append(eps, at.Endpoint)
	}
	if diff := cmp.Diff([]string{"/run/missing.sock", a, b}, eps); diff != "" {
		t.Errorf("attempts (-want +got):\n%s", diff)
	}
	if !errors.Is(res.Attempts[0].Err, errAbsent) || !errors.Is(res.Attempts[1].Err, errUnknown) || res.Attempts[2].Err != nil {
		t.Errorf("attempt errors = %v, %v, %v", res.Attempts[0].Err, res.Attempts[1].Err, res.Attempts[2].Err)
	}
	close(calls)
	for req := range calls {
		if !req.Verbose || req.ContainerId != id1 {
			t.Errorf("ContainerStatus request %+v: want Verbose and the bare ID", req)
		}
	}
}

func TestLookupNotRunning(t *testing.T) {
	root := shortTemp(t)
	ep := serve(t, root, "/run/containerd/containerd.sock", &fakeRuntime{containers: map[string]fakeContainer{
		id1: {state: runtimeapi.ContainerState_CONTAINER_EXITED, info: `{"pid":0}`},
		id2: {state: runtimeapi.ContainerState_CONTAINER_RUNNING, info: `{"pid":0}`},
	}})
	for _, id := range []string{id1, id2} {
		// The default endpoint list finds the socket under HostRoot.
		_, err := Lookup(t.Context(), Options{ContainerID: id, HostRoot: root, ProcRoot: filepath.Join(root, "noproc")})
		if !errors.Is(err, ErrNotRunning) || !strings.Contains(err.Error(), ep) {
			t.Errorf("Lookup(%s) error = %v; want ErrNotRunning naming %s", id[:6], err, ep)
		}
	}
}

func TestLookupNotFound(t *testing.T) {
	root := shortTemp(t)
	serve(t, root, "/run/crio/crio.sock", &fakeRuntime{containers: map[string]fakeContainer{id2: running("9")}})
	notSock := filepath.Join(root, "run/k0s/containerd.sock")
	if err := os.MkdirAll(filepath.Dir(notSock), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(notSock, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Lookup(t.Context(), Options{ContainerID: id1, HostRoot: root, NoProcFallback: true})
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("error = %v; want ErrNotFound", err)
	}
	for _, want := range []string{"/run/crio/crio.sock: runtime does not know the container", "/run/containerd/containerd.sock: absent", "/run/k0s/containerd.sock: not a socket", "fallback is off"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if _, err := Lookup(t.Context(), Options{ContainerID: "nope"}); !errors.Is(err, ErrInvalidID) {
		t.Errorf("bad ID: error = %v; want ErrInvalidID", err)
	}
}

func TestLookupCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	root := shortTemp(t)
	_, err := Lookup(ctx, Options{ContainerID: id1, HostRoot: root})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error = %v; want context.Canceled", err)
	}
}

// writeProc makes a /proc-like tree: pid -> (ppid, cgroup file content).
func writeProc(t *testing.T, procs map[string][2]string) string {
	t.Helper()
	root := t.TempDir()
	for pid, p := range procs {
		dir := filepath.Join(root, pid)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		stat := pid + " (sh (x) y) S " + p[0] + " 1 1 0 -1\n"
		if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "cgroup"), []byte(p[1]), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Entries that are not processes are ignored.
	if err := os.WriteFile(filepath.Join(root, "meminfo"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

func TestScanProc(t *testing.T) {
	v2 := "0::/kubepods/besteffort/pod1234/" + id1 + "\n"
	v1 := "12:pids:/kubepods.slice/cri-containerd-" + id1 + ".scope\n11:cpu:/\n"
	proc := writeProc(t, map[string][2]string{
		"1":   {"0", "0::/init.scope\n"},
		"90":  {"1", "0::/system.slice/containerd.service\n"}, // shim: holds the ID only in its argv
		"100": {"90", v2},                                     // the container's init
		"101": {"100", v2},                                    // its child
		"50":  {"1", "0::/kubepods/besteffort/pod1234/" + id2 + "\n"},
		"300": {"1", v1}, // exec'd into the container: parent outside it, but a higher PID
	})
	pid, err := ScanProc(proc, id1)
	if err != nil || pid != 100 {
		t.Errorf("ScanProc = %d, %v; want 100", pid, err)
	}
	pid, err = ScanProc(proc, id2)
	if err != nil || pid != 50 {
		t.Errorf("ScanProc(id2) = %d, %v; want 50", pid, err)
	}
	if _, err := ScanProc(proc, "aaaaaaaaaaaaaaaa"); !errors.Is(err, ErrNotFound) {
		t.Errorf("absent ID: error = %v; want ErrNotFound", err)
	}
	if _, err := ScanProc(filepath.Join(proc, "missing"), id1); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing proc: error = %v; want ErrNotFound", err)
	}
}

func TestLookupFallsBackToProc(t *testing.T) {
	root := shortTemp(t)
	proc := writeProc(t, map[string][2]string{"77": {"1", "0::/kubepods/x/" + id1 + "\n"}})
	res, err := Lookup(t.Context(), Options{ContainerID: "containerd://" + id1, HostRoot: root, ProcRoot: proc})
	if err != nil {
		t.Fatal(err)
	}
	if res.PID != 77 || res.Method != MethodProc || res.Endpoint != "" || len(res.Attempts) != len(DefaultEndpoints()) {
		t.Errorf("Lookup = %+v; want PID 77 via /proc after trying every default endpoint", res)
	}
	// Neither a runtime nor /proc knows it: the error names both.
	_, err = Lookup(t.Context(), Options{ContainerID: id2, HostRoot: root, ProcRoot: proc})
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "in its cgroup") || !strings.Contains(err.Error(), "absent") {
		t.Errorf("error = %v; want ErrNotFound naming the sockets and the scan", err)
	}
}

func TestInfoPID(t *testing.T) {
	if pid, err := InfoPID(map[string]string{"info": `{"pid": 12}`}); err != nil || pid != 12 {
		t.Errorf("InfoPID = %d, %v", pid, err)
	}
	for _, info := range []map[string]string{nil, {"info": "not json"}, {"info": `{"pid":0}`}} {
		if _, err := InfoPID(info); err == nil {
			t.Errorf("InfoPID(%v): no error", info)
		}
	}
}
