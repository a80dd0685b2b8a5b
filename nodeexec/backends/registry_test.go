package backends

import (
	"slices"
	"testing"
)

// TestRegistry: the table is consistent: names unique, the defaults
// registered (and runnable by the watcher where they are its default),
// every flag an entry reads described by Flags, a Node builder exactly for
// the backends the watcher may run, a builder for every backend.
func TestRegistry(t *testing.T) {
	seen := map[string]bool{}
	var flags []string
	for _, f := range Flags() {
		if slices.Contains(flags, f.Name) {
			t.Errorf("flag --%s described twice", f.Name)
		}
		flags = append(flags, f.Name)
	}
	for _, e := range Entries() {
		if e.Name == "" || seen[e.Name] {
			t.Errorf("entry name %q empty or repeated", e.Name)
		}
		seen[e.Name] = true
		if (e.Node != nil) != e.RunToCompletion {
			t.Errorf("%s: RunToCompletion %v but Node set %v", e.Name, e.RunToCompletion, e.Node != nil)
		}
		if e.Build == nil || e.DefaultImage == "" || !slices.Contains(e.Flags, e.ImageFlag) {
			t.Errorf("%s: Build set %v, default image %q, image flag %q among its flags %v", e.Name, e.Build != nil, e.DefaultImage, e.ImageFlag, e.Flags)
		}
		if (e.Target == TargetContainer) != (e.CheckTargets != nil) {
			t.Errorf("%s: target %v, CheckTargets set %v", e.Name, e.Target, e.CheckTargets != nil)
		}
		for _, f := range e.Flags {
			if !slices.Contains(flags, f) {
				t.Errorf("%s reads --%s, which Flags does not describe", e.Name, f)
			}
		}
	}
	if d, ok := Lookup(DefaultName); !ok || !d.RunToCompletion || WatcherNames()[0] != DefaultName {
		t.Errorf("DefaultName %q: registered %v, the watcher's first %v", DefaultName, ok, WatcherNames())
	}
	if _, ok := Lookup(RunDefaultName); !ok {
		t.Errorf("RunDefaultName %q is not registered", RunDefaultName)
	}
	for _, f := range Flags() {
		if f.Exclusive && len(FlagUsers(f.Name)) == 0 {
			t.Errorf("exclusive flag --%s is read by no backend", f.Name)
		}
	}
}
