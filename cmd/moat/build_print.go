package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/display"
)

// printBuildSummary writes what moat build prints at a build's end
// without --json: one "KEY  VALUE" line each (the build, status, reason,
// source, toolchain, exit code, artifacts as "SHA256  SIZE  PATH" lines
// below, what was skipped, the log, duration, peak memory). Every string
// a build carries may come from its sandbox: it goes through package
// display.
func printBuildSummary(w io.Writer, b *api.Build, out string) error {
	var sb strings.Builder
	d := display.String
	line := func(key, format string, a ...any) {
		fmt.Fprintf(&sb, "%-10s %s\n", key, fmt.Sprintf(format, a...))
	}
	if b.ID != "" {
		line("build", "%s", d(b.ID))
	}
	line("status", "%s", d(b.Status))
	if b.Reason != "" || b.Message != "" {
		reason := d(b.Reason)
		if b.Message != "" {
			if reason != "" {
				reason += ": "
			}
			reason += d(b.Message)
		}
		line("reason", "%s", reason)
	}
	if b.SourceDigest != "" {
		src := d(b.SourceDigest)
		if b.Source != nil {
			entries := "entries"
			if b.Source.Files == 1 {
				entries = "entry"
			}
			src += fmt.Sprintf(" (%d %s, %s", b.Source.Files, entries, formatBytes(b.Source.Bytes))
			if b.Source.Stripped > 0 {
				src += fmt.Sprintf("; setuid/setgid stripped from %d", b.Source.Stripped)
			}
			src += ")"
		}
		line("source", "%s", src)
	}
	if b.Toolchain.Template != "" {
		tc := d(b.Toolchain.Template)
		if b.Toolchain.Digest != "" {
			tc += " " + d(b.Toolchain.Digest)
		}
		line("toolchain", "%s", tc)
	}
	if b.ExitCode != nil {
		line("exit code", "%d", *b.ExitCode)
	}
	if len(b.Artifacts) > 0 {
		where := ""
		if b.Status == api.BuildSucceeded {
			where = " in " + d(out)
		}
		line("artifacts", "%d%s", len(b.Artifacts), where)
		for _, a := range b.Artifacts {
			fmt.Fprintf(&sb, "  %s  %d  %s\n", d(a.SHA256), a.Size, d(a.Path))
		}
	}
	if len(b.Skipped) > 0 {
		sk := make([]string, len(b.Skipped))
		for i, s := range b.Skipped {
			sk[i] = d(s)
		}
		line("skipped", "%s (symlinks and special files are not collected)", strings.Join(sk, ", "))
	}
	if b.Log.Bytes > 0 {
		lg := formatBytes(b.Log.Bytes)
		if b.Log.Truncated {
			lg += fmt.Sprintf(" (the first %s kept)", formatBytes(b.Log.Kept))
		}
		line("log", "%s", lg)
	}
	if b.ID != "" {
		line("duration", "%s", fmtDuration(time.Duration(b.DurationMs)*time.Millisecond))
	}
	if b.PeakMemoryBytes > 0 {
		line("memory", "%s peak", formatBytes(b.PeakMemoryBytes))
	}
	_, err := io.WriteString(w, sb.String())
	return err
}
