package testcluster

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
)

// Fault injection for end-to-end tests of what nodeexec does when a part of the
// cluster fails. Every fault signals only processes this package started and
// recorded (PID and start time, see procRecord); nothing else on the machine is
// touched. A stopped component is started again with the argv it ran with (saved
// in <RunDir>/<component>.argv when it is stopped), in the same namespaces.
//
// A fault holds the cluster's operation lock (the one Start, AddNode and
// RemoveNode take) only while it runs, so a component stopped by a Stop* call
// stays stopped between calls: call the matching Start* (or Restore) before
// anything calls Start or Attach, which treat a stopped component as a broken
// cluster. Tests should register Restore with t.Cleanup.

// ErrNoSuchNode is wrapped by the errors of node faults given a name that is not
// one of the cluster's real nodes.
var ErrNoSuchNode = errors.New("no such test cluster node")

// faultReadyTimeout bounds the waits of the Start* faults (API server /readyz,
// containerd answering, node Ready).
const faultReadyTimeout = 2 * time.Minute

// bootIDPath is the file the kubelet (cAdvisor) reads the node's boot ID from.
const bootIDPath = "/proc/sys/kernel/random/boot_id"

// Open returns the cluster described by o's directories without checking its
// health (unlike Attach), for injecting and undoing faults while a component is
// stopped. It fails with an error wrapping ErrNotRunning when no cluster state is there.
func Open(o Options) (*Cluster, error) {
	o, err := o.resolve()
	if err != nil {
		return nil, err
	}
	r := newRunner(o)
	st, err := r.l.loadState()
	if err != nil {
		return nil, fmt.Errorf("testcluster: %w: %w", ErrNotRunning, err)
	}
	r.o.APIPort = st.APIPort
	return &Cluster{r: r}, nil
}

// RestartAPIServer kills the API server with SIGKILL, waits down (0: start again at
// once), starts it again with the same flags in the same namespaces and waits
// until /readyz answers "ok" on the host port. In-flight requests and watches
// fail (EOF, connection refused) as on a crash of a real control plane.
func (c *Cluster) RestartAPIServer(ctx context.Context, down time.Duration) error {
	if err := c.StopAPIServer(ctx); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return fmt.Errorf("testcluster: restart kube-apiserver: %w", ctx.Err())
	case <-time.After(down):
	}
	return c.StartAPIServer(ctx)
}

// StopAPIServer kills the API server with SIGKILL (no graceful shutdown) and waits
// until it is gone. The API is unreachable until StartAPIServer.
func (c *Cluster) StopAPIServer(ctx context.Context) error {
	return c.fault(ctx, "stop kube-apiserver", func(r *runner, _ *clusterState) error {
		return r.killProc(procAPIServer, syscall.SIGKILL)
	})
}

// StartAPIServer starts the API server if it is not running (with the flags it last
// ran with) and waits until /readyz answers "ok" on the host port, at most
// 2 minutes. A frozen API server is thawed.
func (c *Cluster) StartAPIServer(ctx context.Context) error {
	return c.fault(ctx, "start kube-apiserver", func(r *runner, _ *clusterState) error {
		if err := r.restartProc(procAPIServer); err != nil {
			return err
		}
		return r.waitHostReadyz(ctx)
	})
}

// FreezeAPIServer stops the API server with SIGSTOP: its sockets stay open, so
// clients see requests hang (time out) rather than fail. ThawAPIServer resumes it.
func (c *Cluster) FreezeAPIServer(ctx context.Context) error {
	return c.fault(ctx, "freeze kube-apiserver", func(r *runner, _ *clusterState) error {
		return r.signalProc(procAPIServer, syscall.SIGSTOP)
	})
}

// ThawAPIServer resumes a frozen API server (SIGCONT) and waits until /readyz answers.
func (c *Cluster) ThawAPIServer(ctx context.Context) error {
	return c.fault(ctx, "thaw kube-apiserver", func(r *runner, _ *clusterState) error {
		if err := r.signalProc(procAPIServer, syscall.SIGCONT); err != nil {
			return err
		}
		return r.waitHostReadyz(ctx)
	})
}

