package v1alpha1

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func dur(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

func TestSetDefaults(t *testing.T) {
	// base is what every spec gets.
	base := func(s NodeScriptSpec) NodeScriptSpec {
		s.Rollout.Canary, s.Retry.Limit = intPtr(DefaultCanary), intPtr(DefaultRetryLimit)
		s.Rollout.WindowMargin, s.OnFailure.DrainTimeout, s.RebootTimeout = dur(DefaultWindowMargin), dur(DefaultDrainTimeout), dur(DefaultRebootTimeout)
		s.RebootSentinel = DefaultRebootSentinel
		return s
	}
	full := NodeScriptSpec{
		Script:         "true",
		Rollout:        RolloutSpec{Canary: intPtr(0), WindowMargin: dur(0), MaxConcurrency: &intstr.IntOrString{IntVal: 2}},
		Retry:          RetryPolicy{Limit: intPtr(7), InitialBackoff: dur(time.Second)},
		OnFailure:      FailurePolicy{DrainTimeout: dur(time.Minute)},
		RebootTimeout:  dur(time.Hour),
		RebootSentinel: "/run/reboot",
		Maintenance:    &MaintenanceSpec{Cordon: true, Drain: &DrainSpec{Timeout: dur(2 * time.Minute)}},
	}
	for name, tc := range map[string]struct{ in, want NodeScriptSpec }{
		"empty":       {NodeScriptSpec{}, base(NodeScriptSpec{})},
		"script only": {NodeScriptSpec{Script: "true"}, base(NodeScriptSpec{Script: "true"})},
		// Set fields, zeros included, are kept.
		"all set": {full, full},
		"drain without timeout": {
			NodeScriptSpec{Maintenance: &MaintenanceSpec{Cordon: true, Drain: &DrainSpec{}}},
			base(NodeScriptSpec{Maintenance: &MaintenanceSpec{Cordon: true, Drain: &DrainSpec{Timeout: dur(DefaultDrainTimeout)}}}),
		},
		"maintenance without drain": {
			NodeScriptSpec{Maintenance: &MaintenanceSpec{MaxUnavailable: &intstr.IntOrString{IntVal: 1}}},
			base(NodeScriptSpec{Maintenance: &MaintenanceSpec{MaxUnavailable: &intstr.IntOrString{IntVal: 1}}}),
		},
		// The hashed fields and those whose absence means something stay out.
		"left alone": {
			NodeScriptSpec{Script: "x", Backend: BackendSpec{}, Timeout: nil, RebootCommand: ""},
			base(NodeScriptSpec{Script: "x"}),
		},
	} {
		t.Run(name, func(t *testing.T) {
			ns := &NodeScript{Spec: *tc.in.DeepCopy()}
			hash := SpecHash(&ns.Spec)
			SetDefaults(ns)
			if diff := cmp.Diff(tc.want, ns.Spec); diff != "" {
				t.Errorf("SetDefaults (-want +got):\n%s", diff)
			}
			if got := SpecHash(&ns.Spec); got != hash {
				t.Errorf("SpecHash changed by SetDefaults: %s, was %s", got, hash)
			}
			again := ns.DeepCopy()
			SetDefaults(again)
			if diff := cmp.Diff(ns, again); diff != "" {
				t.Errorf("SetDefaults not idempotent (-once +twice):\n%s", diff)
			}
			if Defaulted(ns) != ns {
				t.Error("Defaulted copied a defaulted NodeScript")
			}
			raw := &NodeScript{Spec: *tc.in.DeepCopy()}
			if d := Defaulted(raw); !cmp.Equal(d.Spec, tc.want) || !cmp.Equal(raw.Spec, tc.in) {
				t.Errorf("Defaulted: got %+v (input now %+v), want %+v and the input unchanged", d.Spec, raw.Spec, tc.want)
			}
		})
	}
}

// TestSetDefaultsKeepsValidation: Validate says the same of a NodeScript
// and of its defaulted copy (the watcher validates the defaulted one).
func TestSetDefaultsKeepsValidation(t *testing.T) {
	for name, s := range map[string]NodeScriptSpec{
		"valid":             {Script: "true"},
		"backoff over max":  {Script: "true", Retry: RetryPolicy{InitialBackoff: dur(time.Hour)}},
		"analysis canary":   {Script: "true", RollbackScript: "true", Rollout: RolloutSpec{Analysis: &CanaryAnalysis{}}},
		"negative drain":    {Script: "true", OnFailure: FailurePolicy{DrainTimeout: dur(-time.Second)}},
		"reboot no timeout": {Script: "true", Reboot: RebootIfRequired},
	} {
		ns := &NodeScript{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Spec: s}
		want := Validate(ns).ToAggregate()
		got := Validate(Defaulted(ns)).ToAggregate()
		if (want == nil) != (got == nil) || (want != nil && want.Error() != got.Error()) {
			t.Errorf("%s: Validate = %v, of the defaulted copy %v", name, want, got)
		}
	}
}
