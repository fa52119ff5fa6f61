-- 0009: what the daemons of one store share. rates: each agent
-- identity's create-rate state (policy.Rate as JSON), which every daemon
-- counts against. nodes: the daemons and their last heartbeat, by the
-- database's clock. leases: named, timed rights, such as running the
-- store-wide background loops.
CREATE TABLE rates (
	tenant text COLLATE "C" NOT NULL CHECK (tenant <> ''),
	agent  text COLLATE "C" NOT NULL,
	state  jsonb NOT NULL,
	PRIMARY KEY (tenant, agent)
);

CREATE TABLE nodes (
	name         text COLLATE "C" NOT NULL PRIMARY KEY CHECK (name <> ''),
	address      text NOT NULL,
	version      text NOT NULL,
	instance     text NOT NULL DEFAULT '',
	started_at   timestamptz NOT NULL,
	heartbeat_at timestamptz NOT NULL,
	node_time    timestamptz NOT NULL,
	credential   text NOT NULL DEFAULT '',
	previous_credential text NOT NULL DEFAULT ''
);

CREATE TABLE leases (
	name   text COLLATE "C" NOT NULL PRIMARY KEY CHECK (name <> ''),
	holder text COLLATE "C" NOT NULL CHECK (holder <> ''),
	until  timestamptz NOT NULL
);
