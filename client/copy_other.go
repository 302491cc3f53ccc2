//go:build !linux

package client

import "context"

// copyIn cannot copy safely off Linux.
func (s *Sandbox) copyIn(ctx context.Context, src, dst string, opt *CopyOptions) (*CopyResult, error) {
	return nil, ErrCopyUnsupported
}

// copyOut cannot copy safely off Linux.
func (s *Sandbox) copyOut(ctx context.Context, src, dst string, opt *CopyOptions) (*CopyResult, error) {
	return nil, ErrCopyUnsupported
}
