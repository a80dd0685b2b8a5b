package matrix

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Report is bench/matrix.json: one run of the matrix.
type Report struct {
	// Date is when the run started (UTC).
	Date time.Time `json:"date"`
	// Commit is the tree's git commit; Dirty says it had uncommitted changes.
	Commit string `json:"commit"`
	Dirty  bool   `json:"dirty,omitempty"`
	// Machine is where it ran.
	Machine Machine `json:"machine"`
	// Command is how to run it again.
	Command string `json:"command"`
	// Tests is the -test.run regex of every column.
	Tests string `json:"tests"`
	// Seconds is the run's wall time from the first column to the default
	// cluster's return, both included.
	Seconds float64 `json:"seconds"`
	// BuildSeconds is the build of the runner's binaries before it;
	// LockWaitSeconds the wait for -lock after the build.
	BuildSeconds    float64 `json:"buildSeconds,omitempty"`
	LockWaitSeconds float64 `json:"lockWaitSeconds,omitempty"`
	// Restore is the error bringing the default cluster back at the end, if any.
	Restore string `json:"restoreError,omitempty"`
	// Columns in the order run.
	Columns []ColumnResult `json:"columns"`
}

// Machine describes the host.
type Machine struct {
	CPUs      int    `json:"cpus"`
	MemoryMiB int    `json:"memoryMiB"`
	Kernel    string `json:"kernel"`
	OS        string `json:"os"`
	Go        string `json:"go"`
}

// Phases at which a column can fail (ColumnResult.Phase).
const (
	PhaseDown  = "down"  // testcluster down before the column
	PhaseUp    = "up"    // testcluster up with the column's versions
	PhaseImage = "image" // pushing nodeexec's image
	PhaseTests = "tests" // running the test binary (not a test failing: see Run)
)

// ColumnResult is one column of a run.
type ColumnResult struct {
	Column
	// Name is Column.String().
	Name string `json:"name"`
	// APIServer is the API server's version (its /version gitVersion).
	APIServer string `json:"apiServer,omitempty"`
	// Nodes are the real nodes' kubelet and container runtime versions as
	// their Node objects report them.
	Nodes []NodeVersions `json:"nodes,omitempty"`
	// Up is this run's `testcluster up` (nil if it was not reached).
	Up *UpTime `json:"up,omitempty"`
	// UpCold and UpWarm are the latest cold and warm ups of this column: this
	// run's, or carried over from the previous report (see CarryOver).
	UpCold *Figure `json:"upCold,omitempty"`
	UpWarm *Figure `json:"upWarm,omitempty"`
	// Phase and Error say where and why the column failed before or outside
	// its tests; both empty when the tests ran to the end.
	Phase string `json:"phase,omitempty"`
	Error string `json:"error,omitempty"`
	// Run is the tests' results (nil if they were not reached).
	Run *TestRun `json:"run,omitempty"`
	// Seconds is the column's wall time: down, up, image and tests.
	Seconds float64 `json:"seconds"`
}

// NodeVersions is what a Node's status.nodeInfo says.
type NodeVersions struct {
	Name    string `json:"name"`
	Kubelet string `json:"kubelet"`
	Runtime string `json:"runtime"`
}

// UpTime is one `testcluster up`.
type UpTime struct {
	Seconds float64 `json:"seconds"`
	// Cold: the up built something (its log has a "building ..." line: the
	// first build of the version's binaries); warm: everything was cached.
	Cold bool `json:"cold"`
	// Built are the up's "building ..." log lines.
	Built []string `json:"built,omitempty"`
}

// Figure is a measured time with when and at which commit.
type Figure struct {
	Seconds float64   `json:"seconds"`
	Date    time.Time `json:"date"`
	Commit  string    `json:"commit"`
}

// Failed says whether the column failed: before its tests, or a test failed.
func (c ColumnResult) Failed() bool {
	return c.Error != "" || c.Run == nil || c.Run.Result == Fail
}

