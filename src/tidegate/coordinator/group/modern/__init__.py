"""The modern group protocols' pure core (Kafka's ``coordinator.group.modern``): member
values, the target assignment and reconciliation of KIP-848 consumer groups, shared with
KIP-932 share groups where Kafka shares them.

* :mod:`.member_state` -- :class:`~.member_state.MemberState`;
* :mod:`.records` -- the record types, :class:`~.records.CoordinatorRecord` and the
  group-level record values both protocols write;
* :mod:`.modern_group` -- :class:`~.modern_group.ModernGroup`, the state both kinds of
  group keep (epochs, members, target assignment, subscription counts);
* :mod:`.group_manager` -- :class:`~.group_manager.ModernGroupManager`, what both
  coordinators share: records first, replay at load, timers on the timing wheel, group
  configs, the metadata hash;
* :mod:`.topics` -- the topic metadata the core reads (a protocol the broker's topic store
  satisfies), topic name resolution and the subscribed-topics metadata hash;
* :mod:`.subscription` -- subscription counts and the group's subscription type;
* :mod:`.target_assignment_builder` -- the new target assignment and its records;
* :mod:`.consumer` -- :class:`~.consumer.consumer_group_member.ConsumerGroupMember` and
  the reconciliation engine (:mod:`.consumer.current_assignment_builder`), the consumer
  group and its coordinator;
* :mod:`.share` -- KIP-932 share groups and their coordinator.

No I/O, no asyncio: the coordinators read their injected clock, append through an
injected function and replay what they wrote.
"""
