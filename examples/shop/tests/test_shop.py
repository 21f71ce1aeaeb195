from __future__ import annotations

import psycopg
import pytest

import shop
from conftest import dbname


def test_checkout_turns_the_cart_into_an_order(db_url, cache):
    shop.migrate(db_url)
    shop.add_to_cart(cache, "ada", "book", 1200)
    shop.add_to_cart(cache, "ada", "pen", 300)
    order = shop.checkout(db_url, cache, "ada")
    with psycopg.connect(db_url) as db:
        assert db.execute("SELECT customer, total_cents FROM orders WHERE id = %s", (order,)).fetchone() == ("ada", 1500)
    assert cache.exists("cart:ada") == 0


def test_an_empty_cart_is_refused(db_url, cache):
    shop.migrate(db_url)
    with pytest.raises(ValueError, match="empty"):
        shop.checkout(db_url, cache, "bob")


def test_every_test_starts_from_an_empty_cache(cache):
    assert cache.dbsize() == 0
    cache.set("left-behind", 1)


def test_every_test_starts_from_an_empty_cache_again(cache):
    assert cache.dbsize() == 0


def test_archive_moves_old_orders_into_the_second_database(db_url, archive_url, cache):
    assert dbname(db_url) != dbname(archive_url)
    shop.migrate(db_url)
    shop.add_to_cart(cache, "cy", "lamp", 4000)
    old = shop.checkout(db_url, cache, "cy")
    with psycopg.connect(db_url) as db:
        db.execute("UPDATE orders SET placed_at = now() - interval '400 days' WHERE id = %s", (old,))
    assert shop.archive(db_url, archive_url, older_than_days=365) == 1
    with psycopg.connect(db_url) as db:
        assert db.execute("SELECT count(*) FROM orders").fetchone() == (0,)
    with psycopg.connect(archive_url) as db:
        assert db.execute("SELECT id, total_cents FROM orders").fetchall() == [(old, 4000)]
