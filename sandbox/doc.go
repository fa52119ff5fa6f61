// Package sandbox is hearth's vocabulary: sandbox names, specs, statuses,
// the calling Principal, exec and file types, and the one Error type that
// every door renders. It imports only the standard library so that every
// other package may import it.
package sandbox