// StopKubelet stops node's kubelet (SIGTERM, SIGKILL after 15 s; this cluster
// configures no graceful node shutdown, so pods are left alone). Its containers
// keep running; the Node turns NotReady (Ready=Unknown) once the controller
// manager's node-monitor grace period passes without a heartbeat.
func (c *Cluster) StopKubelet(ctx context.Context, node string) error {
	return c.nodeFault(ctx, "stop kubelet", node, func(r *runner, n nodeSpec) error {
		r.saveArgv(kubeletProc(n))
		r.stopProcs(15*time.Second, kubeletProc(n))
		return nil
	})
}

// StartKubelet starts node's kubelet again (same flags, same namespaces) if it is
// not running and waits until the Node is Ready, at most 2 minutes.
func (c *Cluster) StartKubelet(ctx context.Context, node string) error {
	return c.nodeFault(ctx, "start kubelet", node, func(r *runner, n nodeSpec) error {
		if err := r.restartProc(kubeletProc(n)); err != nil {
			return err
		}
		return r.waitReady(ctx, n.Name, "")
	})
}

// StopContainerd stops node's containerd (SIGTERM, SIGKILL after 15 s). Running
// containers keep running under their shims; the kubelet reports the runtime down
// and the Node turns NotReady within seconds; nothing can be started or exec'd on it.
func (c *Cluster) StopContainerd(ctx context.Context, node string) error {
	return c.nodeFault(ctx, "stop containerd", node, func(r *runner, n nodeSpec) error {
		r.saveArgv(containerdProc(n))
		r.stopProcs(15*time.Second, containerdProc(n))
		return nil
	})
}

// StartContainerd starts node's containerd again (same flags, same namespaces) if
// it is not running, waits until it answers and until the Node is Ready.
func (c *Cluster) StartContainerd(ctx context.Context, node string) error {
	return c.nodeFault(ctx, "start containerd", node, func(r *runner, n nodeSpec) error {
		if err := r.startContainerd(ctx, n); err != nil {
			return err
		}
		return r.waitReady(ctx, n.Name, "")
	})
}

// RebootNode simulates a crash and reboot of node: it SIGKILLs the kubelet, kills
// every container of the node (SIGKILL through its containerd: containers, pod
// sandboxes, then their shims), SIGKILLs containerd, gives the node a new boot ID
// and starts containerd and the kubelet again. It waits until the Node is Ready and
// reports the new boot ID in status.nodeInfo.bootID, and returns that boot ID.
//
// The boot ID is a per-node file, <RunDir>/boot_id-<node>, bind-mounted over
// /proc/sys/kernel/random/boot_id in the node's mount namespace (for node 1 that
// namespace is shared with the control plane processes, which do not read it).
// Pods bound to the node stay bound: the kubelet finds their containers dead on
// start, as after a real reboot (restartPolicy Never pods end Failed).
func (c *Cluster) RebootNode(ctx context.Context, node string) (string, error) {
	var bootID string
	err := c.nodeFault(ctx, "reboot", node, func(r *runner, n nodeSpec) error {
		kubelet, containerd := kubeletProc(n), containerdProc(n)
		r.saveArgv(kubelet)
		if err := r.killProc(kubelet, syscall.SIGKILL); err != nil {
			return err
		}
		if rec, err := r.l.readProc(containerd); err == nil && rec.alive() {
			r.removeContainers(ctx, n)
		}
		r.saveArgv(containerd)
		if err := r.killProc(containerd, syscall.SIGKILL); err != nil {
			return err
		}
		r.killOurShims(&n)
		id, err := newBootID()
		if err != nil {
			return err
		}
		if err := r.setBootID(ctx, n, id); err != nil {
			return err
		}
		if err := r.startContainerd(ctx, n); err != nil {
			return err
		}
		if err := r.restartProc(kubelet); err != nil {
			return err
		}
		bootID = id
		return r.waitReady(ctx, n.Name, id)
	})
	return bootID, err
}

