-- 0005: tenants' secrets, sealed (the plain value is never stored), and
-- their credential bindings (sandbox.Binding), which name a secret and
-- never hold its value. Rows are keyed by tenant name without a foreign
-- key: tenants are never deleted, and the daemon's own rows belong to
-- 'system', which has no tenants row.
CREATE TABLE secrets (
	tenant     text  COLLATE "C" NOT NULL,
	name       text  COLLATE "C" NOT NULL CHECK (name <> ''),
	sealed     bytea NOT NULL,
	created_at timestamptz NOT NULL,
	updated_at timestamptz NOT NULL,
	PRIMARY KEY (tenant, name)
);

CREATE TABLE bindings (
	tenant     text COLLATE "C" NOT NULL CHECK (tenant <> ''),
	name       text COLLATE "C" NOT NULL CHECK (name <> ''),
	secret     text NOT NULL CHECK (secret <> ''),
	upstream   text NOT NULL CHECK (upstream <> ''),
	header     text NOT NULL CHECK (header <> ''),
	format     text NOT NULL CHECK (format <> ''),
	created_at timestamptz NOT NULL,
	updated_at timestamptz NOT NULL,
	PRIMARY KEY (tenant, name)
);
