package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/nodeexec/nodeexec/internal/testcluster"
)

// faultUsage lists the fault-injection commands (see testcluster.Cluster's fault methods).
const faultUsage = `       testcluster [flags] apiserver restart [DOWN] | apiserver stop|start|freeze|thaw
       testcluster [flags] kubelet stop|start NODE | containerd stop|start NODE | reboot NODE | restore`

// fault runs a fault-injection command; handled is false when cmd is not one.
// These work on a cluster with a stopped component (testcluster.Open, no health check).
func fault(ctx context.Context, o testcluster.Options, cmd string, args []string, stdout io.Writer) (handled bool, err error) {
	switch cmd {
	case "apiserver", "kubelet", "containerd", "reboot", "restore":
	default:
		return false, nil
	}
	c, err := testcluster.Open(o)
	if err != nil {
		return true, err
	}
	bad := func(want string) error {
		return fmt.Errorf("%s: want `testcluster %s`, got %q", cmd, want, args)
	}
	switch cmd {
	case "apiserver":
		if len(args) == 0 {
			return true, bad("apiserver restart [DOWN] | stop | start | freeze | thaw")
		}
		switch {
		case args[0] == "restart" && len(args) <= 2:
			var down time.Duration
			if len(args) == 2 {
				if down, err = time.ParseDuration(args[1]); err != nil || down < 0 {
					return true, fmt.Errorf("apiserver restart: DOWN must be a duration such as 3s, got %q", args[1])
				}
			}
			return true, c.RestartAPIServer(ctx, down)
		case len(args) != 1:
			return true, bad("apiserver restart [DOWN] | stop | start | freeze | thaw")
		case args[0] == "stop":
			return true, c.StopAPIServer(ctx)
		case args[0] == "start":
			return true, c.StartAPIServer(ctx)
		case args[0] == "freeze":
			return true, c.FreezeAPIServer(ctx)
		case args[0] == "thaw":
			return true, c.ThawAPIServer(ctx)
		}
		return true, bad("apiserver restart [DOWN] | stop | start | freeze | thaw")
	case "kubelet", "containerd":
		if len(args) != 2 || (args[0] != "stop" && args[0] != "start") {
			return true, bad(cmd + " stop|start NODE")
		}
		ops := map[string]func(context.Context, string) error{
			"kubelet stop": c.StopKubelet, "kubelet start": c.StartKubelet,
			"containerd stop": c.StopContainerd, "containerd start": c.StartContainerd,
		}
		return true, ops[cmd+" "+args[0]](ctx, args[1])
	case "reboot":
		if len(args) != 1 {
			return true, bad("reboot NODE")
		}
		id, err := c.RebootNode(ctx, args[0])
		if err != nil {
			return true, err
		}
		fmt.Fprintf(stdout, "%s boot ID %s\n", args[0], id)
		return true, nil
	default: // restore
		if len(args) != 0 {
			return true, bad("restore")
		}
		return true, c.Restore(ctx)
	}
}
