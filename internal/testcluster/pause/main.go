// Command pause is the pod sandbox ("infra") container of the nodeexec test cluster
// and the init (PID 1) of each test node's PID namespace: it reaps orphaned children
// (containerd shims re-parent to it) and exits 0 on SIGINT or SIGTERM. Standard
// library only: testcluster embeds this file and builds it in a scratch module.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
