"""Data access: every SQL statement, named, in ``queries/<concern>.sql``, each with the module of
the same name that calls it; ``connection`` owns the connection, its timeouts and its retries."""
