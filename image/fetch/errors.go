package fetch

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// Kinds of failure, found with errors.Is in the errors this package
// returns.
var (
	// ErrUnauthorized: the registry refused the credentials, or asked for
	// some (HTTP 401 or 403).
	ErrUnauthorized = errors.New("unauthorized")
	// ErrNotFound: the registry has no such repository, tag or blob.
	ErrNotFound = errors.New("not found")
	// ErrTooLarge: a manifest, config, image or archive is over its limit.
	ErrTooLarge = errors.New("too large")
	// ErrDigest: content does not match its digest or size.
	ErrDigest = errors.New("content does not match its digest")
	// ErrUnsupported: schema 1 manifests, artifacts that are not container
	// images, layer media types and digest algorithms hearth does not
	// read, an image for another platform.
	ErrUnsupported = errors.New("unsupported")
	// ErrInvalid: a reference, manifest, config or archive that is not
	// well-formed.
	ErrInvalid = errors.New("invalid")
	// ErrTLS: the registry's certificate was not verified.
	ErrTLS = errors.New("TLS certificate not trusted")
	// ErrPlainHTTP: the host would have been spoken to over plain HTTP,
	// which only loopback hosts and those marked Insecure are.
	ErrPlainHTTP = errors.New("plain HTTP refused")
	// ErrInternal: under Options.PublicOnly, a host that Registries does
	// not list is at an address on the host's own or a private network.
	ErrInternal = errors.New("internal address refused")
)

// Error is a failure to fetch or read an image: where it happened, its
// kind, its cause and the HTTP status, if any.
type Error struct {
	// Registry (host[:port]) and Repository of a pull; empty for an
	// archive.
	Registry, Repository string
	// Tag is the tag being resolved, if any.
	Tag string
	// Object is what failed: "manifest", "index", "config", "layer", or
	// "" for the registry or the archive as a whole.
	Object string
	// Digest is the object's digest, when known.
	Digest string
	// Entry is the archive entry concerned.
	Entry string
	// Status is the registry's HTTP status; 0 if none.
	Status int
	// Kind is one of the Err* kinds, or nil.
	Kind error
	// Err is the cause, or nil.
	Err error

	archive bool // ReadArchive's
}

func (e *Error) Error() string {
	var b strings.Builder
	switch {
	case e.Registry != "":
		b.WriteString(e.Registry + "/" + e.Repository)
		if e.Tag != "" {
			b.WriteString(":" + e.Tag)
		}
	case e.Entry != "":
		fmt.Fprintf(&b, "image archive: %q", e.Entry)
	case e.archive:
		b.WriteString("image archive")
	default:
		b.WriteString("image")
	}
	if what := strings.TrimSpace(e.Object + " " + e.Digest); what != "" {
		b.WriteString(": " + what)
	}
	if e.Kind != nil {
		b.WriteString(": " + e.Kind.Error())
	}
	if e.Err != nil {
		b.WriteString(": " + e.Err.Error())
	}
	if e.Status != 0 {
		fmt.Fprintf(&b, " (HTTP %d %s)", e.Status, http.StatusText(e.Status))
	}
	return b.String()
}

// Unwrap gives the kind and the cause.
func (e *Error) Unwrap() []error {
	var errs []error
	for _, err := range []error{e.Kind, e.Err} {
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// kindf is an error of kind with a formatted cause, for a caller to place
// (remote.fail or an archive's entry).
func kindf(kind error, format string, args ...any) *Error {
	return &Error{Kind: kind, Err: fmt.Errorf(format, args...)}
}

// at places e at the object what of digest.
func (e *Error) at(what, digest string) *Error {
	e.Object, e.Digest = what, digest
	return e
}

// placeAt places an *Error that names no digest at the object what of
// digest.
func placeAt(err error, what, digest string) error {
	if e := (*Error)(nil); errors.As(err, &e) && e.Digest == "" {
		e.at(what, digest)
	}
	return err
}

// fail places err (from the transport, the registry, or a kindf) at r's
// reference and the object what of digest, and gives it a kind where it
// has none: from a certificate the transport did not trust, plain HTTP it
// refused, or the registry's HTTP status.
func (r *remote) fail(what, digest string, err error) error {
	if err == nil {
		return nil
	}
	e := &Error{Registry: r.host, Repository: r.repo, Tag: r.tag, Object: what, Digest: digest, Err: err}
	var placed *Error
	if errors.As(err, &placed) {
		if placed.Registry != "" {
			return err
		}
		e.Kind, e.Err, e.Status = placed.Kind, placed.Err, placed.Status
		if placed.Digest != "" {
			e.Object, e.Digest = cmp.Or(placed.Object, what), placed.Digest
		}
	}
	var (
		te *transport.Error
		pe *plainHTTPError
	)
	switch {
	case e.Kind != nil:
	case certError(err) != nil:
		e.Kind, e.Err = ErrTLS, fmt.Errorf("%w (give the registry's CA, or mark it insecure)", certError(err))
	case errors.As(err, &pe):
		e.Kind = ErrPlainHTTP
	case errors.As(err, &te):
		e.Status = te.StatusCode
		switch te.StatusCode {
		case http.StatusUnauthorized, http.StatusForbidden:
			e.Kind, e.Err = ErrUnauthorized, fmt.Errorf("run hearth registry login %s", r.host)
		case http.StatusNotFound:
			e.Kind = ErrNotFound
		}
	}
	return e
}

func isContext(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// certError is the TLS certificate verification failure in err, or nil.
func certError(err error) error {
	var (
		ve *tls.CertificateVerificationError
		ua x509.UnknownAuthorityError
		he x509.HostnameError
		ci x509.CertificateInvalidError
	)
	switch {
	case errors.As(err, &ve):
		return ve
	case errors.As(err, &ua):
		return ua
	case errors.As(err, &he):
		return he
	case errors.As(err, &ci):
		return ci
	}
	return nil
}

// permanentError marks a failure that trying again will not mend (the
// local disk's, say).
type permanentError struct{ err error }

func (p permanentError) Error() string { return p.err.Error() }
func (p permanentError) Unwrap() error { return p.err }

// temporary reports whether trying again may succeed: a cut or reset
// connection, a timeout, a registry's 5xx or 429; not a refusal, a
// certificate, a mismatch, a limit or the caller's cancellation.
func temporary(err error) bool {
	var (
		e  *Error
		te *transport.Error
		pe permanentError
		ge *plainHTTPError
	)
	switch {
	case err == nil, isContext(err), errors.As(err, &pe), errors.As(err, &ge), certError(err) != nil:
		return false
	case errors.As(err, &e) && e.Kind != nil:
		return false
	case errors.As(err, &te):
		return te.Temporary()
	}
	return errors.Is(err, errTryAgain) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE) || isNetError(err)
}
