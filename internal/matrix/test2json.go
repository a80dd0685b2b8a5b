package matrix

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
)

// Results of a test, as in TestResult.Result.
const (
	Pass = "pass"
	Fail = "fail"
	Skip = "skip"
)

// TestResult is one top-level test of a column's run.
type TestResult struct {
	// Test is the top-level test's name, "TestBackendConformance".
	Test string `json:"test"`
	// Result is Pass, Fail or Skip. A test that started and never ended (the
	// test binary panicked, timed out or was killed) is a Fail.
	Result string `json:"result"`
	// Seconds is the test's elapsed time as go test reports it (subtests
	// included); 0 for a test that never ended.
	Seconds float64 `json:"seconds"`
	// Subtests counts the test's subtests by result (none: nil).
	Subtests map[string]int `json:"subtests,omitempty"`
	// FailedSubtests are the full names of the failed subtests, in order.
	FailedSubtests []string `json:"failedSubtests,omitempty"`
	// Output is the last lines the test printed, for a failed test only (at
	// most OutputLines).
	Output []string `json:"output,omitempty"`
}

// OutputLines bounds TestResult.Output and TestRun.Output.
const OutputLines = 20

// TestRun is what one run of the e2e test binary gave, from its test2json
// event stream.
type TestRun struct {
	// Result is the package's: Pass, Fail (a test failed, TestMain failed or
	// the binary crashed) or Skip (no test ran); "" if the stream ended
	// without one.
	Result string `json:"result"`
	// Seconds is the package's elapsed time (0 if the stream ended without it).
	Seconds float64 `json:"seconds"`
	// Tests are the top-level tests in the order they started.
	Tests []TestResult `json:"tests"`
	// Output is the last lines printed outside any test (TestMain's, a panic's),
	// when the package failed.
	Output []string `json:"output,omitempty"`
}

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Time    time.Time
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

// ParseTestJSON reads a test2json event stream (`go test -json`, or `go tool
// test2json` around a test binary run with -test.v=test2json) to its end and
// reduces it to per-test results. Lines that are not JSON events (a build
// error, say) are kept as package output. done, if not nil, is called as each
// top-level test ends. Errors: only from reading r.
func ParseTestJSON(r io.Reader, done func(TestResult)) (TestRun, error) {
	var run TestRun
	index := map[string]int{}       // top-level test -> index in run.Tests
	output := map[string][]string{} // top-level test -> its last lines
	var pkgOut []string
	keep := func(lines []string, s string) []string {
		s = strings.TrimRight(s, "\n")
		if s == "" {
			return lines
		}
		lines = append(lines, s)
		if len(lines) > OutputLines {
			lines = lines[len(lines)-OutputLines:]
		}
		return lines
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			pkgOut = keep(pkgOut, string(line))
			continue
		}
		if e.Test == "" {
			switch e.Action {
			case "output":
				pkgOut = keep(pkgOut, e.Output)
			case Pass, Fail, Skip:
				run.Result, run.Seconds = e.Action, e.Elapsed
			}
			continue
		}
		top, _, sub := strings.Cut(e.Test, "/")
		i, ok := index[top]
		if !ok {
			index[top] = len(run.Tests)
			i = len(run.Tests)
			run.Tests = append(run.Tests, TestResult{Test: top})
		}
		t := &run.Tests[i]
		switch e.Action {
		case "output":
			output[top] = keep(output[top], e.Output)
		case Pass, Fail, Skip:
			if sub {
				if t.Subtests == nil {
					t.Subtests = map[string]int{}
				}
				t.Subtests[e.Action]++
				if e.Action == Fail {
					t.FailedSubtests = append(t.FailedSubtests, e.Test)
				}
				continue
			}
			t.Result, t.Seconds = e.Action, e.Elapsed
			if e.Action == Fail {
				t.Output = output[top]
			}
			delete(output, top)
			if done != nil {
				done(*t)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return run, fmt.Errorf("reading the test events: %w", err)
	}
	for i := range run.Tests {
		if t := &run.Tests[i]; t.Result == "" {
			t.Result = Fail
			t.Output = append(output[t.Test], "(the test never ended: the test binary exited during it)")
			if done != nil {
				done(*t)
			}
		}
	}
	if run.Result != Pass && run.Result != Skip {
		run.Output = pkgOut
	}
	return run, nil
}

// Count is the number of tests with result res.
func (r TestRun) Count(res string) int {
	n := 0
	for _, t := range r.Tests {
		if t.Result == res {
			n++
		}
	}
	return n
}
