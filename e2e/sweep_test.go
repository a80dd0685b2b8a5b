//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	ucli "github.com/urfave/cli/v2"

	nodeexeccli "github.com/nodeexec/nodeexec/internal/cli"
)

// sweepTimeout bounds each invocation of the sweep.
const sweepTimeout = 20 * time.Second

// TestSweep runs every command of the CLI, walked from the application
// itself, with every backend and every target flag where it takes them,
// against an API server that does not answer and against the test
// cluster. Every invocation is refused or creates nothing (--explain,
// version, completion, a NodeScript that does not exist...). None may
// panic, run past sweepTimeout, or leave an object that was not there
// before (TestBadInput's clusterObjects); one refused (exit 2) prints
// exactly one error line, first. A command the sweep has no arguments for
// fails it: add them below.
func TestSweep(t *testing.T) {
	ctx := t.Context()
	dyn := watcherSetup(t)
	dir := t.TempDir()
	unreachable, _ := unreachableKubeconfig(t, dir)
	node := env.nodes[0]
	const (
		missingScript = "e2e-sweep-missing"
		missingNS     = "nodeexec-e2e-sweep-missing"
	)
	dup := filepath.Join(dir, "dup.yaml")
	d := "apiVersion: nodeexec.io/v1alpha1\nkind: NodeScript\nmetadata: {name: e2e-sweep-dup}\nspec:\n  nodeSelector: {}\n  script: 'true'\n"
	if err := os.WriteFile(dup, []byte(d+"---\n"+d), 0o600); err != nil {
		t.Fatal(err)
	}

	backends := nodeexeccli.BackendNames()
	targets := [][]string{{"--node", node}, {"--node", "no-such-node"}, {"--selector", "nodeexec-e2e=nothing"}, {"--all"}, {"--pod", "default/no-such-pod"}}
	refusedTargets := [][]string{targets[1], targets[2], targets[4]}
	var run, shell, rerun [][]string
	for _, b := range backends {
		for _, tg := range targets {
			run = append(run, join([]string{"run", "--backend", b}, tg, []string{"--explain", "--", "true"}))
		}
		for _, tg := range refusedTargets {
			run = append(run, join([]string{"run", "--backend", b}, tg, []string{"--", "true"}))
		}
		shell = append(shell, []string{"shell", node, "--backend", b, "--explain"}, []string{"shell", "no-such-node", "--backend", b, "--explain"},
			[]string{"shell", "--backend", b, "--pod", "default/no-such-pod", "--explain"})
	}
	for _, tg := range targets[:4] {
		rerun = append(rerun, join([]string{"rerun", missingScript}, tg))
	}
	// The arguments tried, by command path (as `nodeexec help` spells it).
	sweep := map[string][][]string{
		"run":    run,
		"shell":  shell,
		"gc":     {{"gc"}, {"gc", "-A"}, {"gc", "-n", missingNS}, {"gc", "-A", "-n", "default"}},
		"apply":  {{"apply", "-f", dup}, {"apply", "-f", filepath.Join(dir, "missing.yaml")}},
		"status": {{"status", missingScript}, {"status", missingScript, "-o", "json"}},
		"windows": {{"windows"}, {"windows", missingScript}, {"windows", "--calendar", "e2e-sweep-missing-calendar"},
			{"windows", missingScript, "--count", "0"}, {"windows", missingScript, "--calendar", "x"}, {"windows", "a", "b"}},
		"promote":         {{"promote", missingScript, "--to", "all"}},
		"pause":           {{"pause", missingScript}},
		"resume":          {{"resume", missingScript}},
		"rerun":           rerun,
		"ignore":          {{"ignore", missingScript, "--node", node}},
		"unignore":        {{"unignore", missingScript, "--node", node}},
		"run-now":         {{"run-now", missingScript, "--for", "1h"}, {"run-now", missingScript, "--cancel"}, {"run-now", missingScript, "--for", "999999999h"}},
		"watch":           {{"watch", "--workers", "0"}, {"watch", "extra"}},
		"image push":      {{"image", "push"}, {"image", "push", "--binary", filepath.Join(dir, "missing"), "127.0.0.1:1/nodeexec"}},
		"agent install":   {{"agent", "install", "--timeout", "-1s"}, {"agent", "install", "--agent-image", "a b"}},
		"agent uninstall": {{"agent", "uninstall", "--namespace", missingNS}},
		"version":         {{"version"}, {"version", "--client"}, {"version", "-o", "json"}},
		"completion":      {{"completion", "bash"}, {"completion", "zsh"}, {"completion", "fish"}, {"completion"}},
		// Parents alone, and with a word that is no subcommand.
		"agent": {{"agent"}, {"agent", "bogus"}},
		"image": {{"image"}, {"image", "bogus"}},
	}
	for _, path := range commandPaths(nodeexeccli.NewApp(nodeexeccli.Streams{})) {
		if len(sweep[path]) == 0 {
			t.Errorf("command %q has no arguments in the sweep: add them", path)
		}
	}

	type invocation struct {
		kubeconfig string
		args       []string
	}
	var all []invocation
	for _, kc := range []string{unreachable, env.kubeconfig} {
		for _, args := range sweep {
			for _, a := range args {
				all = append(all, invocation{kc, a})
			}
		}
	}
	before := clusterObjects(ctx, t, dyn)
	start := time.Now()
	sem := make(chan struct{}, 4)
	var wg sync.WaitGroup
	for _, inv := range all {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			where := "cluster"
			if inv.kubeconfig == unreachable {
				where = "unreachable"
			}
			name := fmt.Sprintf("%s: nodeexec %s", where, strings.Join(inv.args, " "))
			stdout, stderr, code, took := sweepOne(ctx, inv.kubeconfig, inv.args)
			switch {
			case took >= sweepTimeout:
				t.Errorf("%s: still running after %s; stderr:\n%s", name, sweepTimeout, stderr)
			case code < 0:
				t.Errorf("%s: did not exit normally (%d); stderr:\n%s", name, code, stderr)
			}
			if out := stdout + stderr; strings.Contains(out, "panic:") || strings.Contains(out, "goroutine ") {
				t.Errorf("%s: panicked:\n%s", name, out)
			}
			if code == 2 && (strings.Count(stderr, "error: ") != 1 || !strings.HasPrefix(stderr, "error: ")) {
				t.Errorf("%s: exit 2 with %d error lines, want exactly one, first:\n%s", name, strings.Count(stderr, "error: "), stderr)
			}
		}()
	}
	wg.Wait()
	t.Logf("%d invocations in %s", len(all), time.Since(start).Round(time.Millisecond))
	// Whatever was created and deleted again is gone by now; nothing new
	// may remain (gc may have deleted what others left).
	var created []string
	waitFor(30*time.Second, func() bool {
		created = nil
		for _, o := range clusterObjects(ctx, t, dyn) {
			if !slices.Contains(before, o) {
				created = append(created, o)
			}
		}
		return len(created) == 0
	})
	if len(created) > 0 {
		t.Errorf("objects created by the sweep: %v", created)
	}
}

// sweepOne runs the CLI once with kubeconfig, bounded by sweepTimeout; code
// is -1 when it did not exit by itself.
func sweepOne(ctx context.Context, kubeconfig string, args []string) (stdout, stderr string, code int, took time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, sweepTimeout)
	defer cancel()
	start := time.Now()
	stdout, stderr, code = cliAs(ctx, kubeconfig, "", args...)
	if ctx.Err() != nil {
		code = -1
	}
	return stdout, stderr, code, time.Since(start)
}

// commandPaths are the app's user-facing commands, by path ("agent
// install"), and the parents of subcommands themselves ("agent").
func commandPaths(app *ucli.App) []string {
	var out []string
	var walk func(prefix string, cmds []*ucli.Command)
	walk = func(prefix string, cmds []*ucli.Command) {
		for _, c := range cmds {
			if c.Hidden || c.Name == "help" {
				continue
			}
			out = append(out, strings.TrimSpace(prefix+" "+c.Name))
			walk(strings.TrimSpace(prefix+" "+c.Name), c.Subcommands)
		}
	}
	walk("", app.Commands)
	return out
}

func join(parts ...[]string) []string { return slices.Concat(parts...) }
