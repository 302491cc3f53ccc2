package sandbox

// RootFS is the root filesystem of a sandbox: an overlayfs whose lower
// layers are read-only host directories and whose upper layer is private to
// the sandbox (a size-capped tmpfs, Limits.DiskBytes, removed with it).
type RootFS struct {
	// Layers are the read-only lower layers, top first: snapshot layers,
	// then, unless Host is set, a template's complete root. Files in them
	// are stored with the sandbox's own ids (0 is the sandbox's root, 1000
	// its user) and appear so through an idmapped mount. The runtime holds
	// a shared flock(2) on each layer directory for the sandbox's life; a
	// store removing a layer takes it exclusively first.
	Layers []string `json:"layers,omitempty"`
	// Host: the host's system directories (/usr, /bin, /lib...) and a
	// filtered /etc are mounted read-only over the layers, as in a
	// sandbox without RootFS (the "host" template).
	Host bool `json:"host,omitempty"`
	// Template names the template in reports.
	Template string `json:"template,omitempty"`
	// User is the template's user, in an OCI image config's form ("" is
	// root; see ResolveImageUser), resolved against the template layer's
	// /etc/passwd and /etc/group. Processes still run as the sandbox user
	// (uid 1000): the template layer is idmapped so that what this user
	// owns there appears owned by the sandbox user (and what uid 1000 owns
	// there by the template's user), so the command can write what the
	// image's user could, its writes landing in the private upper layer.
	// Ignored with Host.
	User string `json:"user,omitempty"`
}
