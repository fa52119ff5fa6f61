-- 0013: tenants' credential bindings (sandbox.Binding): the secret the
-- egress gateway adds, as which header, to requests a sandbox sends to
-- NAME.hearth.internal, and the upstream it forwards them to. A binding
-- names its secret and never holds the value. Like secrets, rows are keyed
-- by tenant name without a foreign key: tenants are never deleted.
CREATE TABLE bindings (
	tenant     TEXT NOT NULL CHECK (tenant <> ''),
	name       TEXT NOT NULL CHECK (name <> ''),
	secret     TEXT NOT NULL CHECK (secret <> ''),
	upstream   TEXT NOT NULL CHECK (upstream <> ''),
	header     TEXT NOT NULL CHECK (header <> ''),
	format     TEXT NOT NULL CHECK (format <> ''),
	created_at TEXT NOT NULL,
	updated_at TEXT NOT NULL,
	PRIMARY KEY (tenant, name)
) STRICT;
