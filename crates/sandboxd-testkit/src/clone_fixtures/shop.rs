//! The "production" the clone tests measure against: a shop whose data makes the planner choose
//! by statistics (skewed and correlated columns, rare and frequent values, partial and
//! multi-column indexes, tables whose sizes decide a join's order), and the queries whose plans
//! a clone must pick as production does.

/// Loads the shop (about 2.5M rows) into an empty database, then `VACUUM ANALYZE`s it (run it
/// with `batch_execute`; `VACUUM` is a statement of its own at the end).
pub const LOAD: &str = r#"
SELECT setseed(0.42);

CREATE TABLE regions (id int PRIMARY KEY, name text NOT NULL);
INSERT INTO regions SELECT g, 'region-' || g FROM generate_series(1, 20) g;

CREATE TABLE customers (
    id int PRIMARY KEY,
    region_id int NOT NULL REFERENCES regions,
    country text NOT NULL,
    tier text NOT NULL,
    signup_on date NOT NULL,
    email text NOT NULL
);
INSERT INTO customers
SELECT g, 1 + g % 20,
       CASE WHEN g % 100 < 55 THEN 'US' WHEN g % 100 < 75 THEN 'DE' WHEN g % 100 < 90 THEN 'FR'
            ELSE 'X' || lpad((g % 97)::text, 2, '0') END,
       CASE WHEN g % 997 = 0 THEN 'platinum' WHEN g % 11 = 0 THEN 'gold' ELSE 'basic' END,
       date '2016-01-01' + g / 40,
       'user' || g || '@example.com'
FROM generate_series(1, 200000) g;
CREATE INDEX customers_country_idx ON customers (country);
CREATE INDEX customers_tier_idx ON customers (tier);
CREATE INDEX customers_signup_idx ON customers (signup_on);

CREATE TABLE products (
    id int PRIMARY KEY,
    category int NOT NULL,
    price numeric(10, 2) NOT NULL,
    discontinued boolean NOT NULL
);
INSERT INTO products
SELECT g, CASE WHEN g % 10 < 7 THEN 1 + g % 5 ELSE 6 + g % 45 END,
       round((1 + random() * 999)::numeric, 2), g % 50 = 0
FROM generate_series(1, 20000) g;
CREATE INDEX products_category_idx ON products (category);
CREATE INDEX products_price_idx ON products (price);

CREATE TABLE orders (
    id bigint PRIMARY KEY,
    customer_id int NOT NULL REFERENCES customers,
    status text NOT NULL,
    created_at timestamptz NOT NULL,
    total numeric(12, 2) NOT NULL,
    channel text NOT NULL
);
INSERT INTO orders
SELECT g, 1 + floor(power(random(), 4) * 199999)::int,
       CASE WHEN r < 0.90 THEN 'delivered' WHEN r < 0.97 THEN 'shipped'
            WHEN r < 0.999 THEN 'pending' ELSE 'cancelled' END,
       timestamptz '2020-01-01 00:00:00+00' + g * interval '2 minutes',
       round((5 + random() * 495)::numeric, 2),
       CASE WHEN g % 10 < 6 THEN 'web' WHEN g % 10 < 9 THEN 'app' ELSE 'store' END
FROM (SELECT g, random() AS r FROM generate_series(1, 1000000) g) s;
CREATE INDEX orders_customer_idx ON orders (customer_id);
CREATE INDEX orders_created_idx ON orders (created_at);
CREATE INDEX orders_status_created_idx ON orders (status, created_at);
CREATE INDEX orders_open_idx ON orders (customer_id) WHERE status IN ('pending', 'shipped');
CREATE STATISTICS orders_status_channel (dependencies) ON status, channel FROM orders;

CREATE TABLE order_items (
    order_id bigint NOT NULL REFERENCES orders,
    line int NOT NULL,
    product_id int NOT NULL REFERENCES products,
    qty int NOT NULL,
    PRIMARY KEY (order_id, line)
);
INSERT INTO order_items
SELECT o, l, 1 + floor(power(random(), 2) * 19999)::int, 1 + (random() * 4)::int
FROM generate_series(1, 500000) o, generate_series(1, 2) l;
CREATE INDEX order_items_product_idx ON order_items (product_id);

CREATE TABLE events (
    id bigserial PRIMARY KEY,
    customer_id int,
    kind text NOT NULL,
    payload jsonb,
    at timestamptz NOT NULL
);
INSERT INTO events (customer_id, kind, payload, at)
SELECT CASE WHEN random() < 0.7 THEN NULL ELSE 1 + (random() * 199999)::int END,
       CASE WHEN r < 0.85 THEN 'view' WHEN r < 0.95 THEN 'cart' WHEN r < 0.999 THEN 'purchase'
            ELSE 'refund' END,
       jsonb_build_object('n', g),
       timestamptz '2023-01-01 00:00:00+00' + g * interval '1 minute'
FROM (SELECT g, random() AS r FROM generate_series(1, 300000) g) s;
CREATE INDEX events_customer_idx ON events (customer_id);
CREATE INDEX events_kind_at_idx ON events (kind, at);

