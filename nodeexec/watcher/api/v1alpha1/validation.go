package v1alpha1

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/distribution/reference"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	"github.com/nodeexec/nodeexec/internal/durationcheck"
	"github.com/nodeexec/nodeexec/nodeexec/backends"
)

// Limits of a NodeScript's fields (see Validate).
const (
	// MaxScriptBytes is the largest script, verify or rollback script, in
	// bytes: each runs as one argument of `sh -c`, and Linux refuses to exec
	// an argument of 128 KiB or more (MAX_ARG_STRLEN; execve fails with E2BIG).
	MaxScriptBytes = 128<<10 - 1
	// MaxTimeout is the largest spec.timeout: the run pod's
	// activeDeadlineSeconds (the timeout plus 30 s) must stay within the
	// API's limit of 2147483647 seconds (about 68 years).
	MaxTimeout = (math.MaxInt32 - 60) * time.Second
	// MinReapplyInterval is the shortest spec.reapply.interval: drift
	// correction, not a loop.
	MinReapplyInterval = time.Minute
	// ExitRebootRequired is the script exit code that means "succeeded,
	// and the node must reboot" under spec.reboot: IfRequired (any other
	// policy reads it as a failure).
	ExitRebootRequired = 194
)

// Values of spec.reboot.
const (
	RebootNever      = "Never"
	RebootIfRequired = "IfRequired"
	RebootAlways     = "Always"
)

// Profiles are the values of spec.backend.profile: kubectl debug's profiles.
func Profiles() []string {
	return []string{"legacy", "general", "baseline", "restricted", "netadmin", "sysadmin"}
}

// TaintEffects are the values of spec.startupTaint.effect.
func TaintEffects() []string {
	return []string{string(corev1.TaintEffectNoSchedule), string(corev1.TaintEffectPreferNoSchedule), string(corev1.TaintEffectNoExecute)}
}

// Backends are the values of spec.backend.name: the backends the watcher
// may run, read from the registration table (backends.WatcherNames; those
// that reach a container are for one-shot runs).
func Backends() []string { return backends.WatcherNames() }

// Validate checks a NodeScript as `nodeexec apply` and the watcher see it,
// beyond what the CRD's OpenAPI schema can express. Each error names its
// field (e.g. spec.rollout.maxConcurrency). The checks run per field group,
// in this order; the errors come in the same order.
func Validate(ns *NodeScript) field.ErrorList {
	spec := field.NewPath("spec")
	s := &ns.Spec
	errs := validateMetadata(ns)
	errs = append(errs, validateNodeSelector(s, spec)...)
	errs = append(errs, validateScriptSource(s, spec)...)
	errs = append(errs, validateScripts(s, spec)...)
	errs = append(errs, validateExcludeNodes(s, spec)...)
	errs = append(errs, validateOnFailure(s, spec)...)
	errs = append(errs, validateBackend(s, spec.Child("backend"))...)
	errs = append(errs, validateEnv(s, spec)...)
	if w := s.Window; w != nil {
		errs = append(errs, validateWindow(w, spec.Child("window"))...)
	}
	errs = append(errs, validateCalendarFields(spec, s)...)
	errs = append(errs, validateBlockingPodSelector(s, spec)...)
	errs = append(errs, validateMaintenance(s, spec)...)
	errs = append(errs, validatePostComplete(spec, s)...)
	errs = append(errs, validateAnnotationGates(spec.Child("hooks"), s.Hooks)...)
	errs = append(errs, validateNotify(spec.Child("notify"), s.Notify)...)
	errs = append(errs, validateReboot(s, spec)...)
	errs = append(errs, validateReapply(s, spec)...)
	errs = append(errs, validateLifecycle(spec, s)...)
	errs = append(errs, validateTimeout(s, spec)...)
	errs = append(errs, validateDurations(s, spec)...)
	errs = append(errs, validateBackoff(s, spec)...)
	errs = append(errs, validateRollout(s, spec.Child("rollout"))...)
	errs = append(errs, validateRetryLimit(s, spec)...)
	errs = append(errs, validateGates(spec.Child("gates"), s.Gates)...)
	errs = append(errs, validateStartupTaint(s, spec)...)
	errs = append(errs, validateBudgetFields(spec, s)...)
	errs = append(errs, validateAnalysis(s, spec)...)
	errs = append(errs, validateForecast(s, spec)...)
	errs = append(errs, validateHooks(spec, s)...)
	return errs
}

