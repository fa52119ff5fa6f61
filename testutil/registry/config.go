package registry

import (
	"encoding/hex"
	"fmt"
	"strings"
)

// config is what the harness writes into docker-registry's config.yml.
type config struct {
	addr, storage string
	// cert and key are the TLS files (empty: plain HTTP).
	cert, key string
	// htpasswd is the basic-auth file (empty: none).
	htpasswd string
	// realm and tokenRoots configure bearer tokens (empty: none).
	realm, tokenRoots string
}

// yaml renders c. Every value is a path, an address or a URL the harness
// made, quoted as YAML double-quoted strings.
func (c config) yaml() []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\n")
	fmt.Fprintf(&b, "storage:\n  filesystem:\n    rootdirectory: %q\n  delete:\n    enabled: true\n", c.storage)
	fmt.Fprintf(&b, "  maintenance:\n    uploadpurging:\n      enabled: false\n")
	fmt.Fprintf(&b, "http:\n  addr: %q\n  secret: %q\n", c.addr, hex.EncodeToString(randomBytes(16)))
	if c.cert != "" {
		fmt.Fprintf(&b, "  tls:\n    certificate: %q\n    key: %q\n", c.cert, c.key)
	}
	switch {
	case c.htpasswd != "":
		fmt.Fprintf(&b, "auth:\n  htpasswd:\n    realm: hearth-test\n    path: %q\n", c.htpasswd)
	case c.realm != "":
		fmt.Fprintf(&b, "auth:\n  token:\n    realm: %q\n    service: %q\n    issuer: %q\n    rootcertbundle: %q\n",
			c.realm, tokenService, tokenIssuer, c.tokenRoots)
	}
	return []byte(b.String())
}
