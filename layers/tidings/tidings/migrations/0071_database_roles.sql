-- Database roles: one NOLOGIN group role per kind of caller, each granted only what its holders
-- use (0072_grants.sql; tidings.dal.access says which statements each one runs), and the owner
-- role that owns the schema and everything in it.
--
-- Roles belong to the whole server, not to one database: a second database on the same server
-- (or two migrators at once) finds them there, so each is created only when missing. Creating a
-- role needs CREATEROLE, which the RDS master user has (it is not a superuser); nothing here
-- needs more.
DO $$
DECLARE
    v_role text;
BEGIN
    FOREACH v_role IN ARRAY ARRAY[
        'tidings_owner',
        'tidings_producer',
        'tidings_claimer',
        'tidings_sender',
        'tidings_ingest',
        'tidings_authorizer',
        'tidings_percentiles',
        'tidings_health_monitor',
        'tidings_dead_letter_report',
        'tidings_pruner',
        'tidings_operator'
    ] LOOP
        IF to_regrole(v_role) IS NULL THEN
            BEGIN
                EXECUTE format('CREATE ROLE %I NOLOGIN', v_role);
            EXCEPTION WHEN duplicate_object OR unique_violation THEN
                NULL;  -- made by another session meanwhile
            END;
        END IF;
    END LOOP;
END $$;

-- The migrating user becomes a member of the owner role (with its privileges, and able to make
-- it an object's owner): the migrator hands the schema to tidings_owner at the end of every run
-- (tidings.migrations), and goes on creating and altering objects through that membership. A
-- superuser needs no membership.
DO $$
BEGIN
    IF NOT (SELECT r.rolsuper FROM pg_roles r WHERE r.rolname = current_user)
       AND NOT pg_has_role(current_user, 'tidings_owner', 'USAGE') THEN
        EXECUTE format('GRANT tidings_owner TO %I', current_user);
    END IF;
END $$;

-- ensure_login_v1: the login user p_user, a member of the group role p_group, with the password
-- whose SCRAM verifier is given (the password itself never reaches the server). Made when missing,
-- its password set again when present, so the migrator can run it on every deploy. Runs with the
-- caller's rights (creating a role needs CREATEROLE, which the owner role lacks): the migrator, a
-- member of the owner role, may call it; nobody else may. p_group must be one of Tidings' group
-- roles (tidings_*, NOLOGIN, not the owner), and p_user a new name or a plain existing login: a
-- group role never becomes a login, and the password of an administrator (the master user, a
-- member of the owner role, any user that may create roles) is never changed this way.
CREATE FUNCTION tidings.ensure_login_v1(p_user text, p_group text, p_verifier text)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles r
                   WHERE r.rolname = p_group AND r.rolname LIKE 'tidings\_%'
                     AND r.rolname <> 'tidings_owner' AND NOT r.rolcanlogin) THEN
        RAISE EXCEPTION 'tidings.ensure_login_v1: % is not a group role of Tidings', p_group
            USING ERRCODE = '22023';
    END IF;
    IF p_user IS NULL OR p_user !~ '^[a-z][a-z0-9_]{0,62}$'
       OR EXISTS (SELECT 1 FROM pg_roles r
                  WHERE r.rolname = p_user
                    AND (NOT r.rolcanlogin OR r.rolsuper OR r.rolcreaterole
                         OR pg_has_role(r.oid, 'tidings_owner', 'MEMBER'))) THEN
        RAISE EXCEPTION 'tidings.ensure_login_v1: % cannot be a login user', p_user
            USING ERRCODE = '22023';
    END IF;
    IF p_verifier IS NULL OR p_verifier !~ '^SCRAM-SHA-256\$' THEN
        RAISE EXCEPTION 'tidings.ensure_login_v1: give a SCRAM-SHA-256 verifier, not a password'
            USING ERRCODE = '22023';
    END IF;
    IF to_regrole(p_user) IS NULL THEN
        EXECUTE format('CREATE ROLE %I LOGIN PASSWORD %L', p_user, p_verifier);
    ELSE
        EXECUTE format('ALTER ROLE %I PASSWORD %L', p_user, p_verifier);
    END IF;
    IF NOT pg_has_role(p_user, p_group, 'USAGE') THEN
        EXECUTE format('GRANT %I TO %I', p_group, p_user);
    END IF;
END $$;

-- What only the owner may do, as functions the roles that need it may call.

-- analyze_latency_histograms: refreshes the planner's statistics of the latency histograms (only
-- a table's owner may ANALYZE it; anyone else is skipped with a warning).
CREATE FUNCTION tidings.analyze_latency_histograms() RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    ANALYZE tidings.latency_buckets, tidings.latency_window;
END $$;

-- The functions that run with their owner's rights, each with a search path no caller can
-- change: the producers' entry points (a producer may do exactly what they do and nothing
-- else), the sender's and claimer's hot statements (the sender reads signing secrets only
-- through begin_attempts_v1, for rows it holds), the pruner's partition upkeep (only an owner may
-- create and drop partitions), the trigger that makes an endpoint's health row. Every overload of
-- each name, so a redefinition with new arguments in an earlier migration is covered too. A
-- later CREATE OR REPLACE resets both attributes: it must state them again (a test checks).
DO $$
DECLARE
    v_function regprocedure;
BEGIN
    FOR v_function IN
        SELECT p.oid::regprocedure
        FROM pg_proc p
        WHERE p.pronamespace = 'tidings'::regnamespace
          AND p.proname IN ('enqueue', 'enqueue_batch', 'enqueue_event', 'claim_due_v1',
                            'begin_attempts_v1', 'record_outcomes_v1', 'release_leases_v1',
                            'set_endpoint_secret_v1', 'ensure_attempt_partitions',
                            'drop_oldest_attempt_partition', 'keep_live_attempts',
                            'drop_attempt_partition', 'analyze_latency_histograms',
                            'create_endpoint_health')
    LOOP
        EXECUTE format('ALTER FUNCTION %s SECURITY DEFINER SET search_path = pg_catalog, pg_temp',
                       v_function);
    END LOOP;
END $$;

-- Nobody but the owner may call a function of the schema unless granted (PostgreSQL lets PUBLIC
-- execute every new function); the migrator repeats this at the end of every run for functions
-- that later migrations add.
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA tidings FROM PUBLIC;
REVOKE ALL ON SCHEMA tidings FROM PUBLIC;