// CarryOver fills each column's UpCold and UpWarm that this run did not
// measure from prev's column of the same name, so that a warm run keeps the
// last cold figure and the other way round. This run's own figures come from
// its Up.
func (r *Report) CarryOver(prev *Report) {
	for i := range r.Columns {
		c := &r.Columns[i]
		if c.Up != nil && c.Error != "" && c.Phase == PhaseUp {
			// an up that failed measured nothing
		} else if c.Up != nil {
			f := &Figure{Seconds: c.Up.Seconds, Date: r.Date, Commit: r.Commit}
			if c.Up.Cold {
				c.UpCold = f
			} else {
				c.UpWarm = f
			}
		}
		if prev == nil {
			continue
		}
		for _, p := range prev.Columns {
			if p.Name != c.Name {
				continue
			}
			if c.UpCold == nil {
				c.UpCold = p.UpCold
			}
			if c.UpWarm == nil {
				c.UpWarm = p.UpWarm
			}
		}
	}
}

// Markers delimit the generated table in docs/compatibility.md.
const (
	BeginMarker = "<!-- matrix:begin -->"
	EndMarker   = "<!-- matrix:end -->"
)

// ReplaceGenerated returns doc with what is between BeginMarker and EndMarker
// (each on a line of its own) replaced by content. Errors: a marker missing,
// twice, or the end before the begin.
func ReplaceGenerated(doc []byte, content string) ([]byte, error) {
	b, e := []byte(BeginMarker+"\n"), []byte("\n"+EndMarker)
	if bytes.Count(doc, b) != 1 || bytes.Count(doc, e) != 1 {
		return nil, fmt.Errorf("want the lines %s and %s once each", BeginMarker, EndMarker)
	}
	i, j := bytes.Index(doc, b)+len(b), bytes.Index(doc, e)
	if j < i-1 {
		return nil, fmt.Errorf("%s comes before %s", EndMarker, BeginMarker)
	}
	if j < i { // nothing between the markers: "begin\nend"
		j = i - 1
	}
	content = strings.TrimRight(content, "\n")
	var out bytes.Buffer
	out.Write(doc[:i])
	out.WriteString(content)
	out.Write(doc[j:])
	return out.Bytes(), nil
}

