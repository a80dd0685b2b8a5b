package cli

import "testing"

// TestRunEphemeralBadInput: --pod and --backend ephemeral misuse exits 2
// with one clear error before any request reaches the API server.
func TestRunEphemeralBadInput(t *testing.T) {
	srv := newFakeAPIServer(t, []string{"n1"}, nil)
	kc := writeKubeconfig(t, srv.URL)
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{name: "ephemeral without pod", args: []string{"run", "--backend", "ephemeral", "--", "true"}, want: []string{"--backend ephemeral needs --pod"}},
		{name: "pod without ephemeral", args: []string{"run", "--pod", "web-1", "--", "true"}, want: []string{"--pod is for --backend ephemeral"}},
		{name: "pod and node", args: []string{"run", "--backend", "ephemeral", "--pod", "web-1", "--node", "n1", "--", "true"}, want: []string{"do not combine it with --node"}},
		{name: "pod and all", args: []string{"run", "--backend", "ephemeral", "--pod", "web-1", "--all", "--", "true"}, want: []string{"do not combine"}},
		{name: "malformed pod", args: []string{"run", "--backend", "ephemeral", "--pod", "a/b/c", "--", "true"}, want: []string{`--pod "a/b/c"`, "NAMESPACE/NAME"}},
		{name: "empty pod name", args: []string{"run", "--backend", "ephemeral", "--pod", "ns/", "--", "true"}, want: []string{`--pod "ns/"`}},
		{name: "container without ephemeral", args: []string{"run", "--node", "n1", "--container", "app", "--", "true"}, want: []string{"--container is for --backend ephemeral"}},
		{name: "no command", args: []string{"run", "--backend", "ephemeral", "--pod", "web-1"}, want: []string{"no command"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := run(t, "", append([]string{"--kubeconfig", kc}, tt.args...)...)
			wantRefused(t, got, tt.want...)
		})
	}
	if reqs := srv.seen(); len(reqs) != 0 {
		t.Errorf("bad input reached the API server: %v", reqs)
	}
}
