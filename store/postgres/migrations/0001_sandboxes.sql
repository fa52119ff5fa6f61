-- 0001: sandboxes and their checkpoints.
--
-- Names, ids and keys are text COLLATE "C": byte order, whatever the
-- database's locale, as store/sqlite sorts. Times are timestamptz
-- (microseconds, UTC on the way out); NULL stands for the zero time where
-- zero means "never" (expires_at). seq, an identity, is insertion order:
-- lists order by time and then by it, as store/sqlite does by rowid, and
-- an UPDATE keeps it.
CREATE TABLE sandboxes (
	seq              bigint  GENERATED ALWAYS AS IDENTITY,
	id               text    COLLATE "C" NOT NULL PRIMARY KEY CHECK (id <> ''),
	name             text    COLLATE "C" NOT NULL CHECK (name <> ''),
	tenant           text    COLLATE "C" NOT NULL,
	owner            text    COLLATE "C" NOT NULL,
	image            text    NOT NULL,
	-- The image version ('' when unknown), the layer store's key the root
	-- was prepared from, and the image's config (sandbox.ImageConfig's
	-- JSON encoding).
	image_digest     text    NOT NULL,
	image_key        text    COLLATE "C" NOT NULL,
	image_config     jsonb   NOT NULL CHECK (jsonb_typeof(image_config) = 'object'),
	size             text    NOT NULL,
	runtime          text    NOT NULL,
	status           text    NOT NULL,
	reason           text    NOT NULL,
	created_at       timestamptz NOT NULL,
	updated_at       timestamptz NOT NULL,
	expires_at       timestamptz,
	-- In the order the driver reported them.
	capabilities     text[]  NOT NULL,
	-- Resources are columns, so that policy can sum usage in SQL.
	millicpu         bigint  NOT NULL,
	memory_bytes     bigint  NOT NULL,
	pids             bigint  NOT NULL,
	disk_bytes       bigint  NOT NULL,
	net_bits_per_sec bigint  NOT NULL,
	net_conns        bigint  NOT NULL,
	-- The checkpoint the root last descended from, '' before the first:
	-- plain text, not a reference (deleting that checkpoint leaves the
	-- root where it is).
	head             text    NOT NULL,
	labels           text[]  NOT NULL,
	public_ports     integer[] NOT NULL,
	network          text    NOT NULL,
	-- The sandbox's own egress policy (sandbox.EgressPolicy's JSON).
	egress           jsonb   NOT NULL CHECK (jsonb_typeof(egress) = 'object'),
	-- Names are unique within a tenant only.
	CONSTRAINT sandboxes_tenant_name_key UNIQUE (tenant, name)
);

-- Lists filter by tenant, by tenant and owner, by owner or by name, and
-- always order oldest first, insertion order among equals; "which
-- sandboxes use these layers" asks by image_key across tenants.
CREATE INDEX sandboxes_by_created ON sandboxes (created_at, seq);
CREATE INDEX sandboxes_by_tenant_owner ON sandboxes (tenant, owner, created_at, seq);
CREATE INDEX sandboxes_by_owner ON sandboxes (owner, created_at, seq);
CREATE INDEX sandboxes_by_name ON sandboxes (name);
CREATE INDEX sandboxes_by_image_key ON sandboxes (image_key);

-- A checkpoint belongs to one sandbox and goes with it. Its sandbox's name
-- is not copied here: reads join sandboxes, so a rename shows. parent is
-- plain text, like head: a parent may be deleted before its children.
CREATE TABLE checkpoints (
	seq        bigint  GENERATED ALWAYS AS IDENTITY,
	id         text    COLLATE "C" NOT NULL PRIMARY KEY CHECK (id <> ''),
	sandbox_id text    COLLATE "C" NOT NULL REFERENCES sandboxes (id) ON DELETE CASCADE,
	label      text    NOT NULL,
	parent     text    NOT NULL,
	created_at timestamptz NOT NULL,
	size_bytes bigint  NOT NULL,
	memory     boolean NOT NULL
);

-- One sandbox's checkpoints, oldest first; the cascade finds them by it.
CREATE INDEX checkpoints_by_sandbox ON checkpoints (sandbox_id, created_at, seq);
