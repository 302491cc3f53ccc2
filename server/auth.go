package server

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// Tokens file names in the data directory.
const (
	// TokensFile lists every API token, one "TENANT TOKEN [ROLE]" per
	// line.
	TokensFile = "tokens"
	// TokenFile holds the token of tenant "default" alone, for local
	// clients (MOAT_TOKEN_FILE).
	TokenFile = "token"
	// ApproverTokenFile holds an approver token of tenant "default",
	// created on first start with TokenFile, for the person who answers
	// approvals (moat approvals; MOAT_APPROVER_TOKEN_FILE).
	ApproverTokenFile = "approver-token"
	// RoleApprover lets a token answer approvals. Give it to people, not
	// to agents: an agent holding it could approve its own calls.
	RoleApprover = "approver"
	// DefaultTenant owns the token created on first start.
	DefaultTenant = "default"
)

// Tokens authenticates API callers. Each token belongs to one tenant and
// may have a role (approver). Tokens are kept as SHA-256 digests and
// compared in constant time.
type Tokens struct {
	path string
	mu   sync.RWMutex
	list []tokenEntry
}

type tokenEntry struct {
	digest [sha256.Size]byte
	tenant string
	id     string // short public name of the token: its digest's prefix
	role   string // "" or RoleApprover
}

// ErrBadToken is returned for a missing or unknown token.
var ErrBadToken = errors.New("missing or invalid bearer token")

// LoadTokens reads dir/tokens, creating it (and dir/token and
// dir/approver-token) with a new token and a new approver token for
// tenant "default" when it does not exist. created reports that tokens
// were made.
func LoadTokens(dir string) (t *Tokens, created bool, err error) {
	t = &Tokens{path: filepath.Join(dir, TokensFile)}
	if _, err := os.Lstat(t.path); errors.Is(err, fs.ErrNotExist) {
		if err := createTokens(dir); err != nil {
			return nil, false, err
		}
		created = true
	}
	if err := t.Reload(); err != nil {
		return nil, false, err
	}
	return t, created, nil
}

// newToken returns a new random token.
func newToken() (string, error) {
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", fmt.Errorf("auth: new token: %w", err)
	}
	return "moat_" + hex.EncodeToString(raw[:]), nil
}

// createTokens writes a first token and a first approver token for the
// default tenant.
func createTokens(dir string) error {
	tok, err := newToken()
	if err != nil {
		return err
	}
	atok, err := newToken()
	if err != nil {
		return err
	}
	write := func(name, content string) error {
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return fmt.Errorf("auth: %w", err)
		}
		if _, err := f.WriteString(content); err != nil {
			f.Close()
			return fmt.Errorf("auth: write %s: %w", name, err)
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return fmt.Errorf("auth: sync %s: %w", name, err)
		}
		return f.Close()
	}
	_ = os.Remove(filepath.Join(dir, TokenFile))
	_ = os.Remove(filepath.Join(dir, ApproverTokenFile))
	if err := write(TokenFile, tok+"\n"); err != nil {
		return err
	}
	if err := write(ApproverTokenFile, atok+"\n"); err != nil {
		return err
	}
	return write(TokensFile, "# moat API tokens: one \"TENANT TOKEN [ROLE]\" per line; ROLE approver may answer approvals.\n"+
		"# Reloaded on SIGHUP.\n"+DefaultTenant+" "+tok+"\n"+DefaultTenant+" "+atok+" "+RoleApprover+"\n")
}

// Reload reads the tokens file again. On error the previous tokens stay.
func (t *Tokens) Reload() error {
	fi, err := os.Lstat(t.path)
	if err != nil {
		return fmt.Errorf("auth: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("auth: %s is not a regular file", t.path)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("auth: %s is readable by others (mode %04o); chmod 600 it", t.path, fi.Mode().Perm())
	}
	data, err := os.ReadFile(t.path)
	if err != nil {
		return fmt.Errorf("auth: %w", err)
	}
	list, err := parseTokens(data)
	if err != nil {
		return fmt.Errorf("auth: %s: %w", t.path, err)
	}
	t.mu.Lock()
	t.list = list
	t.mu.Unlock()
	return nil
}

func parseTokens(data []byte) ([]tokenEntry, error) {
	var list []tokenEntry
	seen := map[[sha256.Size]byte]bool{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 && len(f) != 3 {
			return nil, fmt.Errorf("line %d: want \"TENANT TOKEN [ROLE]\"", n)
		}
		role := ""
		if len(f) == 3 {
			if f[2] != RoleApprover {
				return nil, fmt.Errorf("line %d: unknown role %q (the only role is %q)", n, f[2], RoleApprover)
			}
			role = f[2]
		}
		if !validTenant(f[0]) {
			return nil, fmt.Errorf("line %d: tenant %q must be 1-64 of [A-Za-z0-9_.-]", n, f[0])
		}
		if len(f[1]) < 32 {
			return nil, fmt.Errorf("line %d: token shorter than 32 characters", n)
		}
		d := sha256.Sum256([]byte(f[1]))
		if seen[d] {
			return nil, fmt.Errorf("line %d: token listed twice", n)
		}
		seen[d] = true
		list = append(list, tokenEntry{digest: d, tenant: f[0], id: "token:" + hex.EncodeToString(d[:4]), role: role})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(list) == 0 {
		return nil, errors.New("no tokens")
	}
	return list, nil
}

func validTenant(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

// Authenticate returns the caller a bearer token stands for. Every known
// token is compared, in constant time, whatever matches.
func (t *Tokens) Authenticate(token string) (Caller, error) {
	if token == "" {
		return Caller{}, ErrBadToken
	}
	d := sha256.Sum256([]byte(token))
	t.mu.RLock()
	defer t.mu.RUnlock()
	found := -1
	for i := range t.list {
		if subtle.ConstantTimeCompare(d[:], t.list[i].digest[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return Caller{}, ErrBadToken
	}
	e := t.list[found]
	return Caller{Tenant: e.tenant, Actor: e.id, Approver: e.role == RoleApprover}, nil
}
