package main

import (
	"slices"
	"strings"
)

const (
	recordPath    = "api/nodeexec.txt"
	changelogPath = "CHANGELOG.md"
)

// parseRecord splits a record into its lines, without empty ones.
func parseRecord(s string) []string {
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

// diff returns the lines of old not in new (removed) and of new not in old
// (added), each sorted.
func diff(old, new []string) (removed, added []string) {
	o, n := set(old), set(new)
	for l := range o {
		if !n[l] {
			removed = append(removed, l)
		}
	}
	for l := range n {
		if !o[l] {
			added = append(added, l)
		}
	}
	slices.Sort(removed)
	slices.Sort(added)
	return removed, added
}

func set(lines []string) map[string]bool {
	m := make(map[string]bool, len(lines))
	for _, l := range lines {
		m[l] = true
	}
	return m
}
