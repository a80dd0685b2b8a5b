// Package golden compares what a test produced with a file under testdata/,
// and rewrites the file instead when the test runs with -update:
//
//	go test ./nodeexec/debugpod -update
//
// Pod and container specs are built by pure functions and pinned this way.
package golden

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"
)

// update is -update: rewrite the golden files from what the tests produce.
var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// Check compares got with the file testdata/name (after writing got there
// when -update is given) and reports a difference, -want +got, as a test
// error. A missing file is fatal, with the command that creates it.
func Check(t testing.TB, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run the test with -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("differs from %s (-want +got):\n%s", path, diff)
	}
}

// CheckYAML is Check of v marshalled as YAML (sigs.k8s.io/yaml, as kubectl
// prints objects).
func CheckYAML(t testing.TB, name string, v any) {
	t.Helper()
	got, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	Check(t, name, got)
}
