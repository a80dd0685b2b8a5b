package resident

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodeexec/nodeexec/internal/agentcmd"
	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/agent"
)

// TestWrapEnv: a request's environment variables reach the resident agent
// in the request frame (the agent puts them in its process's environment),
// never on a command line: not over the port-forward's command, and never
// over exec (the run gets the wrapped backend's pod instead).
func TestWrapEnv(t *testing.T) {
	argv := agent.ContainerExecArgv(agent.ContainerExecArgs{ContainerID: "containerd://c", Env: map[string]string{"SECRETVAL": "x"}, Argv: []string{"id"}})
	req := func(out *bytes.Buffer) nodeexec.Request {
		return nodeexec.Request{Command: []string{"id"}, Env: map[string]string{"SECRETVAL": "s3cr3t"}, Stdout: out, Timeout: 10 * time.Second}
	}
	serving := agentPod("a-1", "node-1", true)
	serving.Annotations = map[string]string{agent.AnnotationServe: "7710"}

	t.Run("port-forward", func(t *testing.T) {
		// The agent's stand-in records its environment variable and its
		// arguments, prints, and ends as a spooled agent does.
		dir := t.TempDir()
		fakeAgent := spooledAgent(t, dir, "printf '%s' \"$"+agent.ExecEnvVar+"\" > "+dir+"/env\nprintf '%s ' \"$@\" > "+dir+"/args\n", 0)
		exec, inner := &fakeStreamer{}, &fakeInner{name: "runtime"}
		b, err := Wrap(inner, WrapOptions{Client: fake.NewClientset(agentDS(), serving), Streamer: exec,
			Dialer: &fakeDialer{server: &agentcmd.Server{Exe: fakeAgent}}, Commander: fixedCommander{node: "node-1", rawArgv: argv}, SpoolName: func() string { return "s1" }})
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if _, err := b.Run(t.Context(), req(&out)); err != nil || out.String() != "hi\n" || inner.ran || exec.got != nil {
			t.Fatalf("err %v, stdout %q, inner ran %v, exec %+v", err, out.String(), inner.ran, exec.got)
		}
		env, _ := os.ReadFile(filepath.Join(dir, "env"))
		args, _ := os.ReadFile(filepath.Join(dir, "args"))
		if string(env) != `{"SECRETVAL":"s3cr3t"}` || strings.Contains(string(args), "s3cr3t") || !strings.Contains(string(args), agent.EnvFromAgentFlag) {
			t.Errorf("the agent got environment %q and arguments %q", env, args)
		}
	})

	for name, tc := range map[string]struct {
		pod    func() *corev1.Pod
		dialer *fakeDialer
	}{
		"exec-only agent":        {pod: func() *corev1.Pod { return agentPod("a-1", "node-1", true) }, dialer: &fakeDialer{server: shServer()}},
		"listener did not start": {pod: func() *corev1.Pod { return serving }, dialer: &fakeDialer{refuse: "connection refused"}},
	} {
		t.Run(name, func(t *testing.T) {
			exec, inner := &fakeStreamer{}, &fakeInner{name: "runtime"}
			b, err := Wrap(inner, WrapOptions{Client: fake.NewClientset(agentDS(), tc.pod()), Streamer: exec, Dialer: tc.dialer,
				Commander: fixedCommander{node: "node-1", rawArgv: argv}, SpoolName: func() string { return "s1" }})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := b.Run(t.Context(), req(&bytes.Buffer{})); err != nil || !inner.ran || exec.got != nil {
				t.Errorf("err %v, inner ran %v (want the pod), exec %+v (want none)", err, inner.ran, exec.got)
			}
		})
	}
}

// TestWrapNsenterEnv: an nsenter command line with environment variables
// (a shell's TERM) goes to an agent whose pod says its nsenter takes them
// (agent.AnnotationNsenterEnv), with the variables in the request frame;
// an agent from before gets none of it: the wrapped backend's pod runs it.
func TestWrapNsenterEnv(t *testing.T) {
	argv := agent.WithEnvFromAgent(agent.NsenterArgv(nil, []string{"sh"}))
	for name, annotated := range map[string]bool{"current agent": true, "older agent": false} {
		t.Run(name, func(t *testing.T) {
			pod := agentPod("a-1", "node-1", true)
			pod.Annotations = map[string]string{agent.AnnotationServe: "7710"}
			if annotated {
				pod.Annotations[agent.AnnotationNsenterEnv] = "true"
			}
			dir := t.TempDir()
			fakeAgent := spooledAgent(t, dir, "printf '%s' \"$"+agent.ExecEnvVar+"\" > "+dir+"/env\n", 0)
			exec, inner := &fakeStreamer{}, &fakeInner{name: "nsenter"}
			b, err := Wrap(inner, WrapOptions{Client: fake.NewClientset(agentDS(), pod), Streamer: exec,
				Dialer: &fakeDialer{server: &agentcmd.Server{Exe: fakeAgent}}, Commander: fixedCommander{node: "node-1", rawArgv: argv}, SpoolName: func() string { return "s1" }})
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			_, err = b.Run(t.Context(), nodeexec.Request{Command: []string{"sh"}, Env: map[string]string{"TERM": "xterm"}, Stdout: &out, Timeout: 10 * time.Second})
			env, _ := os.ReadFile(filepath.Join(dir, "env"))
			switch {
			case annotated && (err != nil || inner.ran || string(env) != `{"TERM":"xterm"}`):
				t.Errorf("err %v, inner ran %v, the agent's %s %q: want the agent with TERM", err, inner.ran, agent.ExecEnvVar, env)
			case !annotated && (!inner.ran || len(env) > 0):
				t.Errorf("inner ran %v, the agent got %q: want the pod", inner.ran, env)
			}
		})
	}
}
