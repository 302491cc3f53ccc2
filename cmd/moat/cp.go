package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/pflag"

	"github.com/moat-sandbox/moat/client"
	"github.com/moat-sandbox/moat/display"
	"github.com/moat-sandbox/moat/sandbox"
)

// moat sandbox cp: the arguments, standard input and output, and the
// summary. The copy itself is the SDK's (client.Sandbox.CopyIn and
// CopyOut), which follows no symlink on the host in either direction:
// see there and package fstree (ExtractInto, WriteTar, OpenPath).

const cpLong = `Copy a file or a directory between the host and a sandbox. One side is
SANDBOX:PATH (PATH absolute, or relative to /workspace), the other a host
path, or - for this command's stdin (a file's content) or stdout.

As with cp -r: when the destination is an existing directory the source is
copied into it under its own name, otherwise it is copied to the
destination's name. Directories travel as tar archives; symlinks are
copied as symlinks, FIFOs, sockets and devices are skipped.

On the host, moat follows no symlink: a sandbox can plant them in a
workspace bound from the host. A host path with a symlink in any component
(a relative path starts at the current directory) is refused: name the
real path instead. A source that is itself a symlink is copied as a
symlink (with a trailing /, it is refused). A destination that is a
symlink is refused, never written through; an existing file there is
overwritten in place. Inside a copied directory, an entry replaces what
is there (a symlink included, which is removed, not followed), and no
link of the archive is followed by a later entry.

With --json, print a summary object when the copy is done: direction
("in" to the sandbox, "out" to the host), sandbox, path (in the sandbox),
host (the host path, absolute, or -), archive (whether it went as a tar
archive: directories, symlinks, and every copy out to a host path) and
bytes (the file's size, or the archive's). --json cannot go with - as
the destination, whose content is stdout.

Examples:
  moat sandbox cp ./src sb-123:/workspace/
  moat sandbox cp sb-123:/workspace/out/report.json .
  moat sandbox cp - sb-123:/workspace/input.txt < input.txt`

// cpSummary is what cp --json prints.
type cpSummary struct {
	Direction string `json:"direction"` // in (to the sandbox) or out
	Sandbox   string `json:"sandbox"`
	Path      string `json:"path"` // in the sandbox
	Host      string `json:"host"` // absolute, or - (stdin, stdout)
	Archive   bool   `json:"archive"`
	Bytes     int64  `json:"bytes"`
}

func sbCopy(sio sandboxIO) *command {
	var asJSON bool
	return &command{
		name:  "cp",
		usage: "[--json] SRC DST   (one of them SANDBOX:PATH)",
		short: "Copy a file or directory between the host and a sandbox",
		long:  cpLong,
		setup: func(fl *pflag.FlagSet) {
			fl.BoolVar(&asJSON, "json", false, "print a summary of the copy as JSON")
		},
		run: func(ctx context.Context, args []string) error {
			if len(args) != 2 {
				return usageError("cp takes a source and a destination")
			}
			srcID, srcPath, srcRemote := splitRemote(args[0])
			dstID, dstPath, dstRemote := splitRemote(args[1])
			if srcRemote == dstRemote {
				return usageError("cp: exactly one of SRC and DST must be SANDBOX:PATH")
			}
			if asJSON && args[1] == "-" {
				return usageError("cp: --json cannot go with - as the destination (the file's content is stdout)")
			}
			if err := cpSupported(); err != nil {
				return err
			}
			sum := &cpSummary{Direction: "in", Sandbox: dstID}
			err := withClient(func(c *client.Client) error {
				ctx, stop := interruptible(ctx)
				defer stop()
				if dstRemote {
					return copyIn(ctx, sio, c.Sandbox(dstID), args[0], dstPath, sum)
				}
				sum.Direction, sum.Sandbox = "out", srcID
				return copyOut(ctx, sio, c.Sandbox(srcID), srcPath, args[1], sum)
			})
			if err != nil || !asJSON {
				return err
			}
			return printJSONTo(sio.stdout, sum)
		},
	}
}

// splitRemote reads SANDBOX:PATH; a host path with a colon can be written
// ./a:b.
func splitRemote(s string) (id, p string, ok bool) {
	id, p, ok = strings.Cut(s, ":")
	if !ok || id == "" || strings.Contains(id, "/") {
		return "", "", false
	}
	if p == "" {
		p = sandbox.WorkspaceDir
	}
	return id, p, true
}

// copyIn copies the host path src (or stdin) to dst in the sandbox and
// says what it did in sum.
func copyIn(ctx context.Context, sio sandboxIO, sb *client.Sandbox, src, dst string, sum *cpSummary) error {
	if src == "-" {
		b, err := io.ReadAll(sio.stdin)
		if err != nil {
			return fmt.Errorf("reading standard input: %w", err)
		}
		sum.Host, sum.Path, sum.Bytes = "-", dst, int64(len(b))
		return sb.WriteFile(ctx, dst, b, 0)
	}
	res, err := sb.CopyIn(ctx, src, dst, cpOptions(sio))
	if err != nil {
		return cpError(err)
	}
	sum.Path, sum.Host, sum.Archive, sum.Bytes = res.Path, res.Host, res.Archive, res.Bytes
	return nil
}

// copyOut copies src of the sandbox to the host path dst (or stdout) and
// says what it did in sum.
func copyOut(ctx context.Context, sio sandboxIO, sb *client.Sandbox, src, dst string, sum *cpSummary) error {
	sum.Path = src
	if dst == "-" {
		b, err := sb.ReadFile(ctx, src)
		if err != nil {
			return err
		}
		sum.Host, sum.Bytes = "-", int64(len(b))
		_, err = sio.stdout.Write(b)
		return err
	}
	res, err := sb.CopyOut(ctx, src, dst, cpOptions(sio))
	if err != nil {
		return cpError(err)
	}
	sum.Path, sum.Host, sum.Archive, sum.Bytes = res.Path, res.Host, res.Archive, res.Bytes
	return nil
}

// cpOptions warns on stderr of what a copied tree leaves out.
func cpOptions(sio sandboxIO) *client.CopyOptions {
	return &client.CopyOptions{Skipped: func(p, why string) {
		fmt.Fprintf(sio.stderr, "moat: skipping %s: %s\n", display.String(p), display.String(why))
	}}
}

// cpError makes a destination a copy cannot go to a usage error.
func cpError(err error) error {
	if errors.Is(err, client.ErrCopyPath) {
		return usageError("cp: %v", err)
	}
	return err
}
