// Package cri finds the PID of a container from its ID, as a node agent does
// before entering the container's namespaces: it asks the node's container
// runtime over CRI (ContainerStatus with Verbose: true, reading "pid" from the
// verbose "info" JSON, which containerd and CRI-O both report), probing the
// well-known runtime sockets in order, and falls back to scanning
// /proc/*/cgroup for the container ID when no runtime answers.
//
// It imports no Kubernetes client: the agent binary links it.
//
// # Where the sockets are
//
// Endpoints are host paths (such as /run/containerd/containerd.sock). The
// agent runs in a pod that mounts the host's root filesystem read-only at
// /host (hostPath "/"), so Options.HostRoot is "/host" there and every
// endpoint is dialed as /host/<path>. Connecting to a unix socket works
// through a read-only mount. The /proc fallback needs the host's PID namespace
// (hostPID) so that /proc lists the node's processes.
//
// # Permissions
//
// Connecting to a runtime socket needs write access to it (root, in practice);
// reading /proc/PID/cgroup of other users' processes needs nothing special.
package cri

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Defaults for Options.
const (
	// DefaultProcRoot is the proc filesystem scanned by the fallback.
	DefaultProcRoot = "/proc"
	// DefaultCallTimeout bounds the connection and the ContainerStatus call on
	// one socket.
	DefaultCallTimeout = 3 * time.Second
)

// Methods reported in Result.Method.
const (
	// MethodCRI: a runtime answered ContainerStatus over CRI.
	MethodCRI = "cri"
	// MethodProc: found by scanning /proc/*/cgroup.
	MethodProc = "proc"
)

// DefaultEndpoints returns the runtime sockets probed after the ones given in
// Options.Endpoints, in order: containerd, k3s/RKE2's containerd, CRI-O (both
// spellings), MicroK8s and k0s. Host paths; a new slice on every call.
func DefaultEndpoints() []string {
	return []string{
		"/run/containerd/containerd.sock",
		"/run/k3s/containerd/containerd.sock",
		"/var/run/crio/crio.sock",
		"/run/crio/crio.sock",
		"/var/snap/microk8s/common/run/containerd.sock",
		"/run/k0s/containerd.sock",
	}
}

// Sentinel errors; Lookup's errors wrap them.
var (
	// ErrInvalidID: the container ID is not `[scheme://]HEX` with 12 to 64
	// lowercase hex digits.
	ErrInvalidID = errors.New("invalid container ID")
	// ErrNotRunning: the runtime knows the container but it is not running
	// (created, exited, or reported without a PID).
	ErrNotRunning = errors.New("container is not running")
	// ErrNotFound: no runtime socket answered with the container and the
	// /proc scan (when enabled) found no process in its cgroup.
	ErrNotFound = errors.New("container not found")
)

// Options say which container to look up and where.
type Options struct {
	// ContainerID is the container, as in a pod's
	// status.containerStatuses[].containerID ("containerd://<id>",
	// "cri-o://<id>") or bare. Required; the ID must be 12-64 hex digits.
	ContainerID string
	// Endpoints are extra runtime socket paths on the host, probed before
	// DefaultEndpoints(); a "unix://" prefix is accepted. Optional.
	Endpoints []string
	// NoDefaultEndpoints probes only Endpoints.
	NoDefaultEndpoints bool
	// HostRoot is where the host's root filesystem is visible; every endpoint
	// is dialed as HostRoot+path. Default "" (the endpoints as given; "/"
	// also means that).
	HostRoot string
	// ProcRoot is the proc filesystem scanned when no runtime answers, listing
	// the node's processes (hostPID). Defaults to DefaultProcRoot.
	ProcRoot string
	// NoProcFallback turns off the /proc scan.
	NoProcFallback bool
	// CallTimeout bounds the connection and call on each socket. Defaults to
	// DefaultCallTimeout.
	CallTimeout time.Duration
}

// Attempt is the outcome of one probed socket.
type Attempt struct {
	// Endpoint is the host path; Path is what was dialed (HostRoot + Endpoint).
	Endpoint, Path string
	// Err says why this socket did not give the PID: absent, not a socket,
	// unreachable, or the runtime does not know the container.
	Err error
}

