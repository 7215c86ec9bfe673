"""Tidings on one machine: local imitations of what AWS provides, running the unchanged handlers.

``runtime`` wires the collaborators (``embedded`` PostgreSQL, ``queue``, ``notifier``) and plays
EventBridge (``scheduler``), the SQS event source mapping (``event_source``) and API Gateway
(``api_server``, ``lambda_env``); ``demo`` and ``receivers`` are ``tidings demo``.
"""
