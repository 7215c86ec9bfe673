-- Speed lanes shown and set: the API and operators read and set an endpoint's own cap on its
-- deliveries in flight (endpoints.max_in_flight, migration 0094), and read when its slow-lane
-- hold ends (endpoint_health.slow_until), to show each endpoint's lane and to explain why a due
-- message of a slow endpoint waits.

GRANT SELECT (max_in_flight), INSERT (max_in_flight), UPDATE (max_in_flight)
    ON tidings.endpoints TO tidings_ingest, tidings_operator;
GRANT SELECT (slow_until) ON tidings.endpoint_health TO tidings_ingest, tidings_operator;
