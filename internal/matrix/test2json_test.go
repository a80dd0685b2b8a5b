package matrix

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

func parseFile(t *testing.T, name string) (TestRun, []string) {
	t.Helper()
	f, err := os.Open("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var ended []string
	run, err := ParseTestJSON(f, func(r TestResult) { ended = append(ended, r.Test+" "+r.Result) })
	if err != nil {
		t.Fatal(err)
	}
	return run, ended
}

// fail.jsonl: TestPass passes, TestTable has a failed and a skipped subtest,
// TestSkipped skips, TestPanics passes; the package fails.
func TestParseTestJSONSubtests(t *testing.T) {
	run, ended := parseFile(t, "fail.jsonl")
	if run.Result != Fail || run.Seconds <= 0 {
		t.Errorf("package %q %v, want fail with its seconds", run.Result, run.Seconds)
	}
	want := []string{"TestPass pass", "TestTable fail", "TestSkipped skip", "TestPanics pass"}
	if !reflect.DeepEqual(ended, want) {
		t.Errorf("ended %v, want %v", ended, want)
	}
	if run.Count(Pass) != 2 || run.Count(Fail) != 1 || run.Count(Skip) != 1 {
		t.Errorf("counts %d/%d/%d", run.Count(Pass), run.Count(Fail), run.Count(Skip))
	}
	tb := run.Tests[1]
	if !reflect.DeepEqual(tb.FailedSubtests, []string{"TestTable/debugpod"}) ||
		!reflect.DeepEqual(tb.Subtests, map[string]int{Pass: 1, Fail: 1, Skip: 1}) {
		t.Errorf("TestTable: failed %v subtests %v", tb.FailedSubtests, tb.Subtests)
	}
	if !strings.Contains(strings.Join(tb.Output, "\n"), "exit 125, want 0") {
		t.Errorf("TestTable's output does not have its error: %q", tb.Output)
	}
	if run.Tests[0].Output != nil {
		t.Errorf("a passed test keeps no output: %q", run.Tests[0].Output)
	}
}

func TestParseTestJSONPass(t *testing.T) {
	run, _ := parseFile(t, "pass.jsonl")
	if run.Result != Pass || len(run.Tests) != 2 || run.Output != nil {
		t.Errorf("got %+v", run)
	}
}

// panic.jsonl: TestPanics panics, which ends the binary.
func TestParseTestJSONPanic(t *testing.T) {
	run, _ := parseFile(t, "panic.jsonl")
	p := run.Tests[len(run.Tests)-1]
	if run.Result != Fail || p.Test != "TestPanics" || p.Result != Fail || !strings.Contains(strings.Join(p.Output, "\n"), "kaboom") {
		t.Errorf("package %s, last test %+v", run.Result, p)
	}
	if len(p.Output) > OutputLines {
		t.Errorf("%d output lines kept, want at most %d", len(p.Output), OutputLines)
	}
}

// mainfail.jsonl: TestMain fails before any test.
func TestParseTestJSONMainFails(t *testing.T) {
	run, _ := parseFile(t, "mainfail.jsonl")
	if run.Result != Fail || len(run.Tests) != 0 || !strings.Contains(strings.Join(run.Output, "\n"), "starting the test cluster: boom") {
		t.Errorf("got %+v", run)
	}
}

// killed.jsonl: the stream ends in the middle of TestSkipped, then a line
// that is not an event.
func TestParseTestJSONKilled(t *testing.T) {
	run, ended := parseFile(t, "killed.jsonl")
	if run.Result != "" || !reflect.DeepEqual(ended, []string{"TestPass pass", "TestSkipped fail"}) {
		t.Errorf("package %q, ended %v", run.Result, ended)
	}
	if o := strings.Join(run.Tests[1].Output, "\n"); !strings.Contains(o, "never ended") {
		t.Errorf("the unfinished test does not say so: %q", o)
	}
	if !reflect.DeepEqual(run.Output, []string{"signal: killed"}) {
		t.Errorf("package output %q", run.Output)
	}
}
