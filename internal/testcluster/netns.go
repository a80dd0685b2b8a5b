package testcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The cluster lives in network namespaces this package creates:
//
//   - nodeexec-tc (the hub): node 1 and the control plane. Node 1's address sits on
//     one end of a veth pair whose both ends stay inside (this kernel has no dummy
//     driver). Default route: blackhole, so nothing leaves.
//   - nodeexec-tc-n<i> for node i >= 2, linked to the hub by a veth pair, with routes
//     for all node addresses and pod subnets through the hub.
//
// Nothing touches the host's own routes, addresses or iptables. The API server is
// reached from the host through two socat forwarders (see sockForwarderArgs).

func (r *runner) ip(ctx context.Context, args ...string) error {
	_, err := r.run(ctx, "ip", args...)
	return err
}

func (r *runner) netnsExists(name string) bool {
	_, err := os.Stat(netnsPath(name))
	return err == nil
}

// inNetns runs a short command in a network namespace: nsenter --net, not
// `ip netns exec` (which also makes a mount namespace and remounts /sys).
func (r *runner) inNetns(ctx context.Context, ns string, argv ...string) error {
	_, err := r.run(ctx, "nsenter", append([]string{"--net=" + netnsPath(ns), "--"}, argv...)...)
	return err
}

// setupHub creates the hub namespace with node 1's address.
func (r *runner) setupHub(ctx context.Context) error {
	if r.netnsExists(hubNetns) {
		return nil
	}
	n := r.l.node(1)
	steps := [][]string{
		{"netns", "add", hubNetns},
		{"-n", hubNetns, "link", "set", "lo", "up"},
		{"-n", hubNetns, "link", "add", "nx0", "type", "veth", "peer", "name", "nx0p"},
		{"-n", hubNetns, "addr", "add", n.IP + "/32", "dev", "nx0"},
		{"-n", hubNetns, "link", "set", "nx0", "up"},
		{"-n", hubNetns, "link", "set", "nx0p", "up"},
		{"-n", hubNetns, "route", "add", "blackhole", "default"},
	}
	for _, s := range steps {
		if err := r.ip(ctx, s...); err != nil {
			return fmt.Errorf("hub network namespace: %w", err)
		}
	}
	if err := r.inNetns(ctx, hubNetns, "sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward"); err != nil {
		return fmt.Errorf("hub network namespace: %w", err)
	}
	return nil
}

// nodeNetnsSteps are the `ip` invocations that create node n's namespace (n >= 2)
// and link it to the hub.
func nodeNetnsSteps(hubIP string, n nodeSpec) [][]string {
	return [][]string{
		{"netns", "add", n.Netns},
		{"-n", n.Netns, "link", "set", "lo", "up"},
		{"-n", hubNetns, "link", "add", n.HubVeth, "type", "veth", "peer", "name", n.NodeVeth, "netns", n.Netns},
		{"-n", hubNetns, "link", "set", n.HubVeth, "up"},
		{"-n", n.Netns, "addr", "add", n.IP + "/32", "dev", n.NodeVeth},
		{"-n", n.Netns, "link", "set", n.NodeVeth, "up"},
		{"-n", hubNetns, "route", "add", n.IP + "/32", "dev", n.HubVeth},
		{"-n", hubNetns, "route", "add", n.PodCIDR, "via", n.IP, "dev", n.HubVeth, "onlink"},
		{"-n", n.Netns, "route", "add", hubIP + "/32", "dev", n.NodeVeth},
		// every other node and pod subnet is reached through the hub
		{"-n", n.Netns, "route", "add", nodeCIDR, "via", hubIP, "dev", n.NodeVeth, "onlink"},
		{"-n", n.Netns, "route", "add", podSupernet, "via", hubIP, "dev", n.NodeVeth, "onlink"},
		{"-n", n.Netns, "route", "add", "blackhole", "default"},
	}
}

