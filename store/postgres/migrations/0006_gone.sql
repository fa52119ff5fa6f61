-- 0006: why the latest sandbox of each name of each tenant went, kept for
-- a retention period.
CREATE TABLE gone (
	tenant      text COLLATE "C" NOT NULL,
	name        text COLLATE "C" NOT NULL CHECK (name <> ''),
	id          text NOT NULL,
	owner       text NOT NULL,
	reason      text NOT NULL,
	last_status text NOT NULL,
	at          timestamptz NOT NULL,
	PRIMARY KEY (tenant, name)
);

CREATE INDEX gone_by_at ON gone (at);
