package podexec_test

import (
	"strings"
	"testing"

	"github.com/nodeexec/nodeexec/nodeexec/podexec"
)

func TestPodName(t *testing.T) {
	tests := []struct{ node, want string }{
		{"tc-node-1", "nodeexec-tc-node-1-abcde"},
		{"ip-10-0-0-1.ec2.internal", "nodeexec-ip-10-0-0-1-ec2-internal-abcde"},
		{"Upper", "nodeexec-upper-abcde"},
		{strings.Repeat("n", 100), "nodeexec-" + strings.Repeat("n", 63-len("nodeexec-")-6) + "-abcde"},
		{strings.Repeat("a", 47) + "-b", "nodeexec-" + strings.Repeat("a", 47) + "-abcde"},
	}
	for _, tc := range tests {
		got := podexec.PodName(tc.node, "abcde")
		if got != tc.want {
			t.Errorf("PodName(%q) = %q, want %q", tc.node, got, tc.want)
		}
		if len(got) > 63 {
			t.Errorf("PodName(%q) is %d characters, more than a DNS label allows", tc.node, len(got))
		}
	}
}
