"""/v1/apps: create, list, read, change, delete; the routes of an application under
/v1/apps/{app}/..., by uid or id; the default application behind today's routes."""

from __future__ import annotations

from tests.integration.api.conftest import PUBLIC_URL, Api, count
from tests.support.seed import seed_messages
from tidings.dal.connection import Database


def create(api: Api, uid: str, **fields: object) -> dict:
    reply = api.post("/v1/apps", {"uid": uid, **fields})
    assert reply.status == 201, reply.raw
    return dict(reply.body)


def test_create_read_list_change(api: Api) -> None:
    acme = create(api, "acme", name="Acme Inc.", metadata={"plan": "pro"})
    assert set(acme) == {
        "id",
        "uid",
        "name",
        "metadata",
        "default_payload_format",
        "created_at",
        "updated_at",
    }
    assert (acme["uid"], acme["name"], acme["metadata"]) == ("acme", "Acme Inc.", {"plan": "pro"})
    assert "claim_after_endpoint_id" not in api.get("/v1/apps/acme").raw
    assert api.get("/v1/apps/acme").body == acme
    assert api.get(f"/v1/apps/{acme['id']}").body == acme
    listed = api.get("/v1/apps").body
    assert [a["uid"] for a in listed["items"]] == ["default", "tidings-operational", "acme"]
    changed = api.patch("/v1/apps/acme", {"name": "Acme", "metadata": {}})
    assert (changed.status, changed.body["name"], changed.body["metadata"]) == (200, "Acme", {})
    assert changed.body["uid"] == "acme"
    kept = api.patch("/v1/apps/acme", {"metadata": {"tier": "1"}})
    assert (kept.body["name"], kept.body["metadata"]) == ("Acme", {"tier": "1"})


def test_paging(api: Api) -> None:
    for n in range(5):
        create(api, f"c-{n}")
    first = api.get("/v1/apps", {"limit": "4"}).body
    assert [a["uid"] for a in first["items"]] == ["default", "tidings-operational", "c-0", "c-1"]
    second = api.get("/v1/apps", {"limit": "1", "cursor": first["next_cursor"]}).body
    assert [a["uid"] for a in second["items"]] == ["c-2"]
    rest = api.get("/v1/apps", {"limit": "4", "cursor": second["next_cursor"]}).body
    assert ([a["uid"] for a in rest["items"]], rest["next_cursor"]) == (["c-3", "c-4"], None)


def test_bad_applications_are_refused(api: Api, db: Database) -> None:
    create(api, "acme")
    taken = api.post("/v1/apps", {"uid": "acme"})
    assert (taken.status, taken.error["code"], taken.error["field"]) == (409, "uid_taken", "uid")
    for body in (
        {"uid": ""},
        {"uid": "-leading"},
        {"uid": "has space"},
        {"uid": "a" * 201},
        {"uid": "x", "metadata": {"n": 1}},
        {"uid": "x", "metadata": {"": "v"}},
        {"uid": "x", "claim_after_endpoint_id": 9},
        {"name": "no uid"},
    ):
        reply = api.post("/v1/apps", body)
        assert reply.status == 422, (body, reply.raw)
    # default, the operational application and acme.
    assert count(db, "applications") == 3


def test_an_unknown_application_is_404_everywhere(api: Api) -> None:
    for method, path in (
        ("GET", "/v1/apps/nobody"),
        ("PATCH", "/v1/apps/nobody"),
        ("DELETE", "/v1/apps/nobody"),
        ("GET", "/v1/apps/nobody/endpoints"),
        ("GET", "/v1/apps/999/messages"),
        ("POST", "/v1/apps/nobody/events"),
    ):
        body = {"event_type": "t", "payload": 1} if path.endswith("events") else None
        if method == "PATCH":
            body = {"name": "x"}
        reply = api.call(method, path, body)
        assert (reply.status, reply.error["code"]) == (404, "application_not_found"), path


def test_a_uid_wins_over_an_id(api: Api) -> None:
    acme = create(api, "acme")
    numeric = create(api, str(acme["id"]))
    assert api.get(f"/v1/apps/{acme['id']}").body["uid"] == numeric["uid"]
    assert api.get(f"/v1/apps/{numeric['id']}").body["uid"] == numeric["uid"]


