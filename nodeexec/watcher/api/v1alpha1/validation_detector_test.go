package v1alpha1

import (
	"strings"
	"testing"

	"k8s.io/utils/ptr"
)

func TestValidateCheck(t *testing.T) {
	unpriv := func(mounts ...HostPathMount) *CheckSpec {
		return &CheckSpec{Privileged: ptr.To(false), HostPaths: mounts}
	}
	tests := map[string]struct {
		check   *CheckSpec
		script  string // checkScript; "-" leaves it out
		backend BackendSpec
		want    string // "" = valid
	}{
		"no check":                {nil, "", BackendSpec{}, ""},
		"privileged explicit":     {&CheckSpec{Privileged: ptr.To(true)}, "", BackendSpec{}, ""},
		"unprivileged no mounts":  {unpriv(), "", BackendSpec{}, ""},
		"kured sentinel":          {unpriv(HostPathMount{Path: "/var/run", MountPath: "/host/var/run"}), "", BackendSpec{}, ""},
		"mountPath defaults":      {unpriv(HostPathMount{Path: "/var/run"}, HostPathMount{Path: "/etc/os-release.d"}), "", BackendSpec{}, ""},
		"nsenter with image":      {unpriv(), "", BackendSpec{Name: "nsenter", Image: "registry.example/tools:1"}, ""},
		"nsenter privileged":      {&CheckSpec{}, "", BackendSpec{Name: "nsenter"}, ""},
		"siblings are fine":       {unpriv(HostPathMount{Path: "/a", MountPath: "/m/a"}, HostPathMount{Path: "/b", MountPath: "/m/ab"}), "", BackendSpec{}, ""},
		"same host path twice ok": {unpriv(HostPathMount{Path: "/a", MountPath: "/x"}, HostPathMount{Path: "/a", MountPath: "/y"}), "", BackendSpec{}, ""},

		"without checkScript":   {unpriv(), "-", BackendSpec{}, "spec.check: Invalid value"},
		"hostPaths privileged":  {&CheckSpec{HostPaths: []HostPathMount{{Path: "/var/run"}}}, "", BackendSpec{}, "spec.check.hostPaths: Invalid value: 1: mounts node directories into the unprivileged check only"},
		"hostPaths priv true":   {&CheckSpec{Privileged: ptr.To(true), HostPaths: []HostPathMount{{Path: "/var/run"}}}, "", BackendSpec{}, "spec.check.privileged: false"},
		"relative path":         {unpriv(HostPathMount{Path: "var/run"}), "", BackendSpec{}, `spec.check.hostPaths[0].path: Invalid value: "var/run": must be an absolute path`},
		"empty path":            {unpriv(HostPathMount{}), "", BackendSpec{}, "spec.check.hostPaths[0].path: Invalid value: \"\": is empty"},
		"root path":             {unpriv(HostPathMount{Path: "/", MountPath: "/host"}), "", BackendSpec{}, `spec.check.hostPaths[0].path: Invalid value: "/": must not be /`},
		"dotdot path":           {unpriv(HostPathMount{Path: "/var/../etc", MountPath: "/host"}), "", BackendSpec{}, `spec.check.hostPaths[0].path: Invalid value: "/var/../etc": must not contain '..'`},
		"unclean path":          {unpriv(HostPathMount{Path: "/var/run/", MountPath: "/host"}), "", BackendSpec{}, `spec.check.hostPaths[0].path: Invalid value: "/var/run/": must be clean`},
		"double slash":          {unpriv(HostPathMount{Path: "/var//run", MountPath: "/host"}), "", BackendSpec{}, `spec.check.hostPaths[0].path: Invalid value: "/var//run": must be clean`},
		"relative mountPath":    {unpriv(HostPathMount{Path: "/var/run", MountPath: "host"}), "", BackendSpec{}, `spec.check.hostPaths[0].mountPath: Invalid value: "host": must be an absolute path`},
		"root mountPath":        {unpriv(HostPathMount{Path: "/var/run", MountPath: "/"}), "", BackendSpec{}, `spec.check.hostPaths[0].mountPath: Invalid value: "/": must not be /`},
		"dotdot mountPath":      {unpriv(HostPathMount{Path: "/var/run", MountPath: "/host/.."}), "", BackendSpec{}, `spec.check.hostPaths[0].mountPath: Invalid value: "/host/..": must not contain '..'`},
		"mount over proc":       {unpriv(HostPathMount{Path: "/proc"}), "", BackendSpec{}, `spec.check.hostPaths[0].mountPath: Invalid value: "/proc": overlaps the container's own /proc`},
		"mount around dev":      {unpriv(HostPathMount{Path: "/var/run", MountPath: "/dev/host"}), "", BackendSpec{}, "overlaps the container's own /dev"},
		"same mountPath":        {unpriv(HostPathMount{Path: "/a", MountPath: "/m"}, HostPathMount{Path: "/b", MountPath: "/m"}), "", BackendSpec{}, `spec.check.hostPaths[1].mountPath: Invalid value: "/m": overlaps spec.check.hostPaths[0] mounted at /m`},
		"nested mountPath":      {unpriv(HostPathMount{Path: "/a", MountPath: "/m"}, HostPathMount{Path: "/b", MountPath: "/m/b"}), "", BackendSpec{}, "spec.check.hostPaths[1].mountPath: Invalid value: \"/m/b\": overlaps spec.check.hostPaths[0]"},
		"enclosing mountPath":   {unpriv(HostPathMount{Path: "/var/run"}, HostPathMount{Path: "/var"}), "", BackendSpec{}, "spec.check.hostPaths[1].mountPath: Invalid value: \"/var\": overlaps spec.check.hostPaths[0] mounted at /var/run"},
		"too many":              {unpriv(manyMounts(MaxCheckHostPaths + 1)...), "", BackendSpec{}, "spec.check.hostPaths: Too many: 9: must have at most 8 items"},
		"nsenter default image": {unpriv(), "", BackendSpec{Name: "nsenter"}, "spec.backend.image: Required value: the unprivileged check"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ns := valid()
			ns.Spec.CheckScript = "test -e /host/var/run/reboot-required && exit 1; exit 0"
			if tc.script == "-" {
				ns.Spec.CheckScript = ""
			}
			ns.Spec.Check, ns.Spec.Backend = tc.check, tc.backend
			err := Validate(ns).ToAggregate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
	if got := manyMounts(MaxCheckHostPaths); Validate(func() *NodeScript {
		ns := valid()
		ns.Spec.CheckScript, ns.Spec.Check = "true", unpriv(got...)
		return ns
	}()) != nil {
		t.Errorf("%d mounts refused", MaxCheckHostPaths)
	}
}

func manyMounts(n int) []HostPathMount {
	var out []HostPathMount
	for i := range n {
		out = append(out, HostPathMount{Path: "/d" + string(rune('a'+i))})
	}
	return out
}

func TestCheckPrivilegedDefault(t *testing.T) {
	for _, c := range []struct {
		check *CheckSpec
		want  bool
	}{{nil, true}, {&CheckSpec{}, true}, {&CheckSpec{Privileged: ptr.To(true)}, true}, {&CheckSpec{Privileged: ptr.To(false)}, false}} {
		s := NodeScriptSpec{Check: c.check}
		if got := s.CheckPrivileged(); got != c.want {
			t.Errorf("%+v: CheckPrivileged %t, want %t", c.check, got, c.want)
		}
	}
	// The spec hash of a NodeScript without spec.check is what it was
	// before the field existed; setting it changes the hash.
	a := NodeScriptSpec{Script: "x", CheckScript: "y"}
	b := a
	b.Check = &CheckSpec{Privileged: ptr.To(false)}
	if SpecHash(&a) == SpecHash(&b) {
		t.Error("spec.check does not enter the spec hash")
	}
}