// validateMetadata: the name is a DNS-1123 label (it labels pods).
func validateMetadata(ns *NodeScript) field.ErrorList {
	if ns.Name == "" {
		return nil
	}
	if msgs := validation.IsDNS1123Label(ns.Name); len(msgs) > 0 {
		return field.ErrorList{field.Invalid(field.NewPath("metadata", "name"), ns.Name, strings.Join(msgs, "; ")+" (the name labels the watcher's pods, so at most 63 characters)")}
	}
	return nil
}

// validateNodeSelector: spec.nodeSelector parses.
func validateNodeSelector(s *NodeScriptSpec, spec *field.Path) field.ErrorList {
	if _, err := metav1.LabelSelectorAsSelector(&s.NodeSelector); err != nil {
		return field.ErrorList{field.Invalid(spec.Child("nodeSelector"), s.NodeSelector, err.Error())}
	}
	return nil
}

// validateScriptSource: exactly one of script and scriptFrom, and
// scriptFrom's reference well formed.
func validateScriptSource(s *NodeScriptSpec, spec *field.Path) field.ErrorList {
	switch f := s.ScriptFrom; {
	case f == nil && strings.TrimSpace(s.Script) == "":
		return field.ErrorList{field.Required(spec.Child("script"), "give the script to run on each node (or scriptFrom: a ConfigMap's or Secret's key)")}
	case f != nil && s.Script != "" && s.ScriptDigest == "": // (the watcher's resolved copy has both)
		return field.ErrorList{field.Invalid(spec.Child("scriptFrom"), "(set)", "set exactly one of script and scriptFrom")}
	case f != nil && (f.ConfigMapKeyRef == nil) == (f.SecretKeyRef == nil):
		return field.ErrorList{field.Invalid(spec.Child("scriptFrom"), "(set)", "set exactly one of configMapKeyRef and secretKeyRef")}
	case f != nil:
		p, ref := spec.Child("scriptFrom", "configMapKeyRef"), f.ConfigMapKeyRef
		if ref == nil {
			p, ref = spec.Child("scriptFrom", "secretKeyRef"), f.SecretKeyRef
		}
		var errs field.ErrorList
		if msgs := validation.IsDNS1123Subdomain(ref.Name); len(msgs) > 0 {
			errs = append(errs, field.Invalid(p.Child("name"), ref.Name, strings.Join(msgs, "; ")+": name an object in spec.backend.namespace"))
		}
		if msgs := validation.IsConfigMapKey(ref.Key); len(msgs) > 0 {
			errs = append(errs, field.Invalid(p.Child("key"), ref.Key, strings.Join(msgs, "; ")))
		}
		return errs
	}
	return nil
}

// validateScripts: each script's size and bytes, checkScript not only
// blanks, and spec.check.
func validateScripts(s *NodeScriptSpec, spec *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, sc := range []struct{ name, text string }{{"script", s.Script}, {"checkScript", s.CheckScript}, {"verifyScript", s.VerifyScript}, {"rollbackScript", s.RollbackScript}} {
		errs = append(errs, validateScript(spec.Child(sc.name), sc.text)...)
	}
	if s.CheckScript != "" && strings.TrimSpace(s.CheckScript) == "" {
		errs = append(errs, field.Invalid(spec.Child("checkScript"), s.CheckScript, "only blanks: give a command that exits 0 when the node does not need spec.script and 1 when it does, or leave checkScript out"))
	}
	return append(errs, validateCheck(s, spec)...)
}