CREATE VIEW open_orders AS
    SELECT id, customer_id, status, created_at FROM orders WHERE status IN ('pending', 'shipped');
CREATE FUNCTION order_quantity(bigint) RETURNS bigint LANGUAGE sql STABLE
    AS $$ SELECT coalesce(sum(qty), 0) FROM order_items WHERE order_id = $1 $$;
CREATE MATERIALIZED VIEW daily_sales AS
    SELECT created_at::date AS day, count(*) AS orders, sum(total) AS total
    FROM orders GROUP BY 1;
"#;

pub use super::FINISH;

/// The query set: index against sequential scans, join order and method, aggregates, `IN`
/// lists, `LIMIT` with `ORDER BY`, partial and multi-column index use.
pub const QUERIES: &[&str] = &[
    "SELECT * FROM orders WHERE customer_id = 1",
    "SELECT * FROM orders WHERE customer_id = 190000",
    "SELECT * FROM orders WHERE customer_id IN (1, 2, 3)",
    "SELECT * FROM orders WHERE customer_id IN (150001, 160002, 170003)",
    "SELECT * FROM orders WHERE status = 'cancelled'",
    "SELECT * FROM orders WHERE status = 'delivered'",
    "SELECT count(*) FROM orders WHERE status = 'shipped'",
    "SELECT * FROM orders WHERE status = 'pending' AND customer_id = 5",
    "SELECT customer_id FROM orders WHERE status IN ('pending', 'shipped') AND customer_id < 100",
    "SELECT * FROM orders WHERE created_at >= '2021-01-01' AND created_at < '2021-01-02'",
    "SELECT * FROM orders WHERE created_at >= '2020-06-01'",
    "SELECT * FROM orders ORDER BY created_at DESC LIMIT 20",
    "SELECT * FROM orders WHERE status = 'cancelled' ORDER BY created_at LIMIT 20",
    "SELECT * FROM orders WHERE channel = 'store' ORDER BY created_at LIMIT 20",
    "SELECT status, count(*) FROM orders GROUP BY status",
    "SELECT customer_id, count(*) FROM orders GROUP BY customer_id ORDER BY count(*) DESC LIMIT 10",
    "SELECT count(DISTINCT customer_id) FROM orders WHERE created_at < '2020-02-01'",
    "SELECT c.country, sum(o.total) FROM orders o JOIN customers c ON c.id = o.customer_id \
     GROUP BY c.country",
    "SELECT o.* FROM orders o JOIN customers c ON c.id = o.customer_id WHERE c.tier = 'platinum'",
    "SELECT o.* FROM orders o JOIN customers c ON c.id = o.customer_id \
     WHERE c.country = 'US' AND o.status = 'cancelled'",
    "SELECT * FROM customers WHERE country = 'X07'",
    "SELECT * FROM customers WHERE country = 'US'",
    "SELECT * FROM customers WHERE tier = 'gold' AND country = 'FR'",
    "SELECT * FROM customers WHERE signup_on BETWEEN '2020-01-01' AND '2020-01-31'",
    "SELECT c.id FROM customers c WHERE NOT EXISTS \
     (SELECT 1 FROM orders o WHERE o.customer_id = c.id)",
    "SELECT c.id FROM customers c WHERE EXISTS \
     (SELECT 1 FROM orders o WHERE o.customer_id = c.id AND o.status = 'cancelled')",
    "SELECT p.category, sum(i.qty) FROM order_items i JOIN products p ON p.id = i.product_id \
     GROUP BY p.category",
    "SELECT i.* FROM order_items i JOIN products p ON p.id = i.product_id WHERE p.category = 40",
    "SELECT * FROM order_items WHERE product_id = 19999",
    "SELECT * FROM order_items WHERE product_id = 1",
    "SELECT o.id, sum(i.qty) FROM orders o JOIN order_items i ON i.order_id = o.id \
     WHERE o.customer_id = 150000 GROUP BY o.id",
    "SELECT r.name, count(*) FROM regions r JOIN customers c ON c.region_id = r.id \
     JOIN orders o ON o.customer_id = c.id \
     WHERE o.created_at >= '2021-06-01' AND o.created_at < '2021-06-08' GROUP BY r.name",
    "SELECT * FROM products WHERE price > 999",
    "SELECT * FROM products WHERE discontinued",
    "SELECT * FROM products WHERE category = 3 ORDER BY price LIMIT 5",
    "SELECT * FROM events WHERE customer_id IS NULL",
    "SELECT * FROM events WHERE customer_id = 42",
    "SELECT * FROM events WHERE kind = 'refund' AND at >= '2023-03-01'",
    "SELECT * FROM open_orders WHERE customer_id = 3",
    "SELECT id FROM orders WHERE id BETWEEN 1000 AND 2000",
    "SELECT max(created_at) FROM orders",
    "SELECT * FROM orders o JOIN order_items i ON i.order_id = o.id WHERE o.id < 50",
];
