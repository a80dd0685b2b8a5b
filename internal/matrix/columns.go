// Package matrix runs nodeexec's compatibility matrix (`make test-matrix`):
// for each column (a Kubernetes version and a containerd) it brings the local
// test cluster (internal/testcluster) down and up with those versions, runs
// the selected end-to-end tests and records, per test, pass, fail or skip and
// the seconds taken. The results are a JSON report (bench/matrix.json) and a
// markdown table generated from it (docs/compatibility.md).
//
// This package holds the parts that need no cluster: the column syntax,
// go test's JSON event stream (test2json) reduced to per-test results, the
// report's types and its markdown rendering. The runner is
// internal/matrix/cmd/matrix.
package matrix

import (
	"fmt"
	"regexp"
	"strings"
)

// DebianContainerd is the containerd part of a column that means the
// distribution's packaged containerd (the test cluster's default: no
// --containerd-version flag is passed).
const DebianContainerd = "debian"

// Column is one column of the matrix: the Kubernetes version of the control
// plane and kubelets, and the containerd of every node.
type Column struct {
	// Kubernetes is a version "1.37.1" (no "v").
	Kubernetes string `json:"kubernetesVersion"`
	// Containerd is DebianContainerd or a version "2.2.9" (no "v") that the
	// test cluster builds.
	Containerd string `json:"containerd"`
}

// String is the column's name as written in -columns: "1.37.1/debian".
func (c Column) String() string { return c.Kubernetes + "/" + c.Containerd }

// UpArgs are the version flags for `testcluster up`: always
// --kubernetes-version, and --containerd-version unless Containerd is
// DebianContainerd.
func (c Column) UpArgs() []string {
	args := []string{"--kubernetes-version", c.Kubernetes}
	if c.Containerd != DebianContainerd {
		args = append(args, "--containerd-version", c.Containerd)
	}
	return args
}

var versionRE = regexp.MustCompile(`^v?([0-9]+)\.([0-9]+)\.([0-9]+)$`)

// ParseColumns parses a comma-separated list of columns KUBERNETES/CONTAINERD,
// e.g. "1.37.1/debian,1.37.1/2.2.9,1.34.4/2.2.9", where KUBERNETES is a
// version x.y.z and CONTAINERD is "debian" or a version x.y.z (a leading "v"
// is dropped from either). Spaces around items are ignored. flag names the
// flag in the errors, which say what is wrong and how to write it. Errors: an
// empty list, an empty item, a malformed item or version, a duplicate column.
func ParseColumns(flag, s string) ([]Column, error) {
	const how = "want a comma-separated list of KUBERNETES/CONTAINERD, e.g. 1.37.1/debian,1.37.1/2.2.9 (CONTAINERD: debian or a version x.y.z)"
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("%s is empty: %s", flag, how)
	}
	var cols []Column
	seen := map[Column]bool{}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			return nil, fmt.Errorf("%s %q has an empty column: %s", flag, s, how)
		}
		k, c, ok := strings.Cut(item, "/")
		if !ok || strings.Contains(c, "/") {
			return nil, fmt.Errorf("%s: column %q is not KUBERNETES/CONTAINERD: %s", flag, item, how)
		}
		if !versionRE.MatchString(k) {
			return nil, fmt.Errorf("%s: column %q: Kubernetes version %q is not x.y.z (e.g. 1.34.4)", flag, item, k)
		}
		col := Column{Kubernetes: strings.TrimPrefix(k, "v"), Containerd: c}
		if c != DebianContainerd {
			if !versionRE.MatchString(c) {
				return nil, fmt.Errorf("%s: column %q: containerd %q is neither %q nor a version x.y.z (e.g. 2.2.9)", flag, item, c, DebianContainerd)
			}
			col.Containerd = strings.TrimPrefix(c, "v")
		}
		if seen[col] {
			return nil, fmt.Errorf("%s: column %s is listed twice", flag, col)
		}
		seen[col] = true
		cols = append(cols, col)
	}
	return cols, nil
}