// validateExcludeNodes: each entry is a node name.
func validateExcludeNodes(s *NodeScriptSpec, spec *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, n := range s.ExcludeNodes {
		if msgs := validation.IsDNS1123Subdomain(n); len(msgs) > 0 {
			errs = append(errs, field.Invalid(spec.Child("excludeNodes").Index(i), n, "not a node name: "+strings.Join(msgs, "; ")))
		}
	}
	return errs
}

// validateOnFailure: rollback needs rollbackScript, drain needs cordon.
func validateOnFailure(s *NodeScriptSpec, spec *field.Path) field.ErrorList {
	var errs field.ErrorList
	if s.OnFailure.Rollback && strings.TrimSpace(s.RollbackScript) == "" {
		errs = append(errs, field.Required(spec.Child("rollbackScript"), "onFailure.rollback is set: give the script that undoes spec.script"))
	}
	if s.OnFailure.Drain && !s.OnFailure.Cordon {
		errs = append(errs, field.Invalid(spec.Child("onFailure", "drain"), true, "drain needs cordon: set onFailure.cordon too"))
	}
	return errs
}

// profileBackends are the backends a NodeScript may name that read a
// kubectl debug profile (backends.FlagUsers("profile") the watcher runs).
func profileBackends() []string {
	var out []string
	for _, n := range backends.FlagUsers("profile") {
		if slices.Contains(Backends(), n) {
			out = append(out, n)
		}
	}
	return out
}

// validateBackend checks spec.backend (bp): its name, namespace, profile,
// image, namespaces and image pull secrets.
func validateBackend(s *NodeScriptSpec, bp *field.Path) field.ErrorList {
	errs := validateBackendName(s.Backend.Name, bp.Child("name"))
	if ns := s.Backend.Namespace; ns != "" {
		if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
			errs = append(errs, field.Invalid(bp.Child("namespace"), ns, strings.Join(msgs, "; ")))
		}
	}
	if p := s.Backend.Profile; p != "" && s.Backend.Name != "" && !slices.Contains(profileBackends(), s.Backend.Name) {
		errs = append(errs, field.Invalid(bp.Child("profile"), p, "a profile applies to the "+strings.Join(profileBackends(), " or ")+" backend only"))
	} else if p != "" && !slices.Contains(Profiles(), p) {
		errs = append(errs, field.NotSupported(bp.Child("profile"), p, Profiles()))
	}
	if img := s.Backend.Image; img != "" {
		if _, err := reference.ParseNormalizedNamed(img); err != nil {
			errs = append(errs, field.Invalid(bp.Child("image"), img, "not a valid image reference ("+err.Error()+"): give NAME[:TAG][@DIGEST], such as busybox:1.36"))
		}
	}
	for i, n := range s.Backend.Namespaces {
		if !slices.Contains([]string{"mnt", "uts", "ipc", "net", "pid", "cgroup", "user"}, n) {
			errs = append(errs, field.NotSupported(bp.Child("namespaces").Index(i), n, []string{"mnt", "uts", "ipc", "net", "pid", "cgroup", "user"}))
		}
	}
	for i, r := range s.Backend.ImagePullSecrets {
		if msgs := validation.IsDNS1123Subdomain(r.Name); len(msgs) > 0 {
			errs = append(errs, field.Invalid(bp.Child("imagePullSecrets").Index(i).Child("name"), r.Name,
				strings.Join(msgs, "; ")+": name a docker-registry secret in spec.backend.namespace"))
		}
	}
	return errs
}

// validateBackendName: spec.backend.name (p) is empty or one of Backends.
func validateBackendName(name string, p *field.Path) field.ErrorList {
	if name != "" && !slices.Contains(Backends(), name) {
		return field.ErrorList{field.NotSupported(p, name, Backends())}
	}
	return nil
}