// Result is where the container was found.
type Result struct {
	// ID is the bare container ID.
	ID string
	// PID is the container's init process, in the PID namespace of the
	// runtime (the node's, for an agent with hostPID).
	PID int
	// Method is MethodCRI or MethodProc.
	Method string
	// Endpoint is the host path of the socket that answered (MethodCRI), and
	// Runtime the runtime's name and version as it reported them ("containerd
	// v1.6.20"); both empty for MethodProc.
	Endpoint, Runtime string
	// Attempts lists the sockets probed before (and including) the one that
	// answered.
	Attempts []Attempt
}

var idRE = regexp.MustCompile(`^[0-9a-f]{12,64}$`)

// ParseID strips a "scheme://" prefix and checks the rest is 12-64 lowercase
// hex digits. Errors wrap ErrInvalidID.
func ParseID(s string) (string, error) {
	id := s
	if i := strings.Index(s, "://"); i >= 0 {
		id = s[i+3:]
	}
	if !idRE.MatchString(id) {
		return "", fmt.Errorf("%w %q: want [runtime://]ID with 12 to 64 lowercase hex digits, as in a pod's status.containerStatuses[].containerID", ErrInvalidID, s)
	}
	return id, nil
}

// Lookup finds the PID of o.ContainerID: it calls ContainerStatus (Verbose)
// on each endpoint in turn (o.Endpoints, then DefaultEndpoints()), skipping
// absent paths, unreachable sockets and runtimes that do not know the
// container, and returns the first PID reported. A runtime that knows the
// container but reports it not running ends the lookup with ErrNotRunning.
// When no runtime answered with the container it scans ProcRoot/*/cgroup
// (unless NoProcFallback). Errors wrap ErrInvalidID, ErrNotRunning or
// ErrNotFound (which lists every attempt); a cancelled ctx ends it with
// ctx's error.
func Lookup(ctx context.Context, o Options) (Result, error) {
	id, err := ParseID(o.ContainerID)
	if err != nil {
		return Result{}, err
	}
	if o.ProcRoot == "" {
		o.ProcRoot = DefaultProcRoot
	}
	if o.CallTimeout <= 0 {
		o.CallTimeout = DefaultCallTimeout
	}
	res := Result{ID: id}
	for _, ep := range endpoints(o) {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		a := Attempt{Endpoint: ep, Path: dialPath(o.HostRoot, ep)}
		pid, runtime, err := probe(ctx, a.Path, id, o.CallTimeout)
		if err == nil {
			res.Attempts = append(res.Attempts, a)
			res.PID, res.Method, res.Endpoint, res.Runtime = pid, MethodCRI, ep, runtime
			return res, nil
		}
		a.Err = err
		res.Attempts = append(res.Attempts, a)
		if cerr := ctx.Err(); cerr != nil {
			return res, cerr
		}
		if errors.Is(err, ErrNotRunning) {
			return res, fmt.Errorf("container %s (runtime socket %s): %w", id, ep, err)
		}
	}
	if !o.NoProcFallback {
		pid, err := ScanProc(o.ProcRoot, id)
		if err == nil {
			res.PID, res.Method = pid, MethodProc
			return res, nil
		}
		return res, fmt.Errorf("%w: container %s: no runtime socket answered for it (%s), and %w", ErrNotFound, id, describe(res.Attempts), err)
	}
	return res, fmt.Errorf("%w: container %s: no runtime socket answered for it (%s), and the /proc fallback is off", ErrNotFound, id, describe(res.Attempts))
}

// endpoints is o.Endpoints then the defaults, without "unix://" and duplicates.
func endpoints(o Options) []string {
	var out []string
	all := slices.Clone(o.Endpoints)
	if !o.NoDefaultEndpoints {
		all = append(all, DefaultEndpoints()...)
	}
	for _, ep := range all {
		ep = strings.TrimPrefix(ep, "unix://")
		if ep != "" && !slices.Contains(out, ep) {
			out = append(out, ep)
		}
	}
	return out
}

func dialPath(root, ep string) string {
	if root == "" || root == "/" {
		return ep
	}
	return filepath.Join(root, ep)
}

