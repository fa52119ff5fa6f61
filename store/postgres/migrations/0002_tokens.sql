-- 0002: bearer tokens. Only the SHA-256 of the secret, hex encoded, is
-- stored. NULL expires_at or revoked_at is "never".
CREATE TABLE tokens (
	seq         bigint GENERATED ALWAYS AS IDENTITY,
	id          text   COLLATE "C" NOT NULL PRIMARY KEY CHECK (id <> ''),
	hash        text   COLLATE "C" NOT NULL CHECK (hash <> ''),
	tenant      text   NOT NULL,
	agent       text   NOT NULL,
	role        text   NOT NULL,
	-- The token's name restriction ('' for none).
	name_prefix text   NOT NULL,
	created_at  timestamptz NOT NULL,
	expires_at  timestamptz,
	revoked_at  timestamptz,
	CONSTRAINT tokens_hash_key UNIQUE (hash)
);

CREATE INDEX tokens_by_created ON tokens (created_at, seq);
