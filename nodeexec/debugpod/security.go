package debugpod

import (
	"slices"

	"k8s.io/kubectl/pkg/cmd/debug"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/preflight"
)

// PodSecurityLevel is the least permissive Pod Security level whose namespace
// admits the pod of profile: "privileged" for sysadmin, legacy, general and
// netadmin (host namespaces, hostPath /host, privileges or added
// capabilities), "baseline" for baseline, "restricted" for restricted; ""
// for an unknown profile.
func PodSecurityLevel(profile string) string {
	switch profile {
	case debug.ProfileSysadmin, debug.ProfileLegacy, debug.ProfileGeneral, debug.ProfileNetadmin:
		return preflight.LevelPrivileged
	case debug.ProfileBaseline:
		return preflight.LevelBaseline
	case debug.ProfileRestricted:
		return preflight.LevelRestricted
	}
	return ""
}

// ProfileGrants says in one line what the debugging container of profile
// may do on the node ("" for an unknown profile).
func ProfileGrants(profile string) string {
	switch profile {
	case debug.ProfileSysadmin:
		return "privileged container, the node's PID, network and IPC namespaces, its root filesystem at /host"
	case debug.ProfileLegacy:
		return "the node's PID, network and IPC namespaces, its root filesystem at /host (not privileged)"
	case debug.ProfileGeneral:
		return "the node's PID, network and IPC namespaces, its root filesystem at /host, capability SYS_PTRACE"
	case debug.ProfileNetadmin:
		return "the node's PID, network and IPC namespaces, capabilities NET_ADMIN and NET_RAW (no /host)"
	case debug.ProfileBaseline:
		return "a pod pinned to the node with no host namespaces or mounts (sees only its own container)"
	case debug.ProfileRestricted:
		return "as baseline, and non-root, all capabilities dropped, seccomp RuntimeDefault"
	}
	return ""
}

// PodSecurityLevel is PodSecurityLevel of the backend's profile.
func (b *Backend) PodSecurityLevel() string { return PodSecurityLevel(b.o.Profile) }

// Requirements are the profile's Pod Security level (and the other
// profiles' levels, picked with --profile) in the backend's namespace, and
// the RBAC of a pod per node: create, watch and delete it, exec into it,
// the run's Lease, the kubelet's Events, and list nodes.
func (b *Backend) Requirements() nodeexec.Requirements {
	alts := map[string]string{}
	for _, p := range Profiles() {
		if p != b.o.Profile {
			alts[p] = PodSecurityLevel(p)
		}
	}
	return nodeexec.Requirements{
		Namespace: b.o.Namespace, PodSecurityLevel: b.PodSecurityLevel(),
		Permissions: slices.Concat(preflight.PodLifecycle(), preflight.RunLease(), preflight.Exec(), preflight.Events(), preflight.Nodes()),
		VariantKind: "profile", Variant: b.o.Profile, Grants: ProfileGrants(b.o.Profile),
		Alternatives: alts, AlternativeFlag: "--profile",
	}
}

// HostRoot is HostRoot when the profile mounts the node's root filesystem
// there (sysadmin, general, legacy), else "".
func (b *Backend) HostRoot() string {
	if MountsHostRoot(b.o.Profile) {
		return HostRoot
	}
	return ""
}
