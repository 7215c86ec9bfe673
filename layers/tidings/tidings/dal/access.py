"""Who may run what: the database's group roles and the named queries each role's holders run.

This table is the one place that says which statements each kind of caller runs. The grants that
let them (``migrations/0072_grants.sql``) are checked against it by a test that connects as a
member of each role: every query of a role must run, and every privilege a role holds must be
needed by one of its queries. A new query needs one line here (and, if it touches something the
role could not touch before, a grant in a new migration); a query no role runs fails that test.

Roles are ``NOLOGIN`` groups (``migrations/0071_database_roles.sql``). On AWS each function
connects as a login user of its own that is a member of its function's role
(``tidings.deployment``), producers as login users that are members of ``tidings_producer``,
operators as members of ``tidings_operator``. ``tidings_owner`` owns the schema; the migrator (the
master user) is a member of it and runs the owner's queries. Locally, one database URL of a user
that may do everything serves every part, as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

OWNER = "tidings_owner"


@dataclass(frozen=True, slots=True)
class DatabaseRole:
    name: str
    description: str
    # The named queries (dal/queries/*.sql) its holders run.
    queries: frozenset[str]


def _role(name: str, description: str, *queries: str) -> DatabaseRole:
    return DatabaseRole(name, description, frozenset(queries))


_SECRETS_WRITER = (
    "current_data_key",
    "next_data_key_id",
    "insert_data_key",
    "next_endpoint_secret_id",
    "set_endpoint_secret",
    # Receiver credentials (migration 0097): sealed like signing secrets, shown redacted.
    "next_endpoint_credential_id",
    "set_endpoint_credential",
    "clear_endpoint_credential",
)
_ENDPOINTS = (
    "insert_endpoint",
    "get_endpoint",
    "list_endpoints",
    "update_endpoint",
    "soft_delete_endpoint",
    "endpoint_health",
    "endpoint_hourly_attempts",
    "report_secret_rotated",
    # FIFO lines (migration 0131): an ordering switched, lines listed and resumed.
    "reorder_endpoint",
    "list_lines",
    "resume_lines",
)
_MESSAGES = (
    "get_message",
    "attempts_of_message",
    "replay_dead_letters",
    "resend_message",
    "endpoint_of_application",
    "messages_outside_application",
    "recovery_candidates",
    "recover_messages",
    # What a replay, resend or recovery makes pending again joins its FIFO line.
    "place_in_lines",
)
_APPLICATIONS = (
    "insert_application",
    "find_application",
    "list_applications",
    "update_application",
    "mark_application_deleted",
    "wait_for_application_writers",
    "retire_application_endpoints",
    "operational_application",
)
_TOKENS = ("insert_token", "list_tokens", "get_token", "revoke_token")
# The event-type catalog (migration 0110): kept, read to validate payloads on ingest, and the
# events "send example" makes.
_EVENT_TYPES = (
    "insert_event_type",
    "lock_event_type",
    "update_event_type",
    "add_event_type_version",
    "get_event_type",
    "list_event_types",
    "get_event_type_version",
    "payload_validators",
    "event_type_schema",
    "mark_example_event",
)
_OPERATOR_VIEWS = (
    "health_summary",
    "application_figures",
    "endpoint_progress",
    "dead_letter_stats",
)

PRODUCER = _role(
    "tidings_producer",
    "Producers: record events through tidings.enqueue and tidings.enqueue_batch, nothing else",
    "enqueue_events",
    "enqueue_batch",
)
CLAIMER = _role(
    "tidings_claimer",
    "The claimer: leases due messages, gives back what it could not queue",
    "claim_due",
    "release_leases",
    "advance_noted_lines",
)
SENDER = _role(
    "tidings_sender",
    "The sender: begins attempts (reading the signing secrets of the rows it holds), records "
    "outcomes, gives back leases; opens the data keys that seal the secrets",
    "begin_attempts",
    "mark_slow",
    "mark_quick",
    "record_outcomes",
    "release_leases",
    "load_data_keys",
    "advance_lines",
)
INGEST = _role(
    "tidings_ingest",
    "The ingest API: applications, tokens and portal links, the event-type catalog, and in an "
    "application events, "
    "endpoints (creating and rotating their secrets, revealing the current one through "
    "tidings.endpoint_signing_secret_v1), messages and their attempts, replay, resend and "
    "recovery; the operators' status and dead-letter views",
    "enqueue_event",
    "enqueue_batch",
    "list_messages",
    *_ENDPOINTS,
    *_MESSAGES,
    *_SECRETS_WRITER,
    *_APPLICATIONS,
    *_TOKENS,
    *_EVENT_TYPES,
    # The API alone opens portal sessions and reveals a secret a person asks for.
    "exchange_portal_link",
    "endpoint_signing_secret",
    # What `tidings status` and `tidings dead-letters` read, over the API.
    *_OPERATOR_VIEWS,
)
AUTHORIZER = _role(
    "tidings_authorizer",
    "The API's token authorizer: finds a token by its prefix (with its application's state) and "
    "remembers the API Gateway API key made for it",
    "tokens_with_prefix",
    "set_usage_key",
)
PERCENTILES = _role(
    "tidings_percentiles",
    "The percentiles job: latency histograms and the minutes of the hourly charts from the "
    "tallies of recorded attempts, figures per endpoint",
    "lock_percentiles_state",
    "reset_latency_window",
    "advance_latency_window",
    "roll_up_attempt_minutes",
    "delete_emptied_latency_window",
    "analyze_latency_histograms",
    "allow_large_rollup",
    "save_percentiles_state",
    "lock_endpoint_health",
    "update_endpoint_percentiles",
)
HEALTH_MONITOR = _role(
    "tidings_health_monitor",
    "The health monitor: the queue's figures, failing endpoints disabled, unreachable messages "
    "dead-lettered, alerts claimed",
    "health_summary",
    "endpoints_needing_attention",
    "count_dead_lettered_between",
    "track_failing_streaks",
    "disable_failing_endpoints",
    "retire_endpoints_of_deleted_applications",
    "dead_letter_unreachable_messages",
    "monitor_checkpoint",
    "save_monitor_checkpoint",
    "firing_alerts",
    "claim_alert_firing",
    "claim_alert_resolved",
    "take_waiting_notifications",
    "notification_published",
    "notification_not_published",
    "application_figures",
    "report_expiring_certificates",
)
DEAD_LETTER_REPORT = _role(
    "tidings_dead_letter_report",
    "The dead-letter report: claims the unreported dead letters",
    "claim_dead_letters_for_report",
    "count_unreported_dead_letters",
)
PRUNER = _role(
    "tidings_pruner",
    "The pruner: attempt and tally partitions made and dropped (the attempts of kept messages "
    "moved aside first, the messages a day's tallies delivered deleted first), dead letters, "
    "events past their window and expired rotated-out secrets deleted",
    "ensure_attempt_partitions",
    "oldest_attempt_partition",
    "keep_live_attempts",
    "drop_attempt_partition",
    "prune_default_attempts",
    "oldest_tally_partition",
    "tally_pruning_progress",
    "save_tally_pruning_progress",
    "prune_tallied_messages",
    "prune_default_tallies",
    "prune_dead_letters",
    "prune_orphan_events",
    "prune_expired_secrets",
)
OPERATOR = _role(
    "tidings_operator",
    "People with the tidings CLI: status, applications, tokens and portal links, the event-type "
    "catalog, endpoints "
    "(creating and rotating secrets, never revealing one), sending, messages, dead letters, "
    "replay, resend and recovery, the dev runtime and the demo",
    "enqueue_event",
    "enqueue_events",
    *_OPERATOR_VIEWS,
    "any_token",
    "unsettled_messages",
    "dead_letter_ids",
    *_ENDPOINTS,
    *_MESSAGES,
    *_SECRETS_WRITER,
    *_APPLICATIONS,
    *_TOKENS,
    *_EVENT_TYPES,
)

ROLES: tuple[DatabaseRole, ...] = (
    PRODUCER,
    CLAIMER,
    SENDER,
    INGEST,
    AUTHORIZER,
    PERCENTILES,
    HEALTH_MONITOR,
    DEAD_LETTER_REPORT,
    PRUNER,
    OPERATOR,
)
ROLES_BY_NAME: Mapping[str, DatabaseRole] = {role.name: role for role in ROLES}

# Functions the previous release's code calls and this release's does not, kept (and granted)
# so that code still running while a release is deployed keeps working; no query of this
# release needs them. The next release's migration drops them and removes them here.
PREVIOUS_RELEASE_FUNCTIONS: Mapping[str, frozenset[str]] = {
    # Replaced by begin_attempts_v4 (migration 0131), which adds FIFO lines and batches: 0.2.0's
    # senders call v3 (it works through the tidings.messages view since migration 0150).
    "tidings_sender": frozenset({"begin_attempts_v3"}),
}

# Run by the migrator (or `tidings schema` / `tidings secrets reencrypt`) as a member of the
# owner role: reading the catalogs, and the secrets' upkeep, which opens every stored secret.
OWNER_QUERIES: frozenset[str] = frozenset(
    {
        "schema_server_major",
        "schema_enums",
        "schema_tables",
        "schema_columns",
        "schema_constraints",
        "schema_indexes",
        "schema_views",
        "schema_functions",
        "schema_triggers",
        "schema_grants",
        "current_data_key",
        "next_data_key_id",
        "insert_data_key",
        "next_endpoint_secret_id",
        "load_data_keys",
        "plaintext_secrets",
        "store_encrypted_plaintext",
        "secrets_to_reencrypt",
        "replace_ciphertexts",
        "unbound_secrets_left",
        "drop_unused_data_keys",
        "ensure_login",
        "store_max_payload_bytes",
        "store_operational_settings",
        "token_with_hash",
        "insert_token",
    }
)

# Functions that run with their owner's rights (SECURITY DEFINER, with a fixed search_path), so
# that a role needs only EXECUTE on them: what a producer may do is exactly what tidings.enqueue
# does; the sender reads secrets only through begin_attempts_v4 (v3 before it), for rows it
# holds. Every overload of each name. A later CREATE OR REPLACE resets both attributes, so a
# migration that redefines one must say SECURITY DEFINER SET search_path = pg_catalog, pg_temp
# again (a test fails otherwise).
SECURITY_DEFINER_FUNCTIONS: frozenset[str] = frozenset(
    {
        "enqueue",
        "enqueue_batch",
        "enqueue_event",
        "claim_due_v2",
        "mark_slow_v1",
        "mark_quick_v1",
        "begin_attempts_v3",
        "begin_attempts_v4",
        "advance_lines_v1",
        "advance_noted_lines_v1",
        "place_in_lines_v1",
        "reorder_endpoint_v1",
        "resume_lines_v1",
        "record_outcomes_v1",
        "emit_lifecycle_v1",
        "release_leases_v1",
        "set_endpoint_secret_v2",
        "set_endpoint_credential_v1",
        "endpoint_signing_secret_v1",
        "ensure_attempt_partitions",
        "drop_oldest_attempt_partition",
        "keep_live_attempts",
        "drop_attempt_partition",
        "prune_tallied_messages",
        "prune_default_tallies",
        "analyze_latency_histograms",
        "create_endpoint_health",
        # Writes through tidings.messages and tidings.attempts (views) reach their tables.
        "write_messages_view",
        "write_attempts_view",
    }
)
DEFINER_SEARCH_PATH = "pg_catalog, pg_temp"
