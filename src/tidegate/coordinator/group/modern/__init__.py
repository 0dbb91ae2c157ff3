"""The modern group protocols' pure core (Kafka's ``coordinator.group.modern``): member
values, the target assignment and reconciliation of KIP-848 consumer groups, shared with
KIP-932 share groups where Kafka shares them.

* :mod:`.member_state` -- :class:`~.member_state.MemberState`;
* :mod:`.topics` -- the topic metadata the core reads (a protocol the broker's topic store
  satisfies), topic name resolution and the subscribed-topics metadata hash;
* :mod:`.subscription` -- subscription counts and the group's subscription type;
* :mod:`.target_assignment_builder` -- the new target assignment and its records;
* :mod:`.consumer` -- :class:`~.consumer.consumer_group_member.ConsumerGroupMember` and
  the reconciliation engine (:mod:`.consumer.current_assignment_builder`).

No clock, no I/O, no asyncio: the group coordinator drives these and persists the
records they return.
"""