func describe(as []Attempt) string {
	if len(as) == 0 {
		return "no endpoint to try"
	}
	parts := make([]string, len(as))
	for i, a := range as {
		parts[i] = fmt.Sprintf("%s: %v", a.Endpoint, a.Err)
	}
	return strings.Join(parts, "; ")
}

// errAbsent, errUnknown: why a socket was skipped.
var (
	errAbsent  = errors.New("absent")
	errUnknown = errors.New("runtime does not know the container")
)

// probe asks the runtime at path for id's PID.
func probe(ctx context.Context, path, id string, timeout time.Duration) (pid int, runtime string, err error) {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return 0, "", errAbsent
	case err != nil:
		return 0, "", err
	case fi.Mode().Type() != os.ModeSocket:
		return 0, "", fmt.Errorf("not a socket (%s)", fi.Mode().Type())
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return 0, "", err
	}
	defer conn.Close()
	rt := runtimeapi.NewRuntimeServiceClient(conn)
	st, err := rt.ContainerStatus(cctx, &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: true}, grpc.WaitForReady(false))
	if err != nil {
		if status.Code(err) == codes.NotFound {
			return 0, "", errUnknown
		}
		if ctxErr := ctx.Err(); ctxErr != nil {
			return 0, "", ctxErr
		}
		return 0, "", fmt.Errorf("ContainerStatus: %s: %s", status.Code(err), status.Convert(err).Message())
	}
	if v, verr := rt.Version(cctx, &runtimeapi.VersionRequest{}); verr == nil {
		runtime = strings.TrimSpace(v.RuntimeName + " " + v.RuntimeVersion)
	}
	if s := st.GetStatus(); s != nil && s.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return 0, runtime, fmt.Errorf("%w: its state is %s", ErrNotRunning, s.State)
	}
	pid, err = InfoPID(st.GetInfo())
	if err != nil {
		return 0, runtime, err
	}
	return pid, runtime, nil
}

// InfoPID reads the "pid" field of the JSON under the "info" key of a verbose
// ContainerStatus response. A missing or zero pid wraps ErrNotRunning.
func InfoPID(info map[string]string) (int, error) {
	raw, ok := info["info"]
	if !ok {
		return 0, errors.New(`the runtime's verbose status has no "info" key (does it support Verbose?)`)
	}
	var v struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal([]byte(raw), &v); err != nil {
		return 0, fmt.Errorf(`the runtime's verbose "info" is not JSON: %w`, err)
	}
	if v.Pid <= 0 {
		return 0, fmt.Errorf("%w: the runtime reports no PID for it", ErrNotRunning)
	}
	return v.Pid, nil
}

// ScanProc finds the init process of container id by reading
// procRoot/*/cgroup: among the processes whose cgroup path contains id, the
// one whose parent is not among them (the lowest such PID). Errors wrap
// ErrNotFound.
func ScanProc(procRoot, id string) (int, error) {
	entries, err := os.ReadDir(procRoot)
	if err != nil {
		return 0, fmt.Errorf("%w: scanning %s: %w", ErrNotFound, procRoot, err)
	}
	in := map[int]bool{}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		b, err := os.ReadFile(filepath.Join(procRoot, e.Name(), "cgroup"))
		if err != nil {
			continue // the process exited, or is not readable
		}
		if cgroupHas(string(b), id) {
			in[pid] = true
			pids = append(pids, pid)
		}
	}
	if len(pids) == 0 {
		return 0, fmt.Errorf("%w: no process under %s has %s in its cgroup", ErrNotFound, procRoot, id)
	}
	slices.Sort(pids)
	for _, pid := range pids {
		if !in[ppid(procRoot, pid)] {
			return pid, nil
		}
	}
	return pids[0], nil
}

// cgroupHas reports whether a cgroup path in a /proc/PID/cgroup file
// (lines "hierarchy:controllers:path") contains id.
func cgroupHas(content, id string) bool {
	sc := bufio.NewScanner(strings.NewReader(content))
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) == 3 && strings.Contains(parts[2], id) {
			return true
		}
	}
	return false
}

// ppid reads the parent PID from procRoot/pid/stat; 0 when unknown.
func ppid(procRoot string, pid int) int {
	b, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	// "pid (comm) state ppid ...": comm may hold spaces and parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(f[1])
	return n
}
