"""Each test gets fresh databases cut from the session's sandbox (CREATE DATABASE) and an empty
Redis (FLUSHDB): the sandbox is provisioned once by the sandboxd plugin."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
import redis
from psycopg.conninfo import conninfo_to_dict, make_conninfo


def database(admin_url: str) -> Iterator[str]:
    name = f"test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin_url, autocommit=True) as db:
        db.execute(f'CREATE DATABASE "{name}"')
    yield make_conninfo(admin_url, dbname=name)
    with psycopg.connect(admin_url, autocommit=True) as db:
        db.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


@pytest.fixture
def db_url(sandboxd_postgres: str) -> Iterator[str]:
    yield from database(sandboxd_postgres)


@pytest.fixture
def archive_url(sandboxd_postgres: str) -> Iterator[str]:
    yield from database(sandboxd_postgres)


@pytest.fixture
def cache(sandboxd_redis: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(sandboxd_redis)
    client.flushdb()
    yield client
    client.close()


def dbname(url: str) -> str:
    return conninfo_to_dict(url)["dbname"]