// validateEnv: spec.secretEnv's and spec.configMapEnv's references.
func validateEnv(s *NodeScriptSpec, spec *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, e := range s.SecretEnv {
		errs = append(errs, validateEnvRef(spec.Child("secretEnv").Index(i), "secret", e.Secret, e.Key, ": name a Secret in spec.backend.namespace")...)
	}
	for i, e := range s.ConfigMapEnv {
		errs = append(errs, validateEnvRef(spec.Child("configMapEnv").Index(i), "configMap", e.ConfigMap, e.Key, ": name a ConfigMap in spec.backend.namespace")...)
	}
	return errs
}

// validateEnvRef: one env entry at p, naming object name (field obj) and
// optionally a key.
func validateEnvRef(p *field.Path, obj, name, key, hint string) field.ErrorList {
	var errs field.ErrorList
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		errs = append(errs, field.Invalid(p.Child(obj), name, strings.Join(msgs, "; ")+hint))
	}
	if key != "" {
		if msgs := validation.IsConfigMapKey(key); len(msgs) > 0 {
			errs = append(errs, field.Invalid(p.Child("key"), key, strings.Join(msgs, "; ")))
		}
	}
	return errs
}

// validateBlockingPodSelector: parses, and selects something.
func validateBlockingPodSelector(s *NodeScriptSpec, spec *field.Path) field.ErrorList {
	b := s.BlockingPodSelector
	if b == nil {
		return nil
	}
	p := spec.Child("blockingPodSelector")
	if _, err := metav1.LabelSelectorAsSelector(b); err != nil {
		return field.ErrorList{field.Invalid(p, b, err.Error())}
	}
	if len(b.MatchLabels) == 0 && len(b.MatchExpressions) == 0 {
		return field.ErrorList{field.Invalid(p, "{}", "matches every pod, so no node would ever start: give matchLabels or matchExpressions (e.g. matchLabels: {app: batch-job}), or leave it out")}
	}
	return nil
}

// validateMaintenance checks spec.maintenance: drain needs cordon, the
// drain's selector and grace period, maxUnavailable, silences, drains.
func validateMaintenance(s *NodeScriptSpec, spec *field.Path) field.ErrorList {
	m := s.Maintenance
	if m == nil {
		return nil
	}
	mp := spec.Child("maintenance")
	var errs field.ErrorList
	if m.Drain != nil {
		errs = validateMaintenanceDrain(m, mp)
	}
	if m.MaxUnavailable != nil {
		errs = append(errs, countOrPercent(mp.Child("maxUnavailable"), *m.MaxUnavailable, 1)...)
	}
	errs = append(errs, validateSilences(m, mp)...)
	if !m.Cordon && m.MaxUnavailable == nil {
		errs = append(errs, field.Required(mp, "set cordon: true (and drain), or maxUnavailable; or leave maintenance out"))
	}
	return append(errs, validateDrains(m, mp)...)
}

// validateMaintenanceDrain checks spec.maintenance.drain (set).
func validateMaintenanceDrain(m *MaintenanceSpec, mp *field.Path) field.ErrorList {
	var errs field.ErrorList
	if !m.Cordon {
		errs = append(errs, field.Invalid(mp.Child("cordon"), m.Cordon, "maintenance.drain needs cordon: true (a drained node must not get new pods)"))
	}
	if m.Drain.PodSelector != "" {
		if _, err := labels.Parse(m.Drain.PodSelector); err != nil {
			errs = append(errs, field.Invalid(mp.Child("drain", "podSelector"), m.Drain.PodSelector, "want a label selector (kubectl syntax, e.g. app!=monitoring): "+err.Error()))
		}
	}
	if m.Drain.GracePeriodSeconds != nil && *m.Drain.GracePeriodSeconds < 0 {
		errs = append(errs, field.Invalid(mp.Child("drain", "gracePeriodSeconds"), *m.Drain.GracePeriodSeconds, "must be 0 or more, or left out for each pod's own"))
	}
	return errs
}

