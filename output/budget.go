package output

import (
	"sync"
)

// Budget accounts the bytes of output a daemon holds in memory (captures
// of calls in progress, the kept output of background processes), in all
// and per tenant, so that no tenant and no number of tenants can make it
// hold more than its limits. A holder asks before it grows (Account.Grow)
// and gives back what it drops; a refusal means "hold no more": the
// holder then spills to disk or drops its oldest output. It is safe for
// concurrent use.
type Budget struct {
	mu        sync.Mutex
	max       int64 // daemon-wide; 0 means no limit
	tenantMax int64 // per tenant; 0 means no limit
	held      int64
	peak      int64
	refused   int64
	tenants   map[string]int64
}

// NewBudget returns a Budget of max bytes in all and tenantMax per tenant
// (0: no limit).
func NewBudget(max, tenantMax int64) *Budget {
	return &Budget{max: max, tenantMax: tenantMax, tenants: map[string]int64{}}
}

// Account returns a holder's account, charged to tenant. A nil *Budget
// gives a nil *Account, which never refuses.
func (b *Budget) Account(tenant string) *Account {
	if b == nil {
		return nil
	}
	return &Account{b: b, tenant: tenant}
}

// Held is the number of bytes held now, in all.
func (b *Budget) Held() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.held
}

// TenantHeld is the number of bytes held now for tenant.
func (b *Budget) TenantHeld(tenant string) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.tenants[tenant]
}

// Peak is the most bytes held at once since the budget was made.
func (b *Budget) Peak() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.peak
}

// Refused counts the requests to grow that were refused.
func (b *Budget) Refused() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.refused
}

// Limits returns the daemon-wide and per-tenant limits.
func (b *Budget) Limits() (max, tenantMax int64) { return b.max, b.tenantMax }

// Account is one holder's share of a Budget (a capture, a log). Its
// methods are safe for concurrent use; a nil *Account never refuses and
// counts nothing.
type Account struct {
	b      *Budget
	tenant string
	held   int64 // under b.mu
}

// Grow asks for n more bytes; false means the tenant's or the daemon's
// limit would be passed, and nothing was charged.
func (a *Account) Grow(n int) bool {
	if a == nil || n <= 0 {
		return true
	}
	b := a.b
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.tenants[a.tenant]
	if b.max > 0 && b.held+int64(n) > b.max || b.tenantMax > 0 && t+int64(n) > b.tenantMax {
		b.refused++
		return false
	}
	b.held += int64(n)
	b.peak = max(b.peak, b.held)
	b.tenants[a.tenant] = t + int64(n)
	a.held += int64(n)
	return true
}

// Shrink gives back n bytes (at most what the account holds).
func (a *Account) Shrink(n int) {
	if a == nil || n <= 0 {
		return
	}
	b := a.b
	b.mu.Lock()
	defer b.mu.Unlock()
	a.shrinkLocked(min(int64(n), a.held))
}

func (a *Account) shrinkLocked(n int64) {
	b := a.b
	a.held -= n
	b.held -= n
	if t := b.tenants[a.tenant] - n; t > 0 {
		b.tenants[a.tenant] = t
	} else {
		delete(b.tenants, a.tenant)
	}
}

// Close gives back everything the account holds; it may be called more
// than once.
func (a *Account) Close() {
	if a == nil {
		return
	}
	a.b.mu.Lock()
	defer a.b.mu.Unlock()
	a.shrinkLocked(a.held)
}

// Held is what the account holds now.
func (a *Account) Held() int64 {
	if a == nil {
		return 0
	}
	a.b.mu.Lock()
	defer a.b.mu.Unlock()
	return a.held
}
