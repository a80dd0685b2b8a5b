//go:build e2e

package testcluster

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// TestMonitoringStopStart stops the monitoring processes as Stop does (the
// recorded PIDs, SIGTERM) and checks that nothing of them is left (no process
// of their binaries, ports free, data under the state directory that Stop
// removes), then starts the missing ones as Start does on a running cluster.
func TestMonitoringStopStart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, _ := kwokCluster(t, ctx)
	r := c.r
	unlock, err := lockCache(ctx, r.l, r.logf)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := r.startMonitoring(ctx); err != nil {
			t.Errorf("startMonitoring: %v", err)
		}
	})
	var names []string
	for _, p := range monitoringProcs() {
		names = append(names, p.name)
		if rec, err := r.l.readProc(p.name); err != nil || !rec.alive() {
			t.Fatalf("%s is not running on the started cluster: %v", p.name, err)
		}
	}
	t0 := time.Now()
	r.stopProcs(10*time.Second, names...)
	t.Logf("stopped %v in %s", names, time.Since(t0).Round(time.Millisecond))
	if pids := r.foreignMonitoringProcs(); len(pids) > 0 {
		t.Errorf("processes of the monitoring binaries left: %v", pids)
	}
	for _, p := range monitoringProcs() {
		if err := portFree(p.port); err != nil {
			t.Errorf("port %d still taken: %v", p.port, err)
		}
		if _, err := os.Stat(r.l.pidFile(p.name)); !os.IsNotExist(err) {
			t.Errorf("PID file of %s left: %v", p.name, err)
		}
	}
	for path := range monitoringFiles(r.l) {
		if !strings.HasPrefix(path, r.o.StateDir+"/") {
			t.Errorf("%s is outside the state directory", path)
		}
	}
	t0 = time.Now()
	if err := r.startMonitoring(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("started and ready in %s", time.Since(t0).Round(time.Millisecond))
}
