package v1alpha1

// MaxCheckHostPaths is the most entries spec.check.hostPaths may hold.
const MaxCheckHostPaths = 8

// CheckSpec says how spec.checkScript's pod runs (see
// docs/nodescript-detector.md).
// +kubebuilder:validation:XValidation:rule="!has(self.hostPaths) || size(self.hostPaths) == 0 || (has(self.privileged) && !self.privileged)",message="hostPaths mounts node directories into the unprivileged check only: set privileged: false, or leave hostPaths out"
type CheckSpec struct {
	// Privileged says which pod runs spec.checkScript. True (the default,
	// when unset): the run's own pod, built by the backend
	// spec.backend.name names (privileged, in the node's namespaces), as
	// for spec.script. False: a pod of the watcher's own that holds no
	// privilege, whatever spec.backend.name is: not privileged, no
	// hostPID, hostNetwork or hostIPC, every capability dropped, no
	// privilege escalation, a read-only root filesystem, seccomp
	// RuntimeDefault, user and group 65534 (nobody), no service account
	// token; it sees of the node only the directories spec.check.hostPaths
	// names, read-only. The script runs with /bin/sh in the image of
	// spec.backend.image (or the backend's default image: busybox:stable
	// for debugpod; the nsenter backend's default, the agent image, has no
	// shell, so spec.backend.image must then be set). spec.backend.name
	// chooses how the script runs, not the check. The check's exit code
	// means what it means for the privileged check.
	// +optional
	Privileged *bool `json:"privileged,omitempty"`
	// HostPaths are the node's directories the unprivileged check sees,
	// each mounted read-only (hostPath type Directory: a directory that
	// does not exist on the node fails the check pod, an error, never an
	// answer). Only with privileged: false (the privileged check sees the
	// whole node already). At most 8. Defaults to none.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8
	HostPaths []HostPathMount `json:"hostPaths,omitempty"`
}

// HostPathMount is one node directory the unprivileged check sees.
type HostPathMount struct {
	// Path is the directory on the node: absolute, clean (no "..", no
	// "//", no trailing "/"), not "/". Mount the directory that holds a
	// file, not the file (kured's sentinel /var/run/reboot-required:
	// path /var/run): the mount then shows the file as it appears and
	// goes, and a missing file is never created as a directory.
	// +kubebuilder:validation:MinLength=2
	// +kubebuilder:validation:MaxLength=4096
	// +kubebuilder:validation:XValidation:rule="self.startsWith('/')",message="must be an absolute path"
	// +kubebuilder:validation:XValidation:rule="!self.contains('/../') && !self.endsWith('/..')",message="must not contain '..'"
	Path string `json:"path"`
	// MountPath is where the check sees it in its pod: absolute, clean,
	// not "/" and not inside or around another entry's mountPath.
	// Defaults to Path.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	MountPath string `json:"mountPath,omitempty"`
}

// CheckPrivileged reports whether spec.checkScript runs in the privileged
// run pod: spec.check.privileged, true when unset.
func (s *NodeScriptSpec) CheckPrivileged() bool {
	return s.Check == nil || s.Check.Privileged == nil || *s.Check.Privileged
}

// MountPathOrDefault is m.MountPath, or m.Path when it is empty.
func (m HostPathMount) MountPathOrDefault() string {
	if m.MountPath != "" {
		return m.MountPath
	}
	return m.Path
}
