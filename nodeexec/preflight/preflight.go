// Package preflight checks, before anything is created, whether the cluster
// will refuse what a nodeexec backend needs: the namespace's Pod Security
// level (its pod-security.kubernetes.io/enforce label), the caller's RBAC
// permissions (one SelfSubjectAccessReview per permission), and, when the
// backend can do one, a server-side dry-run of the pod it would create; and
// that the Secrets the pod takes environment variables from exist and hold
// the keys it names.
//
// A Report says what was found; Report.Err is nil when nothing will be
// refused, and otherwise an error wrapping nodeexec.ErrForbidden that names
// the backend, each missing permission or Pod Security level, and what would
// work instead (or, when only Secrets are missing, an error wrapping the API
// server's NotFound). Check creates nothing but SelfSubjectAccessReviews (which
// are not stored) and makes only dry-run creates.
//
// CheckRequests, apart from Check and with no API call, compares a pod's
// resource requests with the target nodes' allocatable resources.
package preflight

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	authv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeexec/nodeexec/nodeexec"
)

// Pod Security levels, from the most permissive to the strictest, and the
// namespace labels that set them
// (https://kubernetes.io/docs/concepts/security/pod-security-admission/).
const (
	LevelPrivileged = "privileged"
	LevelBaseline   = "baseline"
	LevelRestricted = "restricted"

	// LabelEnforce is the namespace label whose level the API server enforces on pod creation.
	LabelEnforce = "pod-security.kubernetes.io/enforce"
	// LabelEnforceVersion pins the policy version of LabelEnforce ("latest" when absent).
	LabelEnforceVersion = "pod-security.kubernetes.io/enforce-version"
)

// Levels are the Pod Security levels, from the most permissive to the strictest.
func Levels() []string { return []string{LevelPrivileged, LevelBaseline, LevelRestricted} }

// Allows reports whether a namespace enforcing level nsLevel admits a pod
// that needs podLevel. An empty nsLevel (no label) is treated as privileged,
// the API server's default when no admission configuration says otherwise.
// An unknown level allows nothing and is allowed nowhere.
func Allows(nsLevel, podLevel string) bool {
	if nsLevel == "" {
		nsLevel = LevelPrivileged
	}
	ns, pod := slices.Index(Levels(), nsLevel), slices.Index(Levels(), podLevel)
	return ns >= 0 && pod >= 0 && ns <= pod
}

// Permission is nodeexec.Permission, one RBAC permission (a backend's
// Requirements list them).
type Permission = nodeexec.Permission

// Building blocks of the backends' Requirements.Permissions.

// PodLifecycle: create a pod, follow it (the shared watch), delete it.
func PodLifecycle() []Permission {
	return []Permission{
		{Verb: "create", Resource: "pods"}, {Verb: "get", Resource: "pods"}, {Verb: "list", Resource: "pods"},
		{Verb: "watch", Resource: "pods"}, {Verb: "delete", Resource: "pods"},
	}
}

// Exec runs a command in a pod's container (WebSocket exec is authorised as create).
func Exec() []Permission {
	return []Permission{{Verb: "create", Resource: "pods", Subresource: "exec"}}
}

// Attach attaches to a running container's process.
func Attach() []Permission {
	return []Permission{{Verb: "create", Resource: "pods", Subresource: "attach"}}
}

// EphemeralContainers adds an ephemeral container to an existing pod.
func EphemeralContainers() []Permission {
	return []Permission{{Verb: "patch", Resource: "pods", Subresource: "ephemeralcontainers"}}
}

// Events follows the kubelet's events (the Started event that triggers the first exec).
func Events() []Permission {
	return []Permission{{Verb: "list", Resource: "events"}, {Verb: "watch", Resource: "events"}}
}

// RunLease holds the run's coordination.k8s.io Lease (create it, renew it,
// delete it), which lets later invocations collect the pods of a client
// that died; collecting them needs list and delete on leases too.
func RunLease() []Permission {
	return []Permission{
		{Verb: "create", Group: "coordination.k8s.io", Resource: "leases"}, {Verb: "get", Group: "coordination.k8s.io", Resource: "leases"},
		{Verb: "update", Group: "coordination.k8s.io", Resource: "leases"}, {Verb: "delete", Group: "coordination.k8s.io", Resource: "leases"},
	}
}

// Nodes resolves the targets (the Runner lists nodes).
func Nodes() []Permission { return []Permission{{Verb: "list", Resource: "nodes", Cluster: true}} }

