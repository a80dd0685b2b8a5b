package watcher

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/nodescripts"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// TestREADMEManifests parses and validates every YAML block of README.md
// and docs/watcher.md (the watcher's guide, README's worked examples) that
// holds nodeexec.io objects, as `nodeexec apply` would before sending them:
// the worked examples stay examples of what the watcher accepts.
func TestREADMEManifests(t *testing.T) {
	var b []byte
	for _, name := range []string{"../../README.md", "../../docs/watcher.md"} {
		f, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		b = append(append(b, f...), '\n')
	}
	blocks := 0
	for _, part := range strings.Split(string(b), "```yaml\n")[1:] {
		block, _, _ := strings.Cut(part, "```")
		if !strings.Contains(block, "apiVersion: nodeexec.io/v1alpha1") {
			continue
		}
		blocks++
		m, err := nodescripts.ParseAllManifests(strings.NewReader(block))
		scripts := m.Scripts
		if err != nil {
			t.Errorf("README or docs/watcher.md block %d: %v\n%s", blocks, err, block)
			continue
		}
		for _, ns := range scripts {
			if errs := v1alpha1.Validate(ns); len(errs) > 0 {
				t.Errorf("README or docs/watcher.md block %d: nodescript %s: %v", blocks, ns.Name, errs.ToAggregate())
			}
		}
		if len(scripts)+len(m.Budgets)+len(m.Calendars) == 0 {
			t.Errorf("README or docs/watcher.md block %d: no NodeScript, MaintenanceBudget or MaintenanceCalendar parsed", blocks)
		}
	}
	if blocks < 3 {
		t.Errorf("found %d README and docs/watcher.md blocks of nodeexec.io objects, want at least 3", blocks)
	}
}

// TestExampleManifests does the same for examples/watcher's manifests.
func TestExampleManifests(t *testing.T) {
	files, err := filepath.Glob("../../examples/watcher/*.yaml")
	if err != nil || len(files) < 2 {
		t.Fatalf("examples/watcher/*.yaml: %v (%d files)", err, len(files))
	}
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		m, err := nodescripts.ParseAllManifests(f)
		scripts := m.Scripts
		f.Close()
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		for _, ns := range scripts {
			if errs := v1alpha1.Validate(ns); len(errs) > 0 {
				t.Errorf("%s: nodescript %s: %v", name, ns.Name, errs.ToAggregate())
			}
		}
	}
}
