package debugpod

import "k8s.io/kubectl/pkg/cmd/debug"

// Pod Security levels (pod-security.kubernetes.io/enforce values).
const (
	levelPrivileged = "privileged"
	levelBaseline   = "baseline"
	levelRestricted = "restricted"
)

// PodSecurityLevel is the least permissive Pod Security level whose namespace
// admits the pod of profile: "privileged" for sysadmin, legacy, general and
// netadmin (host namespaces, hostPath /host, privileges or added
// capabilities), "baseline" for baseline, "restricted" for restricted; ""
// for an unknown profile.
func PodSecurityLevel(profile string) string {
	switch profile {
	case debug.ProfileSysadmin, debug.ProfileLegacy, debug.ProfileGeneral, debug.ProfileNetadmin:
		return levelPrivileged
	case debug.ProfileBaseline:
		return levelBaseline
	case debug.ProfileRestricted:
		return levelRestricted
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

// Profile is the backend's kubectl debug profile.
func (b *Backend) Profile() string { return b.o.Profile }

// Namespace is the namespace of the backend's pods.
func (b *Backend) Namespace() string { return b.o.Namespace }

// PodSecurityLevel is PodSecurityLevel(b.Profile()).
func (b *Backend) PodSecurityLevel() string { return PodSecurityLevel(b.o.Profile) }
