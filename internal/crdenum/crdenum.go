// Package crdenum writes the NodeScript CRD's spec.backend.name enum from
// the backends' registration table (backends.WatcherNames), after
// controller-gen has generated the CRD (`make generate`): the enum is not a
// kubebuilder marker in the API types, so a new backend the watcher may run
// is one entry in the table. Patch edits the YAML as text, leaving the rest
// of controller-gen's output byte for byte.
package crdenum

import (
	"fmt"
	"slices"
	"strings"
)

// Path is the keys from a version's openAPIV3Schema down to the field
// whose enum Patch writes.
var Path = []string{"spec", "backend", "name"}

// Patch returns crd (a CRD's YAML as controller-gen writes it: two-space
// indents, keys sorted) with the enum of every schema property at the end
// of Path (properties: spec: properties: backend: properties: name:) set
// to names, in that order. An enum already there is replaced; the result
// of patching twice is that of patching once. It fails when crd has no
// such property.
func Patch(crd []byte, names []string) ([]byte, error) {
	lines := strings.Split(string(crd), "\n")
	found := 0
	for i := 0; i < len(lines); i++ {
		at, ok := propertyAt(lines, i, Path)
		if !ok {
			continue
		}
		found++
		lines = setEnum(lines, at, names)
	}
	if found == 0 {
		return nil, fmt.Errorf("no schema property properties.%s in the CRD", strings.Join(Path, ".properties."))
	}
	return []byte(strings.Join(lines, "\n")), nil
}

// indent is the number of leading spaces of line.
func indent(line string) int { return len(line) - len(strings.TrimLeft(line, " ")) }

// child returns the line index of key (at indent in+2) in the block of
// the mapping key at line i, indented in; false if absent.
func child(lines []string, i int, key string) (int, bool) {
	in := indent(lines[i])
	for j := i + 1; j < len(lines); j++ {
		if strings.TrimSpace(lines[j]) == "" {
			continue
		}
		if indent(lines[j]) <= in {
			return 0, false
		}
		if indent(lines[j]) == in+2 && strings.TrimSpace(lines[j]) == key+":" {
			return j, true
		}
	}
	return 0, false
}

// propertyAt reports whether line i is "properties:" and path leads from
// it through nested properties; it returns the line of the last key.
func propertyAt(lines []string, i int, path []string) (int, bool) {
	if strings.TrimSpace(lines[i]) != "properties:" {
		return 0, false
	}
	at := i
	for k, key := range path {
		j, ok := child(lines, at, key)
		if !ok {
			return 0, false
		}
		at = j
		if k < len(path)-1 {
			if at, ok = child(lines, at, "properties"); !ok {
				return 0, false
			}
		}
	}
	return at, true
}

// setEnum replaces the enum of the property at line at with names.
func setEnum(lines []string, at int, names []string) []string {
	in := indent(lines[at]) + 2
	pad := strings.Repeat(" ", in)
	end := at + 1
	for end < len(lines) && (strings.TrimSpace(lines[end]) == "" || indent(lines[end]) >= in) {
		end++
	}
	block := slices.Clone(lines[at+1 : end])
	// Drop an enum already there: "enum:" and its "- " items.
	if k := slices.Index(block, pad+"enum:"); k >= 0 {
		n := k + 1
		for n < len(block) && strings.HasPrefix(block[n], pad+"- ") {
			n++
		}
		block = slices.Delete(block, k, n)
	}
	// Insert it where controller-gen's sorted keys put it.
	pos := len(block)
	for k, l := range block {
		if indent(l) == in && !strings.HasPrefix(strings.TrimSpace(l), "- ") && strings.TrimSpace(l) > "enum:" {
			pos = k
			break
		}
	}
	enum := []string{pad + "enum:"}
	for _, n := range names {
		enum = append(enum, pad+"- "+n)
	}
	block = slices.Insert(block, pos, enum...)
	return slices.Concat(lines[:at+1], block, lines[end:])
}
