-- 0010: the node (daemon instance) that runs each sandbox. Rows from
-- before nodes have '' until their daemon adopts them at its next start.
ALTER TABLE sandboxes ADD COLUMN node text COLLATE "C" NOT NULL DEFAULT '';
