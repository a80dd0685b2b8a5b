package v1alpha1

import (
	"path"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/nodeexec/nodeexec/nodeexec/backends"
)

// checkReservedMountPaths are the container's own filesystems a host path
// may not be mounted over or under.
var checkReservedMountPaths = []string{"/proc", "/sys", "/dev"}

// validateCheck checks spec.check (c, at spec.check) against
// spec.checkScript and spec.backend: paths absolute and clean, not "/",
// mount paths not overlapping one another nor /proc, /sys or /dev, at most
// MaxCheckHostPaths, hostPaths only with privileged: false, and an image
// with a shell for the unprivileged check.
func validateCheck(s *NodeScriptSpec, spec *field.Path) field.ErrorList {
	c := s.Check
	if c == nil {
		return nil
	}
	p := spec.Child("check")
	var errs field.ErrorList
	if s.CheckScript == "" {
		errs = append(errs, field.Invalid(p, "set", "says how spec.checkScript runs: set checkScript too, or leave check out"))
	}
	hp := p.Child("hostPaths")
	if len(c.HostPaths) > 0 && s.CheckPrivileged() {
		errs = append(errs, field.Invalid(hp, len(c.HostPaths), "mounts node directories into the unprivileged check only: set spec.check.privileged: false (the privileged check sees the whole node already), or leave hostPaths out"))
	}
	if len(c.HostPaths) > MaxCheckHostPaths {
		errs = append(errs, field.TooMany(hp, len(c.HostPaths), MaxCheckHostPaths))
	}
	if !s.CheckPrivileged() && runsAgentImage(s.Backend.Name) && s.Backend.Image == "" {
		errs = append(errs, field.Required(spec.Child("backend", "image"), "the unprivileged check (spec.check.privileged: false) runs checkScript with /bin/sh in the run's image, and the nsenter backend's default image (the agent) has no shell: name an image with one (allowed by the cluster's admission policy), or use the debugpod backend"))
	}
	var mounts []string
	for i, m := range c.HostPaths {
		ip := hp.Index(i)
		if msg := checkPath(m.Path); msg != "" {
			errs = append(errs, field.Invalid(ip.Child("path"), m.Path, msg))
		}
		mp := m.MountPathOrDefault()
		if m.MountPath != "" {
			if msg := checkPath(m.MountPath); msg != "" {
				errs = append(errs, field.Invalid(ip.Child("mountPath"), m.MountPath, msg))
				continue
			}
		} else if checkPath(m.Path) != "" {
			continue // refused above; the default mountPath is the same path
		}
		for _, r := range checkReservedMountPaths {
			if within(mp, r) || within(r, mp) {
				errs = append(errs, field.Invalid(ip.Child("mountPath"), mp, "overlaps the container's own "+r+": choose another mountPath, e.g. /host"+m.Path))
			}
		}
		for j, other := range mounts {
			if within(mp, other) || within(other, mp) {
				errs = append(errs, field.Invalid(ip.Child("mountPath"), mp, "overlaps spec.check.hostPaths["+strconv.Itoa(j)+"] mounted at "+other+": give each entry its own mountPath, not inside another's"))
			}
		}
		mounts = append(mounts, mp)
	}
	return errs
}

// checkPath is why p is not a usable host or mount path, "" when it is:
// absolute, clean, not "/", no "..".
func checkPath(p string) string {
	switch {
	case p == "":
		return "is empty: give an absolute path, e.g. /var/run"
	case !strings.HasPrefix(p, "/"):
		return "must be an absolute path (start with /)"
	case p == "/":
		return "must not be / (the whole node): name the directory the check reads, e.g. /var/run"
	case strings.Contains(p, "\x00"):
		return "contains a NUL byte"
	case hasDotDot(p):
		return "must not contain '..'"
	case path.Clean(p) != p:
		return "must be clean (no '.', '//' or trailing '/'): " + path.Clean(p)
	}
	return ""
}

func hasDotDot(p string) bool {
	for _, e := range strings.Split(p, "/") {
		if e == ".." {
			return true
		}
	}
	return false
}

// within reports whether clean absolute path p is dir or inside it.
func within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, dir+"/")
}

// runsAgentImage is whether backend name runs nodeexec's own image by
// default (the agent: a static binary, no shell), as the nsenter backend does.
func runsAgentImage(name string) bool {
	e, ok := backends.Lookup(name)
	return ok && e.RunsAgentImage()
}
