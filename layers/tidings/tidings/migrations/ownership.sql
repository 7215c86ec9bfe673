-- Hands the schema and everything in it to tidings_owner, and keeps every function of the
-- schema from PUBLIC. The migrator runs this at the end of every run, once the owner role exists
-- (0071_database_roles.sql), so what any migration creates as the migrating user ends up owned,
-- and closed, like the rest. Indexes, identity sequences, row types and array types follow
-- their table or type. Safe to run again: it changes only what is not so yet.
DO $$
DECLARE
    v_owner oid := to_regrole('tidings_owner');
    v_statement text;
BEGIN
    IF v_owner IS NULL OR to_regnamespace('tidings') IS NULL THEN
        RETURN;
    END IF;
    IF (SELECT n.nspowner FROM pg_namespace n WHERE n.nspname = 'tidings') <> v_owner THEN
        ALTER SCHEMA tidings OWNER TO tidings_owner;
    END IF;
    FOR v_statement IN
        SELECT format('ALTER TABLE %s OWNER TO tidings_owner', c.oid::regclass)
        FROM pg_class c
        WHERE c.relnamespace = 'tidings'::regnamespace
          AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
          AND c.relowner <> v_owner
        UNION ALL
        SELECT format('ALTER SEQUENCE %s OWNER TO tidings_owner', c.oid::regclass)
        FROM pg_class c
        WHERE c.relnamespace = 'tidings'::regnamespace
          AND c.relkind = 'S'
          AND c.relowner <> v_owner
          AND NOT EXISTS (SELECT 1 FROM pg_depend d
                          WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid
                            AND d.deptype IN ('a', 'i'))
        UNION ALL
        SELECT format('ALTER ROUTINE %s OWNER TO tidings_owner', p.oid::regprocedure)
        FROM pg_proc p
        WHERE p.pronamespace = 'tidings'::regnamespace
          AND p.proowner <> v_owner
        UNION ALL
        SELECT format('ALTER TYPE %s OWNER TO tidings_owner', t.oid::regtype)
        FROM pg_type t
        LEFT JOIN pg_class r ON r.oid = t.typrelid
        WHERE t.typnamespace = 'tidings'::regnamespace
          AND t.typowner <> v_owner
          AND t.typtype IN ('e', 'd', 'r', 'c')
          AND (t.typrelid = 0 OR r.relkind = 'c')
        UNION ALL
        -- Functions PUBLIC may execute: new ones have no ACL yet, which means just that.
        SELECT format('REVOKE ALL ON ROUTINE %s FROM PUBLIC', p.oid::regprocedure)
        FROM pg_proc p
        WHERE p.pronamespace = 'tidings'::regnamespace
          AND EXISTS (SELECT 1 FROM aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) x
                      WHERE x.grantee = 0)
    LOOP
        EXECUTE v_statement;
    END LOOP;
END $$;