// Restore undoes every fault: it thaws a frozen API server, starts every recorded
// component that is not running (etcd, API server, controller manager, scheduler,
// forwarders, each node's containerd and kubelet, Prometheus, Alertmanager,
// Pushgateway) with its last flags, and waits until /readyz answers, every node
// is Ready and the monitoring processes answer /-/ready. Nodes keep their current boot ID.
// Use it in t.Cleanup of every test that injects faults.
func (c *Cluster) Restore(ctx context.Context) error {
	return c.fault(ctx, "restore", func(r *runner, st *clusterState) error {
		if rec, err := r.l.readProc(procAPIServer); err == nil && rec.alive() {
			_ = syscall.Kill(rec.PID, syscall.SIGCONT)
			_, ppid, _, _ := readStat(rec.PID)
			r.wakeWrapper(ppid)
		}
		for _, name := range []string{procEtcd, procAPIServer, procCM, procScheduler, procSockFwd, procHostFwd} {
			if err := r.restartProc(name); err != nil {
				return err
			}
		}
		if err := r.waitHostReadyz(ctx); err != nil {
			return err
		}
		for _, i := range st.Nodes {
			n := r.l.node(i)
			if err := r.startContainerd(ctx, n); err != nil {
				return err
			}
			if err := r.restartProc(kubeletProc(n)); err != nil {
				return err
			}
		}
		for _, i := range st.Nodes {
			if err := r.waitReady(ctx, nodeName(i), ""); err != nil {
				return err
			}
		}
		return r.restoreMonitoring(ctx)
	})
}

// fault runs f under the cluster's operation lock.
func (c *Cluster) fault(ctx context.Context, what string, f func(*runner, *clusterState) error) error {
	r := c.r
	unlock, err := lockCache(ctx, r.l, r.logf)
	if err != nil {
		return err
	}
	defer unlock()
	st, err := r.l.loadState()
	if err != nil {
		return fmt.Errorf("testcluster: %s: %w: %w", what, ErrNotRunning, err)
	}
	t0 := time.Now()
	if err := f(r, st); err != nil {
		return fmt.Errorf("testcluster: %s: %w", what, err)
	}
	r.timing("fault "+what, t0)
	return nil
}

// nodeFault runs f for the real node named node under the operation lock.
func (c *Cluster) nodeFault(ctx context.Context, what, node string, f func(*runner, nodeSpec) error) error {
	return c.fault(ctx, what+" "+node, func(r *runner, st *clusterState) error {
		i, ok := nodeIndex(node)
		if !ok || !st.hasNode(i) {
			return fmt.Errorf("%w: %q (nodes: %v)", ErrNoSuchNode, node, c.Nodes())
		}
		return f(r, r.l.node(i))
	})
}

// argvFile holds the argv a component ran with when a fault stopped it.
func (l layout) argvFile(name string) string { return filepath.Join(l.o.RunDir, name+".argv") }

