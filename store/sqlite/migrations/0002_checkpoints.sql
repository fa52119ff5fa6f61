-- 0002: checkpoints, and each sandbox's head.
--
-- head is the checkpoint a sandbox's root last descended from, '' before the
-- first. It is plain text, not a reference: deleting that checkpoint leaves
-- the root where it is, and the next checkpoint still names it as parent.

ALTER TABLE sandboxes ADD COLUMN head TEXT NOT NULL DEFAULT '';

-- A checkpoint belongs to one sandbox and goes with it: ON DELETE CASCADE
-- needs PRAGMA foreign_keys on the connection, which Open sets on every one.
-- The sandbox's name is not copied here; reads join sandboxes, so a rename
-- shows. parent is plain text for the same reason as head: a parent may be
-- deleted before its children.
CREATE TABLE checkpoints (
	id         TEXT    NOT NULL PRIMARY KEY CHECK (id <> ''),
	sandbox_id TEXT    NOT NULL REFERENCES sandboxes (id) ON DELETE CASCADE,
	label      TEXT    NOT NULL,
	parent     TEXT    NOT NULL,
	created_at TEXT    NOT NULL,
	size_bytes INTEGER NOT NULL,
	memory     INTEGER NOT NULL CHECK (memory IN (0, 1))
) STRICT;

-- ListCheckpoints lists one sandbox's oldest first (rowid, which every index
-- carries, breaks ties), and the cascade finds a sandbox's checkpoints by it.
CREATE INDEX checkpoints_by_sandbox ON checkpoints (sandbox_id, created_at);
