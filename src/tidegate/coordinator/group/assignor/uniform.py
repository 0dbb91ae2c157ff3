"""The ``uniform`` server-side assignor, Kafka's default (``UniformAssignor``): sticky and
balanced, with one builder for homogeneous subscriptions and one for heterogeneous."""

from __future__ import annotations

from tidegate.coordinator.group.assignor.api import (
    HOMOGENEOUS,
    GroupAssignment,
    GroupSpec,
    SubscribedTopicDescriber,
)
from tidegate.coordinator.group.assignor.uniform_heterogeneous import (
    UniformHeterogeneousAssignmentBuilder,
)
from tidegate.coordinator.group.assignor.uniform_homogeneous import assign_homogeneous

UNIFORM_ASSIGNOR_NAME = "uniform"


class UniformAssignor:
    """Balance (member sizes differ by at most one), then stickiness."""

    name = UNIFORM_ASSIGNOR_NAME

    def assign(
        self, group_spec: GroupSpec, topic_describer: SubscribedTopicDescriber
    ) -> GroupAssignment:
        if not group_spec.members:
            return GroupAssignment({})
        if group_spec.subscription_type is HOMOGENEOUS:
            return assign_homogeneous(group_spec, topic_describer)
        return UniformHeterogeneousAssignmentBuilder(group_spec, topic_describer).build()
