"""The ingest and management HTTP API (API Gateway REST, Powertools resolver).

``tidings.api.app`` builds the resolver and the Lambda entry; ``routes`` maps each route onto a
use case of ``tidings.logic``; ``models`` holds the request and response bodies, from which the
OpenAPI document is generated.
"""
