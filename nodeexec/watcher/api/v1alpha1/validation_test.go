package v1alpha1

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

func valid() *NodeScript {
	return &NodeScript{
		ObjectMeta: metav1.ObjectMeta{Name: "fix-sysctl"},
		Spec: NodeScriptSpec{
			NodeSelector: metav1.LabelSelector{MatchLabels: map[string]string{"pool": "gpu"}},
			Script:       "sysctl -w net.core.somaxconn=4096",
			Rollout:      RolloutSpec{Canary: ptr.To[int32](1), MaxConcurrency: ptr.To(intstr.FromString("20%"))},
		},
	}
}

func TestValidate(t *testing.T) {
	tests := map[string]struct {
		mutate func(*NodeScript)
		want   string // "" = valid
	}{
		"valid": {func(*NodeScript) {}, ""},
		"invalid selector": {func(n *NodeScript) {
			n.Spec.NodeSelector = metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Near"}}}
		}, "spec.nodeSelector: Invalid value"},
		"concurrency 0":    {func(n *NodeScript) { n.Spec.Rollout.MaxConcurrency = ptr.To(intstr.FromInt32(0)) }, "spec.rollout.maxConcurrency: Invalid value: 0: must be 1 or more"},
		"concurrency 150%": {func(n *NodeScript) { n.Spec.Rollout.MaxConcurrency = ptr.To(intstr.FromString("150%")) }, `spec.rollout.maxConcurrency: Invalid value: "150%": want a percentage from 1% to 100%`},
		"unknown backend":  {func(n *NodeScript) { n.Spec.Backend.Name = "ssh" }, `spec.backend.name: Unsupported value: "ssh"`},
		"bad pull secret name": {func(n *NodeScript) {
			n.Spec.Backend.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "ok"}, {Name: "Not_A_Name"}}
		}, `spec.backend.imagePullSecrets[1].name: Invalid value: "Not_A_Name"`},
		"bad secretEnv secret": {func(n *NodeScript) {
			n.Spec.SecretEnv = []SecretEnvSource{{Secret: "ok", Key: "K"}, {Secret: "Not_A_Name"}}
		}, `spec.secretEnv[1].secret: Invalid value: "Not_A_Name"`},
		"bad configMapEnv name": {func(n *NodeScript) {
			n.Spec.ConfigMapEnv = []ConfigMapEnvSource{{ConfigMap: "ok", Key: "K"}, {ConfigMap: "Not_A_Name"}}
		}, `spec.configMapEnv[1].configMap: Invalid value: "Not_A_Name"`},
		"bad configMapEnv key": {func(n *NodeScript) { n.Spec.ConfigMapEnv = []ConfigMapEnvSource{{ConfigMap: "ok", Key: "a b"}} }, `spec.configMapEnv[0].key: Invalid value: "a b"`},
		"bad secretEnv key":    {func(n *NodeScript) { n.Spec.SecretEnv = []SecretEnvSource{{Secret: "ok", Key: "a b"}} }, `spec.secretEnv[0].key: Invalid value: "a b"`},
		"missing script":       {func(n *NodeScript) { n.Spec.Script = "  " }, "spec.script: Required value"},
		"rollback no script":   {func(n *NodeScript) { n.Spec.OnFailure.Rollback = true }, "spec.rollbackScript: Required value: onFailure.rollback is set"},
		"drain without cordon": {func(n *NodeScript) { n.Spec.OnFailure.Drain = true }, "spec.onFailure.drain: Invalid value: true: drain needs cordon"},
		"bad batch": {func(n *NodeScript) {
			n.Spec.Rollout.Batches = []intstr.IntOrString{intstr.FromInt32(1), intstr.FromString("x%")}
		}, "spec.rollout.batches[1]"},
		"bad promoteTo":        {func(n *NodeScript) { n.Spec.Rollout.PromoteTo = "a in (" }, "spec.rollout.promoteTo"},
		"max failures 0 ok":    {func(n *NodeScript) { n.Spec.Rollout.MaxFailures = ptr.To(intstr.FromInt32(0)) }, ""},
		"negative timeout":     {func(n *NodeScript) { n.Spec.Timeout = &metav1.Duration{Duration: -time.Second} }, "spec.timeout"},
		"huge timeout":         {func(n *NodeScript) { n.Spec.Timeout = &metav1.Duration{Duration: 100 * 365 * 24 * time.Hour} }, "spec.timeout: Invalid value: \"876000h0m0s\": must be at most"},
		"max timeout ok":       {func(n *NodeScript) { n.Spec.Timeout = &metav1.Duration{Duration: MaxTimeout} }, ""},
		"negative soak":        {func(n *NodeScript) { n.Spec.Rollout.SoakTime = &metav1.Duration{Duration: -time.Second} }, "spec.rollout.soakTime: Invalid value: \"-1s\": must be 0 or more"},
		"negative drain":       {func(n *NodeScript) { n.Spec.OnFailure.DrainTimeout = &metav1.Duration{Duration: -time.Second} }, "spec.onFailure.drainTimeout"},
		"negative backoff":     {func(n *NodeScript) { n.Spec.Retry.InitialBackoff = &metav1.Duration{Duration: -time.Second} }, "spec.retry.initialBackoff"},
		"negative max backoff": {func(n *NodeScript) { n.Spec.Retry.MaxBackoff = &metav1.Duration{Duration: -time.Second} }, "spec.retry.maxBackoff"},
		"initial above max backoff": {func(n *NodeScript) {
			n.Spec.Retry.InitialBackoff, n.Spec.Retry.MaxBackoff = &metav1.Duration{Duration: 10 * time.Minute}, &metav1.Duration{Duration: time.Second}
		}, `spec.retry.initialBackoff: Invalid value: "10m0s": must be at most spec.retry.maxBackoff (1s, as set)`},
		"image with space": {func(n *NodeScript) { n.Spec.Backend.Image = "busy box" }, `spec.backend.image: Invalid value: "busy box": not a valid image reference`},
		"image ok":         {func(n *NodeScript) { n.Spec.Backend.Image = "registry.local:5000/tools/busybox:1.36" }, ""},
		"window ok": {func(n *NodeScript) {
			n.Spec.Window = &MaintenanceWindow{Days: []string{"Mon", "Sat"}, Start: "22:00", End: "04:00", TimeZone: "Europe/Berlin"}
		}, ""},
		"check script ok": {func(n *NodeScript) {
			n.Spec.CheckScript = "sysctl -n net.core.somaxconn | grep -qx 4096 && exit 0 || exit 1"
		}, ""},
		"check script blanks": {func(n *NodeScript) { n.Spec.CheckScript = " \n" }, `spec.checkScript: Invalid value: " \n": only blanks`},
		"check script NUL":    {func(n *NodeScript) { n.Spec.CheckScript = "true\x00" }, "spec.checkScript: Invalid value: \"(NUL at byte 4)\""},
		"blocking pods ok": {func(n *NodeScript) {
			n.Spec.BlockingPodSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "batch"}}
		}, ""},
		"blocking pods empty": {func(n *NodeScript) { n.Spec.BlockingPodSelector = &metav1.LabelSelector{} }, `spec.blockingPodSelector: Invalid value: "{}": matches every pod`},
		"blocking pods bad": {func(n *NodeScript) {
			n.Spec.BlockingPodSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: "Near"}}}
		}, "spec.blockingPodSelector: Invalid value"},
		"maintenance ok": {func(n *NodeScript) {
			n.Spec.Maintenance = &MaintenanceSpec{Cordon: true, Drain: &DrainSpec{Timeout: &metav1.Duration{Duration: time.Minute}, PodSelector: "app!=monitoring", GracePeriodSeconds: ptr.To[int32](30)},
				MaxUnavailable: ptr.To(intstr.FromString("10%"))}
		}, ""},
		"maintenance drain without cordon": {func(n *NodeScript) { n.Spec.Maintenance = &MaintenanceSpec{Drain: &DrainSpec{}} }, "spec.maintenance.cordon: Invalid value: false: maintenance.drain needs cordon"},
		"maintenance empty":                {func(n *NodeScript) { n.Spec.Maintenance = &MaintenanceSpec{} }, "spec.maintenance: Required value"},
		"maintenance bad selector": {func(n *NodeScript) {
			n.Spec.Maintenance = &MaintenanceSpec{Cordon: true, Drain: &DrainSpec{PodSelector: "app in ("}}
		}, "spec.maintenance.drain.podSelector"},
		"maintenance negative grace": {func(n *NodeScript) {
			n.Spec.Maintenance = &MaintenanceSpec{Cordon: true, Drain: &DrainSpec{GracePeriodSeconds: ptr.To[int32](-1)}}
		}, "spec.maintenance.drain.gracePeriodSeconds"},
		"maintenance negative timeout": {func(n *NodeScript) {
			n.Spec.Maintenance = &MaintenanceSpec{Cordon: true, Drain: &DrainSpec{Timeout: &metav1.Duration{Duration: -time.Second}}}
		}, "spec.maintenance.drain.timeout"},
		"maintenance unavailable 0": {func(n *NodeScript) {
			n.Spec.Maintenance = &MaintenanceSpec{Cordon: true, MaxUnavailable: ptr.To(intstr.FromInt32(0))}
		}, "spec.maintenance.maxUnavailable: Invalid value: 0"},
		"reboot ok": {func(n *NodeScript) {
			n.Spec.Reboot, n.Spec.RebootSentinel, n.Spec.RebootCommand = RebootIfRequired, "/run/reboot-needed", "shutdown -r now"
			n.Spec.RebootTimeout = &metav1.Duration{Duration: time.Hour}
		}, ""},
		"reboot bad":           {func(n *NodeScript) { n.Spec.Reboot = "Sometimes" }, `spec.reboot: Unsupported value: "Sometimes"`},
		"reboot sentinel":      {func(n *NodeScript) { n.Spec.RebootSentinel = "var/run/x" }, `spec.rebootSentinel: Invalid value: "var/run/x": want an absolute path`},
		"reboot command blank": {func(n *NodeScript) { n.Spec.RebootCommand = "  " }, "spec.rebootCommand: Invalid value"},
		"reboot timeout 0":     {func(n *NodeScript) { n.Spec.RebootTimeout = &metav1.Duration{} }, "spec.rebootTimeout: Invalid value: \"0s\": must be positive"},
		"reapply ok": {func(n *NodeScript) {
			n.Spec.Reapply = &ReapplyPolicy{OnReboot: true, Interval: &metav1.Duration{Duration: 24 * time.Hour}}
		}, ""},
		"reapply onReboot only": {func(n *NodeScript) { n.Spec.Reapply = &ReapplyPolicy{OnReboot: true} }, ""},
		"reapply empty":         {func(n *NodeScript) { n.Spec.Reapply = &ReapplyPolicy{} }, "spec.reapply: Required value: set onReboot: true, interval"},
		"reapply short interval": {func(n *NodeScript) {
			n.Spec.Reapply = &ReapplyPolicy{Interval: &metav1.Duration{Duration: 30 * time.Second}}
		}, `spec.reapply.interval: Invalid value: "30s": must be at least 1m0s`},
		"reapply negative interval": {func(n *NodeScript) {
			n.Spec.Reapply = &ReapplyPolicy{OnReboot: true, Interval: &metav1.Duration{Duration: -time.Hour}}
		}, `spec.reapply.interval: Invalid value: "-1h0m0s": must be at least 1m0s`},
		"window bad start":    {func(n *NodeScript) { n.Spec.Window = &MaintenanceWindow{Start: "24:00", End: "04:00"} }, `spec.window.start: Invalid value: "24:00": want HH:MM`},
		"window 1-digit hour": {func(n *NodeScript) { n.Spec.Window = &MaintenanceWindow{Start: "22:00", End: "4:00"} }, `spec.window.end: Invalid value: "4:00"`},
		"window bad day": {func(n *NodeScript) {
			n.Spec.Window = &MaintenanceWindow{Days: []string{"Mon", "Monday"}, Start: "22:00", End: "04:00"}
		}, `spec.window.days[1]: Unsupported value: "Monday"`},
		"window twice a day": {func(n *NodeScript) {
			n.Spec.Window = &MaintenanceWindow{Days: []string{"Mon", "Mon"}, Start: "22:00", End: "04:00"}
		}, `spec.window.days[1]: Duplicate value: "Mon"`},
		"window bad zone": {func(n *NodeScript) {
			n.Spec.Window = &MaintenanceWindow{Start: "22:00", End: "04:00", TimeZone: "Mars/Olympus"}
		}, `spec.window.timeZone: Invalid value: "Mars/Olympus"`},
		"unknown profile": {func(n *NodeScript) { n.Spec.Backend.Profile = "admin" }, `spec.backend.profile: Unsupported value: "admin"`},
		"bogus taint":     {func(n *NodeScript) { n.Spec.StartupTaint = &corev1.Taint{Key: "k", Effect: "Sometimes"} }, `spec.startupTaint.effect: Unsupported value: "Sometimes"`},
		"bad taint key":   {func(n *NodeScript) { n.Spec.StartupTaint = &corev1.Taint{Key: "a b", Effect: "NoSchedule"} }, "spec.startupTaint.key"},
		"script too long": {func(n *NodeScript) { n.Spec.Script = strings.Repeat("x", MaxScriptBytes+1) }, "spec.script: Invalid value: \"(131072 bytes)\": at most 131071 bytes"},
		"script at limit": {func(n *NodeScript) { n.Spec.Script = strings.Repeat("x", MaxScriptBytes) }, ""},
		"NUL in rollback": {func(n *NodeScript) { n.Spec.RollbackScript = "a\x00b" }, "spec.rollbackScript: Invalid value: \"(NUL at byte 1)\""},
		"bad exclude":     {func(n *NodeScript) { n.Spec.ExcludeNodes = []string{"Node_1"} }, "spec.excludeNodes[0]"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			n := valid()
			tc.mutate(n)
			errs := Validate(n)
			if tc.want == "" {
				if len(errs) > 0 {
					t.Fatalf("want valid, got %v", errs)
				}
				return
			}
			if !strings.Contains(errs.ToAggregate().Error(), tc.want) {
				t.Fatalf("errors %v, want one containing %q", errs, tc.want)
			}
		})
	}
}

