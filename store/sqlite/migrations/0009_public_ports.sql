-- 0009: the ports of a sandbox that its URL serves to anyone, without a
-- token (a JSON array of numbers).
ALTER TABLE sandboxes ADD COLUMN public_ports TEXT NOT NULL DEFAULT '[]';
