package main

import (
	"fmt"
	"go/ast"
	"go/constant"
	"go/parser"
	"go/token"
	"go/types"
	"io/fs"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// funcComplexity is one function's cyclomatic complexity.
type funcComplexity struct {
	name       string // pkgdir.Func or pkgdir.(*T).Method
	pos        string // file:line
	complexity int
	lines      int
}

// complexities returns every function's complexity in m, highest first.
func complexities(m *module) []funcComplexity {
	var out []funcComplexity
	for _, p := range m.pkgs {
		for _, f := range p.files {
			for _, d := range f.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok || fd.Body == nil {
					continue
				}
				start, end := m.fset.Position(fd.Pos()), m.fset.Position(fd.End())
				out = append(out, funcComplexity{
					name:       p.rel + "." + funcName(fd),
					pos:        fmt.Sprintf("%s:%d", m.relFile(fd.Pos()), start.Line),
					complexity: Complexity(fd),
					lines:      end.Line - start.Line + 1,
				})
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].complexity != out[j].complexity {
			return out[i].complexity > out[j].complexity
		}
		return out[i].name < out[j].name
	})
	return out
}

func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	t := fd.Recv.List[0].Type
	star := ""
	if s, ok := t.(*ast.StarExpr); ok {
		star, t = "*", s.X
	}
	switch x := t.(type) {
	case *ast.IndexExpr:
		t = x.X
	case *ast.IndexListExpr:
		t = x.X
	}
	name := "?"
	if id, ok := t.(*ast.Ident); ok {
		name = id.Name
	}
	if star != "" {
		return "(*" + name + ")." + fd.Name.Name
	}
	return name + "." + fd.Name.Name
}

// Complexity is fn's cyclomatic complexity, as gocyclo counts it: 1, plus
// 1 per if, for, range, non-default case or comm clause, && and ||, in fn
// and the function literals inside it.
func Complexity(fn ast.Node) int {
	c := 1
	ast.Inspect(fn, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.IfStmt, *ast.ForStmt, *ast.RangeStmt:
			c++
		case *ast.CaseClause:
			if n.List != nil {
				c++
			}
		case *ast.CommClause:
			if n.Comm != nil {
				c++
			}
		case *ast.BinaryExpr:
			if n.Op == token.LAND || n.Op == token.LOR {
				c++
			}
		}
		return true
	})
	return c
}

// packageLayers returns each module package's layer: 0 when it imports no
// module package, else 1 + the highest layer among those it imports.
func packageLayers(m *module) map[string]int {
	byPath := map[string]*pkg{}
	for _, p := range m.pkgs {
		byPath[p.ImportPath] = p
	}
	layers := map[string]int{}
	var layer func(p *pkg) int
	layer = func(p *pkg) int {
		if l, ok := layers[p.ImportPath]; ok {
			return l
		}
		l := 0
		for _, imp := range p.Imports {
			if q := byPath[imp]; q != nil {
				l = max(l, 1+layer(q))
			}
		}
		layers[p.ImportPath] = l
		return l
	}
	for _, p := range m.pkgs {
		layer(p)
	}
	return layers
}

// filePair is two files of one package that refer to each other, with the
// names each uses from the other.
type filePair struct {
	a, b   string
	ab, ba []string
}

// fileRefs returns, for each file of p (base name), the files of p it
// refers to and the names it uses from each.
func fileRefs(m *module, p *pkg) map[string]map[string][]string {
	refs := map[string]map[string][]string{}
	for _, f := range p.files {
		from := filepath.Base(m.fset.File(f.Pos()).Name())
		refs[from] = map[string][]string{}
		seen := map[types.Object]bool{}
		ast.Inspect(f, func(n ast.Node) bool {
			id, ok := n.(*ast.Ident)
			if !ok {
				return true
			}
			obj := p.info.Uses[id]
			if obj == nil || obj.Pkg() != p.types || !obj.Pos().IsValid() || seen[obj] {
				return true
			}
			seen[obj] = true
			to := filepath.Base(m.fset.File(obj.Pos()).Name())
			if to != from {
				refs[from][to] = append(refs[from][to], obj.Name())
			}
			return true
		})
	}
	for _, tos := range refs {
		for to := range tos {
			slices.Sort(tos[to])
		}
	}
	return refs
}

// fileCycles returns p's pairs of files that refer to each other, and the
// number of its files in a reference cycle of any length.
func fileCycles(m *module, p *pkg) ([]filePair, int) {
	refs := fileRefs(m, p)
	var pairs []filePair
	for a, tos := range refs {
		for b, ab := range tos {
			if ba, ok := refs[b][a]; ok && a < b {
				pairs = append(pairs, filePair{a, b, abbrev(ab), abbrev(ba)})
			}
		}
	}
	sort.Slice(pairs, func(i, j int) bool {
		if pairs[i].a != pairs[j].a {
			return pairs[i].a < pairs[j].a
		}
		return pairs[i].b < pairs[j].b
	})
	inCycle := 0
	for _, scc := range components(refs) {
		if len(scc) > 1 {
			inCycle += len(scc)
		}
	}
	return pairs, inCycle
}

func abbrev(names []string) []string {
	if len(names) > 3 {
		return append(slices.Clip(names[:3]), fmt.Sprintf("+%d", len(names)-3))
	}
	return names
}

