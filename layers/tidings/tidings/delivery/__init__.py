"""Delivery: due rows leased by the claimer, sent by the sender, each attempt's fate decided.

The stage that does I/O: ``claimer`` (database → queue), ``sender`` (queue → receivers →
database), ``http_transport`` (one request, SSRF-checked and bounded). The pure rules it follows,
beside it: ``envelope`` (the queue message), ``attempt`` (an attempt's fate), ``retry_policy``,
``backoff``, ``circuit_breaker``, ``signing``, ``ssrf`` and ``waiting`` (why a message waits).
"""
