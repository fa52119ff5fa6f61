-- 0016: images, by version, and the registry logins they are pulled with.
--
-- One row per version of a tenant's image. layers is a JSON array of the
-- layer store's keys, bottom first, never empty; config a JSON object in
-- sandbox.ImageConfig's encoding. Like secrets and bindings, rows are keyed
-- by tenant name without a foreign key: the daemon's own images belong to
-- 'system', which has no tenants row.
CREATE TABLE images (
	tenant     TEXT    NOT NULL CHECK (tenant <> ''),
	name       TEXT    NOT NULL CHECK (name <> ''),
	digest     TEXT    NOT NULL CHECK (digest <> ''),
	source     TEXT    NOT NULL,
	ref        TEXT    NOT NULL,
	public     INTEGER NOT NULL CHECK (public IN (0, 1)),
	current    INTEGER NOT NULL CHECK (current IN (0, 1)),
	config     TEXT    NOT NULL CHECK (json_valid(config) AND json_type(config) = 'object'),
	size_bytes INTEGER NOT NULL,
	layers     TEXT    NOT NULL CHECK (json_valid(layers) AND json_type(layers) = 'array' AND json_array_length(layers) > 0),
	created_at TEXT    NOT NULL,
	PRIMARY KEY (tenant, name, digest)
) STRICT;

-- At most one current version per name: the schema itself refuses a
-- second, whatever a bug in the code that switches it.
CREATE UNIQUE INDEX images_current ON images (tenant, name) WHERE current = 1;

-- A tenant's registry credentials per host. The password is sealed by the
-- daemon (package secrets) before it reaches the store: the plain value is
-- never stored.
CREATE TABLE registry_logins (
	tenant          TEXT    NOT NULL CHECK (tenant <> ''),
	host            TEXT    NOT NULL CHECK (host <> ''),
	username        TEXT    NOT NULL,
	sealed_password BLOB    NOT NULL,
	insecure        INTEGER NOT NULL CHECK (insecure IN (0, 1)),
	ca              TEXT    NOT NULL,
	created_at      TEXT    NOT NULL,
	updated_at      TEXT    NOT NULL,
	PRIMARY KEY (tenant, host)
) STRICT;
