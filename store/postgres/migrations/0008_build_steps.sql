-- 0008: the tenants' build caches: one row per build step whose root the
-- layer store keeps under key (scoped to the tenant by its digest).
-- size_bytes is what the step wrote; used_at when a build last made or
-- reused it, which orders eviction.
CREATE TABLE build_steps (
	tenant     text   COLLATE "C" NOT NULL CHECK (tenant <> ''),
	key        text   COLLATE "C" NOT NULL CHECK (key <> ''),
	size_bytes bigint NOT NULL,
	created_at timestamptz NOT NULL,
	used_at    timestamptz NOT NULL,
	PRIMARY KEY (tenant, key)
);

CREATE INDEX build_steps_by_used ON build_steps (tenant, used_at, key);
