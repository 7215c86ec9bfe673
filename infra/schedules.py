"""EventBridge rules that start the scheduled functions."""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Duration
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_lambda as lambda_
from constructs import Construct


class Schedules(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        functions: Mapping[str, lambda_.IFunction],
        expressions: Mapping[str, str],
    ) -> None:
        super().__init__(scope, construct_id)
        self.rules: dict[str, events.Rule] = {}
        for name, function in functions.items():
            expression = expressions[name]
            self.rules[name] = events.Rule(
                self,
                "".join(part.capitalize() for part in name.split("_")),
                description=f"Starts the Tidings {name} function: {expression}",
                schedule=events.Schedule.expression(expression),
                targets=[
                    # A missed run is covered by the next one; retrying late would only overlap it.
                    targets.LambdaFunction(
                        function, retry_attempts=0, max_event_age=Duration.minutes(1)
                    )
                ],
            )