// Markdown renders r as the table of docs/compatibility.md: a line saying
// when, where and how it was run, then one column per matrix column and one
// row for the versions the nodes ran, the cold and warm ups, the totals and
// each test; then notes for failures. Cells: "pass 12 s", "**FAIL** 0.4 s",
// "skip", "–" (not run in that column).
func (r Report) Markdown() string {
	var b strings.Builder
	dirty := ""
	if r.Dirty {
		dirty = " (with uncommitted changes)"
	}
	fmt.Fprintf(&b, "Run on %s at commit `%s`%s, %d CPUs, %.0f GiB, %s, kernel %s, %s; the columns and the default cluster's return took %s: `%s`.\n\n",
		r.Date.UTC().Format("2006-01-02 15:04 UTC"), short(r.Commit), dirty, r.Machine.CPUs, float64(r.Machine.MemoryMiB)/1024,
		r.Machine.OS, r.Machine.Kernel, r.Machine.Go, minutes(r.Seconds), r.Command)
	row := func(cells ...string) { fmt.Fprintf(&b, "| %s |\n", strings.Join(cells, " | ")) }
	head := []string{""}
	sep := []string{"---"}
	for _, c := range r.Columns {
		ctrd := "containerd " + c.Containerd
		if c.Containerd == DebianContainerd {
			ctrd = "Debian's containerd"
		}
		head = append(head, fmt.Sprintf("Kubernetes %s, %s", c.Kubernetes, ctrd))
		sep = append(sep, "---")
	}
	row(head...)
	row(sep...)
	cells := func(label string, f func(ColumnResult) string) {
		cs := []string{label}
		for _, c := range r.Columns {
			cs = append(cs, f(c))
		}
		row(cs...)
	}
	cells("versions running", func(c ColumnResult) string {
		if c.APIServer == "" && len(c.Nodes) == 0 {
			return "–"
		}
		var vs []string
		if c.APIServer != "" {
			vs = append(vs, "API server "+c.APIServer)
		}
		seen := map[string]bool{}
		for _, n := range c.Nodes {
			v := "kubelet " + n.Kubelet + ", " + n.Runtime
			if !seen[v] {
				seen[v] = true
				vs = append(vs, v)
			}
		}
		return strings.Join(vs, "; ") + fmt.Sprintf(" (%d nodes)", len(c.Nodes))
	})
	fig := func(f *Figure) string {
		if f == nil {
			return "not measured"
		}
		s := fmt.Sprintf("%.0f s", f.Seconds)
		if !f.Date.Equal(r.Date) {
			s += " (" + f.Date.UTC().Format("2006-01-02") + ")"
		}
		return s
	}
	cells("cluster up, cold", func(c ColumnResult) string { return fig(c.UpCold) })
	cells("cluster up, warm", func(c ColumnResult) string { return fig(c.UpWarm) })
	cells("result", func(c ColumnResult) string {
		switch {
		case c.Error != "":
			return fmt.Sprintf("**failed at %s** (see below)", c.Phase)
		case c.Run == nil:
			return "not run"
		}
		s := fmt.Sprintf("%d passed, %d failed, %d skipped; tests %s, column %s", c.Run.Count(Pass), c.Run.Count(Fail), c.Run.Count(Skip),
			minutes(c.Run.Seconds), minutes(c.Seconds))
		if c.Run.Result == Fail && c.Run.Count(Fail) == 0 {
			s = "**test binary failed** (see below); " + s
		}
		return s
	})
	var names []string
	for _, c := range r.Columns {
		if c.Run == nil {
			continue
		}
		for _, t := range c.Run.Tests {
			if !slices.Contains(names, t.Test) {
				names = append(names, t.Test)
			}
		}
	}
	for _, name := range names {
		cells("`"+name+"`", func(c ColumnResult) string {
			if c.Run == nil {
				return "–"
			}
			for _, t := range c.Run.Tests {
				if t.Test != name {
					continue
				}
				switch t.Result {
				case Pass:
					return "pass " + seconds(t.Seconds)
				case Skip:
					return "skip"
				default:
					return "**FAIL** " + seconds(t.Seconds)
				}
			}
			return "–"
		})
	}
	var notes []string
	for _, c := range r.Columns {
		if c.Error != "" {
			notes = append(notes, fmt.Sprintf("- %s failed at %s: `%s`", c.Name, c.Phase, oneLine(c.Error)))
		}
		if c.Run == nil {
			continue
		}
		if c.Run.Result == Fail && c.Run.Count(Fail) == 0 && len(c.Run.Output) > 0 {
			notes = append(notes, fmt.Sprintf("- %s: the test binary failed: `%s`", c.Name, oneLine(strings.Join(c.Run.Output, " / "))))
		}
		for _, t := range c.Run.Tests {
			if t.Result == Fail && len(t.FailedSubtests) > 0 {
				notes = append(notes, fmt.Sprintf("- %s: `%s` failed in %s", c.Name, t.Test, strings.Join(quote(t.FailedSubtests), ", ")))
			}
		}
	}
	if r.Restore != "" {
		notes = append(notes, fmt.Sprintf("- bringing the default cluster back failed: `%s`", oneLine(r.Restore)))
	}
	if len(notes) > 0 {
		b.WriteString("\n" + strings.Join(notes, "\n") + "\n")
	}
	return b.String()
}

func short(commit string) string {
	if len(commit) > 12 {
		return commit[:12]
	}
	return commit
}

// seconds is "0.4 s" under 10 s, else "12 s".
func seconds(s float64) string {
	if s < 10 {
		return fmt.Sprintf("%.1f s", s)
	}
	return fmt.Sprintf("%.0f s", s)
}

func minutes(s float64) string {
	d := time.Duration(s * float64(time.Second)).Round(time.Second)
	if d < time.Minute {
		return fmt.Sprintf("%.0f s", d.Seconds())
	}
	return fmt.Sprintf("%d min %02d s", int(d.Minutes()), int(d.Seconds())%60)
}

// oneLine makes s fit a markdown table cell or list item: one line, no
// backquotes, at most 300 characters.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(strings.ReplaceAll(s, "`", "'")), " ")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

func quote(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = "`" + s + "`"
	}
	return out
}
