-- 0001: sandboxes and tokens.
--
-- Times are TEXT in one fixed-width UTC layout,
-- 2006-01-02T15:04:05.000000000Z, so that they sort as text in time order,
-- read plainly in the sqlite3 shell, and round-trip to the nanosecond. NULL
-- stands for the zero time where zero means "never" (expires_at, revoked_at).
--
-- Tables are STRICT so that a value of the wrong type is an error, not a
-- silent conversion.

CREATE TABLE sandboxes (
	id           TEXT    NOT NULL PRIMARY KEY CHECK (id <> ''),
	name         TEXT    NOT NULL UNIQUE      CHECK (name <> ''),
	tenant       TEXT    NOT NULL,
	owner        TEXT    NOT NULL,
	image        TEXT    NOT NULL,
	size         TEXT    NOT NULL,
	runtime      TEXT    NOT NULL,
	status       TEXT    NOT NULL,
	reason       TEXT    NOT NULL,
	created_at   TEXT    NOT NULL,
	updated_at   TEXT    NOT NULL,
	expires_at   TEXT,
	-- A JSON array of strings, in the order the driver reported them.
	capabilities TEXT    NOT NULL CHECK (json_valid(capabilities) AND json_type(capabilities) = 'array'),
	-- Resources are columns, not JSON, so that policy can sum usage in SQL.
	millicpu     INTEGER NOT NULL,
	memory_bytes INTEGER NOT NULL,
	pids         INTEGER NOT NULL
) STRICT;

-- ListSandboxes filters by tenant, by tenant and owner, or by owner, and
-- always orders oldest first; rowid breaks ties in insertion order.
CREATE INDEX sandboxes_by_tenant_owner ON sandboxes (tenant, owner, created_at);
CREATE INDEX sandboxes_by_owner ON sandboxes (owner, created_at);
CREATE INDEX sandboxes_by_created ON sandboxes (created_at);

CREATE TABLE tokens (
	id         TEXT NOT NULL PRIMARY KEY CHECK (id <> ''),
	-- SHA-256 of the secret, hex encoded; the secret itself is never stored.
	hash       TEXT NOT NULL UNIQUE      CHECK (hash <> ''),
	tenant     TEXT NOT NULL,
	agent      TEXT NOT NULL,
	role       TEXT NOT NULL,
	created_at TEXT NOT NULL,
	expires_at TEXT,
	revoked_at TEXT
) STRICT;

CREATE INDEX tokens_by_created ON tokens (created_at);
