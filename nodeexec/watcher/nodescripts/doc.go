// Package nodescripts is the client side of the NodeScript API
// (nodeexec.io/v1alpha1, package v1alpha1): what the nodeexec CLI's
// NodeScript commands call, and what any other program may call to manage
// NodeScripts, MaintenanceBudgets and MaintenanceCalendars and to read what
// the watcher (package watcher) records. It never runs a script and never
// prints; each function takes a context first and the clients it needs, and
// returns errors wrapped with %w (ErrCRDNotInstalled when the API server
// does not serve NodeScripts).
//
// The verbs and the RBAC each needs (the client's identity; cluster-scoped
// resources unless said):
//
//	ParseNodeScripts, ParseManifests,    none: decode and validate YAML or JSON
//	ParseAllManifests                    documents (v1alpha1.Validate)
//	Apply                                get, patch on nodescripts
//	ApplyBudgets                         get, patch on maintenancebudgets
//	ApplyCalendars                       get, patch on maintenancecalendars
//	Get                                  get on nodescripts
//	GetCalendar                          get on maintenancecalendars
//	Promote                              get, patch on nodescripts
//	SetPaused                            patch on nodescripts
//	RunNow                               get, patch on nodescripts; create on
//	                                     selfsubjectreviews
//	Rerun                                get on nodescripts; list, patch on nodes
//	SetIgnored                           get on nodescripts; get, patch on nodes;
//	                                     create on selfsubjectreviews
//	Status                               get on nodescripts; list on nodes; list on
//	                                     pods and configmaps in the run namespace
//	                                     (get on maintenancebudgets with spec.budgetRef)
//	Openings                             get on maintenancecalendars (spec.windowRefs)
//	CalendarOpenings, CalendarNow,       none: pure functions
//	RunNowUntil, DecodeState, WithRunPod
//	WhoAmI                               create on selfsubjectreviews
//
// Changes are made as the field manager "nodeexec". Apply, ApplyBudgets,
// ApplyCalendars, Rerun and SetIgnored have the API server accept every
// change in a dry-run before any is made, so a refusal changes nothing.
//
// A node's record of a NodeScript is its annotation StateAnnotation(name),
// read with DecodeState; while a run goes its pod is the record
// (WithRunPod). The node annotations RerunAnnotation and IgnoreAnnotation
// are the requests Rerun and SetIgnored make. The strings the watcher
// writes (labels, condition types, Event reasons, phases...) are constants
// of package v1alpha1 (wellknown.go).
package nodescripts
