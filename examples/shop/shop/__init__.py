"""A tiny shop: orders in Postgres, a cart cache in Redis, old orders archived into a second
database. Small, but its tests need what real suites need: their own databases, FLUSHDB, two
databases at once."""

from __future__ import annotations

import psycopg
import redis

SCHEMA = """
CREATE TABLE IF NOT EXISTS orders (
    id bigserial PRIMARY KEY,
    customer text NOT NULL,
    total_cents integer NOT NULL CHECK (total_cents >= 0),
    placed_at timestamptz NOT NULL DEFAULT now()
)
"""


def migrate(db_url: str) -> None:
    with psycopg.connect(db_url) as db:
        db.execute(SCHEMA)


def add_to_cart(cache: redis.Redis, customer: str, item: str, cents: int) -> None:
    cache.hincrby(f"cart:{customer}", item, cents)


def checkout(db_url: str, cache: redis.Redis, customer: str) -> int:
    """Turns the customer's cart into an order; returns the order id."""
    cart = cache.hgetall(f"cart:{customer}")
    if not cart:
        raise ValueError(f"{customer}'s cart is empty")
    total = sum(int(cents) for cents in cart.values())
    with psycopg.connect(db_url) as db:
        (order_id,) = db.execute(
            "INSERT INTO orders (customer, total_cents) VALUES (%s, %s) RETURNING id", (customer, total)
        ).fetchone()
    cache.delete(f"cart:{customer}")
    return order_id


def archive(db_url: str, archive_url: str, older_than_days: int) -> int:
    """Moves old orders into the archive database; returns how many moved."""
    migrate(archive_url)
    with psycopg.connect(db_url) as db, psycopg.connect(archive_url) as archive_db:
        rows = db.execute(
            "DELETE FROM orders WHERE placed_at < now() - make_interval(days => %s) "
            "RETURNING id, customer, total_cents, placed_at",
            (older_than_days,),
        ).fetchall()
        with archive_db.cursor() as cursor:
            cursor.executemany(
                "INSERT INTO orders (id, customer, total_cents, placed_at) VALUES (%s, %s, %s, %s)", rows
            )
        archive_db.commit()
    return len(rows)
