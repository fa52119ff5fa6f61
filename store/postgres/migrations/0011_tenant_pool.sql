-- 0011: the node pool a tenant's sandboxes run in (sandbox.Tenant.Pool);
-- '' for any node, which tenants from before pools keep.
ALTER TABLE tenants ADD COLUMN pool text COLLATE "C" NOT NULL DEFAULT '';
