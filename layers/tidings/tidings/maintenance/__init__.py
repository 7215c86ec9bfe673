"""Maintenance: the scheduled jobs that keep the queue measured, healthy, reported and small.

``percentiles`` (every 5 minutes), ``health_monitor`` (every 5 minutes: ``failing_endpoints``,
``unreachable``, ``health``, ``alerts``), ``dead_letter_report`` (hourly) and ``pruning``
(hourly); ``batches`` runs bounded work a batch at a time.
"""
