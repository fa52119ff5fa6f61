-- 0010: a sandbox's network mode ('none' or 'egress').
ALTER TABLE sandboxes ADD COLUMN network TEXT NOT NULL DEFAULT 'none';
