//go:build !linux

package nsenter

import (
	"context"
	"errors"
	"runtime"
)

// Run fails on this platform: namespaces (setns(2)) are Linux-only.
func (c *Cmd) Run(ctx context.Context) (exitCode int, err error) {
	return -1, errors.New("nsenter: Linux namespaces are not available on " + runtime.GOOS)
}
