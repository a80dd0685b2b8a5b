package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"slices"
	"strings"
	"testing"
)

func parse(t *testing.T, name, src string) (*token.FileSet, *ast.File) {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	return fset, f
}

func TestComplexity(t *testing.T) {
	_, f := parse(t, "a.go", `package a
func f(x int, ok bool) int {
	if x > 0 && ok || x < -10 { // if, &&, ||: 3
		return 1
	}
	for i := 0; i < x; i++ {} // 1
	for range 3 {}            // 1
	switch x {
	case 1, 2: // 1
	case 3:    // 1
	default:   // 0
	}
	g := func() {
		if ok {} // 1: a literal counts toward its function
	}
	g()
	select {
	case <-make(chan int): // 1
	default:
	}
	return 0
}
func flat() {}
`)
	got := map[string]int{}
	for _, d := range f.Decls {
		got[d.(*ast.FuncDecl).Name.Name] = Complexity(d)
	}
	if got["f"] != 10 || got["flat"] != 1 {
		t.Errorf("Complexity = %v, want f 10, flat 1", got)
	}
}

func TestComponents(t *testing.T) {
	g := map[string]map[string][]string{
		"a": {"b": nil}, "b": {"c": nil}, "c": {"a": nil}, // a cycle of three
		"d": {"a": nil}, "e": {},
	}
	var sizes []int
	for _, c := range components(g) {
		sizes = append(sizes, len(c))
	}
	slices.Sort(sizes)
	if !slices.Equal(sizes, []int{1, 1, 3}) {
		t.Errorf("component sizes %v, want [1 1 3]", sizes)
	}
}

// TestFileCycles: files that refer to each other (a pair), a one-way
// reference (not counted) and a longer cycle (its files counted in cycle).
func TestFileCycles(t *testing.T) {
	fset := token.NewFileSet()
	srcs := map[string]string{
		"a.go": "package p\ntype A struct{ F int }\nfunc (A) M() { useB() }\n",
		"b.go": "package p\nfunc useB() { var a A; _ = a.F }\n", // a.go <-> b.go
		"c.go": "package p\nfunc c() { useB() }\n",              // c.go -> b.go only
		"x.go": "package p\nfunc x() { y() }\n",
		"y.go": "package p\nfunc y() { z() }\n",
		"z.go": "package p\nfunc z() { x() }\n", // x -> y -> z -> x
	}
	var files []*ast.File
	for _, name := range []string{"a.go", "b.go", "c.go", "x.go", "y.go", "z.go"} {
		f, err := parser.ParseFile(fset, name, srcs[name], 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}}
	tp, err := (&types.Config{}).Check("p", fset, files, info)
	if err != nil {
		t.Fatal(err)
	}
	m := &module{fset: fset}
	p := &pkg{files: files, types: tp, info: info}
	pairs, inCycle := fileCycles(m, p)
	if len(pairs) != 1 || pairs[0].a != "a.go" || pairs[0].b != "b.go" {
		t.Fatalf("pairs = %+v, want a.go <-> b.go", pairs)
	}
	if !slices.Equal(pairs[0].ab, []string{"useB"}) || !slices.Equal(pairs[0].ba, []string{"A", "F"}) {
		t.Errorf("names = %v / %v, want [useB] / [A F]", pairs[0].ab, pairs[0].ba)
	}
	if inCycle != 5 {
		t.Errorf("files in a cycle = %d, want 5 (a, b, x, y, z)", inCycle)
	}
}

func TestMentions(t *testing.T) {
	const path = "example.com/m/nodeexec/nsenterpod"
	for src, want := range map[string]bool{
		`import "example.com/m/nodeexec/nsenterpod"; var _ = nsenterpod.Name`:                           true,
		`import np "example.com/m/nodeexec/nsenterpod"; var _ = np.Name`:                                true,
		`func f(backend string) { switch backend { case "nsenter": } }`:                                 true,
		`func f(s struct{ Backend struct{ Name string } }) bool { return s.Backend.Name == "nsenter" }`: true,
		`var m = map[string]int{"nsenter": 1}`:                                                          true,
		"type T struct {\n// +kubebuilder:validation:Enum=debugpod;nsenter\nName string }":              true,
		`func f(comm string) bool { return comm != "nsenter" }`:                                         false, // the command, not the backend
		`func f(x string) { switch x { case "nsenter": } }`:                                             false,
		`import "example.com/m/other"; var _ = other.Name`:                                              false,
		"// +kubebuilder:validation:Enum=nsenterpod\nvar x int":                                         false,
	} {
		_, f := parse(t, "x.go", "package x\n"+src)
		if got := mentions(f, path, "nsenter"); got != want {
			t.Errorf("mentions(%q) = %v, want %v", src, got, want)
		}
	}
}

func TestFuncName(t *testing.T) {
	_, f := parse(t, "x.go", "package x\ntype T struct{}\ntype G[E any] struct{}\nfunc F() {}\nfunc (T) V() {}\nfunc (*T) P() {}\nfunc (*G[E]) Q() {}\n")
	var got []string
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok {
			got = append(got, funcName(fd))
		}
	}
	if want := "F T.V (*T).P (*G).Q"; strings.Join(got, " ") != want {
		t.Errorf("funcName: %q, want %q", strings.Join(got, " "), want)
	}
}
