"""Server-side assignor micro-benchmark (KIP-848's pure core, no broker).

The consumer protocol computes a group's target assignment inside a heartbeat whenever
the group epoch moves (a member joins or leaves, a subscription or a topic changes), so
the assignor's cost is paid on every member change. For each case this times, on the
calling thread with ``time.perf_counter``:

* ``full``: the first assignment, every member starting empty;
* ``join``: one member joins a group whose members hold a balanced assignment (what a
  rolling start or a scale-up pays per member);
* ``leave``: one member of a balanced group leaves;
* ``steady``: the assignor re-run on its own output (nothing moves).

Cases: uniform homogeneous 10 x 1,000, 100 x 1,000 and 1,000 x 10,000 (members x
partitions, 10 topics); uniform heterogeneous 100 x 1,000 (each member subscribes to a
random half of the 10 topics); range and the share groups' simple assignor at
100 x 1,000; then the whole TargetAssignmentBuilder for a member joining 100 x 1,000
(member specs built from names, assignor, record diff), and one reconciliation step
(CurrentAssignmentBuilder) of a steady heartbeat and of a member moving to a new target.

Each figure is the median of ``--repeat`` runs (default 15; fewer for the 1,000 x 10,000
case), with the fastest run beside it: on a shared machine the minimum is the steadier
number.

Usage::

    .venv/bin/python benchmarks/assignors.py
    .venv/bin/python benchmarks/assignors.py --repeat 31 --json benchmarks/out/assignors.json
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import format_table, git_describe

from tidegate.coordinator.group.assignor import RangeAssignor, SimpleAssignor, UniformAssignor
from tidegate.coordinator.group.assignor.api import (
    HETEROGENEOUS,
    HOMOGENEOUS,
    GroupSpec,
    MemberSubscriptionAndAssignment,
    PartitionAssignor,
    SubscriptionType,
)
from tidegate.coordinator.group.modern.consumer.consumer_group_member import (
    ConsumerGroupMember,
)
from tidegate.coordinator.group.modern.consumer.current_assignment_builder import (
    CurrentAssignmentBuilder,
)
from tidegate.coordinator.group.modern.target_assignment_builder import TargetAssignmentBuilder
from tidegate.coordinator.group.modern.topics import SubscribedTopicDescriberImpl, TopicsImage

TOPICS = 10


def image_for(partitions: int) -> TopicsImage:
    per_topic, extra = divmod(partitions, TOPICS)
    return TopicsImage.of(
        *((uuid.UUID(int=t + 1), f"topic-{t}", per_topic + (t < extra)) for t in range(TOPICS))
    )


def subscriptions(
    members: int, heterogeneous: bool, rnd: random.Random
) -> dict[str, frozenset[uuid.UUID]]:
    all_topics = [uuid.UUID(int=t + 1) for t in range(TOPICS)]
    if not heterogeneous:
        return {f"member-{i:05d}": frozenset(all_topics) for i in range(members)}
    return {
        f"member-{i:05d}": frozenset(rnd.sample(all_topics, TOPICS // 2)) for i in range(members)
    }


def spec_of(subs, assignment, kind: SubscriptionType) -> GroupSpec:
    return GroupSpec(
        {m: MemberSubscriptionAndAssignment(t, assignment.get(m, {})) for m, t in subs.items()},
        kind,
    )


def timed(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples), min(samples)


def assignor_cases(
    name: str, assignor: PartitionAssignor, members: int, partitions: int, kind, repeat: int
) -> list[tuple[str, float, float]]:
    rnd = random.Random(1)
    describer = SubscribedTopicDescriberImpl(image_for(partitions))
    subs = subscriptions(members, kind is HETEROGENEOUS, rnd)
    empty = spec_of(subs, {}, kind)
    balanced = assignor.assign(empty, describer).members

    joined = dict(subs)
    joined["member-new"] = (
        next(iter(subs.values()))
        if kind is HOMOGENEOUS
        else frozenset(rnd.sample(sorted(next(iter(subs.values()))), 1))
    )
    join = spec_of(joined, balanced, kind)
    left = dict(subs)
    left.pop(next(iter(subs)))
    leave = spec_of(left, balanced, kind)
    steady = spec_of(subs, balanced, kind)
    label = f"{name} {members} x {partitions}"
    out = []
    for case, spec in (("full", empty), ("join", join), ("leave", leave), ("steady", steady)):
        median, best = timed(lambda s=spec: assignor.assign(s, describer), repeat)
        out.append((f"{label}: {case}", median, best))
    return out


def target_assignment_case(repeat: int) -> tuple[str, float, float]:
    image = image_for(1000)
    names = frozenset(f"topic-{t}" for t in range(TOPICS))
    members = {
        f"member-{i:05d}": ConsumerGroupMember(f"member-{i:05d}", subscribed_topic_names=names)
        for i in range(100)
    }
    first = TargetAssignmentBuilder(
        "g",
        1,
        UniformAssignor(),
        members=members,
        target_assignment={},
        subscription_type=HOMOGENEOUS,
        metadata_image=image,
    ).build()
    newcomer = ConsumerGroupMember("member-new", subscribed_topic_names=names)

    def join() -> object:
        builder = TargetAssignmentBuilder(
            "g",
            2,
            UniformAssignor(),
            members=members,
            target_assignment=first.target_assignment,
            subscription_type=HOMOGENEOUS,
            metadata_image=image,
        )
        return builder.add_or_update_member("member-new", newcomer).build()

    median, best = timed(join, repeat)
    return ("TargetAssignmentBuilder uniform 100 x 1000: join", median, best)


def reconciliation_cases(repeat: int) -> list[tuple[str, float, float]]:
    image = image_for(1000)
    topic = uuid.UUID(int=1)
    names = frozenset(f"topic-{t}" for t in range(TOPICS))
    assigned = {uuid.UUID(int=t + 1): frozenset(range(5)) for t in range(TOPICS)}
    member = ConsumerGroupMember(
        "m",
        member_epoch=10,
        previous_member_epoch=9,
        subscribed_topic_names=names,
        assigned_partitions=assigned,
    )
    moved = dict(assigned)
    moved[topic] = frozenset(range(1, 6))

    def step(target_epoch, target, owned):
        return lambda: CurrentAssignmentBuilder(
            member,
            target_assignment_epoch=target_epoch,
            target_assignment=target,
            current_partition_epoch=lambda t, p: -1,
            metadata_image=image,
            owned_topic_partitions=owned,
        ).build()

    owned = list(assigned.items())
    out = []
    for label, fn in (
        ("CurrentAssignmentBuilder: steady heartbeat", step(10, assigned, None)),
        ("CurrentAssignmentBuilder: new target (revoke one)", step(11, moved, owned)),
    ):
        median, best = timed(fn, repeat * 20)
        out.append((label, median, best))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    repeat = args.repeat

    results: list[tuple[str, float, float]] = []
    uniform = UniformAssignor()
    for members, partitions in ((10, 1000), (100, 1000), (1000, 10000)):
        r = repeat if partitions <= 1000 else max(3, repeat // 3)
        results += assignor_cases(
            "uniform homogeneous", uniform, members, partitions, HOMOGENEOUS, r
        )
    results += assignor_cases("uniform heterogeneous", uniform, 100, 1000, HETEROGENEOUS, repeat)
    results += assignor_cases("range homogeneous", RangeAssignor(), 100, 1000, HOMOGENEOUS, repeat)
    results += assignor_cases(
        "simple homogeneous", SimpleAssignor(), 100, 1000, HOMOGENEOUS, repeat
    )
    results.append(target_assignment_case(repeat))
    results += reconciliation_cases(repeat)

    rows = [[label, f"{median * 1e3:.3f}", f"{best * 1e3:.3f}"] for label, median, best in results]
    print(f"tidegate {git_describe() or '?'}, python {sys.version.split()[0]}, repeat {repeat}")
    print(format_table(["case", "median ms", "min ms"], rows))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        doc = [{"case": label, "median_ms": m * 1e3, "min_ms": b * 1e3} for label, m, b in results]
        args.json.write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