// Options configure Check.
type Options struct {
	// Client makes the checks: GET on the namespace (RBAC get namespaces; a
	// refusal makes the Pod Security check inconclusive, not a failure) and
	// create on selfsubjectaccessreviews.authorization.k8s.io (allowed to
	// every authenticated user by the default system:basic-user role).
	// Required.
	Client kubernetes.Interface
	// Namespace the backend creates its objects in. Required.
	Namespace string
	// Backend is the backend's name, used in messages. Required.
	Backend string
	// Permissions to check: the backend's Requirements().Permissions.
	// Required.
	Permissions []Permission
	// Variant names the backend's configuration in messages, e.g. "profile sysadmin". Optional.
	Variant string
	// Level is the Pod Security level the backend's pod needs: one of
	// Levels(). Empty skips the Pod Security check (a backend that creates no pod).
	Level string
	// Alternatives are other variants of the backend and the level each needs
	// (e.g. profile name -> level), offered when Level does not fit. Optional.
	Alternatives map[string]string
	// AlternativeFlag is how a caller picks an alternative, shown in messages
	// (e.g. "--profile"). Optional.
	AlternativeFlag string
	// DryRun, when set, asks the API server to admit the object without
	// creating it (server-side dry-run), e.g. debugpod.Backend.Preflight for
	// one node. Its error is reported in Report.DryRun. Optional.
	DryRun func(ctx context.Context) error
	// Secrets are the Secrets in Namespace the pod takes environment
	// variables from (nodeexec.Request.SecretEnv), each read once with GET
	// (RBAC get on secrets): a Secret not found, or without a key an entry
	// names, is reported before the pod is created, instead of as the
	// kubelet's CreateContainerConfigError after it. A GET refused or failed
	// for another reason (users may reference Secrets in pods without being
	// allowed to read them) leaves the check to the kubelet. Optional.
	Secrets []nodeexec.SecretEnv
}

// PermissionResult is the answer of one SelfSubjectAccessReview.
type PermissionResult struct {
	Permission
	// Allowed is the review's status.allowed.
	Allowed bool
	// Reason is the authorizer's status.reason or status.evaluationError. Optional.
	Reason string
	// Err is set when the review could not be made (then Allowed is false
	// and the permission is reported as unknown, not as missing).
	Err error
}

// Report is what Check found.
type Report struct {
	Backend, Variant, Namespace string

	// Enforce and EnforceVersion are the namespace's enforce labels ("" when
	// absent); NamespaceErr is set when the namespace could not be read.
	Enforce, EnforceVersion string
	NamespaceErr            error
	// Level is the level the backend's pod needs ("" when not checked).
	Level string
	// Fits lists the Alternatives whose level the namespace allows, sorted.
	Fits []string
	// AlternativeFlag is Options.AlternativeFlag.
	AlternativeFlag string

	// Permissions holds one result per permission checked, in order.
	Permissions []PermissionResult

	// DryRunDone is true when a dry-run was made; DryRun is its error.
	DryRunDone bool
	DryRun     error

	// SecretsChecked counts the Secrets read; SecretErrs has one error per
	// Options.Secrets entry the pod would fail on: a Secret not found
	// (wrapping the API server's NotFound) or a key it lacks. SecretsErr is
	// set when a Secret could not be read (such as RBAC refusing get on
	// secrets): the entries naming it were not checked.
	SecretsChecked int
	SecretErrs     []error
	SecretsErr     error
}

// For returns the Options that check backend b (or the backend it wraps)
// on node: its nodeexec.Requirements (namespace, Pod Security level and
// alternatives, RBAC) and, when it is a nodeexec.Preflighter, its dry-run
// create. A backend that declares no Requirements gets Options that Check
// refuses, naming it.
func For(b nodeexec.Backend, client kubernetes.Interface, node string) Options {
	o := Options{Client: client, Backend: b.Name()}
	if p, ok := nodeexec.As[nodeexec.Preflighter](b); ok {
		o.DryRun = func(ctx context.Context) error { return p.Preflight(ctx, node) }
	}
	if r, ok := nodeexec.As[nodeexec.Requirer](b); ok {
		req := r.Requirements()
		o.Namespace, o.Level, o.Permissions = req.Namespace, req.PodSecurityLevel, req.Permissions
		o.Variant, o.Alternatives, o.AlternativeFlag = strings.TrimSpace(req.VariantKind+" "+req.Variant), req.Alternatives, req.AlternativeFlag
	}
	return o
}

