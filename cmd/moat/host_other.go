//go:build !linux

package main

import "github.com/moat-sandbox/moat/client"

// closeInherited does nothing off Linux: without close_range(2) and with
// no sandbox to start (the linux runtime fails there), nothing moat runs
// could inherit the descriptors.
func closeInherited() {}

// cpSupported reports that moat cp cannot run off Linux: the SDK's
// copies need openat2 (client.ErrCopyUnsupported).
func cpSupported() error { return client.ErrCopyUnsupported }
