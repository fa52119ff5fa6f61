-- 0015: which image version each sandbox's root was prepared from.
--
-- A sandbox keeps its image's digest (the version, '' when unknown), the
-- layer store's key its root was prepared from, and the image's config (a
-- JSON object in sandbox.ImageConfig's encoding). Before images had
-- versions the default image's layer key was its name, so every existing
-- row's key is its image: a sandbox of the old default image ("default")
-- keeps finding its root's parent.
ALTER TABLE sandboxes ADD COLUMN image_digest TEXT NOT NULL DEFAULT '';
ALTER TABLE sandboxes ADD COLUMN image_key TEXT NOT NULL DEFAULT '';
ALTER TABLE sandboxes ADD COLUMN image_config TEXT NOT NULL DEFAULT '{}'
	CHECK (json_valid(image_config) AND json_type(image_config) = 'object');
UPDATE sandboxes SET image_key = image;

-- "Which sandboxes use these layers", across tenants, before an image's
-- version is removed.
CREATE INDEX sandboxes_by_image_key ON sandboxes (image_key);
