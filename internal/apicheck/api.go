package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/importer"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
)

// goPackage is the part of `go list -json` this program reads.
type goPackage struct {
	ImportPath string
	Name       string
	GoFiles    []string
	Export     string
	Standard   bool
	DepOnly    bool
	Module     *struct{ Path string }
	Error      *struct{ Err string }
}

// The record is made for one platform, so that it is the same on every
// machine (nsenter has a Linux file and a fallback).
var recordEnv = []string{"GOOS=linux", "GOARCH=amd64"}

// goList runs `go list -json` with args in dir and decodes its stream.
func goList(dir string, args ...string) ([]goPackage, error) {
	cmd := exec.Command("go", append([]string{"list", "-json=ImportPath,Name,GoFiles,Export,Standard,DepOnly,Module,Error"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), recordEnv...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	var pkgs []goPackage
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p goPackage
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			return nil, fmt.Errorf("go list: decoding its output: %w", err)
		}
		if p.Error != nil {
			return nil, fmt.Errorf("go list: %s: %s", p.ImportPath, p.Error.Err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs, nil
}

// isPublic reports whether a package of module mod is part of its public
// API: importable (not main, not only tests), not internal (no path element
// "internal").
func isPublic(p goPackage, mod string) bool {
	if p.Module == nil || p.Module.Path != mod || p.Name == "main" || p.Standard || len(p.GoFiles) == 0 {
		return false
	}
	return !slices.Contains(strings.Split(p.ImportPath, "/"), "internal")
}

// PublicPackages lists the import paths of the module in dir's public
// packages (see isPublic), sorted, and the module's path.
func PublicPackages(dir string) (mod string, paths []string, err error) {
	cmd := exec.Command("go", "list", "-m")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return "", nil, fmt.Errorf("go list -m: %w", err)
	}
	mod = strings.TrimSpace(string(out))
	pkgs, err := goList(dir, "./...")
	if err != nil {
		return "", nil, err
	}
	for _, p := range pkgs {
		if isPublic(p, mod) {
			paths = append(paths, p.ImportPath)
		}
	}
	slices.Sort(paths)
	return mod, paths, nil
}

// ModuleAPI returns the exported API of the module in dir: one line per
// feature of each public package, sorted (see Features). It reads the
// packages' export data, which `go list -export` builds (a compile, cached
// afterwards, as go vet's).
func ModuleAPI(dir string) ([]string, error) {
	_, paths, err := PublicPackages(dir)
	if err != nil {
		return nil, err
	}
	pkgs, err := goList(dir, append([]string{"-export", "-deps"}, paths...)...)
	if err != nil {
		return nil, err
	}
	exports := map[string]string{}
	for _, p := range pkgs {
		exports[p.ImportPath] = p.Export
	}
	imp := importer.ForCompiler(token.NewFileSet(), "gc", func(path string) (io.ReadCloser, error) {
		file, ok := exports[path]
		if !ok || file == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(file)
	})
	var api []string
	for _, path := range paths {
		pkg, err := imp.Import(path)
		if err != nil {
			return nil, fmt.Errorf("loading %s: %w", path, err)
		}
		api = append(api, Features(pkg)...)
	}
	slices.Sort(api)
	return slices.Compact(api), nil
}

// Features returns the exported API of pkg in the format of Go's own
// api/*.txt files (cmd/api), one line per feature:
//
//	pkg P, func F(T1, T2) R
//	pkg P, method (*T) M(int) error
//	pkg P, type T struct
//	pkg P, type T struct, Field string
//	pkg P, type T struct, embedded Other
//	pkg P, type I interface { M, N }
//	pkg P, type I interface, M() error
//	pkg P, const C = 5
//	pkg P, const C ideal-int
//	pkg P, var V *T
//
// with two differences: a type from outside the standard library is
// qualified by its full import path (k8s.io/api/core/v1.Pod, not v1.Pod:
// several Kubernetes packages are named v1), and no platform contexts.
// Removing or changing any line is an incompatible change; adding a line is
// compatible, except that an interface's method list line changes when a
// method is added (so that shows as a removed line too).
func Features(pkg *types.Package) []string {
	w := &walker{pkg: pkg}
	scope := pkg.Scope()
	for _, name := range scope.Names() {
		if obj := scope.Lookup(name); obj.Exported() {
			w.object(obj)
		}
	}
	slices.Sort(w.out)
	return slices.Compact(w.out)
}

type walker struct {
	pkg   *types.Package
	scope string // "type T struct" while walking T's fields
	out   []string
}

func (w *walker) emit(format string, args ...any) {
	line := "pkg " + w.pkg.Path() + ", "
	if w.scope != "" {
		line += w.scope + ", "
	}
	w.out = append(w.out, line+fmt.Sprintf(format, args...))
}

func (w *walker) object(obj types.Object) {
	switch obj := obj.(type) {
	case *types.Const:
		w.emit("const %s %s", obj.Name(), w.typeString(obj.Type()))
		short, exact := obj.Val().String(), obj.Val().ExactString()
		if short == exact {
			w.emit("const %s = %s", obj.Name(), short)
		} else {
			w.emit("const %s = %s  // %s", obj.Name(), short, exact)
		}
	case *types.Var:
		w.emit("var %s %s", obj.Name(), w.typeString(obj.Type()))
	case *types.Func:
		w.emit("func %s%s", obj.Name(), w.signature(obj.Type().(*types.Signature)))
	case *types.TypeName:
		w.typeName(obj)
	}
}

func (w *walker) typeName(obj *types.TypeName) {
	name := obj.Name()
	if obj.IsAlias() {
		w.emit("type %s = %s", name, w.typeString(obj.Type()))
		return
	}
	named := obj.Type().(*types.Named)
	if tps := named.TypeParams(); tps != nil {
		var b strings.Builder
		b.WriteString(name)
		w.typeParams(&b, tps, true)
		name = b.String()
	}
	switch u := named.Underlying().(type) {
	case *types.Struct:
		w.emit("type %s struct", name)
		w.scope = "type " + name + " struct"
		for i := range u.NumFields() {
			f := u.Field(i)
			switch {
			case !f.Exported():
			case f.Anonymous():
				w.emit("embedded %s", w.typeString(f.Type()))
			default:
				w.emit("%s %s", f.Name(), w.typeString(f.Type()))
			}
		}
		w.scope = ""
	case *types.Interface:
		w.iface(name, u)
		return // its methods are its lines
	default:
		w.emit("type %s %s", name, w.typeString(u))
	}
	// The method set of *T, each method once (T's set is a subset).
	mset := types.NewMethodSet(types.NewPointer(named))
	for i := range mset.Len() {
		sel := mset.At(i)
		if !sel.Obj().Exported() {
			continue
		}
		sig := sel.Type().(*types.Signature)
		recv := obj.Name()
		if tps := named.TypeParams(); tps != nil {
			var b strings.Builder
			w.typeParams(&b, tps, false)
			recv += b.String()
		}
		if !isValueMethod(named, sel.Obj().Name()) {
			recv = "*" + recv
		}
		w.emit("method (%s) %s%s", recv, sel.Obj().Name(), w.signature(sig))
	}
}

// isValueMethod reports whether method name is in the method set of the
// value type T (not only of *T).
func isValueMethod(t *types.Named, name string) bool {
	vset := types.NewMethodSet(t)
	for i := range vset.Len() {
		if vset.At(i).Obj().Name() == name {
			return true
		}
	}
	return false
}

func (w *walker) iface(name string, t *types.Interface) {
	w.scope = "type " + name + " interface"
	var names []string
	complete := true
	mset := types.NewMethodSet(t)
	for i := range mset.Len() {
		m := mset.At(i).Obj().(*types.Func)
		if !m.Exported() {
			complete = false
			continue
		}
		names = append(names, m.Name())
		w.emit("%s%s", m.Name(), w.signature(m.Type().(*types.Signature)))
	}
	if !complete {
		// Only the package itself can implement it: adding a method is
		// compatible, removing one shows as its line removed.
		w.emit("unexported methods")
	}
	w.scope = ""
	if !complete {
		return
	}
	if t.NumEmbeddeds() > 0 && !t.IsMethodSet() {
		// A constraint interface: its type set is part of its API.
		w.emit("type %s interface { %s }", name, strings.Join(w.embeddeds(t), ", "))
		return
	}
	slices.Sort(names)
	if len(names) == 0 {
		w.emit("type %s interface {}", name)
		return
	}
	w.emit("type %s interface { %s }", name, strings.Join(names, ", "))
}

func (w *walker) embeddeds(t *types.Interface) []string {
	var list []string
	for i := range t.NumEmbeddeds() {
		list = append(list, w.typeString(t.EmbeddedType(i)))
	}
	slices.Sort(list)
	return list
}

func (w *walker) typeString(t types.Type) string {
	var b strings.Builder
	w.writeType(&b, t)
	return b.String()
}

func (w *walker) signature(sig *types.Signature) string {
	var b strings.Builder
	w.writeSignature(&b, sig)
	return b.String()
}

func (w *walker) writeSignature(b *strings.Builder, sig *types.Signature) {
	if tps := sig.TypeParams(); tps != nil {
		w.typeParams(b, tps, true)
	}
	w.params(b, sig.Params(), sig.Variadic())
	switch res := sig.Results(); res.Len() {
	case 0:
	case 1:
		b.WriteByte(' ')
		w.writeType(b, res.At(0).Type())
	default:
		b.WriteByte(' ')
		w.params(b, res, false)
	}
}

func (w *walker) typeParams(b *strings.Builder, tps *types.TypeParamList, constraints bool) {
	b.WriteByte('[')
	for i := range tps.Len() {
		if i > 0 {
			b.WriteString(", ")
		}
		tp := tps.At(i)
		w.writeType(b, tp)
		if constraints {
			b.WriteByte(' ')
			w.writeType(b, tp.Constraint())
		}
	}
	b.WriteByte(']')
}

func (w *walker) params(b *strings.Builder, t *types.Tuple, variadic bool) {
	b.WriteByte('(')
	for i := range t.Len() {
		if i > 0 {
			b.WriteString(", ")
		}
		typ := t.At(i).Type()
		if variadic && i == t.Len()-1 {
			b.WriteString("...")
			typ = typ.(*types.Slice).Elem()
		}
		w.writeType(b, typ)
	}
	b.WriteByte(')')
}

// basicNames are the names cmd/api gives the untyped and alias kinds.
var basicNames = map[types.BasicKind]string{
	types.UnsafePointer:  "unsafe.Pointer",
	types.UntypedBool:    "ideal-bool",
	types.UntypedInt:     "ideal-int",
	types.UntypedRune:    "ideal-char",
	types.UntypedFloat:   "ideal-float",
	types.UntypedComplex: "ideal-complex",
	types.UntypedString:  "ideal-string",
	types.Byte:           "uint8",
	types.Rune:           "int32",
}

func (w *walker) writeType(b *strings.Builder, t types.Type) {
	switch t := t.(type) {
	case *types.Basic:
		if s, ok := basicNames[t.Kind()]; ok {
			b.WriteString(s)
		} else {
			b.WriteString(t.Name())
		}
	case *types.Array:
		fmt.Fprintf(b, "[%d]", t.Len())
		w.writeType(b, t.Elem())
	case *types.Slice:
		b.WriteString("[]")
		w.writeType(b, t.Elem())
	case *types.Pointer:
		b.WriteByte('*')
		w.writeType(b, t.Elem())
	case *types.Signature:
		b.WriteString("func")
		w.writeSignature(b, t)
	case *types.Map:
		b.WriteString("map[")
		w.writeType(b, t.Key())
		b.WriteByte(']')
		w.writeType(b, t.Elem())
	case *types.Chan:
		b.WriteString(map[types.ChanDir]string{types.SendOnly: "chan<- ", types.RecvOnly: "<-chan ", types.SendRecv: "chan "}[t.Dir()])
		w.writeType(b, t.Elem())
	case *types.Alias:
		w.writeType(b, types.Unalias(t))
	case *types.TypeParam:
		// Type parameters' names may change: their index is the API.
		fmt.Fprintf(b, "$%d", t.Index())
	case *types.Struct:
		w.writeStruct(b, t)
	case *types.Interface:
		w.writeInterface(b, t)
	case *types.Union:
		w.writeUnion(b, t)
	case *types.Named:
		w.writeNamed(b, t)
	default:
		fmt.Fprintf(b, "%s", t)
	}
}

// writeStruct writes an anonymous struct type: its fields are part of it.
func (w *walker) writeStruct(b *strings.Builder, t *types.Struct) {
	b.WriteString("struct{")
	for i := range t.NumFields() {
		if i > 0 {
			b.WriteString("; ")
		}
		f := t.Field(i)
		if !f.Anonymous() {
			b.WriteString(f.Name() + " ")
		}
		w.writeType(b, f.Type())
	}
	b.WriteString("}")
}

// writeInterface writes an interface literal, its methods sorted.
func (w *walker) writeInterface(b *strings.Builder, t *types.Interface) {
	b.WriteString("interface{")
	var parts []string
	for i := range t.NumExplicitMethods() {
		m := t.ExplicitMethod(i)
		parts = append(parts, m.Name()+w.signature(m.Type().(*types.Signature)))
	}
	slices.Sort(parts)
	parts = append(parts, w.embeddeds(t)...)
	if len(parts) > 0 {
		b.WriteString(" " + strings.Join(parts, "; ") + " ")
	}
	b.WriteString("}")
}

func (w *walker) writeUnion(b *strings.Builder, t *types.Union) {
	for i := range t.Len() {
		if i > 0 {
			b.WriteString("|")
		}
		if t.Term(i).Tilde() {
			b.WriteByte('~')
		}
		w.writeType(b, t.Term(i).Type())
	}
}

// writeNamed writes a named type: unqualified in its own package, by
// package name from the standard library, else by full import path.
func (w *walker) writeNamed(b *strings.Builder, t *types.Named) {
	if pkg := t.Obj().Pkg(); pkg != nil && pkg != w.pkg {
		if isStd(pkg.Path()) {
			b.WriteString(pkg.Name())
		} else {
			b.WriteString(pkg.Path())
		}
		b.WriteByte('.')
	}
	b.WriteString(t.Obj().Name())
	if targs := t.TypeArgs(); targs.Len() > 0 {
		b.WriteByte('[')
		for i := range targs.Len() {
			if i > 0 {
				b.WriteString(", ")
			}
			w.writeType(b, targs.At(i))
		}
		b.WriteByte(']')
	}
}

// isStd reports whether an import path is the standard library's (its
// first element has no dot).
func isStd(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".")
}
