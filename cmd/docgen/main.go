// Command docgen writes nodeexec's generated documentation (see package
// internal/docgen): the CLI reference and man page, the NodeScript,
// MaintenanceBudget and MaintenanceCalendar references, docs/layout.md and
// the library guide's code. Run it from the module root: `make docs`.
package main

import (
	"fmt"
	"os"

	"github.com/nodeexec/nodeexec/internal/docgen"
)

func main() {
	names, err := docgen.Write(".")
	if err != nil {
		fmt.Fprintln(os.Stderr, "docgen:", err)
		os.Exit(1)
	}
	for _, n := range names {
		fmt.Println(n)
	}
}