// validateReboot checks spec.reboot, rebootSentinel, rebootCommand and
// rebootTimeout.
func validateReboot(s *NodeScriptSpec, spec *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch s.Reboot {
	case "", RebootNever, RebootIfRequired, RebootAlways:
	default:
		errs = append(errs, field.NotSupported(spec.Child("reboot"), s.Reboot, []string{RebootNever, RebootIfRequired, RebootAlways}))
	}
	if p := s.RebootSentinel; p != "" && (!strings.HasPrefix(p, "/") || strings.ContainsAny(p, "\x00\n")) {
		errs = append(errs, field.Invalid(spec.Child("rebootSentinel"), p, "want an absolute path on the node, e.g. /var/run/reboot-required"))
	}
	if s.RebootCommand != "" && strings.TrimSpace(s.RebootCommand) == "" {
		errs = append(errs, field.Invalid(spec.Child("rebootCommand"), s.RebootCommand, "only blanks: give the command that reboots the node, or leave it out for systemctl reboot"))
	}
	errs = append(errs, validateScript(spec.Child("rebootCommand"), s.RebootCommand)...)
	if s.RebootTimeout != nil && s.RebootTimeout.Duration <= 0 {
		errs = append(errs, field.Invalid(spec.Child("rebootTimeout"), s.RebootTimeout.Duration.String(), "must be positive, e.g. 15m"))
	}
	return errs
}

// validateReapply: an interval of at least MinReapplyInterval, and
// something to reapply on.
func validateReapply(s *NodeScriptSpec, spec *field.Path) field.ErrorList {
	r := s.Reapply
	switch {
	case r == nil:
	case r.Interval != nil && r.Interval.Duration < MinReapplyInterval:
		return field.ErrorList{field.Invalid(spec.Child("reapply", "interval"), r.Interval.Duration.String(),
			fmt.Sprintf("must be at least %s, e.g. 24h (or leave it out)", MinReapplyInterval))}
	case !r.OnReboot && r.Interval == nil && r.Schedule == "":
		return field.ErrorList{field.Required(spec.Child("reapply"), "set onReboot: true, interval (e.g. 24h), schedule (e.g. '0 3 * * *'), or several; or leave reapply out")}
	}
	return nil
}

// validateTimeout: spec.timeout positive and at most MaxTimeout.
func validateTimeout(s *NodeScriptSpec, spec *field.Path) field.ErrorList {
	switch {
	case s.Timeout == nil:
	case s.Timeout.Duration <= 0:
		return field.ErrorList{field.Invalid(spec.Child("timeout"), s.Timeout.Duration.String(), "must be positive, e.g. 10m")}
	case s.Timeout.Duration > MaxTimeout:
		return field.ErrorList{field.Invalid(spec.Child("timeout"), s.Timeout.Duration.String(), fmt.Sprintf("must be at most %s (the pod's activeDeadlineSeconds limit)", MaxTimeout))}
	}
	return nil
}

// validateDurations: the durations that may be 0 are not negative.
func validateDurations(s *NodeScriptSpec, spec *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, d := range []struct {
		path *field.Path
		d    *metav1.Duration
	}{
		{spec.Child("rollout", "soakTime"), s.Rollout.SoakTime},
		{spec.Child("onFailure", "drainTimeout"), s.OnFailure.DrainTimeout},
		{spec.Child("retry", "initialBackoff"), s.Retry.InitialBackoff},
		{spec.Child("retry", "maxBackoff"), s.Retry.MaxBackoff},
		{spec.Child("maintenance", "drain", "timeout"), maintenanceDrainTimeout(s)},
	} {
		if d.d != nil && d.d.Duration < 0 {
			errs = append(errs, field.Invalid(d.path, d.d.Duration.String(), "must be 0 or more, e.g. 30s"))
		}
	}
	return errs
}

