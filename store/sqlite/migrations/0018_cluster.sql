-- 0018: what several daemons of one store share (one daemon, for SQLite).
--
-- rates: each agent identity's create-rate state (policy.Rate as JSON),
-- kept so that a restart forgets neither the recent creates nor an open
-- breaker. nodes: the daemons and their last heartbeat. leases: named,
-- timed rights, such as running the store-wide background loops.
CREATE TABLE rates (
	tenant TEXT NOT NULL CHECK (tenant <> ''),
	agent  TEXT NOT NULL,
	state  TEXT NOT NULL,
	PRIMARY KEY (tenant, agent)
) STRICT;

CREATE TABLE nodes (
	name         TEXT NOT NULL PRIMARY KEY CHECK (name <> ''),
	address      TEXT NOT NULL,
	version      TEXT NOT NULL,
	instance     TEXT NOT NULL DEFAULT '',
	started_at   TEXT NOT NULL,
	heartbeat_at TEXT NOT NULL,
	node_time    TEXT NOT NULL,
	credential   TEXT NOT NULL DEFAULT '',
	previous_credential TEXT NOT NULL DEFAULT ''
) STRICT;

CREATE TABLE leases (
	name   TEXT NOT NULL PRIMARY KEY CHECK (name <> ''),
	holder TEXT NOT NULL CHECK (holder <> ''),
	until  TEXT NOT NULL
) STRICT;
