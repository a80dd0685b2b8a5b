package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// goPackage is the part of `go list -json` this program reads.
type goPackage struct {
	ImportPath string
	Name       string
	Dir        string
	GoFiles    []string
	Imports    []string
	Export     string
	DepOnly    bool
	Standard   bool
	Module     *struct{ Path, Dir string }
	Error      *struct{ Err string }
}

// pkg is one package of the module, parsed and type-checked.
type pkg struct {
	goPackage
	rel   string // its directory relative to the module root
	files []*ast.File
	types *types.Package
	info  *types.Info
}

type module struct {
	path, dir string
	fset      *token.FileSet
	pkgs      []*pkg // sorted by import path
}

func (m *module) relFile(pos token.Pos) string {
	name := m.fset.Position(pos).Filename
	if rel, err := filepath.Rel(m.dir, name); err == nil {
		return filepath.ToSlash(rel)
	}
	return name
}

func goList(dir string, args ...string) ([]goPackage, error) {
	cmd := exec.Command("go", append([]string{"list", "-json=ImportPath,Name,Dir,GoFiles,Imports,Export,DepOnly,Standard,Module,Error"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH=amd64")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	var pkgs []goPackage
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p goPackage
		if err := dec.Decode(&p); err == io.EOF {
			return pkgs, nil
		} else if err != nil {
			return nil, err
		}
		if p.Error != nil {
			return nil, fmt.Errorf("%s: %s", p.ImportPath, p.Error.Err)
		}
		pkgs = append(pkgs, p)
	}
}

// load parses and type-checks the module in dir's packages.
func load(dir string) (*module, error) {
	all, err := goList(dir, "-export", "-deps", "./...")
	if err != nil {
		return nil, err
	}
	exports := map[string]string{}
	m := &module{fset: token.NewFileSet()}
	for _, p := range all {
		exports[p.ImportPath] = p.Export
		if !p.DepOnly && p.Module != nil {
			m.path, m.dir = p.Module.Path, p.Module.Dir
		}
	}
	imp := importer.ForCompiler(m.fset, "gc", func(path string) (io.ReadCloser, error) {
		if exports[path] == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(exports[path])
	})
	for _, gp := range all {
		if gp.DepOnly || gp.Module == nil || gp.Module.Path != m.path {
			continue
		}
		p := &pkg{goPackage: gp}
		p.rel, _ = filepath.Rel(m.dir, gp.Dir)
		p.rel = filepath.ToSlash(p.rel)
		for _, name := range gp.GoFiles {
			f, err := parser.ParseFile(m.fset, filepath.Join(gp.Dir, name), nil, parser.ParseComments)
			if err != nil {
				return nil, err
			}
			p.files = append(p.files, f)
		}
		p.info = &types.Info{Uses: map[*ast.Ident]types.Object{}, Selections: map[*ast.SelectorExpr]*types.Selection{}}
		conf := types.Config{Importer: imp}
		if p.types, err = conf.Check(gp.ImportPath, m.fset, p.files, p.info); err != nil {
			return nil, fmt.Errorf("type-checking %s: %w", gp.ImportPath, err)
		}
		m.pkgs = append(m.pkgs, p)
	}
	sort.Slice(m.pkgs, func(i, j int) bool { return m.pkgs[i].ImportPath < m.pkgs[j].ImportPath })
	return m, nil
}

// isPublic: importable and not internal.
func (p *pkg) isPublic() bool {
	return p.Name != "main" && !slices.Contains(strings.Split(p.rel, "/"), "internal")
}