func (r *runner) setupNodeNetns(ctx context.Context, n nodeSpec) error {
	if n.Index == 1 {
		return r.setupHub(ctx)
	}
	if r.netnsExists(n.Netns) {
		return nil
	}
	// a stale hub end from an earlier node with this index would make `link add` fail
	_ = r.ip(ctx, "-n", hubNetns, "link", "del", n.HubVeth)
	for _, s := range nodeNetnsSteps(r.l.hubIP(), n) {
		if err := r.ip(ctx, s...); err != nil {
			return fmt.Errorf("network namespace of %s: %w", n.Name, err)
		}
	}
	if err := r.inNetns(ctx, n.Netns, "sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward"); err != nil {
		return fmt.Errorf("network namespace of %s: %w", n.Name, err)
	}
	return nil
}

// deleteNodeNetns removes node n's namespace (n >= 2) and its link to the hub.
func (r *runner) deleteNodeNetns(ctx context.Context, n nodeSpec) {
	if n.Index == 1 {
		return
	}
	if r.netnsExists(hubNetns) {
		_ = r.ip(ctx, "-n", hubNetns, "route", "del", n.PodCIDR)
		_ = r.ip(ctx, "-n", hubNetns, "link", "del", n.HubVeth)
	}
	if r.netnsExists(n.Netns) {
		if err := r.ip(ctx, "netns", "del", n.Netns); err != nil {
			r.logf("warning: %v", err)
		} else {
			r.logf("deleted network namespace %s", n.Netns)
		}
	}
}

// addServiceDNAT makes the "kubernetes" Service IP reach the API server from the
// node's pods (there is no kube-proxy). Best effort: a missing iptables only costs
// in-cluster API access.
func (r *runner) addServiceDNAT(ctx context.Context, n nodeSpec) {
	if err := r.inNetns(ctx, n.Netns, "iptables", "-t", "nat", "-C", "OUTPUT", "-d", serviceIP+"/32", "-p", "tcp",
		"--dport", "443", "-j", "DNAT", "--to-destination", r.l.hubIP()+":"+strconv.Itoa(hubAPIPort)); err == nil {
		return // already there (the hub is shared by node 1 and the control plane)
	}
	for _, rule := range serviceDNATRules(r.l) {
		if err := r.inNetns(ctx, n.Netns, append([]string{"iptables"}, rule...)...); err != nil {
			r.logf("warning: kubernetes Service DNAT in %s: %v", n.Netns, err)
			return
		}
	}
}

// startInit starts node n's init: PID 1 of a new PID namespace (and a private copy
// of the host's mount namespace) inside the node's network namespace. The node's
// daemons join these namespaces, so a hostPID pod sees this init as PID 1 and
// `nsenter -t 1 -m -u -i -n -p` works as on a real node (this machine's own PID 1
// refuses namespace access). Killing the init ends everything left inside.
func (r *runner) startInit(ctx context.Context, n nodeSpec, pauseBin string) (procRecord, error) {
	name := initProc(n)
	if rec, err := r.l.readProc(name); err == nil && rec.alive() {
		return rec, nil
	}
	rec, err := r.startDaemon(name, nsTarget{Netns: netnsPath(n.Netns)},
		[]string{"unshare", "--pid", "--fork", "--mount-proc", "--", pauseBin}, true)
	if err != nil {
		return rec, err
	}
	// the child of unshare mounts the new /proc, then execs pause: wait for the exec
	// before anything joins its namespaces
	err = poll(ctx, 10*time.Second, 10*time.Millisecond, name+" exec", func(context.Context) (bool, error) {
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", rec.PID))
		return err == nil && exe == pauseBin, err
	})
	if err != nil {
		return rec, fmt.Errorf("start %s: %w", name, err)
	}
	r.dropForeignMounts(ctx, rec.PID)
	return rec, nil
}

