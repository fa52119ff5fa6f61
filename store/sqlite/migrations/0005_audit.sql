-- 0005: the audit log, one row per call through a door.
--
-- id is AUTOINCREMENT so that an id is never reused, not even once the
-- newest rows are deleted: an export keyed by id never sees one twice. A
-- row names its caller by tenant, agent, role and token id (never the
-- secret); '' stands for "none" (an unauthenticated call, a success's code,
-- a call that named no sandbox).
CREATE TABLE audit (
	id          INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
	at          TEXT    NOT NULL,
	door        TEXT    NOT NULL,
	verb        TEXT    NOT NULL,
	tenant      TEXT    NOT NULL,
	agent       TEXT    NOT NULL,
	role        TEXT    NOT NULL,
	token_id    TEXT    NOT NULL,
	sandbox     TEXT    NOT NULL,
	code        TEXT    NOT NULL,
	status      INTEGER NOT NULL,
	duration_ms INTEGER NOT NULL
) STRICT;

-- ListAudit reads a time range, all of it or one tenant's (and agent's),
-- newest first under a limit; retention deletes by time.
CREATE INDEX audit_by_at ON audit (at);
CREATE INDEX audit_by_tenant_agent ON audit (tenant, agent, at);
