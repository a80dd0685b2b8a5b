package testcluster

import (
	"context"
	"strings"
	"testing"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"sigs.k8s.io/yaml"
)

// The audit policy records pod, ephemeral container and NodeScript writes
// with their bodies first (the commands they carry, whoever sends them), then
// Lease creations with theirs (the resident agents' run records), then every
// request of AuditAllGroup's members, then its other pod rules, then
// nothing.
func TestAuditPolicyAuditAllGroup(t *testing.T) {
	var p auditv1.Policy
	if err := yaml.UnmarshalStrict([]byte(auditPolicy), &p); err != nil {
		t.Fatalf("auditPolicy: %v", err)
	}
	if p.Kind != "Policy" || p.APIVersion != "audit.k8s.io/v1" || len(p.Rules) != 6 {
		t.Fatalf("kind %q, %d rules, want Policy and 6:\n%s", p.Kind, len(p.Rules), auditPolicy)
	}
	if r := p.Rules[0]; r.Level != auditv1.LevelRequest || len(r.UserGroups) != 0 || len(r.Resources) != 2 ||
		strings.Join(r.Resources[0].Resources, ",") != "pods,pods/ephemeralcontainers" ||
		r.Resources[1].Group != "nodeexec.io" || strings.Join(r.Resources[1].Resources, ",") != "nodescripts" ||
		strings.Join(r.Verbs, ",") != "create,update,patch" {
		t.Errorf("first rule %+v, want Request for pod, ephemeral container and NodeScript writes", r)
	}
	if r := p.Rules[1]; r.Level != auditv1.LevelRequest || len(r.UserGroups) != 0 || len(r.Resources) != 1 ||
		r.Resources[0].Group != "coordination.k8s.io" || strings.Join(r.Resources[0].Resources, ",") != "leases" || strings.Join(r.Verbs, ",") != "create" {
		t.Errorf("second rule %+v, want Request for Lease creations", r)
	}
	r := p.Rules[2]
	if r.Level != auditv1.LevelMetadata || len(r.UserGroups) != 1 || r.UserGroups[0] != AuditAllGroup || len(r.Verbs) != 0 || len(r.Resources) != 0 {
		t.Errorf("third rule %+v, want Metadata for every request of group %s", r, AuditAllGroup)
	}
	if last := p.Rules[len(p.Rules)-1]; last.Level != auditv1.LevelNone || len(last.UserGroups) != 0 {
		t.Errorf("last rule %+v, want level None for everyone else", last)
	}
}

func TestAuditedUserRefusesBadNames(t *testing.T) {
	c := &Cluster{r: newRunner(Options{StateDir: t.TempDir(), RunDir: t.TempDir()})}
	for _, name := range []string{"", "Bench", "a/b", "-x", strings.Repeat("a", 64), "x y"} {
		if _, _, err := c.AuditedUser(context.Background(), name, t.TempDir()); err == nil || !strings.Contains(err.Error(), "audited user") {
			t.Errorf("AuditedUser(%q): %v, want an error naming the audited user", name, err)
		}
	}
}