// validateBackoff: retry.initialBackoff at most retry.maxBackoff (as set,
// or DefaultMaxBackoff).
func validateBackoff(s *NodeScriptSpec, spec *field.Path) field.ErrorList {
	ib := s.Retry.InitialBackoff
	if ib == nil || ib.Duration < 0 {
		return nil
	}
	// runs.go caps every pause at maxBackoff: a larger first pause
	// would silently become maxBackoff.
	maxB, which := DefaultMaxBackoff, "its default"
	if mb := s.Retry.MaxBackoff; mb != nil {
		maxB, which = mb.Duration, "as set"
	}
	if maxB >= 0 && ib.Duration > maxB {
		return field.ErrorList{field.Invalid(spec.Child("retry", "initialBackoff"), ib.Duration.String(),
			fmt.Sprintf("must be at most spec.retry.maxBackoff (%s, %s), which caps every pause: lower initialBackoff or raise maxBackoff", maxB, which))}
	}
	return nil
}

// validateRollout checks spec.rollout (r): canary, promotion, promoteTo,
// batches, maxConcurrency and maxFailures.
func validateRollout(s *NodeScriptSpec, r *field.Path) field.ErrorList {
	var errs field.ErrorList
	if s.Rollout.Canary != nil && *s.Rollout.Canary < 0 {
		errs = append(errs, field.Invalid(r.Child("canary"), *s.Rollout.Canary, "must be 0 or more"))
	}
	if p := s.Rollout.Promotion; p != "" && p != PromotionAutomatic && p != PromotionManual {
		errs = append(errs, field.NotSupported(r.Child("promotion"), p, []string{PromotionAutomatic, PromotionManual}))
	}
	if to := s.Rollout.PromoteTo; to != "" && to != "all" {
		if _, err := labels.Parse(to); err != nil {
			errs = append(errs, field.Invalid(r.Child("promoteTo"), to, "want \"all\" or a label selector: "+err.Error()))
		}
	}
	for i, b := range s.Rollout.Batches {
		errs = append(errs, countOrPercent(r.Child("batches").Index(i), b, 1)...)
	}
	if c := s.Rollout.MaxConcurrency; c != nil {
		errs = append(errs, countOrPercent(r.Child("maxConcurrency"), *c, 1)...)
	}
	if m := s.Rollout.MaxFailures; m != nil {
		errs = append(errs, countOrPercent(r.Child("maxFailures"), *m, 0)...)
	}
	return errs
}

// validateRetryLimit: spec.retry.limit not negative.
func validateRetryLimit(s *NodeScriptSpec, spec *field.Path) field.ErrorList {
	if l := s.Retry.Limit; l != nil && *l < 0 {
		return field.ErrorList{field.Invalid(spec.Child("retry", "limit"), *l, "must be 0 or more")}
	}
	return nil
}

// validateStartupTaint: a qualified key, a label value, a known effect.
func validateStartupTaint(s *NodeScriptSpec, spec *field.Path) field.ErrorList {
	t := s.StartupTaint
	if t == nil {
		return nil
	}
	tp := spec.Child("startupTaint")
	var errs field.ErrorList
	if t.Key == "" {
		errs = append(errs, field.Required(tp.Child("key"), "name the taint new nodes register with"))
	} else if msgs := validation.IsQualifiedName(t.Key); len(msgs) > 0 {
		errs = append(errs, field.Invalid(tp.Child("key"), t.Key, strings.Join(msgs, "; ")))
	}
	if t.Value != "" {
		if msgs := validation.IsValidLabelValue(t.Value); len(msgs) > 0 {
			errs = append(errs, field.Invalid(tp.Child("value"), t.Value, strings.Join(msgs, "; ")))
		}
	}
	if !slices.Contains(TaintEffects(), string(t.Effect)) {
		errs = append(errs, field.NotSupported(tp.Child("effect"), t.Effect, TaintEffects()))
	}
	return errs
}

