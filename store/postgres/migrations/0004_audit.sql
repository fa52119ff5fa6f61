-- 0004: the audit log, one row per call through a door.
--
-- id is an identity, never reused, not even once the newest rows are
-- deleted: an export keyed by id never sees one twice. '' stands for
-- "none" (an unauthenticated call, a success's code, no sandbox).
CREATE TABLE audit (
	id          bigint  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	at          timestamptz NOT NULL,
	door        text    NOT NULL,
	verb        text    NOT NULL,
	tenant      text    COLLATE "C" NOT NULL,
	agent       text    COLLATE "C" NOT NULL,
	role        text    NOT NULL,
	token_id    text    NOT NULL,
	sandbox     text    NOT NULL,
	code        text    NOT NULL,
	status      integer NOT NULL,
	duration_ms bigint  NOT NULL
);

-- Lists read a time range, all of it or one tenant's (and agent's),
-- newest first under a limit; retention deletes by time.
CREATE INDEX audit_by_at ON audit (at, id);
CREATE INDEX audit_by_tenant_agent ON audit (tenant, agent, at, id);
