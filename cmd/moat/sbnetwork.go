package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/pflag"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/client"
	"github.com/moat-sandbox/moat/display"
	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/sandbox"
)

// netFlags are the network flags of moat sandbox create (and moat
// snapshot fork) and moat sandbox network: moat run's --net,
// --allow-domain and --deny-domain, sent to the daemon.
type netFlags struct {
	net          string
	allow, deny  []string
	defaultedNet bool // an absent --net means none (create), not the current mode
}

// declare adds the flags; create says an absent --net means mode none
// (a create) rather than the sandbox's current mode (moat sandbox
// network).
func (n *netFlags) declare(fl *pflag.FlagSet, create bool) {
	what := "none (default: loopback only), proxy (the daemon's egress proxy is the only way out), open (host network; only at create, where the managed policy permits it)"
	if !create {
		what = "none (loopback only: closes the proxy and its connections), proxy (the daemon's egress proxy is the only way out); default: the sandbox's current mode"
	}
	fl.StringVar(&n.net, "net", "", "network `MODE`: "+what)
	fl.StringArrayVar(&n.allow, "allow-domain", nil, "with --net proxy, admit `DOMAIN` ('*.example.com' for subdomains; an IP or a CIDR like 10.0.0.0/8 only where the managed policy's allow_cidr_entries covers it) (repeatable)")
	fl.StringArrayVar(&n.deny, "deny-domain", nil, "refuse `DOMAIN` even where an allowlist admits it (repeatable)")
	n.defaultedNet = create
}

// request is the network the flags ask for, checked for form as moat run
// checks its flags (the daemon judges them by its policy); nil when no
// network flag was given.
func (n *netFlags) request() (*api.Network, error) {
	if n.net == "" && len(n.allow)+len(n.deny) == 0 {
		return nil, nil
	}
	mode := n.net
	if mode != "" {
		m, err := sandbox.ParseNetMode(mode)
		if err != nil {
			return nil, usageError("--net %q: want none, proxy or open", n.net)
		}
		if m != sandbox.NetProxy && len(n.allow)+len(n.deny) > 0 {
			return nil, usageError("--allow-domain and --deny-domain need --net proxy")
		}
	} else if n.defaultedNet && len(n.allow)+len(n.deny) > 0 {
		return nil, usageError("--allow-domain and --deny-domain need --net proxy (the default, --net none, has no network at all)")
	}
	for _, list := range []struct {
		flag    string
		entries []string
	}{{"--allow-domain", n.allow}, {"--deny-domain", n.deny}} {
		for _, e := range list.entries {
			if _, err := policy.NetAllowRule(e); err != nil {
				return nil, usageError("%s %v", list.flag, err)
			}
		}
	}
	return &api.Network{Mode: mode, AllowDomains: n.allow, DenyDomains: n.deny}, nil
}

const sbNetworkLong = `Set a running sandbox's network: its mode and the egress proxy's allowlist.
The flags replace the sandbox's whole network (an allowlist not repeated
is removed); without any flag the command prints the network as it is.

  --net proxy   from none: the egress proxy's listener (127.0.0.1:3128) is
                added inside the sandbox's network namespace; processes
                started afterwards get the proxy environment (HTTP_PROXY...)
  --net none    closes the listener and every proxied connection
  --net open    refused: mode open exists only from a sandbox's create

The daemon bounds the allowlist by its policy: an entry a deny rule of the
managed, project or user policy (or the sandbox's own rules) covers stays
refused and is reported as dropped, with the rule; an IP address or CIDR
range is accepted only inside the managed policy's allow_cidr_entries.
The proxy decides the next connection with the new network as soon as
the command returns; a change that narrows it ends the proxied
connections opened before. Every change is audited (sandbox.network,
with the previous and the new network).

Prints the mode and the effective allowlist (with --json, the network as
JSON); dropped entries go to stderr. Exit 125 when the daemon refuses.`

func sbNetwork(sio sandboxIO) *command {
	var (
		nf     netFlags
		asJSON bool
	)
	return &command{
		name:  "network",
		usage: "SANDBOX [--net MODE] [--allow-domain DOMAIN]... [--deny-domain DOMAIN]... [--json]",
		short: "Set a running sandbox's network mode and allowlist",
		long:  sbNetworkLong,
		setup: func(fl *pflag.FlagSet) {
			nf.declare(fl, false)
			fl.BoolVar(&asJSON, "json", false, "print the network as JSON")
		},
		run: func(ctx context.Context, args []string) error {
			if len(args) != 1 {
				return usageError("network takes one sandbox id")
			}
			req, err := nf.request()
			if err != nil {
				return err
			}
			return withClient(func(c *client.Client) error {
				sb := c.Sandbox(args[0])
				var n *api.Network
				if req == nil {
					info, err := sb.Info(ctx)
					if err != nil {
						return err
					}
					if n = info.Network; n == nil {
						n = &api.Network{Mode: string(sandbox.NetNone)}
					}
				} else if n, err = sb.SetNetwork(ctx, *req); err != nil {
					return err
				}
				return printNetwork(sio.stdout, sio.stderr, asJSON, n)
			})
		},
	}
}

// printNetwork prints a sandbox's network: "mode MODE", then one
// "allow ENTRY" and "deny ENTRY" line each; dropped entries go to errw.
func printNetwork(w, errw io.Writer, asJSON bool, n *api.Network) error {
	for _, d := range n.Dropped {
		fmt.Fprintf(errw, "moat: network: dropped %s: %s\n", display.String(d.Entry), display.String(d.Reason))
	}
	if asJSON {
		return printJSONTo(w, n)
	}
	var b strings.Builder
	mode := n.Mode
	if mode == "" {
		mode = string(sandbox.NetNone)
	}
	fmt.Fprintf(&b, "mode %s\n", display.String(mode))
	for _, a := range n.AllowDomains {
		fmt.Fprintf(&b, "allow %s\n", display.String(a))
	}
	for _, d := range n.DenyDomains {
		fmt.Fprintf(&b, "deny %s\n", display.String(d))
	}
	_, err := io.WriteString(w, b.String())
	return err
}