// validateScript: at most MaxScriptBytes, no NUL byte (an exec argument
// ends at the first NUL: the script would be cut there).
func validateScript(p *field.Path, text string) field.ErrorList {
	var errs field.ErrorList
	if len(text) > MaxScriptBytes {
		errs = append(errs, field.Invalid(p, fmt.Sprintf("(%d bytes)", len(text)), fmt.Sprintf("at most %d bytes: Linux refuses to exec a longer argument (E2BIG); ship the rest as a file (an image, or a script that downloads it)", MaxScriptBytes)))
	}
	if i := strings.IndexByte(text, 0); i >= 0 {
		errs = append(errs, field.Invalid(p, fmt.Sprintf("(NUL at byte %d)", i), "contains a NUL byte, which would cut the script there"))
	}
	return errs
}

// countOrPercent accepts a count >= lo or a percentage from lo% to 100%.
func countOrPercent(p *field.Path, v intstr.IntOrString, lo int) field.ErrorList {
	if v.Type == intstr.Int {
		if int(v.IntVal) < lo {
			return field.ErrorList{field.Invalid(p, v.IntVal, fmt.Sprintf("must be %d or more, or a percentage such as 20%%", lo))}
		}
		return nil
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(&v, 100, false)
	if err != nil {
		return field.ErrorList{field.Invalid(p, v.StrVal, "want a number or a percentage such as 20%")}
	}
	if n < lo || n > 100 {
		return field.ErrorList{field.Invalid(p, v.StrVal, fmt.Sprintf("want a percentage from %d%% to 100%%", lo))}
	}
	return nil
}

// ValidatePromotion refuses to promote a halted rollout: a halt means the
// error budget or a canary said stop; fix the spec (which starts a new
// rollout) instead.
func ValidatePromotion(ns *NodeScript, to string) error {
	if meta := findCondition(ns.Status.Conditions, ConditionHalted); meta != nil && meta.Status == metav1.ConditionTrue {
		return fmt.Errorf("nodescript %q is halted (%s: %s): promotion refused; change the spec to start a new rollout", ns.Name, meta.Reason, meta.Message)
	}
	if to != "all" {
		if _, err := labels.Parse(to); err != nil {
			return fmt.Errorf("--to %q: want \"all\" or a label selector: %w", to, err)
		}
	}
	return nil
}

func findCondition(cs []metav1.Condition, t string) *metav1.Condition {
	for i := range cs {
		if cs[i].Type == t {
			return &cs[i]
		}
	}
	return nil
}

// SpecHash identifies what a node runs: the scripts, the backend (but not
// its image pull secrets, which are credentials) and the timeout, not the
// rollout controls (changing the pace reruns nothing). A
// node annotated with this hash is not run again; a changed hash runs again.
// The result is the first 16 hex digits of a SHA-256.
func SpecHash(s *NodeScriptSpec) string {
	backend := s.Backend
	backend.ImagePullSecrets = nil
	b, _ := json.Marshal(struct {
		Script, VerifyScript, RollbackScript string
		Backend                              BackendSpec
		Timeout                              *metav1.Duration
		SecretEnv                            []SecretEnvSource    `json:",omitempty"`
		CheckScript                          string               `json:",omitempty"`
		ScriptFrom                           *ScriptSource        `json:",omitempty"`
		ScriptDigest                         string               `json:",omitempty"`
		ConfigMapEnv                         []ConfigMapEnvSource `json:",omitempty"`
		Check                                *CheckSpec           `json:",omitempty"`
	}{s.Script, s.VerifyScript, s.RollbackScript, backend, s.Timeout, s.SecretEnv, s.CheckScript, s.ScriptFrom, s.ScriptDigest, s.ConfigMapEnv, s.Check})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:16]
}

