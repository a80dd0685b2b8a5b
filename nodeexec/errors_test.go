package nodeexec_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nodeexec/nodeexec/nodeexec"
)

func TestExitCode(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want int
	}{
		{name: "nil", err: nil, want: 0},
		{name: "exit error", err: &nodeexec.ExitError{Node: "n", Code: 3}, want: 3},
		{name: "exit error 255", err: &nodeexec.ExitError{Node: "n", Code: 255}, want: 255},
		{name: "wrapped exit error", err: fmt.Errorf("outer: %w", &nodeexec.ExitError{Node: "n", Code: 42}), want: 42},
		{name: "joined exit error", err: errors.Join(errors.New("x"), &nodeexec.ExitError{Node: "n", Code: 7}), want: 7},
		{name: "timeout", err: fmt.Errorf("node %q: %w after 1s", "n", nodeexec.ErrTimeout), want: 124},
		{name: "bare timeout sentinel", err: nodeexec.ErrTimeout, want: 124},
		{name: "pod error", err: &nodeexec.PodError{Reason: "ErrImagePull"}, want: 1},
		{name: "not ready", err: nodeexec.ErrNodeNotReady, want: 1},
		{name: "cancelled", err: context.Canceled, want: 1},
		{name: "deadline exceeded is not the request timeout", err: context.DeadlineExceeded, want: 1},
		{name: "other", err: errors.New("boom"), want: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := nodeexec.ExitCode(tt.err); got != tt.want {
				t.Errorf("ExitCode(%v) = %d, want %d", tt.err, got, tt.want)
			}
		})
	}
}

// A missing image with pull policy Never is an image pull failure, and the
// one of them that is the request's mistake.
func TestImageNeverPull(t *testing.T) {
	for reason, want := range map[string]bool{"ErrImageNeverPull": true, "ErrImagePull": false, "ImagePullBackOff": false, "Evicted": false} {
		err := fmt.Errorf("node a: %w", &nodeexec.PodError{Reason: reason})
		if got := errors.Is(err, nodeexec.ErrImageNeverPull); got != want {
			t.Errorf("reason %q: errors.Is(err, ErrImageNeverPull) = %v, want %v", reason, got, want)
		}
		if want && !errors.Is(err, nodeexec.ErrImagePull) {
			t.Errorf("reason %q: not ErrImagePull", reason)
		}
	}
}

func TestErrorMessages(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{
			name: "exit error",
			err:  &nodeexec.ExitError{Node: "node-1", Code: 3},
			want: `command on node "node-1" exited with code 3`,
		},
		{
			name: "pod error with message",
			err:  &nodeexec.PodError{Node: "node-1", Namespace: "ns", Pod: "p", Reason: "ErrImagePull", Message: "pull access denied"},
			want: `pod ns/p on node "node-1" could not run the command: ErrImagePull: pull access denied`,
		},
		{
			name: "pod error without message",
			err:  &nodeexec.PodError{Node: "node-1", Namespace: "ns", Pod: "p", Reason: "Evicted"},
			want: `pod ns/p on node "node-1" could not run the command: Evicted`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.err.Error(); got != tt.want {
				t.Errorf("Error() = %q, want %q", got, tt.want)
			}
		})
	}
	if got := (&nodeexec.ExitError{Code: 9}).ExitStatus(); got != 9 {
		t.Errorf("ExitStatus() = %d, want 9", got)
	}
}
