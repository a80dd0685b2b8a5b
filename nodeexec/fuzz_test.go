package nodeexec

import (
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// FuzzParseCountOrPercent: --batch and --max-errors. Whatever the input, no
// panic; an accepted value is exactly the number or percentage written
// (never a wrapped int32, as intstr.Parse gives for 4294967297), and
// CheckCountOrPercent then either accepts it with a plan that covers every
// node, or refuses it.
func FuzzParseCountOrPercent(f *testing.F) {
	for _, s := range []string{"1", "5", "20%", "100%", "0", "0%", "-1", "150%", "4294967297", "2147483647", "2147483648", "%", "5%%", "x", " 5", "+5", "1e3", "", "-0%"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseCountOrPercent(s)
		if err != nil {
			if !strings.Contains(err.Error(), strconv.Quote(s)) {
				t.Fatalf("error %q does not quote the input %q", err, s)
			}
			return
		}
		switch v.Type {
		case intstr.Int:
			n, perr := strconv.ParseInt(s, 10, 64)
			if perr != nil || int64(v.IntVal) != n {
				t.Fatalf("%q parsed as %d", s, v.IntVal)
			}
		case intstr.String:
			if v.StrVal != s || !strings.HasSuffix(s, "%") {
				t.Fatalf("%q parsed as %q", s, v.StrVal)
			}
		}
		for _, zeroOK := range []bool{false, true} {
			if CheckCountOrPercent(v, zeroOK) != nil {
				continue
			}
			if !zeroOK {
				for _, n := range []int{1, 7, 1000} {
					stages, covered := plan(n, 0, []intstr.IntOrString{v}), 0
					for _, st := range stages {
						if len(st) == 0 {
							t.Fatalf("batch %q on %d nodes: an empty stage", s, n)
						}
						covered += len(st)
					}
					if covered != n {
						t.Fatalf("batch %q on %d nodes: %d planned", s, n, covered)
					}
				}
			}
			if b := errorBudget(&v, 10); b < 0 || (v.Type == intstr.String && b > 10) {
				t.Fatalf("max-errors %q: budget %d of 10", s, b)
			}
		}
	})
}

// FuzzTargetsValidate: --selector (and --node names). Validate never
// panics; an accepted selector parses, and its canonical form parses to the
// same selector.
func FuzzTargetsValidate(f *testing.F) {
	for _, s := range []string{"a=b", "pool in (gpu,cpu)", "!gpu", "a!=b,c", "a in (b", "kubernetes.io/os=linux", "", "=", "a==b", "x notin ()", "a=b,,c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		err := Targets{Selector: s}.Validate()
		if err != nil {
			if s != "" && !strings.Contains(err.Error(), "selector") {
				t.Fatalf("error %q does not name the selector", err)
			}
			return
		}
		sel, perr := labels.Parse(s)
		if perr != nil {
			t.Fatalf("accepted %q but labels.Parse: %v", s, perr)
		}
		again, perr := labels.Parse(sel.String())
		if perr != nil || again.String() != sel.String() {
			t.Fatalf("%q: canonical form %q does not round-trip (%v)", s, sel.String(), perr)
		}
	})
}
