"""Array parameters sent as literals read back, through each cast the statements use, as the
lists they were made from."""

from __future__ import annotations

import uuid

from tidings.dal.arrays import array_literal
from tidings.dal.connection import Database


def test_the_server_reads_each_literal_as_its_list(database_url: str) -> None:
    ids = [1, 2**63 - 1, -(2**63), None]
    tokens = [uuid.uuid4(), None, uuid.uuid4()]
    attempts = [0, 2**31 - 1, None]
    flags = [True, False, None]
    db = Database(database_url)
    with db.cursor() as cur:
        cur.execute(
            "SELECT %(ids)s::bigint[], %(tokens)s::uuid[], %(attempts)s::integer[],"
            " %(flags)s::boolean[], %(empty)s::bigint[]",
            {
                "ids": array_literal(ids),
                "tokens": array_literal(tokens),
                "attempts": array_literal(attempts),
                "flags": array_literal(flags),
                "empty": array_literal([]),
            },
        )
        assert cur.fetchone() == (ids, tokens, attempts, flags, [])
    db.close()
