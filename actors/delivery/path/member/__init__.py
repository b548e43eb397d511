"""The instance member: the one Kafka group member of this instance for a broker; every
subscription is a cursor on the partitions it reads (issue 24), and rides it through its
`RiderActor`.

The runtime's instances form one consumer group of their own (`[delivery]
instance_group`), subscribed to the union of the subscriptions' topics; Kafka assigns
each topic-partition to one instance. The member fetches and decodes each owned partition
once and hands the records to one cursor per subscription of that topic: a
`PartitionActor` in the subscription's own tree, with its own window, lanes, retries and
offset tracker. Which cursor gets which records is `Fanout`'s decision (../fanout.py); a
cursor that falls behind the shared buffer reads on its own (../catchup.py) until it is
back. No subscription joins a group: a subscription's `group.id` is where its positions
are committed, without membership, through this member's client
(runtime/kafka/group_offsets.py).

Tree::

    groups (one_for_one)                    under the runtime's root
    └── instance:<broker>                   InstanceMemberActor
    delivery
    └── <id>_<group.id>
        ├── egress, deadletter, partitions  partition actors (the cursors) live here
        └── consumer                        RiderActor: joins on start, leaves on stop

One owner (issue 32, item 10). The member's mailbox is the only writer of its state.
Everything that waits runs in a task of the member's that only does I/O and tells the
member what came back: the fetcher (fetcher.py: `getmany`, then `Fetched`), commit rounds,
reads of positions, high watermarks and topics, drains, cursor starts and stops (io.py).
aiokafka's rebalance listener hands `Revoke` and `Assign` to the mailbox too
(actors/shared/rebalance.py); a revoke answers with a future the listener waits on, so
the group moves on once the revoked cursors are drained and committed, while the mailbox
stays free.

Rooms, each named for what it owns:

- actor.py: the mailbox; the fetch turn, commits, start positions, high watermarks,
  flow and catch-up, status;
- cursors.py: starting, routing and retiring cursors (leave, revoke, stop);
- topics.py: what the member subscribes to (patterns, listings, settling);
- fetcher.py, io.py: the tasks;
- pure books, tested as state machines: seats.py (epochs and retirements), commits.py
  (commit rounds: epochs, gone partitions, refusals), topic_plan.py (wanted, listed,
  missing, subscribed), positions.py (where a cursor starts), tuning.py (fetch size and
  wait), with ../fanout.py (who gets which records) and ../roster.py (the riders).
"""

from actors.delivery.path.member.actor import InstanceMemberActor
from actors.delivery.path.member.messages import Hold, Join, Leave, Release
from actors.delivery.path.member.rider import RiderActor

__all__ = ["Hold", "InstanceMemberActor", "Join", "Leave", "Release", "RiderActor"]
