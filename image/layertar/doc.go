// Package layertar applies image layers (uncompressed OCI or Docker layer
// tar streams) onto a directory, and writes a directory back as one.
//
// Every layer is hostile input and the daemon that calls Apply is root, so
// Apply never resolves a path the way the host would. The directory an
// entry goes into is opened from the root's descriptor with
// openat2(RESOLVE_IN_ROOT|RESOLVE_NO_MAGICLINKS|RESOLVE_NO_XDEV), and the
// entry itself is created, replaced or changed relative to that descriptor
// with the *at calls, never following a link in its last component. A
// symbolic link placed by this layer or a lower one is therefore resolved
// as if the root were "/": it can send an entry elsewhere inside the root,
// never outside it. Nothing outside the root is created, changed or
// removed, whatever the layer holds.
//
// # Names
//
// An entry's name is taken relative to the root, as tar tools take it: a
// leading "/" or "./" is dropped, so "/etc/passwd" is the root's
// etc/passwd, and empty and "." components are ignored ("" and "./" name
// the root itself, which only a directory entry may change). A name with a
// ".." component is refused, wherever the ".." is (GNU tar refuses these
// too): no real layer has one, and refusing is clearer than clamping. So
// is a name with a NUL byte or longer than 4096 bytes. Missing parent
// directories are created (mode 0755, owned by root), as tar tools do.
//
// # What an entry does
//
//   - A regular file replaces whatever had its name (a link is replaced,
//     never written through; a directory is removed with its contents). Runs
//     of zeros of at least a 4 KiB block are left as holes, so a sparse file
//     (GNU sparse entries, as archive/tar presents them) takes no disk for
//     its holes.
//   - A directory keeps an existing directory of that name with its
//     children, and replaces anything else.
//   - A symbolic link is created with its target verbatim; Apply never
//     follows it while creating anything.
//   - A hard link's target is resolved inside the root with
//     RESOLVE_IN_ROOT|RESOLVE_NO_SYMLINKS and must be a regular file; the
//     link is made with linkat from that descriptor, never through a host
//     path. On a root that is an overlayfs mount, where a link to a lower
//     file splits it from its other names and a name removed leaves the
//     others a stale link count, Apply makes the names one file again at
//     the layer's end (see links.go).
//   - Character and block devices, FIFOs and sockets are skipped, each with
//     a note in Stats.Skipped: a device node in an image would open the
//     host's device to whoever runs it, and a FIFO is a name the daemon
//     could block on when it reads the tree.
//   - Ownership (uid/gid numbers; names are ignored), permission bits
//     including setuid, setgid and sticky, and the access and modification
//     times are applied to what was created (not to hard links, which share
//     their target's). Directories get their times last, after their
//     contents are in place.
//   - Extended attributes from SCHILY.xattr.* PAX records: user.* on files
//     and directories, and security.capability (file capabilities) on
//     regular files, are set with fsetxattr on the entry's descriptor. All
//     others are skipped with a note: trusted.* (overlayfs keeps its
//     whiteouts and redirects there), other security.* (SELinux labels,
//     IMA), system.* (ACLs), and any on a symbolic link.
//
// # Whiteouts
//
// The OCI image specification ("Representing Changes in Layers") marks a
// removal with a whiteout file: ".wh.NAME" removes NAME, and ".wh..wh..opq"
// makes its directory opaque, removing what the lower layers have in it.
// "Whiteout files MUST only apply to resources in lower/parent layers.
// Files that are present in the same layer as a whiteout file can only be
// hidden by whiteout files in subsequent layers." Apply follows that
// whatever the order of the entries: a whiteout or an opaque marker removes
// only what this layer did not put there, so an entry of this layer that
// came earlier in the tar survives a marker that comes after it, and a
// directory this layer added to keeps only this layer's entries. Entries
// are matched by name as the tar gives them. A whiteout never creates
// anything; other names beginning ".wh..wh." (aufs bookkeeping) are skipped
// with a note.
//
// # Failure
//
// Apply stops at the first entry it refuses or cannot apply and returns an
// *Error naming it; a refused entry's error matches ErrHostile. The root
// then holds part of the layer: it is meant to be a fresh snapshot that the
// caller discards.
//
// Write walks a tree the other way, with the same care: see Write.
package layertar
