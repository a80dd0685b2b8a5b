package debugpod

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/remotecommand"
)

type nopStreamer struct{}

func (nopStreamer) Exec(context.Context, string, string, *corev1.PodExecOptions, remotecommand.StreamOptions) error {
	return nil
}
