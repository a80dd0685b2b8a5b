package noi18n

import (
	"testing"

	"k8s.io/kubectl/pkg/util/i18n"
)

func TestTReturnsTheEnglishText(t *testing.T) {
	t.Setenv("LANG", "fr_FR.UTF-8")
	if got := i18n.T("Print the supported API resources on the server"); got != "Print the supported API resources on the server" {
		t.Errorf("i18n.T = %q, want the text unchanged", got)
	}
}
