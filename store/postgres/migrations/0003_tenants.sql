-- 0003: tenants and their agent identities.
--
-- A tenant's allocation is columns, so that policy can compare usage with
-- it in SQL; it has no pids. policy is sandbox.PolicyOverrides' JSON: a
-- field left at the default is absent, a field set (even to 0) present.
CREATE TABLE tenants (
	name         text   COLLATE "C" NOT NULL PRIMARY KEY CHECK (name <> ''),
	millicpu     bigint NOT NULL,
	memory_bytes bigint NOT NULL,
	disk_bytes   bigint NOT NULL,
	policy       jsonb  NOT NULL CHECK (jsonb_typeof(policy) = 'object'),
	created_at   timestamptz NOT NULL,
	updated_at   timestamptz NOT NULL
);

-- An agent's name is unique within its tenant, which must exist (and
-- cannot be deleted while it has agents).
CREATE TABLE agents (
	tenant     text COLLATE "C" NOT NULL REFERENCES tenants (name),
	name       text COLLATE "C" NOT NULL CHECK (name <> ''),
	created_at timestamptz NOT NULL,
	CONSTRAINT agents_pkey PRIMARY KEY (tenant, name)
);

-- Every tenant's agents, by name and then tenant.
CREATE INDEX agents_by_name ON agents (name, tenant);
