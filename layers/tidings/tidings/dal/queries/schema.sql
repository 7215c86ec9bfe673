-- name: schema_server_major
-- The major version of the server (16 for 16.4).
SELECT current_setting('server_version_num')::integer / 10000 AS major;

-- name: schema_enums
-- The enum types of schema tidings with their labels in order.
SELECT t.typname AS name, array_agg(e.enumlabel ORDER BY e.enumsortorder) AS labels
FROM pg_type t
JOIN pg_namespace n ON n.oid = t.typnamespace
JOIN pg_enum e ON e.enumtypid = t.oid
WHERE n.nspname = 'tidings'
GROUP BY t.typname
ORDER BY t.typname;

-- name: schema_tables
-- The tables of schema tidings, leaving out the daily partitions of the attempt log and of the
-- tallies (made by the pruner, one per day): name, partition key, the parent and bound of a partition, storage options.
SELECT c.relname AS name,
       CASE WHEN c.relkind = 'p' THEN pg_get_partkeydef(c.oid) END AS partition_key,
       parent.relname AS partition_of,
       CASE WHEN c.relispartition THEN pg_get_expr(c.relpartbound, c.oid) END AS partition_bound,
       c.reloptions AS options
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_inherits i ON i.inhrelid = c.oid
LEFT JOIN pg_class parent ON parent.oid = i.inhparent
WHERE n.nspname = 'tidings' AND c.relkind IN ('r', 'p')
  AND c.relname !~ '^(attempts|attempt_tallies)_[0-9]{8}$'
ORDER BY c.relname;

-- name: schema_columns
-- The columns of one table or view in order: type, default, identity and whether they may be NULL.
SELECT a.attname AS name, format_type(a.atttypid, a.atttypmod) AS type,
       pg_get_expr(d.adbin, d.adrelid) AS default_value, a.attidentity AS identity,
       a.attnotnull AS not_null
FROM pg_attribute a
LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE a.attrelid = ('tidings.' || quote_ident(%(table)s))::regclass
  AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum;

-- name: schema_constraints
-- The constraints of one table (not inherited from a parent), by name.
SELECT con.conname AS name, pg_get_constraintdef(con.oid) AS definition
FROM pg_constraint con
WHERE con.conrelid = ('tidings.' || quote_ident(%(table)s))::regclass
  AND con.conislocal
  AND con.contype <> 'n'
ORDER BY con.conname;

-- name: schema_indexes
-- The indexes of schema tidings that are not there for a constraint, leaving out those of the
-- daily partitions.
SELECT pg_get_indexdef(i.indexrelid) AS definition
FROM pg_index i
JOIN pg_class ic ON ic.oid = i.indexrelid
JOIN pg_class tc ON tc.oid = i.indrelid
JOIN pg_namespace n ON n.oid = tc.relnamespace
WHERE n.nspname = 'tidings'
  AND tc.relname !~ '^(attempts|attempt_tallies)_[0-9]{8}$'
  AND NOT EXISTS (SELECT 1 FROM pg_constraint con WHERE con.conindid = i.indexrelid
                  AND con.conrelid = i.indrelid)
ORDER BY tc.relname, ic.relname;

-- name: schema_views
-- The views of schema tidings with their definitions, by name.
SELECT c.relname AS name, pg_get_viewdef(c.oid, true) AS definition
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'tidings' AND c.relkind = 'v'
ORDER BY c.relname;

-- name: schema_functions
-- The functions of schema tidings as CREATE statements, by name and arguments.
SELECT pg_get_functiondef(p.oid) AS definition
FROM pg_proc p
JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname = 'tidings'
ORDER BY p.proname, pg_get_function_identity_arguments(p.oid);

-- name: schema_triggers
-- The triggers on the tables of schema tidings, by table and name.
SELECT pg_get_triggerdef(t.oid) AS definition
FROM pg_trigger t
JOIN pg_class c ON c.oid = t.tgrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'tidings' AND NOT t.tgisinternal
ORDER BY c.relname, t.tgname;

-- name: schema_grants
-- What is granted on schema tidings and its objects to other roles than their owner, one row
-- per object, grantee and privilege (with the columns when it is granted on some columns only),
-- leaving out the daily partitions.
WITH granted AS (
    SELECT 'SCHEMA tidings' AS object, NULL::name AS column_name, x.grantee, x.privilege_type,
           n.nspowner AS owner
    FROM pg_namespace n, aclexplode(n.nspacl) x
    WHERE n.nspname = 'tidings'
    UNION ALL
    SELECT CASE WHEN c.relkind = 'S' THEN 'SEQUENCE ' ELSE 'TABLE ' END
               || 'tidings.' || quote_ident(c.relname),
           NULL, x.grantee, x.privilege_type, c.relowner
    FROM pg_class c, aclexplode(c.relacl) x
    WHERE c.relnamespace = 'tidings'::regnamespace
      AND c.relname !~ '^(attempts|attempt_tallies)_[0-9]{8}$'
    UNION ALL
    SELECT 'TABLE tidings.' || quote_ident(c.relname), a.attname, x.grantee, x.privilege_type,
           c.relowner
    FROM pg_attribute a
    JOIN pg_class c ON c.oid = a.attrelid
    CROSS JOIN aclexplode(a.attacl) x
    WHERE c.relnamespace = 'tidings'::regnamespace
      AND c.relname !~ '^(attempts|attempt_tallies)_[0-9]{8}$'
      AND a.attnum > 0 AND NOT a.attisdropped
    UNION ALL
    SELECT 'FUNCTION tidings.' || quote_ident(p.proname)
               || '(' || pg_get_function_identity_arguments(p.oid) || ')',
           NULL, x.grantee, x.privilege_type, p.proowner
    FROM pg_proc p, aclexplode(p.proacl) x
    WHERE p.pronamespace = 'tidings'::regnamespace
)
SELECT g.object,
       CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(r.rolname) END AS grantee,
       g.privilege_type AS privilege,
       array_agg(quote_ident(g.column_name) ORDER BY g.column_name)
           FILTER (WHERE g.column_name IS NOT NULL) AS columns
FROM granted g
LEFT JOIN pg_roles r ON r.oid = g.grantee
WHERE g.grantee <> g.owner
GROUP BY g.object, g.grantee, r.rolname, g.privilege_type
ORDER BY g.object, 2, g.privilege_type;

-- name: store_max_payload_bytes
-- The deployment's payload limit (TIDINGS_MAX_PAYLOAD_BYTES), which the enqueue functions hold
-- producers to; the migrator writes it at the end of every run (the schema owner only).
UPDATE tidings.settings SET value = %(value)s WHERE name = 'max_payload_bytes' AND value <> %(value)s;

-- name: store_operational_settings
-- The deployment's operational application (TIDINGS_OPERATIONAL_APPLICATION), made when no
-- application has its uid, and the failed attempt that message.attempt.failing reports
-- (TIDINGS_OPERATIONAL_FAILING_ATTEMPT), where tidings.emit_lifecycle_v1 and
-- tidings.record_outcomes_v1 read them; the migrator writes them at the end of every run.
WITH made AS (
    INSERT INTO tidings.applications (uid, name)
    VALUES (%(application)s, 'Tidings operational events')
    ON CONFLICT (uid) DO NOTHING
),
named AS (
    UPDATE tidings.settings SET text_value = %(application)s
    WHERE name = 'operational_application' AND text_value <> %(application)s
)
UPDATE tidings.settings SET value = %(failing_attempt)s
WHERE name = 'operational_failing_attempt' AND value <> %(failing_attempt)s;
