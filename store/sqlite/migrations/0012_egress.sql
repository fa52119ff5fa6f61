-- 0012: a sandbox's own egress policy (a JSON object: allow, deny).
ALTER TABLE sandboxes ADD COLUMN egress TEXT NOT NULL DEFAULT '{}';
