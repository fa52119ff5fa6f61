package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"

	"github.com/hearth/hearth/door"
	"github.com/hearth/hearth/image/dockerfile"
	"github.com/hearth/hearth/lifecycle"
	"github.com/hearth/hearth/sandbox"
)

// maxBuildArgs bounds the "build_args" part of a build.
const maxBuildArgs = 64 << 10

// buildParts is what a build's multipart body holds before its context.
type buildParts struct {
	dockerfile []byte
	args       map[string]string
}

// handleBuild builds the image ?name= from a multipart/form-data body
// (docs/API.md, "Build"): the part "dockerfile", then "build_args" (a JSON
// object, optional), then "context", a tar of the build context, spooled
// into a private directory under Options.BuildDir (never outside it) and
// removed when the build ends. ?network= is the network mode of the
// build's RUN sandboxes. Its progress streams as a pull's does.
func (s images) handleBuild(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	q := queryParams(r, "name", "progress", "network")
	name, progress, network := q.q.Get("name"), q.bool("progress"), q.q.Get("network")
	if name == "" {
		q.fail(sandbox.Errorf(sandbox.CodeInvalidArgument, "missing query parameter \"name\"").WithHint("add ?name=<image name>"))
	}
	if q.err != nil {
		door.WriteError(w, r, q.err)
		return
	}
	mr, err := r.MultipartReader()
	if err != nil {
		door.WriteError(w, r, sandbox.Errorf(sandbox.CodeInvalidArgument, "a build's body is multipart/form-data: %v", err).
			WithHint("send the parts dockerfile, build_args and context (see docs/API.md)"))
		return
	}
	parts, ctxPart, err := readBuildParts(mr)
	if err != nil {
		door.WriteError(w, r, err)
		return
	}
	dir, err := os.MkdirTemp(s.opts.BuildDir, "build-")
	if err != nil {
		door.WriteError(w, r, err)
		return
	}
	defer os.RemoveAll(dir)
	bc, err := dockerfile.TarContext(ctxPart, filepath.Join(dir, "context"), 0)
	if err != nil {
		door.WriteError(w, r, sandbox.Errorf(sandbox.CodeInvalidArgument, "build context: %v", err).WithHint("send the context as a tar of the directory"))
		return
	}
	defer bc.Close()
	req := lifecycle.BuildRequest{Name: name, Dockerfile: bytes.NewReader(parts.dockerfile), BuildArgs: parts.args, Context: bc, Network: network}
	s.withProgress(w, r, progress, func(progress lifecycle.Progress) (sandbox.Image, error) {
		return s.svc.Images.Build(r.Context(), p, req, progress)
	})
}

// readBuildParts reads a build's parts up to its context, which it
// returns unread.
func readBuildParts(mr *multipart.Reader) (buildParts, io.Reader, error) {
	var parts buildParts
	bad := func(format string, args ...any) error {
		return sandbox.Errorf(sandbox.CodeInvalidArgument, format, args...).WithHint("send the parts dockerfile, build_args and context, in that order (see docs/API.md)")
	}
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			return parts, nil, bad("the build's body has no part \"context\"")
		}
		if err != nil {
			return parts, nil, bad("the build's body: %v", err)
		}
		switch part.FormName() {
		case "dockerfile":
			if parts.dockerfile, err = io.ReadAll(io.LimitReader(part, dockerfile.MaxSize+1)); err != nil {
				return parts, nil, bad("the part dockerfile: %v", err)
			}
			if len(parts.dockerfile) > dockerfile.MaxSize {
				return parts, nil, sandbox.Errorf(sandbox.CodeTooLarge, "the Dockerfile is over %d bytes", dockerfile.MaxSize).WithHint("shorten it")
			}
		case "build_args":
			if err := json.NewDecoder(io.LimitReader(part, maxBuildArgs)).Decode(&parts.args); err != nil {
				return parts, nil, bad("the part build_args is not a JSON object of strings: %v", err)
			}
		case "context":
			if parts.dockerfile == nil {
				return parts, nil, bad("the part dockerfile must come before the context")
			}
			return parts, part, nil
		default:
			return parts, nil, bad("unknown part %q", part.FormName())
		}
	}
}