// durationFields are the spec's duration fields, as paths in a document.
var durationFields = [][]string{
	{"spec", "timeout"},
	{"spec", "rollout", "soakTime"},
	{"spec", "onFailure", "drainTimeout"},
	{"spec", "retry", "initialBackoff"},
	{"spec", "retry", "maxBackoff"},
	{"spec", "reapply", "interval"},
	{"spec", "rebootTimeout"},
	{"spec", "maintenance", "drain", "timeout"},
	{"spec", "rollout", "postCompleteDelay"},
	{"spec", "rollout", "analysis", "interval"},
	{"spec", "rollout", "windowMargin"},
	{"spec", "hooks", "preNode", "timeout"},
	{"spec", "hooks", "postNode", "timeout"},
	{"spec", "hooks", "preRollout", "timeout"},
	{"spec", "hooks", "postRollout", "timeout"},
	{"spec", "hooks", "beforeRun", "timeout"},
	{"spec", "hooks", "afterRun", "timeout"},
}

// ValidateDurationSyntax checks the duration fields of a NodeScript
// document (YAML or JSON) before it is decoded, so that `timeout: abc` is
// refused naming spec.timeout (the decoder's own error names no field).
// Other problems are left to decoding and Validate.
func ValidateDurationSyntax(doc []byte) field.ErrorList {
	var m map[string]any
	if err := yaml.Unmarshal(doc, &m); err != nil {
		return nil
	}
	errs := gateDurationSyntax(m)
	for _, path := range durationFields {
		var v any = m
		for _, k := range path {
			obj, ok := v.(map[string]any)
			if !ok {
				v = nil
				break
			}
			v = obj[k]
		}
		if v == nil {
			continue
		}
		p := field.NewPath(path[0], path[1:]...)
		str, ok := v.(string)
		if !ok {
			errs = append(errs, field.Invalid(p, v, "want a duration string such as \"30s\", \"5m\" or \"1h\""))
			continue
		}
		if _, err := time.ParseDuration(str); err != nil && durationcheck.Overflows(str) {
			limit := time.Duration(math.MaxInt64).Truncate(time.Second)
			if p.String() == "spec.timeout" {
				limit = MaxTimeout
			}
			errs = append(errs, field.Invalid(p, str, fmt.Sprintf("too large: at most %s", limit)))
		} else if err != nil {
			errs = append(errs, field.Invalid(p, str, "want a duration such as 30s, 5m or 1h (units ns, us, ms, s, m, h)"))
		}
	}
	return append(errs, silenceDurationSyntax(m)...)
}

// WindowDays are the values of spec.window.days.
func WindowDays() []string { return []string{"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"} }

// validateWindow checks a maintenance window: start and end as HH:MM, days
// among WindowDays, each once, and a time zone the IANA database knows.
func validateWindow(w *MaintenanceWindow, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, f := range []struct{ name, v string }{{"start", w.Start}, {"end", w.End}} {
		if t, err := time.Parse("15:04", f.v); err != nil || len(f.v) != 5 || t.Format("15:04") != f.v {
			errs = append(errs, field.Invalid(path.Child(f.name), f.v, "want HH:MM on a 24-hour clock, 00:00 to 23:59, e.g. 22:00"))
		}
	}
	for i, d := range w.Days {
		if !slices.Contains(WindowDays(), d) {
			errs = append(errs, field.NotSupported(path.Child("days").Index(i), d, WindowDays()))
		} else if slices.Index(w.Days, d) != i {
			errs = append(errs, field.Duplicate(path.Child("days").Index(i), d))
		}
	}
	if _, err := time.LoadLocation(w.TimeZone); err != nil || strings.EqualFold(w.TimeZone, "local") {
		errs = append(errs, field.Invalid(path.Child("timeZone"), w.TimeZone, "want an IANA time zone name, e.g. Europe/Berlin or UTC"))
	}
	return errs
}

// maintenanceDrainTimeout is spec.maintenance.drain.timeout, or nil.
func maintenanceDrainTimeout(s *NodeScriptSpec) *metav1.Duration {
	if s.Maintenance == nil || s.Maintenance.Drain == nil {
		return nil
	}
	return s.Maintenance.Drain.Timeout
}
