// Package overlay is the fallback layers.Store for hosts without btrfs: it
// keeps snapshots as stacks of plain directories mounted with overlayfs,
// on any filesystem overlayfs takes as an upper layer (ext4, xfs). It is
// Linux only, needs root, and passes layers/layerstest.
//
// # Model
//
// A layer is a directory of files. A committed snapshot is a stack of
// read-only layers, its own on top of its parent's, mounted read-only
// (an overlay with no upper layer) at its Info.Path. An active snapshot
// is an overlay mount whose upper layer, its own, is writable and whose
// lower layers are its parent's stack. So:
//
//   - Prepare is O(1): two empty directories, one mount, one record.
//   - Commit is O(1): the active mount is unmounted, and its upper layer
//     becomes the top of the committed stack, mounted read-only at a new
//     path. Nothing may use the active mount then (EBUSY otherwise).
//   - Snapshot of an active snapshot is O(data it wrote since Prepare or
//     Reset): a running sandbox's overlay cannot be remounted under it,
//     so its upper layer is copied (cloned with FICLONE where the
//     filesystem shares extents, as xfs with reflink does; else copied in
//     the kernel with copy_file_range, holes kept) into a new layer,
//     synced with syncfs, and mounted read-only over the same lower
//     layers. A caller that freezes a sandbox around Snapshot freezes it
//     for the copy: milliseconds for a few MB, seconds for GBs (see
//     BenchmarkOverlaySnapshot). This is the fallback's real cost; btrfs
//     does it in one ioctl.
//   - Reset is O(1) plus deleting what the active snapshot wrote: a new
//     upper layer over the parent's stack, mounted at a new path, then
//     the record swap (the commit point), then the old mount is detached
//     and its upper layer deleted.
//   - Remove is O(files it alone holds), deleted in the call (btrfs frees
//     blocks in the background).
//   - Usage walks the snapshot's own layer: O(files).
//
// Every snapshot owns its content, as the contract wants, by reference
// counting: a layer is deleted only when no snapshot's stack names it any
// more. Removing a committed snapshot removes its name, record and mount
// at once (Stat fails, the name is free, children's Parent becomes ""),
// while its layers stay as long as a snapshot made from it uses them. The
// counts are derived from the records, never stored.
//
// # On disk
//
// Under Dir (mode 0700: a sandbox's root holds setuid files no host user
// may reach):
//
//	meta/<key>     the record: JSON {"id", "kind", "parent", "parent_id",
//	               "layers": [top … bottom], "copied"}, written to a
//	               temporary file, synced and renamed, the directory
//	               synced: each call's commit point
//	layers/<id>    a layer's files (an active snapshot's upper dir)
//	work/<id>      overlayfs's work dir of an active snapshot's upper dir
//	mnt/<id>       a snapshot's mount point, its Info.Path; id is new for
//	               every record, so Commit and Reset change the path
//	empty/         an empty lower layer, for stacks overlayfs finds too
//	               short
//	lock           flock'ed while a Store has Dir open
//
// Mounts outlive the daemon: Close unmounts nothing, and Open keeps the
// mounts it finds (sandboxes run on them), mounts what is missing (after
// a reboot), and repairs what a crash in the middle of a call left: calls
// write their record after what it names exists and delete what a record
// named only after it is gone, so Open deletes the layers and detaches the
// mounts no record names, and finishes an interrupted Commit.
//
// # What differs from btrfs
//
//   - SetLimit is unsupported (ErrUnsupported for bytes > 0, nil for 0): an
//     upper layer is a plain directory, and a cap would need the
//     filesystem's project quotas (xfs prjquota, ext4 with the project
//     feature), which this backend does not set up. A sandbox can fill
//     the data dir's filesystem.
//   - A snapshot made by Snapshot is charged nothing by Usage (the
//     contract charges its content to the key that wrote it), but its
//     copy takes disk space of its own unless the filesystem cloned it.
//   - Every Prepare or Reset from a committed snapshot stacks one layer
//     more than the parent has, so a sandbox restored and checkpointed n
//     times runs on about n+2 layers: reads that miss look in each.
//     overlayfs takes at most 500 layers; before Linux 6.8 (no
//     "lowerdir+"), mount(2)'s options must fit in a page, which allows
//     about 4096/(len(Dir)+25) layers, and a deeper Prepare fails.
//   - Sandboxes see overlayfs, not a plain filesystem: a file's first
//     write copies all of it up (a 1 GB file from the image costs 1 GB
//     to change one byte), hard links to image files are split by a
//     copy-up, and inode numbers are not unique across layers. Mounts use
//     index=off (a layer is one mount's upper, then many mounts' lower),
//     metacopy=off (a layer's copy must hold the data), redirect_dir=on
//     (directories from the image can be renamed), xino=off.
//   - Layers are plain directories: root on the host can write into a
//     committed snapshot's layer under Dir, and so change every snapshot
//     on top of it (overlayfs forbids changing a lower layer). Only the
//     committed snapshot's path is read-only.
//   - Records and new directories are made durable with fsync, a few per
//     call; btrfs commits them with its snapshot ioctl.
package overlay