def test_a_deleted_applications_uid_never_comes_to_name_another(api: Api) -> None:
    """A reference that named an application by its uid keeps naming it once it is deleted: a
    second DELETE of the same reference deletes nothing else, nor does any read reach another
    application whose id reads the same."""
    acme = create(api, "acme")
    numeric = create(api, str(acme["id"]))
    assert api.call("DELETE", f"/v1/apps/{numeric['uid']}").status == 204
    for method, path in (
        ("GET", f"/v1/apps/{numeric['uid']}"),
        ("GET", f"/v1/apps/{numeric['uid']}/status"),
        ("DELETE", f"/v1/apps/{numeric['uid']}"),
    ):
        reply = api.call(method, path)
        assert (reply.status, reply.error["code"]) == (404, "application_not_found"), path
    assert api.get("/v1/apps/acme").body["id"] == acme["id"]


def test_an_applications_routes_act_inside_it(api: Api, db: Database) -> None:
    acme = create(api, "acme")
    endpoint = api.post("/v1/apps/acme/endpoints", {"url": PUBLIC_URL, "event_types": ["*"]})
    assert endpoint.status == 201
    default_endpoint = api.create_endpoint()
    sent = api.post(f"/v1/apps/{acme['id']}/events", {"event_type": "t", "payload": {}})
    assert sent.status == 202
    (message_id,) = sent.body["message_ids"]
    message = api.get(f"/v1/apps/acme/messages/{message_id}")
    assert message.body["endpoint_id"] == endpoint.body["id"]
    assert [m["id"] for m in api.get("/v1/apps/acme/messages").body["items"]] == [message_id]
    # Today's routes are the default application's: the acme message and endpoint are not there.
    assert api.get(f"/v1/messages/{message_id}").status == 404
    assert api.get("/v1/messages").body["items"] == []
    assert [e["id"] for e in api.get("/v1/endpoints").body["items"]] == [default_endpoint["id"]]
    assert [e["id"] for e in api.get("/v1/apps/acme/endpoints").body["items"]] == [
        endpoint.body["id"]
    ]
    batch = api.post("/v1/apps/acme/events/batch", {"events": [{"event_type": "t", "payload": 1}]})
    assert batch.status == 202 and len(batch.body["results"][0]["message_ids"]) == 1
    health = api.get(f"/v1/apps/acme/endpoints/{endpoint.body['id']}/health")
    assert health.body["counts"] == {"pending": 2}


def test_deleting_an_application(api: Api, db: Database) -> None:
    create(api, "acme")
    endpoint = api.post("/v1/apps/acme/endpoints", {"url": PUBLIC_URL}).body
    with db.cursor() as cur:
        seed_messages(cur, endpoint["id"], 3)
        seed_messages(cur, endpoint["id"], 2, status="delivered")
    assert api.delete("/v1/apps/acme").status == 204
    assert api.get("/v1/apps/acme").status == 404
    assert [a["uid"] for a in api.get("/v1/apps").body["items"]] == [
        "default",
        "tidings-operational",
    ]
    assert api.post("/v1/apps/acme/events", {"event_type": "t", "payload": 1}).status == 404
    assert api.delete("/v1/apps/acme").status == 404
    # Soft: the rows stay, the endpoint is disabled and the queued messages are dead letters.
    with db.cursor() as cur:
        cur.execute("SELECT deleted_at IS NOT NULL FROM tidings.applications WHERE uid = 'acme'")
        assert cur.fetchone() == (True,)
        cur.execute(
            "SELECT enabled, disabled_reason FROM tidings.endpoints WHERE id = %s",
            (endpoint["id"],),
        )
        assert cur.fetchone() == (False, "application deleted")
        cur.execute(
            "SELECT status::text, last_error, count(*) FROM tidings.messages"
            " GROUP BY 1, 2 ORDER BY 1"
        )
        assert cur.fetchall() == [
            ("dead_letter", "endpoint disabled: application deleted", 3),
            ("delivered", None, 2),
        ]
    # Its uid stays taken by the deleted application.
    assert api.post("/v1/apps", {"uid": "acme"}).status == 409


def test_the_default_application_cannot_be_deleted(api: Api) -> None:
    reply = api.delete("/v1/apps/default")
    assert (reply.status, reply.error["code"]) == (409, "default_application")
    assert api.delete("/v1/apps/1").status == 409
    assert api.get("/v1/apps/default").status == 200
