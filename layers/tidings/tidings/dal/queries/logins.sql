-- name: ensure_login
-- Makes (or updates) a login user that is a member of one group role (tidings.ensure_login_v1),
-- from the SCRAM verifier of its password: the migrator's step after migrating on AWS.
SELECT tidings.ensure_login_v1(%(user)s, %(group)s, %(verifier)s);
