// Package dockerfile turns a Dockerfile and its build context into a plan
// of steps with cache keys, which hearth executes in a build sandbox.
//
// The text is parsed by BuildKit's own parser
// (github.com/moby/buildkit/frontend/dockerfile/parser) and variables are
// expanded by its shell lexer, so that $VAR, ${VAR}, ${VAR:-default},
// quotes and escapes mean what they mean to Docker. The use is in three
// calls:
//
//	f, err := dockerfile.Parse(r, buildArgs)   // checks; f.From is the base image
//	plan, err := f.Plan(base.Config)           // expands against the base image's config
//	err = plan.Resolve(buildContext, base.Digest) // finds and hashes the sources, keys every step
//
// then the executor applies plan.Steps in order (KindRun in a sandbox,
// KindCopy by unpacking each Copy's WriteTar, KindWorkdir by making the
// directory) and stores the root with plan.Config. A step whose Key it
// already has a root for need not run again.
//
// # What is built
//
// One stage: ARGs, then one FROM (an image reference or scratch;
// "AS name" allowed), then RUN (shell form through SHELL, by default
// /bin/sh -c; exec form; inline documents as BuildKit runs them), COPY and
// ADD from the context, ENV, WORKDIR, USER, ARG (defaults, --build-arg
// overrides, an ARG before FROM re-declared after it), LABEL, CMD,
// ENTRYPOINT and SHELL.
//
// COPY and ADD: sources are paths in the context or glob patterns
// (path.Match, one path element at a time); an absolute source is
// relative to the context's root, as in Docker. --chown=user[:group] is
// kept (numbers resolved at once, names by the executor against the
// root's /etc/passwd); --chmod takes an octal mode; --link is accepted
// and changes nothing (hearth applies each copy to the root it has).
// ADD unpacks a local tar archive, plain or compressed with gzip or
// bzip2, as Docker does (xz and zstd are refused: the standard library
// does not read them); every entry of the archive is checked (see
// Copy.WriteTar).
//
// Recorded, not used by a hearth sandbox: EXPOSE, VOLUME, STOPSIGNAL and
// MAINTAINER, in Plan's fields of those names.
//
// Refused, each with an *Error naming the line: a second FROM and COPY
// --from (ErrMultiStage); HEALTHCHECK (hearth never runs one) and ONBUILD
// (hearth keeps no triggers for later builds); ADD or COPY of a URL or a
// git remote (a build fetches nothing itself: a RUN may, under its
// sandbox's network policy); COPY of an inline document; RUN --mount,
// --network, --security and --device; FROM --platform; a source that
// leaves the context by ".." or by a symlink; a FIFO, a socket or a device
// to copy; unknown instructions and flags. The base image's own ONBUILD
// triggers are not run (sandbox.ImageConfig does not carry them).
//
// # Where hearth differs from Docker
//
//   - A symlink that leads out of the context, absolute ones included, is
//     refused as a source (Docker resolves it as if the context were the
//     root); inside a copied directory it is copied as a symlink, as in
//     Docker, and never followed.
//   - A file copied to a destination without a trailing "/" is written
//     as that path even if the image has a directory there (Docker looks
//     at the image).
//   - Hard links in the context are copied as separate files; extended
//     attributes are not copied.
//   - Keys cover content, modes and names, not modification times (which
//     are copied), as Docker's cache does.
//
// # The build context
//
// A Context is a directory read through openat2 so that nothing outside
// it is ever read (see Context); TarContext spools a context sent as a
// tar stream into a private directory first, refusing any entry that
// would land outside it. .dockerignore is honoured with
// github.com/moby/patternmatcher, the matcher Docker's client uses.
package dockerfile
