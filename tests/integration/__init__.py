"""The mesh with real servers behind it: a real PostgreSQL (a throwaway cluster of the test's own
where the test restarts it, a transaction-pooling PgBouncer where the pooler matters), real faults
through a FaultProxy, and the outage drill run through them.

Not one folder per module: each test checks what the parts promise together (an honest answer
through a real fault, a pending write settled once, a partition's schema created once under
concurrent first writes), which no module's own test can see."""
