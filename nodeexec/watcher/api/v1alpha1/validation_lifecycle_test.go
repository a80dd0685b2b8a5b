package v1alpha1

import (
	"strings"
	"testing"
)

func TestValidateLifecycle(t *testing.T) {
	reapply := func(schedule string) func(*NodeScript) {
		return func(n *NodeScript) { n.Spec.Reapply = &ReapplyPolicy{Schedule: schedule} }
	}
	for name, c := range map[string]struct {
		mutate func(*NodeScript)
		want   []string // none = valid
	}{
		"schedule alone":    {reapply("0 3 * * 0"), nil},
		"every minute":      {reapply("* * * * *"), nil},
		"descriptor":        {reapply("@daily"), nil},
		"zone":              {reapply("CRON_TZ=Europe/Berlin 0 3 * * *"), nil},
		"TZ zone":           {reapply("TZ=America/New_York 30 2 * * 1-5"), nil},
		"bad minute":        {reapply("61 * * * *"), []string{`spec.reapply.schedule: Invalid value: "61 * * * *": not a cron expression`}},
		"six fields":        {reapply("0 0 3 * * *"), []string{"spec.reapply.schedule", "not a cron expression"}},
		"words":             {reapply("every night"), []string{"spec.reapply.schedule", "not a cron expression"}},
		"unknown zone":      {reapply("CRON_TZ=Mars/Olympus 0 3 * * *"), []string{"spec.reapply.schedule", "Mars/Olympus"}},
		"zone, no schedule": {reapply("CRON_TZ=UTC"), []string{"spec.reapply.schedule", "names a time zone but no schedule"}},
		"@every":            {reapply("@every 1m"), []string{"spec.reapply.schedule", "use spec.reapply.interval"}},
		"never fires":       {reapply("0 0 30 2 *"), []string{"spec.reapply.schedule", "never fires"}},
		"blank schedule":    {reapply("   "), []string{"spec.reapply.schedule", "empty"}},
		"uninstall ok":      {func(n *NodeScript) { n.Spec.UninstallScript = "rm -f /etc/fix" }, nil},
		"uninstall too long": {func(n *NodeScript) { n.Spec.UninstallScript = strings.Repeat("x", MaxScriptBytes+1) },
			[]string{`spec.uninstallScript: Invalid value: "(131072 bytes)": at most 131071 bytes`}},
		"uninstall NUL":    {func(n *NodeScript) { n.Spec.UninstallScript = "a\x00b" }, []string{"spec.uninstallScript", "NUL"}},
		"uninstall blanks": {func(n *NodeScript) { n.Spec.UninstallScript = " \n" }, []string{"spec.uninstallScript", "only blanks"}},
	} {
		t.Run(name, func(t *testing.T) {
			ns := valid()
			c.mutate(ns)
			got := Validate(ns).ToAggregate()
			if len(c.want) == 0 {
				if got != nil {
					t.Fatalf("refused: %v", got)
				}
				return
			}
			if got == nil {
				t.Fatalf("accepted, want %q", c.want)
			}
			for _, w := range c.want {
				if !strings.Contains(got.Error(), w) {
					t.Errorf("error %q does not contain %q", got, w)
				}
			}
		})
	}
}