// Check checks o's namespace, permissions and dry-run. The error is non-nil
// only for bad Options or a cancelled ctx; refusals are in the Report (see
// Report.Err).
func Check(ctx context.Context, o Options) (*Report, error) {
	switch {
	case o.Client == nil:
		return nil, errors.New("preflight: Options.Client is nil")
	case o.Namespace == "":
		return nil, errors.New("preflight: Options.Namespace is empty")
	case o.Backend == "":
		return nil, errors.New("preflight: Options.Backend is empty")
	case o.Level != "" && !slices.Contains(Levels(), o.Level):
		return nil, fmt.Errorf("preflight: Options.Level %q: want one of %s", o.Level, strings.Join(Levels(), ", "))
	}
	perms := o.Permissions
	if len(perms) == 0 {
		return nil, fmt.Errorf("preflight: Options.Permissions is empty: give backend %s's Requirements().Permissions (see For)", o.Backend)
	}
	r := &Report{Backend: o.Backend, Variant: o.Variant, Namespace: o.Namespace, Level: o.Level, AlternativeFlag: o.AlternativeFlag}

	// The namespace read, the reviews and the dry-run are independent: one
	// round trip for all of them.
	var wg sync.WaitGroup
	if o.Level != "" {
		wg.Go(func() {
			ns, err := o.Client.CoreV1().Namespaces().Get(ctx, o.Namespace, metav1.GetOptions{})
			if err != nil {
				r.NamespaceErr = fmt.Errorf("reading namespace %q: %w", o.Namespace, err)
				return
			}
			r.Enforce, r.EnforceVersion = ns.Labels[LabelEnforce], ns.Labels[LabelEnforceVersion]
			for alt, level := range o.Alternatives {
				if Allows(r.Enforce, level) {
					r.Fits = append(r.Fits, alt)
				}
			}
			slices.Sort(r.Fits)
		})
	}
	r.Permissions = make([]PermissionResult, len(perms))
	for i, p := range perms {
		wg.Go(func() { r.Permissions[i] = review(ctx, o.Client, o.Namespace, p) })
	}
	if o.DryRun != nil {
		r.DryRunDone = true
		wg.Go(func() { r.DryRun = o.DryRun(ctx) })
	}
	secrets := map[string]*secretRead{}
	for _, e := range o.Secrets {
		if secrets[e.Secret] == nil {
			read := &secretRead{}
			secrets[e.Secret] = read
			wg.Go(func() {
				read.secret, read.err = o.Client.CoreV1().Secrets(o.Namespace).Get(ctx, e.Secret, metav1.GetOptions{})
			})
		}
	}
	wg.Wait()
	if ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	r.checkSecrets(o.Secrets, secrets)
	return r, nil
}

// secretRead is the GET of one Secret.
type secretRead struct {
	secret *corev1.Secret
	err    error
}

// checkSecrets fills SecretsChecked, SecretErrs and SecretsErr from the
// reads of entries' Secrets.
func (r *Report) checkSecrets(entries []nodeexec.SecretEnv, reads map[string]*secretRead) {
	var unread []error
	for _, read := range reads {
		switch {
		case read.err == nil || apierrors.IsNotFound(read.err):
			r.SecretsChecked++
		default:
			unread = append(unread, read.err)
		}
	}
	r.SecretsErr = errors.Join(unread...)
	absent := map[string]bool{} // Secrets already reported not found
	for i, e := range entries {
		read := reads[e.Secret]
		switch {
		case apierrors.IsNotFound(read.err):
			if !absent[e.Secret] {
				absent[e.Secret] = true
				r.SecretErrs = append(r.SecretErrs, fmt.Errorf("SecretEnv[%d]: %w in namespace %q: create the Secret there, or name one that exists", i, read.err, r.Namespace))
			}
		case read.err != nil || e.Key == "":
		default:
			if _, ok := read.secret.Data[e.Key]; !ok {
				keys := slices.Sorted(maps.Keys(read.secret.Data))
				r.SecretErrs = append(r.SecretErrs, fmt.Errorf("SecretEnv[%d]: Secret %s/%s has no key %q (its keys: %s)", i, r.Namespace, e.Secret, e.Key, strings.Join(keys, ", ")))
			}
		}
	}
}

