package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/moat-sandbox/moat/config"
	"github.com/moat-sandbox/moat/display"
	"github.com/moat-sandbox/moat/sandbox"
	"github.com/moat-sandbox/moat/templates"
)

const templateLong = `Manage the templates of the local template store: the root filesystems
sandboxes start from ('moat run --template', 'moat sandbox create
--template', a daemon's warm pools). The built-in template "host" is the
host's system directories, read-only; an imported template is a complete
root of its own (a directory tree, or an OCI image), stored once as an
immutable layer and shared by every sandbox made from it. Each sandbox
gets a private writable layer over it.

Commands:
  import   Import a directory or an OCI image as a template
  ls       List the templates
  rm       Remove templates

Run 'moat template COMMAND --help' for a command's flags.

The store is a directory (--store; default the [store] dir of the
operator config, else ` + templates.DefaultDir + `) that 'moat serve' and these
commands share; changing it needs root. What a template holds is treated
as untrusted: device nodes, fifos and sockets are left out, setuid and
setgid bits stripped, extended attributes dropped, and file owners kept
as the sandbox's own ids (0 is the sandbox's root, 1000 its user).
Processes always run as the sandbox user (uid 1000, no capabilities),
whatever an image says; in a sandbox of an imported template the
template's user (the image's User, or --user; root when neither names
one) and the sandbox user trade places in the template's files, so the
command can write wherever that user could (an image's WORKDIR,
/usr/local: pip install, npm install -g), into the sandbox's private
writable layer, gone with the sandbox. /dev, /proc, read-only binds and
restricted paths stay unwritable, and nothing can be created directly in
/. The host template's system directories stay read-only.

Exit codes: 0 done; 1 no such template, a template of that name exists
already, or it is in use (a snapshot of it, a live sandbox); 125 when the
command line is wrong, the source cannot be imported or the store cannot
be opened.`

// templateCommand is `moat template`: the local template store.
func templateCommand() *command {
	return &command{
		name:  "template",
		usage: "COMMAND [flags] [ARGS...]",
		short: "Import, list and remove the templates sandboxes start from",
		long:  templateLong,
		setup: func(*pflag.FlagSet) {},
		// The rest, flags included, is the subcommand's.
		flagsFirst: true,
		run: func(ctx context.Context, args []string) error {
			return runTemplate(ctx, args, sandboxIO{os.Stdin, os.Stdout, os.Stderr})
		},
	}
}

func templateSubcommands(sio sandboxIO) []*command {
	return []*command{tmplImport(sio), tmplList(sio), tmplRemove(sio)}
}

// runTemplate dispatches `moat template COMMAND ARGS...`.
func runTemplate(ctx context.Context, args []string, sio sandboxIO) error {
	sub, err := dispatch(ctx, "template", templateLong, templateSubcommands(sio), args, sio)
	if sub != nil && storeRefused(err) {
		fmt.Fprintf(sio.stderr, "moat template %s: %s\n", sub.name, display.String(err.Error()))
		return &exitError{code: 1}
	}
	return withSub(sub, err)
}

// storeRefused reports whether the store refused a request for what it
// holds (exit 1) rather than for a bad request or a failure (125).
func storeRefused(err error) bool {
	return errors.Is(err, templates.ErrNotFound) || errors.Is(err, templates.ErrExists) || errors.Is(err, templates.ErrInUse)
}

// storeFlags name the template store.
type storeFlags struct {
	dir, config string
}

func (s *storeFlags) declare(fl *pflag.FlagSet) {
	fl.StringVar(&s.dir, "store", "", "template and snapshot store `DIR` (default the config's [store] dir, else "+templates.DefaultDir+")")
	fl.StringVar(&s.config, "config", "", "operator config `FILE` naming the store (default $MOAT_CONFIG or "+config.DefaultPath+")")
}

// open opens the store the flags name.
func (s *storeFlags) open() (*templates.Store, error) {
	var d config.Defaults
	if s.dir == "" || s.config != "" {
		var err error
		if d, err = config.Load(s.config); err != nil {
			return nil, err
		}
	}
	return openStore(s.dir, d)
}

