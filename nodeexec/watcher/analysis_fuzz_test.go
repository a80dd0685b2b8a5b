package watcher

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// FuzzParseAnalysis fuzzes the analysis' parsers: a tolerance
// (v1alpha1.ParseTolerance: a percentage string or a whole number) and a
// threshold (v1alpha1.Number from JSON), and judges values against them:
// no input panics; an accepted tolerance is finite, 0 or more, and the
// percentage it was written as; an accepted threshold is finite and
// written back as the number read; and judgeAnalysis' verdict is one of
// the four, never Passed with a canary that has no finite value.
func FuzzParseAnalysis(f *testing.F) {
	f.Add("10%", int32(0), false, "0.05", 1.0, 1.0)
	f.Add("2.5%", int32(0), false, "1e3", 0.5, math.NaN())
	f.Add("", int32(25), true, "-1", math.Inf(1), 2.0)
	f.Add("0.1", int32(-3), false, `"7"`, 0.0, 0.0)
	f.Add("1000000%", int32(0), true, "abc", -1.0, 3.0)
	f.Fuzz(func(t *testing.T, tol string, tolInt int32, isInt bool, th string, canary, base float64) {
		v := intstr.FromString(tol)
		if isInt {
			v = intstr.FromInt32(tolInt)
		}
		frac, err := v1alpha1.ParseTolerance(v)
		if err == nil {
			if math.IsNaN(frac) || math.IsInf(frac, 0) || frac < 0 {
				t.Fatalf("ParseTolerance(%s) = %v", v.String(), frac)
			}
			if !isInt && !strings.HasSuffix(tol, "%") {
				t.Fatalf("ParseTolerance(%q) accepted a string without %%", tol)
			}
		}
		var n v1alpha1.Number
		thOK := false
		if json.Unmarshal([]byte(th), &n) == nil {
			if x, err := n.Float64(); err == nil {
				thOK = true
				if math.IsNaN(x) || math.IsInf(x, 0) {
					t.Fatalf("threshold %q read as %v", th, x)
				}
				b, err := json.Marshal(n)
				var back v1alpha1.Number
				if err != nil || json.Unmarshal(b, &back) != nil || back != n {
					t.Fatalf("threshold %q: marshal %s %v, back %v", th, b, err, back)
				}
			}
		}
		a := &v1alpha1.CanaryAnalysis{}
		if err == nil {
			a.Tolerance = &v
		}
		if thOK {
			a.Threshold = &n
		}
		if a.Tolerance == nil && a.Threshold == nil {
			return
		}
		res := judgeAnalysis(a, map[string]float64{"c": canary, "b": base}, []string{"c"}, []string{"b"})
		switch res.Verdict {
		case v1alpha1.VerdictPassed:
			if math.IsNaN(canary) || math.IsInf(canary, 0) {
				t.Fatalf("Passed with canary %v: %s", canary, res.Message)
			}
		case v1alpha1.VerdictRegressed, v1alpha1.VerdictInconclusive:
		default:
			t.Fatalf("verdict %q", res.Verdict)
		}
	})
}
