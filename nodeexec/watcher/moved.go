package watcher

// The client verbs moved to package nodescripts and the well-known strings
// to package v1alpha1. These forwarders keep the old names compiling until
// every caller names the new home; nothing else should be added here.

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
	"github.com/nodeexec/nodeexec/nodeexec/watcher/internal/nodescript"
	"github.com/nodeexec/nodeexec/nodeexec/watcher/nodescripts"
)

const (
	AnnotationRunNow   = v1alpha1.AnnotationRunNow
	AnnotationRunNowBy = v1alpha1.AnnotationRunNowBy
	UnknownUser        = v1alpha1.UnknownUser
	DefaultRunNowFor   = nodescripts.DefaultRunNowFor
	MaxRunNowFor       = nodescripts.MaxRunNowFor
)

type (
	Manifests     = nodescripts.Manifests
	NodeReport    = nodescripts.NodeReport
	Report        = nodescripts.Report
	Requester     = nodescripts.Requester
	RerunResult   = nodescripts.RerunResult
	RunNowOptions = nodescripts.RunNowOptions
	RunNowResult  = nodescripts.RunNowResult
)

var (
	Apply             = nodescripts.Apply
	ApplyBudgets      = nodescripts.ApplyBudgets
	ApplyCalendars    = nodescripts.ApplyCalendars
	CalendarNow       = nodescripts.CalendarNow
	CalendarOpenings  = nodescripts.CalendarOpenings
	Get               = nodescripts.Get
	GetCalendar       = nodescripts.GetCalendar
	Openings          = nodescripts.Openings
	ParseAllManifests = nodescripts.ParseAllManifests
	ParseManifests    = nodescripts.ParseManifests
	ParseNodeScripts  = nodescripts.ParseNodeScripts
	Promote           = nodescripts.Promote
	Rerun             = nodescripts.Rerun
	RunNow            = nodescripts.RunNow
	RunNowUntil       = nodescripts.RunNowUntil
	SetIgnored        = nodescripts.SetIgnored
	SetPaused         = nodescripts.SetPaused
	Status            = nodescripts.Status
	WhoAmI            = nodescripts.WhoAmI
	WithRunPod        = nodescripts.WithRunPod
)

// goingRuns is nodescript.GoingRuns.
func goingRuns(ctx context.Context, client kubernetes.Interface, ns *v1alpha1.NodeScript) (map[string]*corev1.Pod, error) {
	return nodescript.GoingRuns(ctx, client, ns)
}