// openStore opens the template store: dir, else the config's store
// directory, else templates.DefaultDir.
func openStore(dir string, d config.Defaults) (*templates.Store, error) {
	if dir == "" {
		dir = d.StoreDir
	}
	if dir == "" {
		dir = templates.DefaultDir
	}
	return templates.Open(dir)
}

// needRoot refuses a change of the store by another user than root: the
// store's layers keep the file owners sandboxes see.
func needRoot(what string) error {
	if os.Geteuid() != 0 {
		return usageError("%s needs root (the store's layers keep the owners of the files sandboxes see)", what)
	}
	return nil
}

const tmplImportLong = `Import a root filesystem as a template.

  moat template import NAME DIR
      copy the directory tree DIR (it is read, never changed; symlinks are
      copied as symlinks and never followed)
  moat template import NAME --oci PATH [--ref REF]
      import an OCI image: an OCI image layout directory, an OCI archive
      (a tar of one) or a 'docker save' archive, told apart by their
      content. --ref picks one image of several (a tag such as
      "python:3.12" or "latest", or a digest); the image's environment
      and working directory become the template's defaults.

NAME is lower-case letters, digits and ".-_" (at most 63 bytes, not
"host"). --env, --workdir and the limit flags set the defaults of every
sandbox made from the template (a sandbox's own settings win; --env
entries come after an image's). --user (USER[:GROUP], names or ids, as an
image's User) names the template's user instead of the image's (a
directory's is root); it must be in the tree's /etc/passwd (and
/etc/group) unless numeric. Processes run as uid 1000, which owns in the
sandbox what that user owns in the template (see 'moat template --help'). The template appears only once it is
complete: an interrupted or refused import leaves nothing usable.

Prints the template (with --json, its whole description); what was left
out or changed (special files, setuid/setgid bits, an image's user) is
said on stderr.`

func tmplImport(sio sandboxIO) *command {
	var (
		st      storeFlags
		lim     runFlags
		oci     string
		ref     string
		env     []string
		workdir string
		user    string
		asJSON  bool
	)
	return &command{
		name:  "import",
		usage: "[flags] NAME DIR   |   moat template import [flags] NAME --oci PATH [--ref REF]",
		short: "Import a directory or an OCI image as a template",
		long:  tmplImportLong,
		setup: func(fl *pflag.FlagSet) {
			fl.StringVar(&oci, "oci", "", "import the OCI image at `PATH` (layout directory, OCI archive or docker-save archive)")
			fl.StringVar(&ref, "ref", "", "with --oci, the image `REF` to import (tag or digest) when the source holds several")
			fl.StringArrayVarP(&env, "env", "e", nil, "default `K=V` of the template's sandboxes (repeatable)")
			fl.StringVar(&workdir, "workdir", "", "default working `DIR` of the template's processes (absolute; default the image's, else /workspace)")
			fl.StringVar(&user, "user", "", "the template's `USER[:GROUP]`, whose files the sandbox user owns (default the image's, else root)")
			fl.StringVar(&lim.memory, "memory", "", "default memory limit `SIZE` of the template's sandboxes (e.g. 512m)")
			fl.Float64Var(&lim.cpus, "cpus", 0, "default CPU quota in `CPUS`")
			fl.Int64Var(&lim.pids, "pids", 0, "default maximum number of processes and threads `N`")
			fl.StringVar(&lim.disk, "disk", "", "default `SIZE` of the sandboxes' writable layer and tmpfs")
			fl.BoolVar(&asJSON, "json", false, "print the template as JSON")
			st.declare(fl)
		},
		run: func(ctx context.Context, args []string) error {
			req := templates.ImportRequest{Kind: templates.SourceDir, Env: env, Workdir: workdir, User: user}
			switch {
			case oci != "" && len(args) == 1:
				req.Name, req.Kind, req.Path, req.Ref = args[0], templates.SourceOCI, oci, ref
			case oci != "":
				return usageError("import --oci takes one argument, the template's NAME (give either a DIR or --oci PATH)")
			case len(args) != 2:
				return usageError("import takes a template NAME and a DIR (or NAME --oci PATH)")
			case ref != "":
				return usageError("--ref selects an image of --oci")
			default:
				req.Name, req.Path = args[0], args[1]
			}
			for _, e := range env {
				if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
					return usageError("--env %q: want K=V", e)
				}
			}
			if workdir != "" && !filepath.IsAbs(workdir) {
				return usageError("--workdir %q: want an absolute path inside the sandbox", workdir)
			}
			var err error
			if req.Sandbox, err = lim.limits(); err != nil {
				return err
			}
			if req.Kind == templates.SourceDir {
				fi, err := os.Stat(req.Path)
				if err != nil {
					return usageError("import: %s: %v", req.Path, errors.Unwrap(err))
				}
				if !fi.IsDir() {
					return usageError("import: %s is not a directory (an image goes with --oci)", req.Path)
				}
			} else if _, err := os.Stat(req.Path); err != nil {
				return usageError("import: --oci %s: %v", req.Path, errors.Unwrap(err))
			}
			if err := needRoot("moat template import"); err != nil {
				return err
			}
			store, err := st.open()
			if err != nil {
				return err
			}
			ctx, stop := interruptible(ctx)
			defer stop()
			t, err := store.Import(ctx, req)
			if err != nil {
				if ctx.Err() != nil {
					return &exitError{code: exitInterrupted}
				}
				// "import SRC: …" says what failed already.
				return subNamed{err}
			}
			warnImport(sio.stderr, t)
			if asJSON {
				return printJSONTo(sio.stdout, t)
			}
			return printTemplate(sio.stdout, t)
		},
	}
}

