-- The API and operators read which application is the operational one (the setting the migrator
-- writes), so that no caller deletes it whatever its own environment says: the two columns of
-- that setting, nothing else of tidings.settings.
GRANT SELECT (name, text_value) ON tidings.settings TO tidings_ingest, tidings_operator;
