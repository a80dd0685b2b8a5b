package v1alpha1

import (
	"fmt"
	"net/url"
	"time"

	amlabels "github.com/prometheus/alertmanager/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Limits of spec.maintenance.silences: the IDs of a node's silences are
// kept with their URLs in the node's state annotation, which is bounded.
const (
	// MaxSilences is the most silences spec.maintenance.silences holds.
	MaxSilences = 4
	// MaxSilenceURLBytes is the longest spec.maintenance.silences[].url.
	MaxSilenceURLBytes = 256
	// MaxSilenceMatchers is the most matchers one silence holds.
	MaxSilenceMatchers = 16
	// MaxSilenceCommentBytes is the longest spec.maintenance.silences[].comment.
	MaxSilenceCommentBytes = 1024
)

// SilenceMatchers are the matchers of silence s for node: s.Matchers
// parsed in Alertmanager's matcher syntax
// (github.com/prometheus/alertmanager/pkg/labels.ParseMatcher), then, with
// s.NodeLabel set, NodeLabel="node". It fails on a matcher that does not
// parse (one without an operator among them), naming it by its index, on a
// NodeLabel that is not a label name ([a-zA-Z_][a-zA-Z0-9_]*), and
// when every matcher matches the empty string (Alertmanager refuses such a
// silence: it would silence every alert).
func SilenceMatchers(s Silence, node string) ([]*amlabels.Matcher, error) {
	var ms []*amlabels.Matcher
	for i, m := range s.Matchers {
		pm, err := amlabels.ParseMatcher(m)
		if err != nil {
			return nil, fmt.Errorf("matchers[%d] %q: %w", i, m, err)
		}
		ms = append(ms, pm)
	}
	if s.NodeLabel != "" {
		if !labelName(s.NodeLabel) {
			return nil, fmt.Errorf("nodeLabel %q: not a label name (letters, digits, _; not starting with a digit)", s.NodeLabel)
		}
		nm, err := amlabels.NewMatcher(amlabels.MatchEqual, s.NodeLabel, node)
		if err != nil {
			return nil, fmt.Errorf("nodeLabel %q: %w", s.NodeLabel, err)
		}
		ms = append(ms, nm)
	}
	if len(ms) == 0 {
		return nil, fmt.Errorf("no matchers: give matchers, nodeLabel, or both")
	}
	for _, m := range ms {
		if !m.Matches("") {
			return ms, nil
		}
	}
	return nil, fmt.Errorf("every matcher matches the empty string, so the silence would cover every alert: add one that does not (e.g. alertname=NodeNotReady, or nodeLabel)")
}

// validateSilences checks spec.maintenance.silences (m is
// spec.maintenance, at path mp): each URL an absolute http(s) URL, each
// matcher Alertmanager's syntax with an operator, nodeLabel a label name,
// duration positive; the silences need cordon.
func validateSilences(m *MaintenanceSpec, mp *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(m.Silences) == 0 {
		return nil
	}
	sp := mp.Child("silences")
	if !m.Cordon {
		errs = append(errs, field.Invalid(mp.Child("cordon"), m.Cordon, "maintenance.silences needs cordon: true (silences are held while the node is cordoned for the run)"))
	}
	if len(m.Silences) > MaxSilences {
		errs = append(errs, field.TooMany(sp, len(m.Silences), MaxSilences))
	}
	for i, s := range m.Silences {
		p := sp.Index(i)
		errs = append(errs, validateSilenceURL(p.Child("url"), s.URL)...)
		if len(s.Matchers) > MaxSilenceMatchers {
			errs = append(errs, field.TooMany(p.Child("matchers"), len(s.Matchers), MaxSilenceMatchers))
		}
		bad := false
		for j, mt := range s.Matchers {
			if _, err := amlabels.ParseMatcher(mt); err != nil {
				bad = true
				errs = append(errs, field.Invalid(p.Child("matchers").Index(j), mt,
					"want an Alertmanager matcher NAME=VALUE, NAME!=VALUE, NAME=~REGEX or NAME!~REGEX, e.g. alertname=\"KubeNodeNotReady\": "+err.Error()))
			}
		}
		if s.NodeLabel != "" {
			if _, err := amlabels.NewMatcher(amlabels.MatchEqual, s.NodeLabel, "node"); err != nil || !labelName(s.NodeLabel) {
				bad = true
				errs = append(errs, field.Invalid(p.Child("nodeLabel"), s.NodeLabel, "want a label name (letters, digits, _; not starting with a digit), e.g. instance or node"))
			}
		}
		if !bad {
			// Placeholder node name: the watcher uses the real one.
			if _, err := SilenceMatchers(s, "node"); err != nil {
				errs = append(errs, field.Invalid(p.Child("matchers"), s.Matchers, err.Error()))
			}
		}
		if s.Duration != nil && s.Duration.Duration <= 0 {
			errs = append(errs, field.Invalid(p.Child("duration"), s.Duration.Duration.String(), "must be positive, e.g. 1h (or left out for the node's whole maintenance)"))
		}
		if len(s.Comment) > MaxSilenceCommentBytes {
			errs = append(errs, field.TooLong(p.Child("comment"), "", MaxSilenceCommentBytes))
		}
	}
	return errs
}

// validateSilenceURL: an absolute http or https URL with a host, no query
// or fragment, at most MaxSilenceURLBytes.
func validateSilenceURL(p *field.Path, raw string) field.ErrorList {
	const fix = "want the Alertmanager's base URL, http or https, e.g. http://alertmanager.monitoring:9093"
	if len(raw) > MaxSilenceURLBytes {
		return field.ErrorList{field.TooLong(p, "", MaxSilenceURLBytes)}
	}
	if raw == "" {
		return field.ErrorList{field.Required(p, fix)}
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return field.ErrorList{field.Invalid(p, raw, fix+": "+err.Error())}
	case u.Scheme != "http" && u.Scheme != "https":
		return field.ErrorList{field.Invalid(p, raw, fix+": the scheme must be http or https")}
	case u.Host == "":
		return field.ErrorList{field.Invalid(p, raw, fix+": no host")}
	case u.RawQuery != "" || u.Fragment != "" || u.User != nil:
		return field.ErrorList{field.Invalid(p, raw, fix+": no query, fragment or user info")}
	}
	return nil
}

// labelName reports whether s is a Prometheus label name of the classic
// kind ([a-zA-Z_][a-zA-Z0-9_]*), as the CRD's pattern on nodeLabel says.
func labelName(s string) bool {
	for i, r := range s {
		ok := r == '_' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (i > 0 && r >= '0' && r <= '9')
		if !ok {
			return false
		}
	}
	return s != ""
}

// silenceDurationSyntax checks spec.maintenance.silences[].duration in a
// decoded NodeScript document m (see ValidateDurationSyntax).
func silenceDurationSyntax(m map[string]any) field.ErrorList {
	spec, _ := m["spec"].(map[string]any)
	maint, _ := spec["maintenance"].(map[string]any)
	list, _ := maint["silences"].([]any)
	var errs field.ErrorList
	for i, item := range list {
		obj, _ := item.(map[string]any)
		v, ok := obj["duration"]
		if !ok || v == nil {
			continue
		}
		p := field.NewPath("spec", "maintenance", "silences").Index(i).Child("duration")
		str, isStr := v.(string)
		if !isStr {
			errs = append(errs, field.Invalid(p, v, "want a duration string such as \"30m\" or \"2h\""))
			continue
		}
		if _, err := time.ParseDuration(str); err != nil {
			errs = append(errs, field.Invalid(p, str, "want a duration such as 30m or 2h (units ns, us, ms, s, m, h)"))
		}
	}
	return errs
}
