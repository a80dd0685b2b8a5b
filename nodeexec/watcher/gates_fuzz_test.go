package watcher

import (
	"math"
	"testing"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// FuzzGateCondition: a prometheus gate's condition either is refused or
// reads back the same from its String, with a known operator and a finite
// number; Holds agrees with the operator on the number itself.
func FuzzGateCondition(f *testing.F) {
	for _, s := range []string{"< 0.05", ">= 3", "== 0", "!=-1e3", "<=1", " > .5 ", "0.05", "< NaN", "<< 1", "< 1 2", "=< 1", "< 0x1p-2", "> 1e400"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := v1alpha1.ParseGateCondition(s)
		if err != nil {
			return
		}
		if math.IsNaN(c.Value) || math.IsInf(c.Value, 0) {
			t.Fatalf("%q: accepted a value %v", s, c.Value)
		}
		back, err := v1alpha1.ParseGateCondition(c.String())
		if err != nil || back != c {
			t.Fatalf("%q: parsed %+v, its String %q reads back as %+v, %v", s, c, c.String(), back, err)
		}
		want := map[string]bool{"<": false, "<=": true, ">": false, ">=": true, "==": true, "!=": false}
		if w, ok := want[c.Op]; !ok || c.Holds(c.Value) != w {
			t.Fatalf("%q: op %q holds for its own value: %v", s, c.Op, c.Holds(c.Value))
		}
		if c.Holds(math.NaN()) && c.Op != "!=" {
			t.Fatalf("%q: holds for NaN", s)
		}
	})
}
