// Command apicheck keeps a record of the module's exported API,
// api/nodeexec.txt, and checks it; `make api` writes the record, `make lint`
// (part of `make test`) checks it.
//
//	go run ./internal/apicheck          check (exit status 1 on a failure)
//	go run ./internal/apicheck -w       write api/nodeexec.txt from the code
//
// The public API is every package of the module outside internal/ that is
// not a command (package main); the record has one line per exported
// identifier, field and method, sorted, in the format of Go's own api/*.txt
// files (see Features). It is computed for linux/amd64 from the packages'
// export data (go list -export).
//
// The check has two rules:
//
//  1. The record is the code's API. Else: "exported API changed: run
//     `make api`, and add a CHANGELOG.md entry under Unreleased".
//  2. An incompatible change — a line of the record removed or changed —
//     comes with a CHANGELOG.md change in the same commit. Checked with git:
//     for the working tree (the record differs from HEAD's with a line
//     removed: CHANGELOG.md must differ from HEAD's too) and for each commit
//     on HEAD's first-parent history since the last tag (or since the -since
//     revision; all of it when there is no tag) that removes a line from the
//     record, compared with its first parent (a merge counts as one commit:
//     the branch it brings in). Adding lines needs no CHANGELOG change.
//
// Without git history (a source tarball, a shallow clone) rule 2 is skipped
// with a message saying so, unless the environment variable CI is set (and
// not "false"): CI fails instead, since a skipped check there would be a
// silent one. NODEEXEC_APICHECK_NO_HISTORY=1 skips rule 2 explicitly, also
// in CI (the message still says so).
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
)

func main() {
	write := flag.Bool("w", false, "write "+recordPath+" from the code instead of checking it")
	since := flag.String("since", "", "check the commits after this revision (default: the last tag, or all)")
	flag.Parse()
	if err := run(".", *write, *since); err != nil {
		fmt.Fprintln(os.Stderr, "apicheck:", err)
		os.Exit(1)
	}
}

func run(dir string, write bool, since string) error {
	api, err := ModuleAPI(dir)
	if err != nil {
		return err
	}
	if write {
		if err := os.MkdirAll(dir+"/api", 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(dir+"/"+recordPath, []byte(strings.Join(api, "\n")+"\n"), 0o644); err != nil {
			return err
		}
		fmt.Printf("apicheck: wrote %s (%d lines)\n", recordPath, len(api))
		return nil
	}
	data, err := os.ReadFile(dir + "/" + recordPath)
	if err != nil {
		return fmt.Errorf("%w: run `make api`", err)
	}
	if err := compareRecord(parseRecord(string(data)), api); err != nil {
		return err
	}
	g := &git{dir: dir}
	msg, err := checkChangelog(g, since, inCI(), os.Getenv("NODEEXEC_APICHECK_NO_HISTORY") == "1")
	if msg != "" {
		fmt.Println("apicheck:", msg)
	}
	if err != nil {
		return err
	}
	fmt.Printf("apicheck: %s matches the code (%d lines)\n", recordPath, len(api))
	return nil
}

// inCI reports whether this runs in continuous integration: the variable
// CI, which the common CI services set, is set and not "false".
func inCI() bool {
	v := os.Getenv("CI")
	return v != "" && v != "false" && v != "0"
}

var errAPIChanged = errors.New("exported API changed: run `make api`, and add a CHANGELOG.md entry under Unreleased")

// compareRecord fails with errAPIChanged, and the differing lines, when the
// committed record is not the code's API.
func compareRecord(record, code []string) error {
	removed, added := diff(record, code)
	if len(removed) == 0 && len(added) == 0 {
		return nil
	}
	var b strings.Builder
	b.WriteString(errAPIChanged.Error())
	if len(removed) > 0 {
		fmt.Fprintf(&b, "\nin %s, not in the code (incompatible: removed or changed):", recordPath)
		for _, l := range removed {
			b.WriteString("\n- " + l)
		}
	}
	if len(added) > 0 {
		fmt.Fprintf(&b, "\nin the code, not in %s (added):", recordPath)
		for _, l := range added {
			b.WriteString("\n+ " + l)
		}
	}
	return fmt.Errorf("%w%s", errAPIChanged, strings.TrimPrefix(b.String(), errAPIChanged.Error()))
}
