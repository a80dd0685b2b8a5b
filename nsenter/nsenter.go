// Package nsenter runs a command inside the namespaces of another process, as
// `nsenter -t PID -m -u -i -n -p -- CMD` does, in pure Go (no cgo, no
// util-linux): it is what the nodeexec agent runs in its pod to reach the
// node's own namespaces.
//
// # Mechanism, and why
//
// setns(2) changes the namespaces of the calling thread only, and a Go
// program is always multi-threaded: its goroutines move between threads, and
// all its threads share one fs_struct (root and working directory). The
// kernel refuses setns(CLONE_NEWNS) to a thread whose fs_struct is shared
// (EINVAL), because entering a mount namespace replaces the root and working
// directory of everything sharing it. So [Cmd.Run] does all of its work in a
// dedicated goroutine that:
//
//  1. calls runtime.LockOSThread, so that every system call below runs on the
//     same thread, and no other goroutine is ever scheduled on it;
//  2. calls unshare(CLONE_FS), which gives this thread a private copy of the
//     fs_struct, so setns(CLONE_NEWNS) is allowed and the process's other
//     threads keep their root and working directory;
//  3. opens every requested /proc/PID/ns/<ns> file first, before any setns,
//     because entering the mount (and pid) namespace changes what /proc shows;
//  4. calls setns for each namespace in util-linux's order: cgroup, ipc, uts,
//     net, pid, mnt (mount last: after it, paths resolve in the target's
//     filesystem). Entering the mount namespace also sets the thread's root
//     and working directory to that namespace's root. Entering the pid
//     namespace only affects children (pid_ns_for_children): the command, not
//     this thread, gets a PID in the target's namespace;
//  5. looks up the program in the target's filesystem, then starts it with
//     os/exec from this same goroutine: the fork happens on the current
//     thread, so the child inherits the thread's namespaces, root and working
//     directory; then it waits for the child;
//  6. never calls runtime.UnlockOSThread: when the goroutine returns, the Go
//     runtime destroys the tainted thread instead of reusing it for other
//     goroutines. (The runtime also never clones new threads from a locked
//     thread; it uses a clean template thread.) The main thread is the one
//     the runtime does not destroy (it parks it for good, and /proc/self/ns
//     would then show, and keep alive, the target's namespaces): when the
//     goroutine finds itself there, it keeps the main thread occupied and
//     untouched while another goroutine, on another thread, does the work.
//
// The user namespace is the exception: the kernel refuses setns(CLONE_NEWUSER)
// from any multi-threaded process (EINVAL), and there is no per-thread way
// around it. Asking for [User] therefore works only when the target is in
// the caller's own user namespace (nothing to enter), and fails with
// [ErrUserNamespace] otherwise. A root caller does not need it: root in the
// initial user namespace holds every capability in all namespaces.
//
// Entering a namespace the caller is already in works (setns to the same
// namespace is allowed), so the same code runs whether or not the caller
// shares some namespaces with the target.
//
// Permissions: setns needs CAP_SYS_ADMIN (and CAP_SYS_CHROOT for the mount
// namespace) over the target's namespaces, and opening /proc/PID/ns/* needs
// ptrace-read access to the target: in practice, root in the host's user
// namespace (a privileged pod with hostPID to reach node processes).
package nsenter

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// Namespace names a Linux namespace kind as spelled under /proc/PID/ns/.
type Namespace string

// The namespace kinds Cmd can enter.
const (
	Mount  Namespace = "mnt"
	UTS    Namespace = "uts"
	IPC    Namespace = "ipc"
	Net    Namespace = "net"
	PID    Namespace = "pid"
	Cgroup Namespace = "cgroup"
	User   Namespace = "user"
)

// ErrUnknownNamespace is wrapped by the errors of ParseNamespaces and Cmd.Run
// for a namespace name that is not one of the constants above.
var ErrUnknownNamespace = errors.New("unknown namespace")

// ErrNotExecutable is wrapped by the error of Cmd.Run when the program exists
// in the target's filesystem but cannot be executed: not a regular file, no
// execute permission, or refused by execve (EACCES, ENOEXEC). A missing
// program is exec.ErrNotFound.
var ErrNotExecutable = errors.New("not executable")

// ErrUserNamespace is wrapped by the error of Cmd.Run when it is asked to
// enter a user namespace other than the caller's own: the kernel refuses
// setns(CLONE_NEWUSER) from a multi-threaded process, and every Go process is
// multi-threaded.
var ErrUserNamespace = errors.New("cannot enter another user namespace: the kernel refuses setns(CLONE_NEWUSER) from a multi-threaded process, and a Go process is always multi-threaded; leave out the user namespace (root in the host's user namespace can enter the others without it)")

// valid reports whether n is one of the constants.
func (n Namespace) valid() bool {
	switch n {
	case Mount, UTS, IPC, Net, PID, Cgroup, User:
		return true
	}
	return false
}

// validNames lists the accepted names, for error messages.
func validNames() string {
	return "mnt, uts, ipc, net, pid, cgroup, user, or all"
}

// DefaultNamespaces returns mnt, uts, ipc, net and pid: the namespaces
// `nsenter -t PID -m -u -i -n -p` enters. A new slice on every call.
func DefaultNamespaces() []Namespace {
	return []Namespace{Mount, UTS, IPC, Net, PID}
}

