-- 0004: tenants and agent identities.
--
-- A tenant's allocation is columns, like a sandbox's resources, so that
-- policy can compare usage with it in SQL; it has no pids. policy is a JSON
-- object in sandbox.PolicyOverrides' encoding: a field left at the default
-- is absent, a field set (even to 0) is present, and durations are strings
-- such as "1h30m0s".
CREATE TABLE tenants (
	name         TEXT    NOT NULL PRIMARY KEY CHECK (name <> ''),
	millicpu     INTEGER NOT NULL,
	memory_bytes INTEGER NOT NULL,
	disk_bytes   INTEGER NOT NULL,
	policy       TEXT    NOT NULL CHECK (json_valid(policy) AND json_type(policy) = 'object'),
	created_at   TEXT    NOT NULL,
	updated_at   TEXT    NOT NULL
) STRICT;

-- An agent's name is unique across tenants, since it prefixes the names of
-- the sandboxes it creates. Its tenant must exist (PRAGMA foreign_keys is on
-- on every connection), and a tenant with agents cannot be deleted.
CREATE TABLE agents (
	name       TEXT NOT NULL PRIMARY KEY CHECK (name <> ''),
	tenant     TEXT NOT NULL REFERENCES tenants (name),
	created_at TEXT NOT NULL
) STRICT;

-- ListAgents of one tenant, by name; the foreign key's checks use it too.
CREATE INDEX agents_by_tenant ON agents (tenant, name);
