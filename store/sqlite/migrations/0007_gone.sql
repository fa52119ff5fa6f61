-- 0007: why each destroyed sandbox went, by name (the latest sandbox of
-- that name), kept for a retention period.
CREATE TABLE gone (
	name        TEXT NOT NULL PRIMARY KEY CHECK (name <> ''),
	id          TEXT NOT NULL,
	tenant      TEXT NOT NULL,
	owner       TEXT NOT NULL,
	reason      TEXT NOT NULL,
	last_status TEXT NOT NULL,
	at          TEXT NOT NULL
) STRICT;

CREATE INDEX gone_by_at ON gone (at);
