package release

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"
)

// Plugin mirrors krew's v1alpha2 Plugin (sigs.k8s.io/krew/pkg/index), the
// fields a manifest may have; ParseManifest refuses any other.
type Plugin struct {
	APIVersion string         `json:"apiVersion"`
	Kind       string         `json:"kind"`
	Metadata   PluginMetadata `json:"metadata"`
	Spec       PluginSpec     `json:"spec"`
}

// PluginMetadata is the part of krew's ObjectMeta a plugin uses.
type PluginMetadata struct {
	Name string `json:"name"`
}

// PluginSpec is krew's PluginSpec.
type PluginSpec struct {
	Version          string           `json:"version,omitempty"`
	ShortDescription string           `json:"shortDescription,omitempty"`
	Description      string           `json:"description,omitempty"`
	Caveats          string           `json:"caveats,omitempty"`
	Homepage         string           `json:"homepage,omitempty"`
	Platforms        []PluginPlatform `json:"platforms,omitempty"`
}

// PluginPlatform is krew's Platform: where one platform's archive is and
// what to install from it.
type PluginPlatform struct {
	URI      string          `json:"uri,omitempty"`
	Sha256   string          `json:"sha256,omitempty"`
	Selector *LabelSelector  `json:"selector,omitempty"`
	Files    []FileOperation `json:"files"`
	License  string          `json:"license,omitempty"`
	Bin      string          `json:"bin"`
}

// LabelSelector is metav1.LabelSelector as krew matches it against the
// labels os and arch.
type LabelSelector struct {
	MatchLabels      map[string]string          `json:"matchLabels,omitempty"`
	MatchExpressions []LabelSelectorRequirement `json:"matchExpressions,omitempty"`
}

// LabelSelectorRequirement is metav1.LabelSelectorRequirement.
type LabelSelectorRequirement struct {
	Key      string   `json:"key"`
	Operator string   `json:"operator"`
	Values   []string `json:"values,omitempty"`
}

// FileOperation is krew's FileOperation: copy From (a glob in the archive)
// to To (in the plugin's install directory).
type FileOperation struct {
	From string `json:"from,omitempty"`
	To   string `json:"to,omitempty"`
}

// ParseManifest reads a krew manifest strictly: unknown or duplicate fields
// are an error.
func ParseManifest(b []byte) (*Plugin, error) {
	var p Plugin
	if err := yaml.UnmarshalStrict(b, &p); err != nil {
		return nil, fmt.Errorf("krew manifest: %w", err)
	}
	return &p, nil
}

// safePluginName is krew's IsSafePluginName pattern.
var safePluginName = regexp.MustCompile(`^[\w-]+$`)

// MaxShortDescription is krew-index's limit on shortDescription.
const MaxShortDescription = 50

// Validate checks p as krew does when it installs a manifest (and
// krew-index when it accepts one), plus nodeexec's own rules: fileName is
// the manifest's file name, which must be metadata.name + ".yaml"; the
// platforms must be exactly Platforms; each uri must be nodeexec's release
// archive for spec.version.
func Validate(p *Plugin, fileName string) error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if p.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" {
		bad("apiVersion %q: want krew.googlecontainertools.github.com/v1alpha2", p.APIVersion)
	}
	if p.Kind != "Plugin" {
		bad("kind %q: want Plugin", p.Kind)
	}
	name := p.Metadata.Name
	if !safePluginName.MatchString(name) || strings.HasPrefix(name, "kubectl-") {
		bad("metadata.name %q: want the plugin's name (letters, digits, _ and -), without kubectl-", name)
	}
	if want := name + ".yaml"; path.Base(fileName) != want {
		bad("file name %q: krew wants metadata.name + .yaml, %q", path.Base(fileName), want)
	}
	if err := CheckVersion(p.Spec.Version); err != nil {
		bad("spec.version: %v", err)
	}
	if !strings.HasPrefix(p.Spec.Homepage, "https://") {
		bad("spec.homepage %q: want an https URL", p.Spec.Homepage)
	}
	switch sd := p.Spec.ShortDescription; {
	case sd == "":
		bad("spec.shortDescription is empty")
	case len(sd) >= MaxShortDescription:
		bad("spec.shortDescription %q: %d characters, krew-index wants fewer than %d", sd, len(sd), MaxShortDescription)
	case strings.ContainsAny(sd, "\r\n"):
		bad("spec.shortDescription: one line")
	}
	if strings.TrimSpace(p.Spec.Description) == "" {
		bad("spec.description is empty")
	}
	if len(p.Spec.Platforms) == 0 {
		bad("spec.platforms is empty")
	}
	seen := map[Platform]bool{}
	for i, pl := range p.Spec.Platforms {
		at := fmt.Sprintf("spec.platforms[%d]", i)
		if pl.Selector == nil {
			bad("%s.selector is missing: krew cannot match it to a platform", at)
			continue
		}
		if len(pl.Selector.MatchExpressions) > 0 {
			bad("%s.selector.matchExpressions: nodeexec's manifest matches os and arch with matchLabels only", at)
		}
		ml := pl.Selector.MatchLabels
		plat := Platform{ml["os"], ml["arch"]}
		if plat.OS == "" || plat.Arch == "" || len(ml) != 2 { // krew allows only os and arch
			bad("%s.selector.matchLabels %v: want exactly os and arch", at, ml)
		}
		if seen[plat] {
			bad("%s: platform %s listed twice", at, plat)
		}
		seen[plat] = true
		switch {
		case !strings.HasPrefix(pl.URI, "https://"):
			bad("%s.uri %q: want an https URL", at, pl.URI)
		case !strings.HasSuffix(pl.URI, ".tar.gz"):
			bad("%s.uri %q: want a .tar.gz archive", at, pl.URI)
		case !strings.Contains(pl.URI, "/"+p.Spec.Version+"/"):
			bad("%s.uri %q: does not contain spec.version %s", at, pl.URI, p.Spec.Version)
		case pl.URI != ArchiveURL(p.Spec.Version, plat):
			bad("%s.uri %q: want %q", at, pl.URI, ArchiveURL(p.Spec.Version, plat))
		}
		if !sha256Hex.MatchString(pl.Sha256) {
			bad("%s.sha256 %q: want 64 lower-case hex digits", at, pl.Sha256)
		}
		if pl.Bin == "" {
			bad("%s.bin is empty", at)
		} else if pl.Bin != BinaryName {
			bad("%s.bin %q: want %q", at, pl.Bin, BinaryName)
		}
		if len(pl.Files) == 0 {
			bad("%s.files is empty: nothing would be installed", at)
		}
		binCopied := false
		for j, f := range pl.Files {
			if f.From == "" || f.To == "" {
				bad("%s.files[%d]: from and to are both required", at, j)
			}
			if strings.Contains(f.To, "..") || path.IsAbs(f.To) {
				bad("%s.files[%d].to %q: must stay in the install directory", at, j, f.To)
			}
			if f.From == pl.Bin && f.To == "." {
				binCopied = true
			}
		}
		if !binCopied {
			bad("%s.files: %q is not copied to .", at, pl.Bin)
		}
	}
	for _, want := range Platforms {
		if !seen[want] {
			bad("spec.platforms: %s is missing", want)
		}
	}
	return errors.Join(errs...)
}
