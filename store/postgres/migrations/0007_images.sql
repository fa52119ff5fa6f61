-- 0007: images, by version, and the registry logins they are pulled with.
--
-- One row per version of a tenant's image. layers are the layer store's
-- keys, bottom first, never none and none empty; config is
-- sandbox.ImageConfig's JSON. Keyed by tenant name without a foreign key:
-- the daemon's own images belong to 'system', which has no tenants row.
CREATE TABLE images (
	seq        bigint  GENERATED ALWAYS AS IDENTITY,
	tenant     text    COLLATE "C" NOT NULL CHECK (tenant <> ''),
	name       text    COLLATE "C" NOT NULL CHECK (name <> ''),
	digest     text    COLLATE "C" NOT NULL CHECK (digest <> ''),
	source     text    NOT NULL,
	ref        text    NOT NULL,
	public     boolean NOT NULL,
	current    boolean NOT NULL,
	config     jsonb   NOT NULL CHECK (jsonb_typeof(config) = 'object'),
	size_bytes bigint  NOT NULL,
	layers     text[]  NOT NULL CHECK (cardinality(layers) > 0 AND array_position(layers, '') IS NULL),
	created_at timestamptz NOT NULL,
	PRIMARY KEY (tenant, name, digest)
);

-- At most one current version per name: the schema itself refuses a
-- second, whatever a bug in the code that switches it.
CREATE UNIQUE INDEX images_current ON images (tenant, name) WHERE current;

-- A tenant's registry credentials per host; the password arrives sealed.
CREATE TABLE registry_logins (
	tenant          text    COLLATE "C" NOT NULL CHECK (tenant <> ''),
	host            text    COLLATE "C" NOT NULL CHECK (host <> ''),
	username        text    NOT NULL,
	sealed_password bytea   NOT NULL,
	insecure        boolean NOT NULL,
	ca              text    NOT NULL,
	created_at      timestamptz NOT NULL,
	updated_at      timestamptz NOT NULL,
	PRIMARY KEY (tenant, host)
);
