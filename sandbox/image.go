package sandbox

import (
	"strings"
	"time"
)

// Image is one version of an image in a tenant's catalog: the root
// filesystem sandboxes are created from, with the config they run under.
//
// A name has one current version, the one a create that names it uses; a
// re-pull of a tag or a rebuild that gives new content adds a version and
// makes it current, while the sandboxes made from an older version (and
// their checkpoints) keep theirs until they are gone.
type Image struct {
	// Name is the caller's handle, unique within its tenant: a plain name
	// ("tools") or, for a pulled image, its normalized registry reference
	// ("127.0.0.1:5000/app:1.2").
	Name string `json:"name"`
	// Tenant owns the image; only it sees and uses the image unless Public.
	Tenant string `json:"tenant"`
	// Digest identifies this version ("sha256:<hex>"): the manifest's
	// digest for a pulled or imported image, that of the root's content
	// description for one made from a sandbox or built.
	Digest string `json:"digest"`
	// Source says how the image came to be: ImageSource*.
	Source string `json:"source"`
	// Ref is where it came from: the registry reference pulled, the
	// sandbox (and checkpoint) it was made from, the Dockerfile's name.
	Ref string `json:"ref,omitempty"`
	// Public images are seen and used by every tenant.
	Public bool `json:"public"`
	// Current marks the version a create that names Name uses.
	Current bool `json:"current"`
	// Config is what sandboxes created from it run under.
	Config ImageConfig `json:"config"`
	// Size is the bytes its root holds unpacked.
	Size int64 `json:"size"`
	// Layers are the layer store's keys of its snapshots, bottom first;
	// the last one is what a sandbox's root is prepared from. They are
	// the node's, never a caller's to name.
	Layers    []string  `json:"-"`
	CreatedAt time.Time `json:"created_at"`
}

// Key is the layer store's key a sandbox's root is prepared from: the top
// of img's layers ("" if it has none).
func (img Image) Key() string {
	if len(img.Layers) == 0 {
		return ""
	}
	return img.Layers[len(img.Layers)-1]
}

// Image sources (Image.Source).
const (
	ImageSourceDefault  = "default"  // the daemon's own default image
	ImageSourceRegistry = "registry" // pulled from a registry
	ImageSourceImport   = "import"   // imported from a tarball
	ImageSourceSandbox  = "sandbox"  // made from a sandbox's disk
	ImageSourceBuild    = "build"    // built from a Dockerfile
)

// ImageConfig is what a sandbox created from an image runs under: the
// image's own config (OCI image config), with its user resolved against
// the image's /etc/passwd and /etc/group when the image was stored.
type ImageConfig struct {
	// Env is the environment every command starts with ("K=V").
	Env []string `json:"env,omitempty"`
	// WorkingDir is the commands' default working directory; "" is the
	// user's home.
	WorkingDir string `json:"working_dir,omitempty"`
	// User is the user as the image names it ("node", "1000:1000", "");
	// UID and GID are what it resolved to, and Home that user's home.
	User string `json:"user,omitempty"`
	UID  int    `json:"uid"`
	GID  int    `json:"gid"`
	Home string `json:"home,omitempty"`
	// Entrypoint and Cmd are recorded, not run: hearth's agent stays PID 1.
	Entrypoint []string `json:"entrypoint,omitempty"`
	Cmd        []string `json:"cmd,omitempty"`
	// Labels are the image's labels.
	Labels map[string]string `json:"labels,omitempty"`
}

// CapImage prefixes the capability that says which image version a
// sandbox runs: "image:sha256:…".
const CapImage = "image:"

// RegistryLogin is a tenant's credentials for one registry host, as listed:
// the password (or token) stays sealed in the store and is never returned.
type RegistryLogin struct {
	Tenant string `json:"tenant"`
	// Host is the registry's host[:port], lower-cased.
	Host     string `json:"host"`
	Username string `json:"username"`
	// Insecure allows plain HTTP or an unverified certificate for Host.
	Insecure bool `json:"insecure,omitempty"`
	// CA is a PEM bundle of certificate authorities trusted for Host, on
	// top of the system's.
	CA        string    `json:"ca,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// ImageProgress is one progress event of a pull, an import, a build or an
// image made from a sandbox, streamed to a caller that asks for progress.
type ImageProgress struct {
	// Phase is "resolve", "layer", "unpack", "step", "commit" or "done".
	Phase string `json:"phase"`
	// Layer is the layer's digest (phase layer and unpack), Step the
	// build step's number from 1 and its instruction (phase step).
	Layer string `json:"layer,omitempty"`
	Step  int    `json:"step,omitempty"`
	Text  string `json:"text,omitempty"`
	// Bytes of Total done (layer: downloaded; unpack: written).
	Bytes int64 `json:"bytes,omitempty"`
	Total int64 `json:"total,omitempty"`
	// Layers is the number of layers, Cached whether this layer or step
	// was already there.
	Layers int  `json:"layers,omitempty"`
	Cached bool `json:"cached,omitempty"`
}

// IsReference reports whether ref reads as a registry reference
// (HOST[:PORT]/REPO…: its first element has a dot or a colon, or is
// localhost) rather than an image's plain name.
func IsReference(ref string) bool {
	host, _, ok := strings.Cut(ref, "/")
	return ok && (strings.ContainsAny(host, ".:") || host == "localhost")
}

// RegistryHost is the host[:port] a registry reference names, lower-cased;
// "" for a plain name.
func RegistryHost(ref string) string {
	if !IsReference(ref) {
		return ""
	}
	host, _, _ := strings.Cut(ref, "/")
	return strings.ToLower(host)
}

// maxImageName is the longest image name.
const maxImageName = 255

// ValidateImageName checks an image name: 1 to 255 bytes of lowercase
// letters, digits and . _ - / : @, starting with a letter or digit, without
// "..", "//" or a trailing "/" (a plain name or a normalized registry
// reference).
func ValidateImageName(name string) error {
	bad := func(why string) error {
		return Errorf(CodeInvalidArgument, "image name %q %s", name, why).
			WithHint("name an image with lowercase letters, digits and . _ - / : @, e.g. tools or 127.0.0.1:5000/app:1.0")
	}
	if name == "" || len(name) > maxImageName {
		return bad("must be 1 to 255 bytes")
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case i > 0 && strings.IndexByte("._-/:@", c) >= 0:
		default:
			return bad("has a character that is not allowed")
		}
	}
	if strings.Contains(name, "..") || strings.Contains(name, "//") || strings.HasSuffix(name, "/") {
		return bad(`has "..", "//" or a trailing "/"`)
	}
	return nil
}
