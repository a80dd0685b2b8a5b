package testcluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"
)

// clusterState is persisted in <state>/cluster.json.
type clusterState struct {
	KubernetesVersion string `json:"kubernetesVersion"`
	// ContainerdVersion is the nodes' containerd: "1.6" (Debian's; "" in a
	// state written before it was recorded) or a 2.x.y built from the module proxy.
	ContainerdVersion string `json:"containerdVersion,omitempty"`
	APIPort           int    `json:"apiPort"`
	// PauseBinary is the init of every node's PID namespace.
	PauseBinary string `json:"pauseBinary"`
	// Nodes are the indexes of the nodes started (node i is nodeexec-tc-<i>).
	Nodes []int `json:"nodes"`
	// Images are the tarballs imported into every node, including nodes added later.
	Images []string `json:"images"`
	// Registry is the test registry (nil for a cluster started before it existed).
	Registry *registryState `json:"registry,omitempty"`
	// AbsentHostPaths are host directories that did not exist before Start; Stop
	// removes them again if they are empty.
	AbsentHostPaths []string `json:"absentHostPaths"`
}

func (l layout) loadState() (*clusterState, error) {
	b, err := os.ReadFile(l.stateFile)
	if err != nil {
		return nil, err
	}
	var st clusterState
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("%s: %w", l.stateFile, err)
	}
	return &st, nil
}

func (l layout) saveState(st *clusterState) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(l.stateFile, append(b, '\n'), 0o644)
}

func (st *clusterState) hasNode(i int) bool { return slices.Contains(st.Nodes, i) }

// freeIndex is the lowest node index not in use.
func (st *clusterState) freeIndex() (int, error) {
	for i := 1; i <= MaxNodes; i++ {
		if !st.hasNode(i) {
			return i, nil
		}
	}
	return 0, fmt.Errorf("testcluster: all %d node indexes are in use", MaxNodes)
}

// lockCache takes an exclusive lock on <cache>/.lock (it serializes Start, Stop,
// AddNode, RemoveNode and ImportImage across processes, e.g. parallel `go test`
// packages) and returns the unlock function.
func lockCache(ctx context.Context, l layout, logf func(string, ...any)) (func(), error) {
	if err := os.MkdirAll(filepath.Dir(l.lockFile), 0o755); err != nil {
		return nil, fmt.Errorf("testcluster lock: %w", err)
	}
	f, err := os.OpenFile(l.lockFile, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("testcluster lock: %w", err)
	}
	waited := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("testcluster lock %s: %w", l.lockFile, err)
		}
		if !waited {
			logf("waiting for another testcluster operation (lock %s)", l.lockFile)
			waited = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("testcluster lock %s: %w", l.lockFile, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
