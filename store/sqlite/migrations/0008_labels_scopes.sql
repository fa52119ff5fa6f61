-- 0008: a sandbox's labels (a JSON array of strings) and a token's name
-- restriction ('' for none).
ALTER TABLE sandboxes ADD COLUMN labels TEXT NOT NULL DEFAULT '[]';
ALTER TABLE tokens ADD COLUMN name_prefix TEXT NOT NULL DEFAULT '';