// saveArgv records the command line of the running component name (if it runs), so
// that restartProc starts it again with exactly the same flags.
func (r *runner) saveArgv(name string) {
	rec, err := r.l.readProc(name)
	if err != nil || !rec.alive() {
		return
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", rec.PID))
	if err != nil || len(b) == 0 {
		return
	}
	if err := writeFileAtomic(r.l.argvFile(name), b, 0o644); err != nil {
		r.logf("warning: saving the command line of %s: %v", name, err)
	}
}

// killProc saves the component's argv, sends sig and waits (at most 10 s) until
// the process is gone. Its PID file stays: the component is recorded but stopped.
func (r *runner) killProc(name string, sig syscall.Signal) error {
	rec, err := r.l.readProc(name)
	if err != nil || !rec.alive() {
		return nil // not running
	}
	r.saveArgv(name)
	_, ppid, _, _ := readStat(rec.PID)
	if err := syscall.Kill(rec.PID, sig); err != nil {
		return fmt.Errorf("signal %s (pid %d): %w", name, rec.PID, err)
	}
	for i := 0; i < 200 && rec.alive(); i++ {
		time.Sleep(50 * time.Millisecond)
	}
	r.wakeWrapper(ppid)
	if rec.alive() {
		return fmt.Errorf("%s (pid %d) still runs 10 s after %s", name, rec.PID, unix.SignalName(sig))
	}
	r.logf("killed %s (pid %d) with %s", name, rec.PID, unix.SignalName(sig))
	return nil
}

// signalProc sends sig to the running component name.
func (r *runner) signalProc(name string, sig syscall.Signal) error {
	rec, err := r.l.readProc(name)
	if err != nil || !rec.alive() {
		return fmt.Errorf("%s is not running", name)
	}
	if err := syscall.Kill(rec.PID, sig); err != nil {
		return fmt.Errorf("signal %s (pid %d): %w", name, rec.PID, err)
	}
	r.logf("sent %s to %s (pid %d)", unix.SignalName(sig), name, rec.PID)
	if sig == syscall.SIGCONT {
		_, ppid, _, _ := readStat(rec.PID)
		r.wakeWrapper(ppid)
	}
	return nil
}

// wakeWrapper resumes ppid when it is a stopped nsenter: the wrapper that
// started a component in its namespaces and waits for it. util-linux's
// nsenter stops itself when its child stops (SIGSTOP, a frozen API server),
// and only a SIGCONT to itself resumes it, so a wrapper left stopped after
// a thaw would never reap its child when that is killed later: a stopped
// process and a zombie left behind by every freeze. Any other process is
// left alone.
func (r *runner) wakeWrapper(ppid int) {
	if ppid <= 1 {
		return
	}
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", ppid))
	if err != nil || strings.TrimSpace(string(comm)) != "nsenter" {
		return
	}
	if state, _, _, err := readStat(ppid); err != nil || state != 'T' {
		return
	}
	if err := syscall.Kill(ppid, syscall.SIGCONT); err == nil {
		r.logf("resumed the stopped nsenter wrapper (pid %d)", ppid)
	}
}

// restartProc starts component name if it is not running: with the argv saved when
// it was stopped, else with the argv this package starts it with, in the namespaces
// it runs in (the hub's init and network namespace for the control plane, its
// node's for a kubelet or containerd, the host for the host forwarder).
func (r *runner) restartProc(name string) error {
	if rec, err := r.l.readProc(name); err == nil && rec.alive() {
		return nil
	}
	target, argv, err := r.procTarget(name)
	if err != nil {
		return err
	}
	if b, err := os.ReadFile(r.l.argvFile(name)); err == nil && len(b) > 0 {
		argv = strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
	}
	_, err = r.startDaemon(name, target, argv, false)
	return err
}

// procTarget returns where component name runs and its default argv.
func (r *runner) procTarget(name string) (nsTarget, []string, error) {
	l := r.l
	hubInit, err := l.readProc(initProc(l.node(1)))
	if err != nil || !hubInit.alive() {
		return nsTarget{}, nil, fmt.Errorf("%s: the control plane's init is not running; the cluster must be started again (Stop, Start)", name)
	}
	hub := nsTarget{InitPID: hubInit.PID, Netns: netnsPath(hubNetns)}
	switch name {
	case procEtcd:
		return hub, etcdArgs(l), nil
	case procAPIServer:
		return hub, apiserverArgs(l), nil
	case procCM:
		return hub, controllerManagerArgs(l), nil
	case procScheduler:
		return hub, schedulerArgs(l), nil
	case procSockFwd:
		return hub, sockForwarderArgs(l), nil
	case procHostFwd:
		return nsTarget{}, hostForwarderArgs(l), nil
	}
	for _, prefix := range []string{"kubelet-", "containerd-"} {
		s, ok := strings.CutPrefix(name, prefix)
		if !ok {
			continue
		}
		i, ok := nodeIndex(s)
		if !ok {
			break
		}
		n := l.node(i)
		init, err := l.readProc(initProc(n))
		if err != nil || !init.alive() {
			return nsTarget{}, nil, fmt.Errorf("%s: the init of %s is not running; remove and add the node again", name, n.Name)
		}
		t := nsTarget{InitPID: init.PID, Netns: netnsPath(n.Netns)}
		if prefix == "kubelet-" {
			return t, kubeletArgs(l, n), nil
		}
		return t, l.containerdArgv(n), nil
	}
	return nsTarget{}, nil, fmt.Errorf("no component %q", name)
}

// startContainerd starts node n's containerd if it is not running and waits until
// it answers.
func (r *runner) startContainerd(ctx context.Context, n nodeSpec) error {
	if err := r.restartProc(containerdProc(n)); err != nil {
		return err
	}
	return poll(ctx, 30*time.Second, 50*time.Millisecond, "containerd of "+n.Name, func(ctx context.Context) (bool, error) {
		_, err := r.run(ctx, r.l.ctr(), "-a", n.ContainerdSocket, "version")
		return err == nil, err
	})
}

// waitHostReadyz waits until /readyz answers "ok" on the host port.
func (r *runner) waitHostReadyz(ctx context.Context) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", r.l.kubeconfig)
	if err != nil {
		return err
	}
	cfg.Timeout = 5 * time.Second
	return poll(ctx, faultReadyTimeout, 100*time.Millisecond, "kube-apiserver /readyz", func(ctx context.Context) (bool, error) {
		err := readyz(ctx, cfg)
		return err == nil, err
	})
}

