-- 0017: the tenants' build caches.
--
-- One row per build step whose root the layer store keeps under key (a
-- step key, scoped to the tenant by its digest). size_bytes is what the
-- step wrote; used_at when a build last made or reused it, which orders
-- eviction. Keyed by tenant name without a foreign key, as images are.
CREATE TABLE build_steps (
	tenant     TEXT    NOT NULL CHECK (tenant <> ''),
	key        TEXT    NOT NULL CHECK (key <> ''),
	size_bytes INTEGER NOT NULL,
	created_at TEXT    NOT NULL,
	used_at    TEXT    NOT NULL,
	PRIMARY KEY (tenant, key)
) STRICT;
