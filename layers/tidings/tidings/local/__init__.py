"""Tidings on one machine: the Lambda handlers run unchanged by a local runtime.

``runtime`` wires the collaborators (embedded PostgreSQL, local queue, printing notifier) and runs
the claimer, the senders, the scheduled handlers and the ingest API; ``lambda_env`` builds the
contexts and events AWS would hand the handlers; ``receivers`` are the demo's webhook receivers.
"""
