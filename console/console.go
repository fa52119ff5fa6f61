// Package console is hearth's web console: static assets embedded in the
// binary (no CDN, nothing built at run time; xterm.js is vendored from npm
// by scripts/vendor-xterm.sh), served at /console/. The page holds no
// logic the API lacks: every action it offers is an API call, made with
// the token its user signs in with (kept in the browser's session storage
// only), so it shows and does exactly what that token may.
package console

import (
	"embed"
	"io/fs"
	"net/http"
	"path"
	"strings"
)

//go:embed assets
var assets embed.FS

// Prefix is where the console is served.
const Prefix = "/console/"

// Handler serves the console's assets under Prefix; any path that names no
// asset is the page itself (its views are in the URL's fragment). Every
// answer forbids framing and sniffing, sends no referrer, and confines the
// page to this origin (scripts and styles from these assets only, calls
// and WebSockets to the daemon only).
func Handler() http.Handler {
	files, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded tree always has assets/
	}
	static := http.StripPrefix(Prefix, http.FileServerFS(files))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
		h.Set("X-Frame-Options", "DENY")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		name := strings.TrimPrefix(path.Clean("/"+strings.TrimPrefix(r.URL.Path, Prefix)), "/")
		if name == "" || name == "." {
			serveIndex(w, r, files)
			return
		}
		if _, err := fs.Stat(files, name); err != nil {
			serveIndex(w, r, files)
			return
		}
		static.ServeHTTP(w, r)
	})
}

// serveIndex answers the page.
func serveIndex(w http.ResponseWriter, r *http.Request, files fs.FS) {
	b, err := fs.ReadFile(files, "index.html")
	if err != nil {
		http.Error(w, "the console's page is missing from this build", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Write(b)
}