// components returns the strongly connected components of the graph
// (Tarjan's algorithm).
func components(g map[string]map[string][]string) [][]string {
	var nodes []string
	for n := range g {
		nodes = append(nodes, n)
	}
	slices.Sort(nodes)
	index, low, onStack := map[string]int{}, map[string]int{}, map[string]bool{}
	var stack []string
	var out [][]string
	var strong func(v string)
	strong = func(v string) {
		index[v], low[v] = len(index), len(index)
		stack = append(stack, v)
		onStack[v] = true
		var succ []string
		for w := range g[v] {
			succ = append(succ, w)
		}
		slices.Sort(succ)
		for _, w := range succ {
			if _, ok := index[w]; !ok {
				strong(w)
				low[v] = min(low[v], low[w])
			} else if onStack[w] {
				low[v] = min(low[v], index[w])
			}
		}
		if low[v] == index[v] {
			var scc []string
			for {
				w := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				onStack[w] = false
				scc = append(scc, w)
				if w == v {
					break
				}
			}
			out = append(out, scc)
		}
	}
	for _, n := range nodes {
		if _, ok := index[n]; !ok {
			strong(n)
		}
	}
	return out
}

// backends are the packages whose Name constant names a backend.
var backends = []string{"nodeexec/debugpod", "nodeexec/nsenterpod", "nodeexec/runtimeexec", "ephemeral"}

type backendUse struct {
	pkg, ident, value string
	files, tests      []string
}

// backendMentions returns, for each backend, the files outside its package
// that name it (see the package doc).
func backendMentions(m *module) []backendUse {
	uses := backendList(m)
	fset := token.NewFileSet()
	_ = filepath.WalkDir(m.dir, func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() {
			return skipDir(m.dir, name)
		}
		if !strings.HasSuffix(name, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(m.dir, name)
		rel = filepath.ToSlash(rel)
		for i := range uses {
			u := &uses[i]
			switch {
			case filepath.ToSlash(filepath.Dir(rel)) == u.pkg || !mentions(f, m.path+"/"+u.pkg, u.value):
			case strings.HasSuffix(rel, "_test.go"):
				u.tests = append(u.tests, rel)
			default:
				u.files = append(u.files, rel)
			}
		}
		return nil
	})
	return uses
}

// skipDir skips the directories go build ignores.
func skipDir(root, dir string) error {
	base := filepath.Base(dir)
	if dir != root && (base == "testdata" || base == "vendor" || strings.HasPrefix(base, ".") || strings.HasPrefix(base, "_")) {
		return filepath.SkipDir
	}
	return nil
}

// backendList returns the backends of m that exist, with their Name
// constant's value.
func backendList(m *module) []backendUse {
	byPath := map[string]*pkg{}
	for _, p := range m.pkgs {
		byPath[p.ImportPath] = p
	}
	var uses []backendUse
	for _, rel := range backends {
		p := byPath[m.path+"/"+rel]
		if p == nil {
			continue
		}
		if c, ok := p.types.Scope().Lookup("Name").(*types.Const); ok && c.Val().Kind() == constant.String {
			uses = append(uses, backendUse{pkg: rel, ident: p.Name + ".Name", value: constant.StringVal(c.Val())})
		}
	}
	return uses
}

// mentions reports whether f names the backend of package path whose Name
// is value: path's Name constant; value as a composite literal's key, in a
// +kubebuilder Enum marker, or as a case of a switch or an operand of == or
// != on an expression whose text says "backend" (s.Backend.Name,
// backendName(c): not a comparison with the nsenter command's name).
func mentions(f *ast.File, path, value string) bool {
	mt := matcher{local: importName(f, path), value: value}
	found := false
	ast.Inspect(f, func(n ast.Node) bool {
		found = found || mt.hit(n)
		return !found
	})
	return found || inEnumMarker(f, value)
}

// matcher finds one backend's name in a file's syntax.
type matcher struct {
	local string // the name the file imports the backend's package as, or ""
	value string // the backend's Name
}

func (mt matcher) hit(n ast.Node) bool {
	switch n := n.(type) {
	case *ast.SelectorExpr:
		id, ok := n.X.(*ast.Ident)
		return ok && mt.local != "" && id.Name == mt.local && n.Sel.Name == "Name"
	case *ast.SwitchStmt:
		return n.Tag != nil && aboutBackend(n.Tag) && slices.ContainsFunc(n.Body.List, mt.isCase)
	case *ast.BinaryExpr:
		return (n.Op == token.EQL || n.Op == token.NEQ) && (mt.isValue(n.X) && aboutBackend(n.Y) || mt.isValue(n.Y) && aboutBackend(n.X))
	case *ast.KeyValueExpr:
		return mt.isValue(n.Key)
	}
	return false
}

func (mt matcher) isCase(s ast.Stmt) bool {
	return slices.ContainsFunc(s.(*ast.CaseClause).List, mt.isValue)
}

func (mt matcher) isValue(e ast.Expr) bool {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return false
	}
	s, _ := strconv.Unquote(lit.Value)
	return s == mt.value
}

// importName returns the name f imports path under, or "".
func importName(f *ast.File, path string) string {
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == path {
			if imp.Name != nil {
				return imp.Name.Name
			}
			return p[strings.LastIndex(p, "/")+1:]
		}
	}
	return ""
}

// inEnumMarker reports whether a +kubebuilder Enum marker in f lists value.
func inEnumMarker(f *ast.File, value string) bool {
	for _, cg := range f.Comments {
		for _, c := range cg.List {
			if _, enum, ok := strings.Cut(c.Text, "+kubebuilder:validation:Enum="); ok && slices.Contains(strings.Split(strings.TrimSpace(enum), ";"), value) {
				return true
			}
		}
	}
	return false
}

// aboutBackend reports whether e's text says "backend" (any case).
func aboutBackend(e ast.Expr) bool {
	return strings.Contains(strings.ToLower(types.ExprString(e)), "backend")
}