// review asks the API server whether the caller has permission p.
func review(ctx context.Context, client kubernetes.Interface, namespace string, p Permission) PermissionResult {
	res := PermissionResult{Permission: p}
	attrs := &authv1.ResourceAttributes{Verb: p.Verb, Group: p.Group, Resource: p.Resource, Subresource: p.Subresource}
	if !p.Cluster {
		attrs.Namespace = namespace
	}
	rev, err := client.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx,
		&authv1.SelfSubjectAccessReview{Spec: authv1.SelfSubjectAccessReviewSpec{ResourceAttributes: attrs}}, metav1.CreateOptions{})
	if err != nil {
		res.Err = fmt.Errorf("SelfSubjectAccessReview for %s: %w", p, err)
		return res
	}
	res.Allowed = rev.Status.Allowed
	res.Reason = rev.Status.Reason
	if res.Reason == "" {
		res.Reason = rev.Status.EvaluationError
	}
	return res
}

// LevelFits reports whether the namespace's enforced level admits the pod:
// true when not checked or the namespace could not be read (inconclusive).
func (r *Report) LevelFits() bool {
	return r.Level == "" || r.NamespaceErr != nil || Allows(r.Enforce, r.Level)
}

// Missing lists the permissions the reviews denied.
func (r *Report) Missing() []Permission {
	var out []Permission
	for _, p := range r.Permissions {
		if !p.Allowed && p.Err == nil {
			out = append(out, p.Permission)
		}
	}
	return out
}

// Problems lists, one sentence each, what will be refused: the Pod Security
// level (with what fits instead), the missing permissions, and the dry-run's
// refusal. Empty when nothing will.
func (r *Report) Problems() []string {
	var out []string
	who := "backend " + r.Backend
	if r.Variant != "" {
		who += " with " + r.Variant
	}
	if !r.LevelFits() {
		msg := fmt.Sprintf("namespace %q enforces Pod Security level %q%s; %s needs %q",
			r.Namespace, r.Enforce, versionSuffix(r.EnforceVersion), who, r.Level)
		var fixes []string
		if len(r.Fits) > 0 {
			alt := strings.Join(r.Fits, ", ")
			if r.AlternativeFlag != "" {
				alt = r.AlternativeFlag + " " + strings.Join(r.Fits, " or "+r.AlternativeFlag+" ")
			}
			fixes = append(fixes, alt+" fits this namespace")
		}
		fixes = append(fixes, fmt.Sprintf("or use a namespace whose enforced level admits %q (-n)", r.Level),
			fmt.Sprintf("or relabel this one: kubectl label namespace %s %s=%s --overwrite", r.Namespace, LabelEnforce, r.Level))
		out = append(out, msg+": "+strings.Join(fixes, "; "))
	}
	if missing := r.Missing(); len(missing) > 0 {
		var names []string
		for _, p := range missing {
			names = append(names, p.String())
		}
		out = append(out, fmt.Sprintf("RBAC: %s needs %s in namespace %q, which the API server denies to you (SelfSubjectAccessReview)",
			who, strings.Join(names, ", "), r.Namespace))
	}
	if r.DryRun != nil {
		// The dry-run repeats a Pod Security or RBAC refusal already named; say it only when it adds something.
		if !errors.Is(r.DryRun, nodeexec.ErrForbidden) || len(out) == 0 {
			out = append(out, "dry-run create: "+r.DryRun.Error())
		}
	}
	for _, err := range r.SecretErrs {
		out = append(out, err.Error())
	}
	return out
}

// Err is nil when nothing will be refused; otherwise an error wrapping
// nodeexec.ErrForbidden (or, for a dry-run that failed for another reason,
// wrapping that error) listing Problems.
func (r *Report) Err() error {
	problems := r.Problems()
	if len(problems) == 0 {
		return nil
	}
	msg := fmt.Sprintf("preflight: %s", strings.Join(problems, "; "))
	switch {
	case !r.LevelFits() || len(r.Missing()) > 0 || errors.Is(r.DryRun, nodeexec.ErrForbidden):
		return fmt.Errorf("%w: %s", nodeexec.ErrForbidden, msg)
	case r.DryRun != nil:
		return fmt.Errorf("%s: %w", msg, r.DryRun)
	}
	// Only Secrets are missing: msg says it, and the errors unwrap to them.
	return &joined{msg: msg, errs: r.SecretErrs}
}

