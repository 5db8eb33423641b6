"""PostgresStore.feed_is_whole says what feed_statistics().state says, without the snapshot: the
mesh trusts the partition facts it kept only while it is True."""

from __future__ import annotations

import pytest

from rxmesh.providers._store import feed_is_whole
from rxmesh.providers.postgres import ChangeFeedState, PostgresStore

pytestmark = pytest.mark.postgres


async def test_the_feed_is_whole_while_it_listens_and_not_before_or_after(
    pg_dsn: str, prefix: str
) -> None:
    store = PostgresStore(pg_dsn, schema_prefix=prefix, max_size=2)
    assert store.feed_is_whole is False  # not started: the control
    await store.start()
    try:
        assert store.feed_statistics().state is ChangeFeedState.LISTENING
        assert store.feed_is_whole is True
        assert feed_is_whole(store) is True
    finally:
        await store.close()
    assert store.feed_statistics().state is not ChangeFeedState.LISTENING
    assert store.feed_is_whole is False
