-- 0003: a sandbox's disk limit, beside its other resources (0: none).
ALTER TABLE sandboxes ADD COLUMN disk_bytes INTEGER NOT NULL DEFAULT 0;
