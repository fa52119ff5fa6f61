-- 0006: tenants' secrets, sealed (secrets.Box: AES-256-GCM under the key
-- file in the data dir, bound to tenant and name). The plain value is never
-- stored.
CREATE TABLE secrets (
	tenant     TEXT NOT NULL,
	name       TEXT NOT NULL CHECK (name <> ''),
	sealed     BLOB NOT NULL,
	created_at TEXT NOT NULL,
	updated_at TEXT NOT NULL,
	PRIMARY KEY (tenant, name)
) STRICT;