// joined is an error with its own message that unwraps to errs.
type joined struct {
	msg  string
	errs []error
}

func (e *joined) Error() string   { return e.msg }
func (e *joined) Unwrap() []error { return e.errs }

// String describes the report over several lines, for people (e.g. --explain).
func (r *Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "namespace %s:\n", r.Namespace)
	switch {
	case r.Level == "":
		b.WriteString("  pod security: not checked (the backend creates no pod)\n")
	case r.NamespaceErr != nil:
		fmt.Fprintf(&b, "  pod security: unknown (%v); the pod needs %q\n", r.NamespaceErr, r.Level)
	default:
		enforce := r.Enforce
		if enforce == "" {
			enforce = "no " + LabelEnforce + " label (the cluster default, privileged unless configured)"
		} else {
			enforce = fmt.Sprintf("enforces %q%s", enforce, versionSuffix(r.EnforceVersion))
		}
		verdict := "fits"
		if !r.LevelFits() {
			verdict = "REFUSED"
		}
		fmt.Fprintf(&b, "  pod security: %s; the pod needs %q: %s\n", enforce, r.Level, verdict)
		if len(r.Fits) > 0 {
			fmt.Fprintf(&b, "  variants that fit this namespace: %s\n", strings.Join(r.Fits, ", "))
		}
	}
	b.WriteString("  RBAC (SelfSubjectAccessReview):\n")
	for _, p := range r.Permissions {
		verdict := "allowed"
		switch {
		case p.Err != nil:
			verdict = "unknown: " + p.Err.Error()
		case !p.Allowed:
			verdict = "DENIED"
		}
		fmt.Fprintf(&b, "    %-40s %s\n", p.Permission.String(), verdict)
	}
	switch {
	case !r.DryRunDone:
		b.WriteString("  dry-run: not made\n")
	case r.DryRun != nil:
		fmt.Fprintf(&b, "  dry-run create: REFUSED: %v\n", r.DryRun)
	default:
		b.WriteString("  dry-run create: admitted\n")
	}
	switch {
	case r.SecretsChecked == 0 && r.SecretsErr == nil:
	case r.SecretsErr != nil:
		fmt.Fprintf(&b, "  secrets: %d read, the others not checked (%v): the kubelet decides\n", r.SecretsChecked, r.SecretsErr)
	case len(r.SecretErrs) > 0:
		fmt.Fprintf(&b, "  secrets: %d read: MISSING\n", r.SecretsChecked)
	default:
		fmt.Fprintf(&b, "  secrets: %d read: every key named is there\n", r.SecretsChecked)
	}
	if err := r.Err(); err != nil {
		fmt.Fprintf(&b, "result: %v\n", err)
	} else {
		b.WriteString("result: nothing will be refused\n")
	}
	return b.String()
}

func versionSuffix(v string) string {
	if v == "" || v == "latest" {
		return ""
	}
	return " (version " + v + ")"
}

// RequestTooLargeError says that a container's resource request is more
// than a node can ever give: the kubelet would refuse the pod (OutOfcpu,
// OutOfmemory) after it was created.
type RequestTooLargeError struct {
	// Node is the node's name; Resource the resource, e.g. "cpu".
	Node     string
	Resource corev1.ResourceName
	// Request is what was asked for; Allocatable what the node has for pods
	// (status.allocatable).
	Request, Allocatable resource.Quantity
}

func (e *RequestTooLargeError) Error() string {
	return fmt.Sprintf("%s request %s is more than node %q can give (allocatable %s: %s)", e.Resource, e.Request.String(), e.Node, e.Resource, e.Allocatable.String())
}

// CheckRequests returns a *RequestTooLargeError for the first node, in
// order, whose allocatable (status.allocatable) is below one of requests
// (e.g. the pod's only container's requests), and nil when every node can
// give them. A resource a node does not report is not checked. It looks
// only at what each node has for pods at all, not at what its other pods
// use: a request that fits may still wait for room.
func CheckRequests(nodes []*corev1.Node, requests corev1.ResourceList) error {
	names := slices.Sorted(maps.Keys(requests))
	for _, n := range nodes {
		for _, name := range names {
			alloc, ok := n.Status.Allocatable[name]
			if req := requests[name]; ok && req.Cmp(alloc) > 0 {
				return &RequestTooLargeError{Node: n.Name, Resource: name, Request: req, Allocatable: alloc}
			}
		}
	}
	return nil
}
