-- 0011: an egress sandbox's traffic cap (bits per second, each way) and
-- its cap on open TCP connections (0: none).
ALTER TABLE sandboxes ADD COLUMN net_bits_per_sec INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sandboxes ADD COLUMN net_conns INTEGER NOT NULL DEFAULT 0;