func TestValidatePromotion(t *testing.T) {
	n := valid()
	if err := ValidatePromotion(n, "all"); err != nil {
		t.Fatal(err)
	}
	if err := ValidatePromotion(n, "a in ("); err == nil || !strings.Contains(err.Error(), `--to "a in ("`) {
		t.Errorf("bad selector: %v", err)
	}
	n.Status.Conditions = []metav1.Condition{{Type: ConditionHalted, Status: metav1.ConditionTrue, Reason: "ErrorBudgetExceeded", Message: "2 nodes failed"}}
	if err := ValidatePromotion(n, "all"); err == nil || !strings.Contains(err.Error(), "is halted (ErrorBudgetExceeded: 2 nodes failed): promotion refused") {
		t.Errorf("halted: %v", err)
	}
}

func TestSpecHash(t *testing.T) {
	a, b := valid(), valid()
	if SpecHash(&a.Spec) != SpecHash(&b.Spec) || len(SpecHash(&a.Spec)) != 16 {
		t.Fatal("equal specs must hash equal, 16 hex digits")
	}
	b.Spec.Rollout.Canary = ptr.To[int32](5)
	b.Spec.Rollout.MaxConcurrency = ptr.To(intstr.FromInt32(3))
	if SpecHash(&a.Spec) != SpecHash(&b.Spec) {
		t.Error("changing the rollout pace must not change the hash (nothing reruns)")
	}
	b.Spec.Script += "\n"
	if SpecHash(&a.Spec) == SpecHash(&b.Spec) {
		t.Error("changing the script must change the hash (nodes run again)")
	}
	b = valid()
	b.Spec.Reapply = &ReapplyPolicy{OnReboot: true, Interval: &metav1.Duration{Duration: time.Hour}}
	if SpecHash(&a.Spec) != SpecHash(&b.Spec) {
		t.Error("adding reapply must not change the hash (it says when to run again, not what)")
	}
	b = valid()
	b.Spec.CheckScript = "exit 1"
	if SpecHash(&a.Spec) == SpecHash(&b.Spec) {
		t.Error("adding a check script must change the hash (nodes are checked)")
	}
	d := valid()
	d.Spec.Backend.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "registry-creds"}}
	if SpecHash(&a.Spec) != SpecHash(&d.Spec) {
		t.Error("changing the image pull secrets (credentials) must not change the hash (nothing reruns)")
	}
	c := valid()
	c.Spec.Backend.Profile = "general"
	if SpecHash(&a.Spec) == SpecHash(&c.Spec) {
		t.Error("changing backend options must change the hash")
	}
}

func TestValidateDurationSyntax(t *testing.T) {
	doc := []byte("spec:\n  timeout: abc\n  rollout: {soakTime: 5}\n  retry: {maxBackoff: 1m}\n  reapply: {interval: daily}\n")
	got := ValidateDurationSyntax(doc).ToAggregate().Error()
	for _, want := range []string{`spec.timeout: Invalid value: "abc": want a duration such as 30s`, "spec.rollout.soakTime: Invalid value: 5: want a duration string", `spec.reapply.interval: Invalid value: "daily"`} {
		if !strings.Contains(got, want) {
			t.Errorf("%q lacks %q", got, want)
		}
	}
	if strings.Contains(got, "maxBackoff") {
		t.Errorf("a valid duration refused: %s", got)
	}
}
