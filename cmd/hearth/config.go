package main

import (
	"path/filepath"
	"strings"
)

// Where a client verb finds the daemon when nothing says otherwise: the
// local daemon and the operator token it writes into its data dir.
const (
	defaultURL     = "http://127.0.0.1:7077"
	defaultDataDir = "/var/lib/hearth"
	tokenFileName  = "operator.token"
)

// config is where the client verbs find the daemon and the token they send.
type config struct {
	URL   string
	Token string
	// TokenSource names where Token came from ("--token", "HEARTH_TOKEN" or
	// the token file's path), or is "" when there is no token.
	TokenSource string
}

// resolveConfig decides the daemon URL and token: a flag beats its
// environment variable (HEARTH_URL, HEARTH_TOKEN). With neither a URL nor a
// token given, the local daemon is used with its operator token file
// ($HEARTH_DATA_DIR, else /var/lib/hearth, /operator.token) when that is
// readable. The token file is never sent to a URL the caller chose: it
// belongs to the local daemon. The URL is checked by the client, whose
// every call reports a malformed one as invalid_argument.
func resolveConfig(flagURL, flagToken string, getenv func(string) string, readFile func(string) ([]byte, error)) config {
	var cfg config
	rawURL := firstNonEmpty(flagURL, getenv("HEARTH_URL"))
	switch {
	case flagToken != "":
		cfg.Token, cfg.TokenSource = flagToken, "--token"
	case getenv("HEARTH_TOKEN") != "":
		cfg.Token, cfg.TokenSource = getenv("HEARTH_TOKEN"), "HEARTH_TOKEN"
	case rawURL == "":
		path := tokenFilePath(getenv)
		if b, err := readFile(path); err == nil {
			if tok := strings.TrimSpace(string(b)); tok != "" {
				cfg.Token, cfg.TokenSource = tok, path
			}
		}
	}
	cfg.URL = firstNonEmpty(rawURL, defaultURL)
	return cfg
}

// tokenFilePath is where the local daemon keeps its operator token.
func tokenFilePath(getenv func(string) string) string {
	return filepath.Join(firstNonEmpty(getenv("HEARTH_DATA_DIR"), defaultDataDir), tokenFileName)
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}
