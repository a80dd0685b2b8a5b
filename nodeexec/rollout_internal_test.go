package nodeexec

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestPlan(t *testing.T) {
	is := func(s ...string) []intstr.IntOrString {
		var out []intstr.IntOrString
		for _, v := range s {
			out = append(out, intstr.Parse(v))
		}
		return out
	}
	tests := []struct {
		name    string
		n       int
		canary  int
		batches []intstr.IntOrString
		want    [][]int
	}{
		{"all at once", 4, 0, nil, [][]int{{0, 1, 2, 3}}},
		{"canary then the rest", 4, 1, nil, [][]int{{0}, {1, 2, 3}}},
		{"canary covers all", 2, 5, nil, [][]int{{0, 1}}},
		{"batches 1,2 then 2 repeats", 6, 0, is("1", "2"), [][]int{{0}, {1, 2}, {3, 4}, {5}}},
		{"canary + percent rounded up", 10, 1, is("1", "25%"), [][]int{{0}, {1}, {2, 3, 4}, {5, 6, 7}, {8, 9}}},
		{"100%", 3, 0, is("100%"), [][]int{{0, 1, 2}}},
		{"no nodes", 0, 2, is("1"), nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, plan(tc.n, tc.canary, tc.batches)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestErrorBudget(t *testing.T) {
	p := func(s string) *intstr.IntOrString { v := intstr.Parse(s); return &v }
	tests := []struct {
		max  *intstr.IntOrString
		n    int
		want int
	}{
		{nil, 10, -1},
		{p("0"), 10, 0},
		{p("3"), 10, 3},
		{p("10%"), 25, 2}, // rounded down: never more failures than asked
		{p("100%"), 7, 7},
	}
	for _, tc := range tests {
		if got := errorBudget(tc.max, tc.n); got != tc.want {
			t.Errorf("errorBudget(%v, %d) = %d, want %d", tc.max, tc.n, got, tc.want)
		}
	}
}

func TestValidateRollout(t *testing.T) {
	p := func(s string) *intstr.IntOrString { v := intstr.Parse(s); return &v }
	tests := map[string]struct {
		o    RunnerOptions
		want string
	}{
		"negative canary":  {RunnerOptions{Canary: -1}, "Canary -1 is negative"},
		"zero batch":       {RunnerOptions{Batches: []intstr.IntOrString{intstr.FromInt32(0)}}, `Batches[0] "0": want a number >= 1`},
		"150% batch":       {RunnerOptions{Batches: []intstr.IntOrString{intstr.FromString("150%")}}, `Batches[0] "150%": want a percentage from 1% to 100%`},
		"bad max errors":   {RunnerOptions{MaxErrors: p("lots")}, `MaxErrors "lots": want a number or a percentage`},
		"negative retries": {RunnerOptions{Retries: -2}, "Retries -2 is negative"},
		"ok":               {RunnerOptions{Canary: 1, Batches: []intstr.IntOrString{intstr.FromInt32(1), intstr.FromString("20%")}, MaxErrors: p("0")}, ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := validateRollout(tc.o)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestParseCountOrPercent(t *testing.T) {
	for in, ok := range map[string]bool{"3": true, "20%": true, "x": false, "%": false, "5%%": false} {
		_, err := ParseCountOrPercent(in)
		if (err == nil) != ok {
			t.Errorf("ParseCountOrPercent(%q) error = %v, want ok=%v", in, err, ok)
		}
	}
}

func TestRecorder(t *testing.T) {
	r := newRecorder(5, true)
	for _, chunk := range []string{"hel", "lo wor", "ld\n"} {
		_, _ = r.Write([]byte(chunk))
	}
	out := r.output()
	sum := sha256.Sum256([]byte("hello world\n"))
	want := Output{Tail: []byte("orld\n"), Bytes: 12, SHA256: hex.EncodeToString(sum[:])}
	if diff := cmp.Diff(want, out); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestBackoff(t *testing.T) {
	// Capped at MaxRetryBackoff, whatever the attempt (35 used to panic: overflow).
	for _, attempt := range []int{20, 35, 64, 1000} {
		if d := backoff(time.Second, attempt); d < MaxRetryBackoff || d > MaxRetryBackoff*3/2 {
			t.Errorf("backoff(1s, %d) = %s, want within [%s, %s]", attempt, d, MaxRetryBackoff, MaxRetryBackoff*3/2)
		}
	}
	if d := backoff(100*time.Hour, 1); d > MaxRetryBackoff*3/2 {
		t.Errorf("a huge base is not capped: %s", d)
	}
	for attempt, base := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second} {
		for range 20 {
			d := backoff(time.Second, attempt)
			if d < base || d > base+base/2 {
				t.Fatalf("backoff(1s, %d) = %s, want within [%s, %s]", attempt, d, base, base+base/2)
			}
		}
	}
}
