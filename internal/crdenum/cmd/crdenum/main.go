// Command crdenum writes the spec.backend.name enum of the NodeScript CRD
// files it is given from the backends' registration table
// (backends.WatcherNames), in place. `make generate` runs it after
// controller-gen: go run ./internal/crdenum/cmd/crdenum deploy/crd/nodeexec.io_nodescripts.yaml
package main

import (
	"fmt"
	"os"

	"github.com/nodeexec/nodeexec/internal/crdenum"
	"github.com/nodeexec/nodeexec/nodeexec/backends"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: crdenum CRD.yaml...")
		os.Exit(2)
	}
	for _, f := range os.Args[1:] {
		if err := patch(f); err != nil {
			fmt.Fprintf(os.Stderr, "crdenum: %s: %v\n", f, err)
			os.Exit(1)
		}
	}
}

func patch(f string) error {
	b, err := os.ReadFile(f)
	if err != nil {
		return err
	}
	out, err := crdenum.Patch(b, backends.WatcherNames())
	if err != nil {
		return err
	}
	return os.WriteFile(f, out, 0o644)
}
