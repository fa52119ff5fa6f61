-- 0014: sandbox names, agent names and the records of why a sandbox went
-- are unique within a tenant, no longer across tenants: a tenant can
-- neither take a name from another nor learn that another has it. Every
-- existing row keeps its values; names unique across tenants are unique
-- within each.
--
-- SQLite cannot drop a column's UNIQUE constraint, so the three tables are
-- rebuilt (new table, copy, drop, rename). Checkpoints refer to sandboxes
-- with ON DELETE CASCADE, and PRAGMA foreign_keys (on for every connection)
-- cannot be turned off inside the migration's transaction: dropping the
-- old sandboxes table would delete every checkpoint row. So the
-- checkpoints are set aside first and put back once the new table has
-- taken the old one's name.

CREATE TABLE checkpoints_0014 AS
	SELECT id, sandbox_id, label, parent, created_at, size_bytes, memory FROM checkpoints ORDER BY rowid;
DROP TABLE checkpoints;

CREATE TABLE sandboxes_0014 (
	id               TEXT    NOT NULL PRIMARY KEY CHECK (id <> ''),
	name             TEXT    NOT NULL CHECK (name <> ''),
	tenant           TEXT    NOT NULL,
	owner            TEXT    NOT NULL,
	image            TEXT    NOT NULL,
	size             TEXT    NOT NULL,
	runtime          TEXT    NOT NULL,
	status           TEXT    NOT NULL,
	reason           TEXT    NOT NULL,
	created_at       TEXT    NOT NULL,
	updated_at       TEXT    NOT NULL,
	expires_at       TEXT,
	capabilities     TEXT    NOT NULL CHECK (json_valid(capabilities) AND json_type(capabilities) = 'array'),
	millicpu         INTEGER NOT NULL,
	memory_bytes     INTEGER NOT NULL,
	pids             INTEGER NOT NULL,
	head             TEXT    NOT NULL DEFAULT '',
	disk_bytes       INTEGER NOT NULL DEFAULT 0,
	labels           TEXT    NOT NULL DEFAULT '[]',
	public_ports     TEXT    NOT NULL DEFAULT '[]',
	network          TEXT    NOT NULL DEFAULT 'none',
	net_bits_per_sec INTEGER NOT NULL DEFAULT 0,
	net_conns        INTEGER NOT NULL DEFAULT 0,
	egress           TEXT    NOT NULL DEFAULT '{}',
	UNIQUE (tenant, name)
) STRICT;

INSERT INTO sandboxes_0014 (id, name, tenant, owner, image, size, runtime, status, reason,
		created_at, updated_at, expires_at, capabilities, millicpu, memory_bytes, pids, head,
		disk_bytes, labels, public_ports, network, net_bits_per_sec, net_conns, egress)
	SELECT id, name, tenant, owner, image, size, runtime, status, reason,
		created_at, updated_at, expires_at, capabilities, millicpu, memory_bytes, pids, head,
		disk_bytes, labels, public_ports, network, net_bits_per_sec, net_conns, egress
	FROM sandboxes ORDER BY rowid;
DROP TABLE sandboxes;
ALTER TABLE sandboxes_0014 RENAME TO sandboxes;

-- As in 0001; (tenant, name) is the unique constraint's index, and an
-- operator's look-up of a name across tenants uses sandboxes_by_name.
CREATE INDEX sandboxes_by_tenant_owner ON sandboxes (tenant, owner, created_at);
CREATE INDEX sandboxes_by_owner ON sandboxes (owner, created_at);
CREATE INDEX sandboxes_by_created ON sandboxes (created_at);
CREATE INDEX sandboxes_by_name ON sandboxes (name);

-- As in 0002.
CREATE TABLE checkpoints (
	id         TEXT    NOT NULL PRIMARY KEY CHECK (id <> ''),
	sandbox_id TEXT    NOT NULL REFERENCES sandboxes (id) ON DELETE CASCADE,
	label      TEXT    NOT NULL,
	parent     TEXT    NOT NULL,
	created_at TEXT    NOT NULL,
	size_bytes INTEGER NOT NULL,
	memory     INTEGER NOT NULL CHECK (memory IN (0, 1))
) STRICT;
INSERT INTO checkpoints (id, sandbox_id, label, parent, created_at, size_bytes, memory)
	SELECT id, sandbox_id, label, parent, created_at, size_bytes, memory FROM checkpoints_0014 ORDER BY rowid;
DROP TABLE checkpoints_0014;
CREATE INDEX checkpoints_by_sandbox ON checkpoints (sandbox_id, created_at);

-- An agent's name is unique within its tenant: it prefixes the names of
-- the sandboxes it creates there, which are unique within the tenant too.
-- Nothing refers to agents; the key serves ListAgents of one tenant.
CREATE TABLE agents_0014 (
	name       TEXT NOT NULL CHECK (name <> ''),
	tenant     TEXT NOT NULL REFERENCES tenants (name),
	created_at TEXT NOT NULL,
	PRIMARY KEY (tenant, name)
) STRICT;
INSERT INTO agents_0014 (name, tenant, created_at) SELECT name, tenant, created_at FROM agents;
DROP TABLE agents;
ALTER TABLE agents_0014 RENAME TO agents;

-- Why the latest sandbox of each name of each tenant went.
CREATE TABLE gone_0014 (
	tenant      TEXT NOT NULL,
	name        TEXT NOT NULL CHECK (name <> ''),
	id          TEXT NOT NULL,
	owner       TEXT NOT NULL,
	reason      TEXT NOT NULL,
	last_status TEXT NOT NULL,
	at          TEXT NOT NULL,
	PRIMARY KEY (tenant, name)
) STRICT;
INSERT INTO gone_0014 (tenant, name, id, owner, reason, last_status, at)
	SELECT tenant, name, id, owner, reason, last_status, at FROM gone;
DROP TABLE gone;
ALTER TABLE gone_0014 RENAME TO gone;
CREATE INDEX gone_by_at ON gone (at);