// warnImport says on w what the import left out or changed.
func warnImport(w io.Writer, t *templates.Template) {
	if t.SkippedCount > 0 {
		more := ""
		if n := t.SkippedCount - len(t.Skipped); n > 0 {
			more = fmt.Sprintf(" and %d more", n)
		}
		skipped := make([]string, len(t.Skipped))
		for i, p := range t.Skipped { // paths in the image
			skipped[i] = display.Argv([]string{p})
		}
		fmt.Fprintf(w, "moat template import: warning: left out %d device, fifo or socket entries: %s%s\n", t.SkippedCount, strings.Join(skipped, ", "), more)
	}
	if t.StrippedSetid > 0 {
		fmt.Fprintf(w, "moat template import: warning: removed the setuid/setgid bits of %d files\n", t.StrippedSetid)
	}
}

// printTemplate writes a template's description, one field a line; what
// comes from the image (workdir, environment) is escaped.
func printTemplate(w io.Writer, t *templates.Template) error {
	d := display.String
	fmt.Fprintf(w, "name:     %s\nsource:   %s\n", d(t.Name), d(t.Source))
	if t.ImageDigest != "" {
		fmt.Fprintf(w, "image:    %s\n", d(t.ImageDigest))
	}
	fmt.Fprintf(w, "digest:   %s\nsize:     %s (%d bytes)\nentries:  %d\n", t.Layer, formatBytes(t.Bytes), t.Bytes, t.Entries)
	if t.Workdir != "" {
		fmt.Fprintf(w, "workdir:  %s\n", d(t.Workdir))
	}
	user := t.ImageUser
	if user == "" {
		user = "root"
	}
	fmt.Fprintf(w, "user:     %s (its files are the sandbox user's, uid 1000)\n", d(user))
	for _, e := range t.Env {
		fmt.Fprintf(w, "env:      %s\n", d(e))
	}
	if l := formatLimits(t.Limits); l != "" {
		fmt.Fprintf(w, "limits:   %s\n", l)
	}
	if t.SkippedCount > 0 {
		fmt.Fprintf(w, "skipped:  %d\n", t.SkippedCount)
	}
	if t.StrippedSetid > 0 {
		fmt.Fprintf(w, "stripped: %d setuid/setgid\n", t.StrippedSetid)
	}
	return nil
}

