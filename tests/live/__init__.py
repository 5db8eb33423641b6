"""Live queries along their whole path: an Initial, its deltas, its gaps and an idle query, from
the store that makes them (in memory and PostgreSQL) through the cache to the subscriber.

Not one folder per module: what these tests hold (one frame order from store to subscriber, a
defective row reported once, a re-select shared by every reader, no work while idle) is a
promise of the path, not of one of its modules. A module's own tests sit where it sits
(tests/operators for fan_in, tests/providers/postgres for the store)."""
