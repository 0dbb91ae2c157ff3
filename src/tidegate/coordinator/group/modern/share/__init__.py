"""KIP-932 share groups on the group coordinator (Kafka's ``coordinator.group.modern.share``
and the share half of its ``GroupMetadataManager``), sans-IO.

* :mod:`.share_group_member` -- :class:`~.share_group_member.ShareGroupMember` and its
  reconciliation (Kafka's ``ShareGroupAssignmentBuilder``);
* :mod:`.records` -- the share group records (types 10-15) and their helpers;
* :mod:`.share_group` -- :class:`~.share_group.ShareGroup`: states, the initializing /
  initialized / deleting share-partitions, describe;
* :mod:`.persister` -- what the coordinator asks of the share-group state persister;
* :mod:`.share_group_manager` -- :class:`~.share_group_manager.ShareGroupManager`:
  ShareGroupHeartbeat, session timeouts, share-partition initialization, replay, and the
  admin operations (ShareGroupDescribe, ListGroups, DeleteGroups, Describe/Alter/
  DeleteShareGroupOffsets).
"""
