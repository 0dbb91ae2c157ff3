"""The ``tidegate`` command line (also ``python -m tidegate``): the ``main`` click group
(:mod:`.base`) and its subcommands, one module per command (group):

``serve`` (:mod:`.serve`, kafka-server-start.sh), ``top`` (:mod:`.top`), ``configs``
(:mod:`.configs`, kafka-configs.sh), ``acls`` (:mod:`.acls`, kafka-acls.sh), ``topics``
(:mod:`.topics`, kafka-topics.sh), ``console-producer`` and ``console-consumer``
(:mod:`.console`), ``consumer-groups`` (:mod:`.consumer_groups`), ``share-groups``
(:mod:`.share_groups`, kafka-share-groups.sh). Each registers itself on ``main`` when
imported.
"""

from tidegate.cli import acls, configs, console, consumer_groups, serve, share_groups, top, topics  # noqa: F401
from tidegate.cli.base import main

__all__ = ["main"]
