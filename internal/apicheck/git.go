package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// git runs git in dir.
type git struct{ dir string }

func (g *git) run(args ...string) (string, error) {
	cmd := exec.Command("git", append([]string{"-c", "log.showSignature=false", "-c", "core.quotePath=false"}, args...)...)
	cmd.Dir = g.dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

// skipOrFail says why the CHANGELOG rule cannot be checked: a message
// outside CI, an error in CI.
func skipOrFail(reason string, ci bool) (string, error) {
	if ci {
		return "", fmt.Errorf("%s: the CHANGELOG rule (an incompatible API change needs a CHANGELOG.md change in the same commit) needs git history in CI: fetch the whole history (e.g. fetch-depth: 0), or set NODEEXEC_APICHECK_NO_HISTORY=1 to skip it explicitly", reason)
	}
	return reason + ": the CHANGELOG rule (an incompatible API change needs a CHANGELOG.md change in the same commit) is not checked", nil
}

// checkChangelog checks rule 2 (see the package doc) in g's repository for
// the working tree and for the commits after since (a revision; "": after
// the last tag, or all commits when there is none). It returns a message
// to print (a skipped check) and an error naming each violation.
func checkChangelog(g *git, since string, ci, noHistory bool) (string, error) {
	if noHistory {
		return "NODEEXEC_APICHECK_NO_HISTORY=1: the CHANGELOG rule is not checked", nil
	}
	if reason := g.unusable(); reason != "" {
		return skipOrFail(reason, ci)
	}
	if _, err := g.run("rev-parse", "--verify", "-q", "HEAD"); err != nil {
		return "no commit yet: the CHANGELOG rule has nothing to check", nil
	}
	prefix, err := g.run("rev-parse", "--show-prefix")
	if err != nil {
		return "", err
	}
	prefix = strings.TrimSpace(prefix)
	record, changelog := prefix+recordPath, prefix+changelogPath
	violations, err := g.workingTree(record, changelog)
	if err != nil {
		return "", err
	}
	inCommits, err := g.commits(since, record, changelog)
	if err != nil {
		return "", err
	}
	if violations = append(violations, inCommits...); len(violations) > 0 {
		return "", fmt.Errorf("an incompatible API change without a CHANGELOG.md change:\n%s", strings.Join(violations, "\n"))
	}
	return "", nil
}

// unusable says why g's history cannot be checked, or "".
func (g *git) unusable() string {
	if _, err := exec.LookPath("git"); err != nil {
		return "no git command"
	}
	if out, err := g.run("rev-parse", "--is-inside-work-tree"); err != nil || strings.TrimSpace(out) != "true" {
		return "not a git checkout (a source archive?)"
	}
	if out, _ := g.run("rev-parse", "--is-shallow-repository"); strings.TrimSpace(out) == "true" {
		return "a shallow clone (its first commit's parent is missing)"
	}
	return ""
}

// workingTree checks the record in the working tree against HEAD's: a
// line removed needs CHANGELOG.md changed (staged, unstaged or new).
func (g *git) workingTree(record, changelog string) ([]string, error) {
	work, err := os.ReadFile(g.dir + "/" + recordPath)
	if err != nil {
		return nil, nil // rule 1 reports a missing record
	}
	head, _ := g.show("HEAD", record)
	removed, _ := diff(parseRecord(head), parseRecord(string(work)))
	if len(removed) == 0 {
		return nil, nil
	}
	status, err := g.run("status", "--porcelain", "--", changelog)
	if err != nil || strings.TrimSpace(status) != "" {
		return nil, err
	}
	return []string{violation("the working tree", removed)}, nil
}

// commits checks each commit on HEAD's first-parent line after since
// (default: the last tag, else all) that changes the record against its
// first parent, back to the commit that added the record.
func (g *git) commits(since, record, changelog string) ([]string, error) {
	if since == "" {
		if tag, err := g.run("describe", "--tags", "--abbrev=0", "HEAD"); err == nil {
			since = strings.TrimSpace(tag)
		}
	}
	rng := "HEAD"
	if since != "" {
		rng = since + "..HEAD"
	}
	out, err := g.run("log", "--first-parent", "--diff-merges=first-parent", "--no-color", "--name-only", "--format=%x00%H %s", rng, "--")
	if err != nil {
		return nil, err
	}
	var violations []string
	for _, entry := range strings.Split(out, "\x00") {
		lines := strings.Split(strings.TrimSpace(entry), "\n")
		hash, subject, _ := strings.Cut(lines[0], " ")
		touched := map[string]bool{}
		for _, l := range lines[1:] {
			touched[strings.TrimSpace(l)] = true
		}
		if hash == "" || !touched[record] {
			continue
		}
		old, ok := g.show(hash+"^1", record)
		if !ok {
			break // the record starts here: older commits have none
		}
		cur, _ := g.show(hash, record)
		if removed, _ := diff(parseRecord(old), parseRecord(cur)); len(removed) > 0 && !touched[changelog] {
			violations = append(violations, violation(fmt.Sprintf("commit %.12s (%s)", hash, subject), removed)+"\n  (the last commit: git commit --amend with the entry; an older one: fold the entry into it, or pass -since past it after a release)")
		}
	}
	return violations, nil
}

// show returns path's content at rev, and whether it exists there.
func (g *git) show(rev, path string) (string, bool) {
	out, err := g.run("show", rev+":"+path)
	return out, err == nil
}

func violation(where string, removed []string) string {
	const most = 5
	s := fmt.Sprintf("%s removes or changes %d line(s) of %s and leaves %s unchanged; add an entry to it in the same commit:", where, len(removed), recordPath, changelogPath)
	for i, l := range removed {
		if i == most {
			s += fmt.Sprintf("\n  ... and %d more", len(removed)-most)
			break
		}
		s += "\n  - " + l
	}
	return s
}
