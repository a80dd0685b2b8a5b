// Package nodescript holds what the watcher's controller (package watcher)
// and the client verbs (package nodescripts) both need, so that neither
// imports the other: the node state codec (NodeState, DecodeState, the
// per-node annotation keys), the calendar math (Openings, CalendarNow), the
// spec hash (CurrentHash), selection (Selects, SelectsNode), names
// (RunNamespace, ConditionType), redaction (Redact, Truncate), and the
// typed reads of NodeScripts and MaintenanceCalendars. Everything here is
// pure or one API call, and never prints.
package nodescript
