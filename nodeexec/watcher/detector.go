package watcher

import (
	"fmt"
	"strconv"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/internal/nodescript"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/podexec"
	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// The unprivileged check pod (spec.check.privileged: false).
const (
	// checkUser is the user and group the unprivileged check runs as:
	// 65534, nobody. It reads what every user may read (kured's sentinel
	// /var/run/reboot-required is 0644), and cannot use what only root or
	// root's group may: the container runtime's socket (0660 root:root)
	// among the node directories mounted read-only, since a read-only
	// mount does not stop a connect(2) to a socket in it.
	checkUser int64 = 65534
	// checkVolumePrefix names the volumes of spec.check.hostPaths: the
	// prefix and the entry's index.
	checkVolumePrefix = "check-host-"
)

// unprivilegedCheckPod is the pod that runs spec.checkScript when
// spec.check.privileged is false: req (the script, env, secretEnv and
// timeout RunPod gives every pod) run as `sh -c SCRIPT` in RunImage(spec),
// on req.Node, named name, created at now, in RunNamespace(spec), with the
// labels and annotations of every nodeexec pod (the run ID is the spec
// hash). The pod is the watcher's own, not the backend's, whatever
// spec.backend.name is, and holds no privilege:
//
//   - not privileged; no hostPID, hostNetwork or hostIPC (its PID 1 is its
//     own shell; it sees none of the node's processes or interfaces);
//   - allowPrivilegeEscalation false, every capability dropped,
//     seccompProfile RuntimeDefault, a read-only root filesystem;
//   - runAsNonRoot, user and group CheckUser (65534), no supplemental
//     groups;
//   - no service account token (automountServiceAccountToken false);
//   - the node directories spec.check.hostPaths names, each a hostPath
//     volume of type Directory (a missing directory keeps the pod from
//     starting rather than being created on the node), mounted readOnly
//     with recursiveReadOnly IfPossible (the mounts under it read-only too
//     where the runtime supports it) at its mountPath.
//
// Pod Security: without hostPaths the pod meets the "restricted" level;
// with hostPaths it needs a namespace at "privileged", since "baseline"
// already forbids every hostPath volume (read-only or not). It is a pure
// function; errors name the field.
func unprivilegedCheckPod(spec *v1alpha1.NodeScriptSpec, req nodeexec.Request, name string, now time.Time) (*corev1.Pod, error) {
	if err := req.Validate(); err != nil {
		return nil, fmt.Errorf("spec.check: %w", err)
	}
	img, err := runImage(spec)
	if err != nil {
		return nil, err
	}
	var secrets []string
	for _, r := range spec.Backend.ImagePullSecrets {
		secrets = append(secrets, r.Name)
	}
	argv := []string{"sh", "-c", req.Script}
	pod, err := podexec.HolderPod(podexec.HolderPodSpec{
		PodBase: podexec.PodBase{
			Node:             req.Node,
			Name:             name,
			Namespace:        nodescript.RunNamespace(spec),
			RunID:            v1alpha1.SpecHash(spec),
			Image:            img,
			ImagePullPolicy:  podexec.DefaultPullPolicy,
			ImagePullSecrets: secrets,
			Requests:         podexec.DefaultRequests(),
			Env:              req.Env,
			SecretEnv:        req.SecretEnv,
			Now:              now,
			Deadline:         now.Add(req.EffectiveTimeout() + podexec.DeadlineSlack),
			Command:          argv,
		},
		Container: v1alpha1.CheckContainer,
	})
	if err != nil {
		return nil, fmt.Errorf("spec.check: %w", err)
	}
	pod = podexec.RunToCompletion(pod, argv)
	pod.Spec.HostPID, pod.Spec.HostNetwork, pod.Spec.HostIPC = false, false, false
	pod.Spec.AutomountServiceAccountToken = ptr.To(false)
	pod.Spec.SecurityContext = &corev1.PodSecurityContext{
		RunAsNonRoot:   ptr.To(true),
		RunAsUser:      ptr.To(checkUser),
		RunAsGroup:     ptr.To(checkUser),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	c := &pod.Spec.Containers[0]
	c.SecurityContext = &corev1.SecurityContext{
		Privileged:               ptr.To(false),
		AllowPrivilegeEscalation: ptr.To(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		ReadOnlyRootFilesystem:   ptr.To(true),
		RunAsNonRoot:             ptr.To(true),
	}
	if spec.Check != nil {
		for i, m := range spec.Check.HostPaths {
			vol := checkVolumePrefix + strconv.Itoa(i)
			pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: vol, VolumeSource: corev1.VolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: m.Path, Type: ptr.To(corev1.HostPathDirectory)},
			}})
			c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{
				Name: vol, MountPath: m.MountPathOrDefault(), ReadOnly: true, RecursiveReadOnly: ptr.To(corev1.RecursiveReadOnlyIfPossible),
			})
		}
	}
	return pod, nil
}
