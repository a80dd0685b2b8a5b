package matrix

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite testdata/matrix.json and testdata/matrix.md")

// sampleReport is three columns: one whose tests ran (fail.jsonl: a failed
// subtest), one whose TestMain failed, one whose cluster did not come up.
func sampleReport(t *testing.T) Report {
	date := time.Date(2026, 11, 27, 19, 0, 0, 0, time.UTC)
	fail, _ := parseFile(t, "fail.jsonl")
	mainFail, _ := parseFile(t, "mainfail.jsonl")
	cold := &Figure{Seconds: 612.4, Date: date.Add(-48 * time.Hour), Commit: "0123456789abcdef"}
	return Report{
		Date: date, Commit: "cea71dd0123456789abcdef0123456789abcdef0", Dirty: true,
		Machine: Machine{CPUs: 2, MemoryMiB: 24 * 1024, Kernel: "6.18.44", OS: "Debian GNU/Linux 12 (bookworm)", Go: "go1.26.8"},
		Command: "make test-matrix", Tests: "^(TestPass|TestTable|TestSkipped|TestPanics)$", Seconds: 1234,
		Columns: []ColumnResult{
			{Column: Column{"1.37.1", "debian"}, Name: "1.37.1/debian", APIServer: "v1.37.1",
				Nodes: []NodeVersions{{"nodeexec-tc-1", "v1.37.1", "containerd://1.6.20"}, {"nodeexec-tc-2", "v1.37.1", "containerd://1.6.20"}},
				Up:    &UpTime{Seconds: 71.2}, UpCold: cold, Run: &fail, Seconds: 400},
			{Column: Column{"1.37.1", "2.3.7"}, Name: "1.37.1/2.3.7", APIServer: "v1.37.1",
				Nodes: []NodeVersions{{"nodeexec-tc-1", "v1.37.1", "containerd://v2.3.7"}, {"nodeexec-tc-2", "v1.37.1", "containerd://v2.3.7"}},
				Up:    &UpTime{Seconds: 190.5, Cold: true, Built: []string{"containerd v2.3.7"}}, Run: &mainFail, Seconds: 200},
			{Column: Column{"1.34.4", "2.3.7"}, Name: "1.34.4/2.3.7", Up: &UpTime{Seconds: 0.3},
				Phase: PhaseUp, Error: "testcluster up --nodes 2 --kubernetes-version 1.34.4 --containerd-version 2.3.7: exit status 2: flag provided but not defined: -containerd-version", Seconds: 2},
		},
	}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := "testdata/" + name
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -update writes it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (go test -update rewrites it); got:\n%s", path, got)
	}
}

// TestMarkdown: bench/matrix.json's form (testdata/matrix.json) renders to
// the table of docs/compatibility.md (testdata/matrix.md).
func TestMarkdown(t *testing.T) {
	r := sampleReport(t)
	r.CarryOver(nil)
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "matrix.json", append(b, '\n'))

	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	md := back.Markdown()
	golden(t, "matrix.md", []byte(md))
	for _, want := range []string{
		"| `TestTable` | **FAIL** 0.0 s | – | – |",
		"| cluster up, cold | 612 s (2026-11-25) | 190 s | not measured |",
		"| cluster up, warm | 71 s | not measured | not measured |",
		"**failed at up**",
		"flag provided but not defined: -containerd-version",
		"`TestTable` failed in `TestTable/debugpod`",
		"the test binary failed: `e2e: starting the test cluster: boom",
		"containerd://1.6.20 (2 nodes)",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the table lacks %q", want)
		}
	}
}

func TestCarryOver(t *testing.T) {
	prev := sampleReport(t)
	prev.CarryOver(nil)
	r := sampleReport(t)
	r.Date = r.Date.Add(24 * time.Hour)
	r.Columns[0].UpCold = nil
	r.Columns[0].Up = &UpTime{Seconds: 500, Cold: true}
	r.Columns[1].Up = &UpTime{Seconds: 60}
	r.CarryOver(&prev)
	c0, c1, c2 := r.Columns[0], r.Columns[1], r.Columns[2]
	if c0.UpCold.Seconds != 500 || !c0.UpCold.Date.Equal(r.Date) || c0.UpWarm.Seconds != 71.2 || !c0.UpWarm.Date.Equal(prev.Date) {
		t.Errorf("column 0: cold %+v warm %+v: want this run's cold, the previous warm", c0.UpCold, c0.UpWarm)
	}
	if c1.UpWarm.Seconds != 60 || c1.UpCold.Seconds != 190.5 {
		t.Errorf("column 1: cold %+v warm %+v: want this run's warm, the previous cold", c1.UpCold, c1.UpWarm)
	}
	if c2.UpCold != nil || c2.UpWarm != nil {
		t.Errorf("a failed up is no figure: %+v %+v", c2.UpCold, c2.UpWarm)
	}
}

func TestReplaceGenerated(t *testing.T) {
	doc := "# T\n\n" + BeginMarker + "\nold\ntable\n" + EndMarker + "\n\nafter\n"
	got, err := ReplaceGenerated([]byte(doc), "new\n")
	if err != nil {
		t.Fatal(err)
	}
	if want := "# T\n\n" + BeginMarker + "\nnew\n" + EndMarker + "\n\nafter\n"; string(got) != want {
		t.Errorf("got %q, want %q", got, want)
	}
	again, err := ReplaceGenerated(got, "new\n")
	if err != nil || !bytes.Equal(again, got) {
		t.Errorf("not idempotent: %q, %v", again, err)
	}
	empty := BeginMarker + "\n" + EndMarker + "\n"
	if got, err := ReplaceGenerated([]byte(empty), "x"); err != nil || string(got) != BeginMarker+"\nx\n"+EndMarker+"\n" {
		t.Errorf("empty section: %q, %v", got, err)
	}
	for _, bad := range []string{"no markers", BeginMarker + "\nx\n", EndMarker + "\n" + BeginMarker + "\n",
		BeginMarker + "\n" + BeginMarker + "\n" + EndMarker + "\n"} {
		if _, err := ReplaceGenerated([]byte(bad), "x"); err == nil {
			t.Errorf("ReplaceGenerated(%q) did not fail", bad)
		}
	}
}