// allNamespaces returns every kind, in the order ParseNamespaces("all") gives.
func allNamespaces() []Namespace {
	return []Namespace{Mount, UTS, IPC, Net, PID, Cgroup, User}
}

// ParseNamespaces parses a comma-separated list of namespace names such as
// "mnt,uts,net" (spaces around names are ignored, duplicates dropped, order
// kept), or "all" alone for mnt, uts, ipc, net, pid, cgroup and user. The
// error, wrapping ErrUnknownNamespace, names the first unknown name and lists
// the valid ones; an empty list is an error too.
func ParseNamespaces(s string) ([]Namespace, error) {
	if strings.TrimSpace(s) == "all" {
		return allNamespaces(), nil
	}
	var out []Namespace
	seen := map[Namespace]bool{}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n := Namespace(f)
		if !n.valid() {
			if f == "all" {
				return nil, fmt.Errorf("namespaces %q: give \"all\" alone, not in a list", s)
			}
			return nil, fmt.Errorf("%w %q: valid names are %s", ErrUnknownNamespace, f, validNames())
		}
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no namespace in %q: give a comma-separated list of %s", s, validNames())
	}
	return out, nil
}

// defaultPath is the PATH used to find Cmd.Path when Cmd.Env has no PATH.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// waitDelay bounds how long Run keeps reading the command's output after the
// command has exited (or been killed) while processes it left behind still
// hold its stdout/stderr, and how long it keeps feeding Stdin after the exit.
const waitDelay = 2 * time.Second

// Cmd is a command to run inside the namespaces of the process Target. The
// zero values of the optional fields are documented defaults; a Cmd is used
// for one Run.
type Cmd struct {
	// Target is the PID (in the caller's PID namespace) whose namespaces to
	// enter. Required, > 0.
	Target int
	// Namespaces to enter. Default (nil or empty): DefaultNamespaces(), that
	// is mnt, uts, ipc, net, pid. Duplicates are ignored; the order is always
	// util-linux's (cgroup, ipc, uts, net, pid, mnt). User is accepted only
	// when the target shares the caller's user namespace (see
	// ErrUserNamespace).
	Namespaces []Namespace
	// Path is the program to run. Without a slash it is looked up in the
	// directories of the PATH in Env (default
	// /usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin) inside the
	// TARGET's filesystem when Mount is entered; a relative path with a slash
	// is relative to Dir. Default: Args[0]. One of Path and Args is required.
	Path string
	// Args is the command line, argv[0] included. Default: []string{Path}.
	Args []string
	// Env is the command's environment, as KEY=VALUE. Default (nil):
	// os.Environ(); a non-nil empty slice means an empty environment.
	Env []string
	// Dir is the working directory of the command, in the target's
	// filesystem when Mount is entered. Default: "/".
	Dir string
	// Stdin, Stdout and Stderr are the command's standard streams, as in
	// os/exec: an *os.File is passed as is, another value is copied through a
	// pipe, nil means the null device (opened in the caller's filesystem).
	// After the command exits, Run reads output still held open by processes
	// it left running for at most 2s, then closes the pipes.
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// ProcessGroup starts the command in a process group of its own and,
	// when the context is done, sends SIGTERM to the whole group, then
	// SIGKILL to what is left of it after KillAfter, so that the processes
	// the command started end with it. Default false: only the command is
	// killed, with SIGKILL. Leave it false when Stdin is the controlling
	// terminal: a group of its own would be a background group there, stopped
	// by SIGTTIN when it reads (with a terminal, the exit of the session
	// leader hangs up the foreground group instead).
	ProcessGroup bool
	// KillAfter is how long the group has between SIGTERM and SIGKILL when
	// ProcessGroup is set. Default DefaultKillAfter.
	KillAfter time.Duration
}

// DefaultKillAfter is Cmd.KillAfter's default: 5 seconds.
const DefaultKillAfter = 5 * time.Second

// ValidateNamespaces rejects an empty list, unknown and repeated names;
// errors for unknown names wrap ErrUnknownNamespace.
func ValidateNamespaces(nss []Namespace) error {
	if len(nss) == 0 {
		return fmt.Errorf("empty: give at least one of %s (or leave it nil for the default)", JoinNamespaces(allNamespaces()))
	}
	seen := map[Namespace]bool{}
	for _, n := range nss {
		// ParseNamespaces names an unknown namespace and lists the valid ones.
		if parsed, err := ParseNamespaces(string(n)); err != nil {
			return err
		} else if len(parsed) != 1 || parsed[0] != n {
			return fmt.Errorf("%w %q: valid names are %s", ErrUnknownNamespace, n, JoinNamespaces(allNamespaces()))
		}
		if seen[n] {
			return fmt.Errorf("%q is listed twice", n)
		}
		seen[n] = true
	}
	return nil
}

// JoinNamespaces is the comma-separated list of the names, as ParseNamespaces
// reads it and the agent's --namespaces flag takes it.
func JoinNamespaces(nss []Namespace) string {
	names := make([]string, len(nss))
	for i, n := range nss {
		names[i] = string(n)
	}
	return strings.Join(names, ",")
}