// formatLimits writes the set fields of l ("" when none is).
func formatLimits(l sandbox.Limits) string {
	var parts []string
	if l.MemoryBytes > 0 {
		parts = append(parts, "memory "+formatBytes(l.MemoryBytes))
	}
	if l.CPUs > 0 {
		parts = append(parts, fmt.Sprintf("cpus %g", l.CPUs))
	}
	if l.Pids > 0 {
		parts = append(parts, fmt.Sprintf("pids %d", l.Pids))
	}
	if l.DiskBytes > 0 {
		parts = append(parts, "disk "+formatBytes(l.DiskBytes))
	}
	return strings.Join(parts, ", ")
}

func tmplList(sio sandboxIO) *command {
	var (
		st     storeFlags
		asJSON bool
	)
	return &command{
		name:  "ls",
		usage: "[--json]",
		short: "List the templates",
		long:  `List the templates of the store, the built-in "host" first.`,
		setup: func(fl *pflag.FlagSet) {
			fl.BoolVar(&asJSON, "json", false, "print the list as JSON")
			st.declare(fl)
		},
		run: func(ctx context.Context, args []string) error {
			if len(args) > 0 {
				return usageError("ls takes no arguments")
			}
			store, err := st.open()
			if err != nil {
				return err
			}
			ts, err := store.Templates()
			if err != nil {
				return err
			}
			now := time.Now()
			return printList(sio.stdout, asJSON, ts, "NAME\tSOURCE\tSIZE\tENTRIES\tCREATED", func(t *templates.Template) string {
				if t.Layer == "" {
					return fmt.Sprintf("%s\t%s\t-\t-\t-", display.String(t.Name), display.String(t.Source))
				}
				return fmt.Sprintf("%s\t%s\t%s\t%d\t%s", display.String(t.Name), display.String(t.Source), formatBytes(t.Bytes), t.Entries, ago(now, t.Created))
			})
		},
	}
}

func tmplRemove(sio sandboxIO) *command {
	var (
		st     storeFlags
		asJSON bool
	)
	return &command{
		name:  "rm",
		usage: "[--json] NAME...",
		short: "Remove templates",
		long: `Remove each template named, and its layer unless another template shares it;
print each name removed. A template is kept (exit 1) while a snapshot was
taken from it ('moat snapshot rm' those first) or a live sandbox uses it.
The built-in "host" template cannot be removed. With --json, print one
object instead: {"removed": [names], "failed": [{"id", "code", "error"}]}
(the reasons are on stderr too).`,
		setup: func(fl *pflag.FlagSet) {
			fl.BoolVar(&asJSON, "json", false, "print what was removed and what was not as one JSON object")
			st.declare(fl)
		},
		run: func(ctx context.Context, args []string) error {
			if len(args) == 0 {
				return usageError("rm takes one or more template names")
			}
			if err := needRoot("moat template rm"); err != nil {
				return err
			}
			store, err := st.open()
			if err != nil {
				return err
			}
			code := 0
			r := newRemoval()
			for _, name := range args {
				err := store.RemoveTemplate(name)
				r.done(sio.stdout, asJSON, name, storeCode(err), err)
				if err == nil {
					continue
				}
				if errors.Is(err, templates.ErrInUse) || errors.Is(err, templates.ErrNotFound) || name == templates.HostTemplate {
					code = max(code, 1)
				} else {
					code = sandbox.ExitSetupFailed
				}
				hint := ""
				if errors.Is(err, templates.ErrInUse) {
					hint = " (delete its snapshots with 'moat snapshot rm' and end the sandboxes made from it first)"
				}
				fmt.Fprintf(sio.stderr, "moat template rm: %s: %s%s\n", display.String(name), display.String(err.Error()), hint)
			}
			if err := r.print(sio.stdout, asJSON); err != nil {
				return err
			}
			if code != 0 {
				return &exitError{code: code}
			}
			return nil
		},
	}
}