// dropForeignMounts unmounts, inside the init's new mount namespace, the copies of
// other runtimes' mounts it inherited from the host (see foreignMounts): they would
// keep other namespaces and filesystems (ours or other clusters') alive after their
// owners release them, until this init exits. nsenter -p too: umount reads
// /proc/self, which only resolves inside the PID namespace.
func (r *runner) dropForeignMounts(ctx context.Context, initPID int) {
	mounts, err := readMountInfo(strconv.Itoa(initPID))
	if err != nil {
		r.logf("warning: mounts of init %d: %v", initPID, err)
		return
	}
	r.unmountIn(ctx, initPID, foreignMounts(mounts))
}

// foreignMounts picks, deepest first, the inherited mounts a new node never needs:
// network namespace pins (nsfs, e.g. /run/netns/*), container root filesystems
// (overlay, except /), kubelet volumes and sandbox shm (tmpfs below a
// kubernetes.io~ volume directory or a sandboxes directory).
func foreignMounts(mounts []mountInfo) []string {
	var out []string
	for _, m := range mounts {
		p := m.MountPoint
		switch {
		case m.FSType == "nsfs",
			m.FSType == "overlay" && p != "/",
			m.FSType == "tmpfs" && (strings.Contains(p, "/volumes/kubernetes.io~") || strings.Contains(p, "/sandboxes/")):
			out = append(out, p)
		}
	}
	slices.SortStableFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out
}

// unmountInside lazily unmounts, in the mount namespace of initPID, every mount at or
// below roots.
func (r *runner) unmountInside(ctx context.Context, initPID int, roots ...string) {
	mounts, err := readMountInfo(strconv.Itoa(initPID))
	if err != nil {
		return
	}
	r.unmountIn(ctx, initPID, mountsUnder(mounts, roots...))
}

// unmountIn lazily unmounts targets in the mount (and PID) namespace of initPID.
func (r *runner) unmountIn(ctx context.Context, initPID int, targets []string) {
	for len(targets) > 0 {
		batch := targets[:min(len(targets), 200)]
		targets = targets[len(batch):]
		args := append([]string{"-t", strconv.Itoa(initPID), "-m", "-p", "--", "umount", "-l"}, batch...)
		if _, err := r.run(ctx, "nsenter", args...); err != nil {
			r.logf("warning: %v", err)
		}
	}
}

// netnsDialer returns a dial function whose sockets are created inside the network
// namespace at nsPath (the calling OS thread enters it just for socket creation).
func netnsDialer(nsPath string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		type result struct {
			c   net.Conn
			err error
		}
		ch := make(chan result, 1)
		go func() {
			runtime.LockOSThread()
			c, restored, err := dialOnThread(ctx, nsPath, network, addr)
			if restored {
				runtime.UnlockOSThread()
			} // else the thread stays locked and is discarded when this goroutine ends
			ch <- result{c, err}
		}()
		res := <-ch
		return res.c, res.err
	}
}

func dialOnThread(ctx context.Context, nsPath, network, addr string) (c net.Conn, restored bool, err error) {
	orig, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", syscall.Gettid()))
	if err != nil {
		return nil, true, err
	}
	defer orig.Close()
	target, err := os.Open(nsPath)
	if err != nil {
		return nil, true, err
	}
	defer target.Close()
	if err := setns(int(target.Fd())); err != nil {
		return nil, true, fmt.Errorf("setns %s: %w", nsPath, err)
	}
	var d net.Dialer
	c, err = d.DialContext(ctx, network, addr)
	if rerr := setns(int(orig.Fd())); rerr != nil {
		if c != nil {
			c.Close()
		}
		return nil, false, errors.Join(err, fmt.Errorf("restore network namespace: %w", rerr))
	}
	return c, true, err
}

func setns(fd int) error { return unix.Setns(fd, unix.CLONE_NEWNET) }

// listNetns returns the names in /run/netns.
func listNetns() []string {
	ents, _ := os.ReadDir("/run/netns")
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// portFree reports whether 127.0.0.1:port can be listened on.
func portFree(port int) error {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return err
	}
	return l.Close()
}

func trimLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}