// waitReady waits until Node name is Ready (and, if bootID is set, reports it).
func (r *runner) waitReady(ctx context.Context, name, bootID string) error {
	cs, err := r.clientset()
	if err != nil {
		return err
	}
	if err := waitNodeReady(ctx, cs, name, faultReadyTimeout); err != nil {
		return err
	}
	if bootID == "" {
		return nil
	}
	return poll(ctx, faultReadyTimeout, 200*time.Millisecond, "node "+name+" boot ID "+bootID, func(ctx context.Context) (bool, error) {
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return n.Status.NodeInfo.BootID == bootID && readyTrue(n), nil
	})
}

func readyTrue(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// newBootID returns a random UUID (version 4), the format of the kernel's boot_id.
func newBootID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:]), nil
}

// setBootID makes node n's mount namespace show id in /proc/sys/kernel/random/boot_id:
// it writes <RunDir>/boot_id-<node> and bind-mounts it there (replacing an earlier
// bind mount), through nsenter into the node's init (mount and PID namespace: the
// node's /proc is its own PID namespace's).
func (r *runner) setBootID(ctx context.Context, n nodeSpec, id string) error {
	init, err := r.l.readProc(initProc(n))
	if err != nil || !init.alive() {
		return fmt.Errorf("the init of %s is not running", n.Name)
	}
	file := filepath.Join(r.o.RunDir, "boot_id-"+n.Name)
	if err := os.WriteFile(file, []byte(id+"\n"), 0o444); err != nil {
		return fmt.Errorf("boot ID: %w", err)
	}
	if mounts, err := readMountInfo(strconv.Itoa(init.PID)); err == nil {
		if targets := mountsUnder(mounts, bootIDPath); len(targets) > 0 {
			r.unmountIn(ctx, init.PID, targets)
		}
	}
	if _, err := r.run(ctx, "nsenter", "-t", strconv.Itoa(init.PID), "-m", "-p", "--",
		"mount", "--bind", file, bootIDPath); err != nil {
		return fmt.Errorf("boot ID: %w", err)
	}
	r.logf("%s has boot ID %s", n.Name, id)
	return nil
}

// closeInheritedOnExec sets close-on-exec on every descriptor above stderr this
// process inherited (Go opens its own with it set), so that daemons do not keep
// them open: e.g. the lock file descriptor of a `flock LOCKFILE go test ...` around
// a test that restarts a component would otherwise stay locked by the daemon
// long after the test ended.
func closeInheritedOnExec() {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			syscall.CloseOnExec(fd)
		}
	}
}
