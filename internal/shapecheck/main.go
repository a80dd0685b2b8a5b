// Command shapecheck prints figures of the module's code shape, the ones a
// newcomer meets first:
//
//	go run ./internal/shapecheck        the figures
//	go run ./internal/shapecheck -v     also the files and names behind them
//	go run ./internal/shapecheck -top N the N most complex functions (15)
//
// It reads the non-test Go files of the module's packages (`go list ./...`
// for linux/amd64; no build tags, so not e2e/) and type-checks them against
// their dependencies' export data. The figures:
//
//  1. Exported names: the exported top-level names (constants, variables,
//     types, functions; not methods or fields) of each public package (the
//     packages outside internal/ that are not commands).
//
//  2. Cyclomatic complexity: the most complex functions, counted as gocyclo
//     does: 1, plus 1 per if, for, range, non-default case of a switch or
//     select, && and ||, function literals inside a function counting
//     toward it. With each function's length in lines.
//
//  3. References running back up. Packages: a package's layer is 0 when it
//     imports no package of the module, else 1 + the highest layer of the
//     module packages it imports; an import runs up when it goes from a
//     lower layer to a higher one, which Go's acyclic imports rule out, so
//     the figure printed is the layers themselves. Files inside one package:
//     file A refers to file B when A uses an identifier (a top-level name, a
//     method or a field) declared in B. Two files that refer to each other
//     form a cycle: whichever of the two is put lower, one of the two
//     references runs back up. The figure is, per package, the number of
//     such file pairs ("back refs"), with the number of files that sit in a
//     reference cycle of any length (a strongly connected component of more
//     than one file) and the package's file count.
//
//  4. Backend names: the files outside each backend's own package that name
//     it: debugpod.Name, nsenterpod.Name, runtimeexec.Name, ephemeral.Name,
//     their string values in a switch case or an == / != comparison, and
//     in a +kubebuilder Enum marker. Test files are counted apart. The
//     files a new backend touches today are its own package plus the
//     union of these files (the figure the issue tracks: "its package + 1"
//     is the goal).
package main

import (
	"flag"
	"fmt"
	"go/token"
	"go/types"
	"io"
	"os"
	"sort"
	"strings"
)

func main() {
	verbose := flag.Bool("v", false, "also list the files and names behind each figure")
	top := flag.Int("top", 15, "how many of the most complex functions to print")
	flag.Parse()
	m, err := load(".")
	if err != nil {
		fmt.Fprintln(os.Stderr, "shapecheck:", err)
		os.Exit(1)
	}
	report(os.Stdout, m, *top, *verbose)
}

func report(w io.Writer, m *module, top int, verbose bool) {
	fmt.Fprintf(w, "# %s: code shape (go run ./internal/shapecheck)\n", m.path)
	reportNames(w, m, verbose)
	reportComplexity(w, m, top)
	reportLayers(w, m)
	reportFileCycles(w, m, verbose)
	reportBackends(w, m, verbose)
}

func reportNames(w io.Writer, m *module, verbose bool) {
	fmt.Fprintf(w, "\n## Exported top-level names per public package\n")
	total := 0
	for _, p := range m.pkgs {
		if !p.isPublic() {
			continue
		}
		names := exportedNames(p.types)
		total += len(names)
		fmt.Fprintf(w, "%5d  %-32s %s\n", len(names), p.rel, kinds(p.types, names))
		if verbose {
			fmt.Fprintf(w, "       %s\n", strings.Join(names, " "))
		}
	}
	fmt.Fprintf(w, "%5d  total\n", total)
}

func reportComplexity(w io.Writer, m *module, top int) {
	fmt.Fprintf(w, "\n## The %d highest cyclomatic complexities (non-test code)\n", top)
	funcs := complexities(m)
	over := 0
	for i, f := range funcs {
		if i < top {
			fmt.Fprintf(w, "%5d  %4d lines  %s  %s\n", f.complexity, f.lines, f.name, f.pos)
		}
		if f.complexity > 15 {
			over++
		}
	}
	fmt.Fprintf(w, "functions over 15: %d of %d\n", over, len(funcs))
}

func reportLayers(w io.Writer, m *module) {
	fmt.Fprintf(w, "\n## References running back up\n")
	layers := packageLayers(m)
	byLayer := map[int][]string{}
	for _, p := range m.pkgs {
		byLayer[layers[p.ImportPath]] = append(byLayer[layers[p.ImportPath]], p.rel)
	}
	fmt.Fprintf(w, "package imports running up: 0 (Go forbids import cycles); layers, 0 = imports no module package:\n")
	for l := 0; len(byLayer[l]) > 0; l++ {
		fmt.Fprintf(w, "  layer %d: %s\n", l, strings.Join(byLayer[l], " "))
	}
}

func reportFileCycles(w io.Writer, m *module, verbose bool) {
	fmt.Fprintf(w, "file references running back up (pairs of files referring to each other), per package:\n")
	fmt.Fprintf(w, "%5s  %8s  %5s  %s\n", "back", "in cycle", "files", "package")
	type row struct {
		p     *pkg
		pairs []filePair
		cyc   int
	}
	var rows []row
	sum := 0
	for _, p := range m.pkgs {
		pairs, cyc := fileCycles(m, p)
		sum += len(pairs)
		if len(pairs) > 0 || verbose {
			rows = append(rows, row{p, pairs, cyc})
		}
	}
	sort.SliceStable(rows, func(i, j int) bool { return len(rows[i].pairs) > len(rows[j].pairs) })
	for _, r := range rows {
		fmt.Fprintf(w, "%5d  %8d  %5d  %s\n", len(r.pairs), r.cyc, len(r.p.files), r.p.rel)
		for _, fp := range r.pairs {
			if verbose {
				fmt.Fprintf(w, "         %s (%s) <-> %s (%s)\n", fp.a, strings.Join(fp.ab, ","), fp.b, strings.Join(fp.ba, ","))
			}
		}
	}
	fmt.Fprintf(w, "%5d  total (packages with none not shown)\n", sum)
}

func reportBackends(w io.Writer, m *module, verbose bool) {
	fmt.Fprintf(w, "\n## Files naming a backend outside its own package\n")
	union, unionTests := map[string]bool{}, map[string]bool{}
	for _, b := range backendMentions(m) {
		fmt.Fprintf(w, "%5d files (+%d test files)  %s (%s = %q)\n", len(b.files), len(b.tests), b.pkg, b.ident, b.value)
		for _, f := range b.files {
			union[f] = true
			fmt.Fprintf(w, "         %s\n", f)
		}
		for _, f := range b.tests {
			unionTests[f] = true
			if verbose {
				fmt.Fprintf(w, "         %s (test)\n", f)
			}
		}
	}
	fmt.Fprintf(w, "a new backend touches its package + %d files (+%d test files) naming the backends today\n", len(union), len(unionTests))
}

// exportedNames returns the exported top-level names of pkg, sorted.
func exportedNames(pkg *types.Package) []string {
	var names []string
	for _, n := range pkg.Scope().Names() {
		if token.IsExported(n) {
			names = append(names, n)
		}
	}
	return names
}

// kinds counts names by the kind of object: "types 3, funcs 5, ...".
func kinds(pkg *types.Package, names []string) string {
	var c [4]int
	for _, n := range names {
		switch pkg.Scope().Lookup(n).(type) {
		case *types.TypeName:
			c[0]++
		case *types.Func:
			c[1]++
		case *types.Const:
			c[2]++
		case *types.Var:
			c[3]++
		}
	}
	return fmt.Sprintf("(types %d, funcs %d, consts %d, vars %d)", c[0], c[1], c[2], c[3])
}
