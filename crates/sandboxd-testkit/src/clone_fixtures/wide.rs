//! A second "production", written to break a clone rather than to flatter it (issue 32): a
//! ride-sharing fleet whose planner inputs are every kind a clone must carry: expression,
//! partial and multi-column indexes; GIN, GiST and BRIN indexes; a range-partitioned table with
//! a default partition and a list-partitioned one without; table inheritance (`inherited =
//! true` statistics on a parent that holds rows of its own); a materialized view; skewed and
//! correlated columns; `CREATE STATISTICS` objects (MCV list and functional dependencies, n-distinct,
//! an expression); per-column statistics targets above and below the default; columns of
//! types ANALYZE keeps no distribution for (`point`, `xml`); the database's own planner settings
//! (`ALTER DATABASE … SET`).
//!
//! Every table is small enough for ANALYZE to read it whole (the statistics targets see to it:
//! 300 × target rows are sampled), so production's statistics, and with them the plans, are the
//! same on every load: the figures and the list of known misses do not drift run to run.

use super::KnownMiss;

/// Loads the fleet (about 600k rows, a few seconds) into an empty database and sets the
/// database's planner settings (`ALTER DATABASE` of the current database, seen by new sessions);
/// then run [`FINISH`].
pub const LOAD: &str = r#"
SELECT setseed(0.17);

CREATE TABLE stations (
    id int PRIMARY KEY,
    zone int NOT NULL,
    name text NOT NULL,
    location point NOT NULL
);
INSERT INTO stations
SELECT g, g / 100, 'station-' || g, point(g % 60, g / 60)
FROM generate_series(1, 3000) g;
CREATE INDEX stations_location_gist ON stations USING gist (location);

CREATE TABLE customers (
    id int PRIMARY KEY,
    email text NOT NULL,
    country text NOT NULL,
    city text NOT NULL,
    plan text NOT NULL,
    tags text[] NOT NULL,
    home point NOT NULL,
    profile xml,
    signup_on date NOT NULL
);
INSERT INTO customers
SELECT g,
       CASE WHEN g % 8 = 0 THEN (ARRAY['Fleet@Ops.example', 'FLEET@ops.example'])[g % 2 + 1]
            ELSE 'Rider' || g || '@Mail.example' END,
       CASE WHEN city IN ('Berlin', 'Hamburg', 'Munich') THEN 'DE'
            WHEN city IN ('Paris', 'Lyon', 'Nice') THEN 'FR'
            WHEN city IN ('New York', 'Austin', 'Denver') THEN 'US'
            WHEN city IN ('Oslo', 'Bergen') THEN 'NO'
            ELSE 'L' || lpad((town / 5)::text, 2, '0') END,
       city,
       CASE WHEN g % 500 = 0 THEN 'enterprise' WHEN g % 9 = 0 THEN 'pro' ELSE 'free' END,
       CASE WHEN g % 1000 = 0 THEN ARRAY['vip', 'beta'] WHEN g % 3 = 0 THEN ARRAY['newsletter']
            ELSE ARRAY['newsletter', 'promo'] END,
       point(r * 100, (g % 100)),
       CASE WHEN g % 4 = 0 THEN xmlelement(name profile, xmlattributes(g AS id)) END,
       date '2015-01-01' + (CASE WHEN g % 10 < 7 THEN 1460 + g % 365 ELSE g % 3650 END)
FROM (
    SELECT g, r, town,
           CASE WHEN r < 0.20 THEN 'Berlin' WHEN r < 0.32 THEN 'Hamburg'
                WHEN r < 0.40 THEN 'Munich' WHEN r < 0.55 THEN 'Paris'
                WHEN r < 0.61 THEN 'Lyon' WHEN r < 0.65 THEN 'Nice'
                WHEN r < 0.75 THEN 'New York' WHEN r < 0.81 THEN 'Austin'
                WHEN r < 0.85 THEN 'Denver' WHEN r < 0.87 THEN 'Oslo'
                WHEN r < 0.88 THEN 'Bergen' ELSE 'Town-' || town END AS city
    FROM (SELECT g, r, floor((r - 0.88) * 2500)::int AS town
          FROM (SELECT g, random() AS r FROM generate_series(1, 60000) g) s) t
) c;
CREATE INDEX customers_lower_email ON customers (lower(email));
CREATE INDEX customers_country_city ON customers (country, city);
CREATE INDEX customers_plan ON customers (plan);
CREATE INDEX customers_tags_gin ON customers USING gin (tags);
CREATE INDEX customers_home_gist ON customers USING gist (home);
CREATE INDEX customers_signup ON customers (signup_on);
ALTER TABLE customers ALTER COLUMN city SET STATISTICS 1000;
ALTER TABLE customers ALTER COLUMN email SET STATISTICS 10;
CREATE STATISTICS customers_geo (mcv, dependencies) ON country, city FROM customers;
CREATE STATISTICS customers_geo_groups (ndistinct) ON country, city, plan FROM customers;
CREATE STATISTICS customers_signup_year ON (date_part('year', signup_on)) FROM customers;

CREATE TABLE trips (
    id bigint NOT NULL,
    customer_id int NOT NULL,
    station_id int NOT NULL,
    zone int NOT NULL,
    kind text NOT NULL,
    started_at timestamp NOT NULL,
    minutes int NOT NULL,
    attrs jsonb NOT NULL
) PARTITION BY RANGE (started_at);
CREATE TABLE trips_2025_01 PARTITION OF trips FOR VALUES FROM ('2025-01-01') TO ('2025-02-01');
CREATE TABLE trips_2025_02 PARTITION OF trips FOR VALUES FROM ('2025-02-01') TO ('2025-03-01');
CREATE TABLE trips_2025_03 PARTITION OF trips FOR VALUES FROM ('2025-03-01') TO ('2025-04-01');
CREATE TABLE trips_2025_04 PARTITION OF trips FOR VALUES FROM ('2025-04-01') TO ('2025-05-01');
CREATE TABLE trips_other PARTITION OF trips DEFAULT;
INSERT INTO trips
SELECT g, 1 + floor(power(random(), 4) * 59999)::int, s, s / 100,
       CASE WHEN r < 0.92 THEN 'ride' WHEN r < 0.995 THEN 'reserve' ELSE 'refund' END,
       CASE WHEN g % 20 = 0 THEN timestamp '2024-06-01' + g * interval '13 minutes'
            ELSE timestamp '2025-01-01' + g * interval '43 seconds' END,
       1 + (random() * 60)::int,
       CASE WHEN g % 200 = 0 THEN jsonb_build_object('promo', 'SPRING' || (g % 7), 'n', g)
            ELSE jsonb_build_object('n', g) END
FROM (SELECT g, random() AS r, 1 + floor(power(random(), 2) * 2999)::int AS s
      FROM generate_series(1, 240000) g) x;
ALTER TABLE trips ALTER COLUMN customer_id SET STATISTICS 1000;
CREATE INDEX trips_customer_started ON trips (customer_id, started_at);
CREATE INDEX trips_started_brin ON trips USING brin (started_at);
CREATE INDEX trips_refund_station ON trips (station_id) WHERE kind = 'refund';
CREATE INDEX trips_promo ON trips ((attrs ->> 'promo'));
CREATE INDEX trips_attrs_gin ON trips USING gin (attrs jsonb_path_ops);

CREATE TABLE payments (
    id bigint NOT NULL,
    customer_id int NOT NULL,
    method text NOT NULL,
    status text NOT NULL,
    amount numeric(10, 2) NOT NULL,
    paid_at timestamp NOT NULL
) PARTITION BY LIST (method);
CREATE TABLE payments_card PARTITION OF payments FOR VALUES IN ('card');
CREATE TABLE payments_cash PARTITION OF payments FOR VALUES IN ('cash');
CREATE TABLE payments_voucher PARTITION OF payments FOR VALUES IN ('voucher', 'gift');
INSERT INTO payments
SELECT g, 1 + floor(power(random(), 2) * 59999)::int,
       CASE WHEN r < 0.85 THEN 'card' WHEN r < 0.99 THEN 'cash' WHEN r < 0.998 THEN 'voucher'
            ELSE 'gift' END,
       CASE WHEN g % 250 = 0 THEN 'failed' WHEN g % 7 = 0 THEN 'refunded' ELSE 'settled' END,
       round((1 + random() * 80)::numeric, 2),
       timestamp '2025-01-01' + g * interval '90 seconds'
FROM (SELECT g, random() AS r FROM generate_series(1, 100000) g) x;
ALTER TABLE payments ALTER COLUMN customer_id SET STATISTICS 400;
CREATE INDEX payments_customer ON payments (customer_id);
CREATE INDEX payments_failed ON payments (paid_at) WHERE status = 'failed';
CREATE INDEX payments_paid ON payments (paid_at);

CREATE TABLE vehicles (id int PRIMARY KEY, station_id int NOT NULL, model text NOT NULL);
INSERT INTO vehicles SELECT g, 1 + g % 3000, CASE WHEN g % 50 = 0 THEN 'cargo' ELSE 'city' END
FROM generate_series(1, 4000) g;

CREATE TABLE maintenance (
    vehicle_id int NOT NULL,
    kind text NOT NULL,
    cost numeric(8, 2) NOT NULL,
    done_on date NOT NULL
);
CREATE TABLE maintenance_2024 () INHERITS (maintenance);
CREATE TABLE maintenance_2025 () INHERITS (maintenance);
INSERT INTO maintenance
SELECT 1 + g % 4000, 'inspection', 50, date '2023-06-01' + g % 200 FROM generate_series(1, 2000) g;
INSERT INTO maintenance_2024
SELECT 1 + floor(power(random(), 4) * 3999)::int,
       CASE WHEN g % 100 = 0 THEN 'recall-' || (g % 37) WHEN g % 3 = 0 THEN 'brakes' ELSE 'tyres' END,
       round((20 + random() * 300)::numeric, 2), date '2024-01-01' + g % 366
FROM generate_series(1, 25000) g;
INSERT INTO maintenance_2025
SELECT 1 + floor(power(random(), 4) * 3999)::int,
       CASE WHEN g % 100 = 0 THEN 'battery-' || (g % 41) WHEN g % 3 = 0 THEN 'brakes' ELSE 'tyres' END,
       round((20 + random() * 300)::numeric, 2), date '2025-01-01' + g % 200
FROM generate_series(1, 25000) g;
ALTER TABLE maintenance ALTER COLUMN vehicle_id SET STATISTICS 500;
CREATE INDEX maintenance_vehicle ON maintenance (vehicle_id);
CREATE INDEX maintenance_2024_vehicle ON maintenance_2024 (vehicle_id);
CREATE INDEX maintenance_2025_vehicle ON maintenance_2025 (vehicle_id);
CREATE INDEX maintenance_2025_kind ON maintenance_2025 (kind);
CREATE INDEX maintenance_2025_done ON maintenance_2025 (done_on);

CREATE TABLE reservations (
    id int PRIMARY KEY,
    vehicle_id int NOT NULL,
    during tsrange NOT NULL
);
INSERT INTO reservations
SELECT g, 1 + g % 4000,
       tsrange(timestamp '2025-01-01' + g * interval '5 minutes',
               timestamp '2025-01-01' + g * interval '5 minutes'
                 + CASE WHEN g % 100 = 0 THEN interval '20 days' ELSE interval '30 minutes' END)
FROM generate_series(1, 40000) g;
ALTER TABLE reservations ALTER COLUMN during SET STATISTICS 200;
CREATE INDEX reservations_during ON reservations USING gist (during);

CREATE MATERIALIZED VIEW station_daily AS
    SELECT station_id, started_at::date AS day, count(*) AS trips, sum(minutes) AS minutes
    FROM trips GROUP BY 1, 2;
ALTER MATERIALIZED VIEW station_daily ALTER COLUMN trips SET STATISTICS 600;
CREATE INDEX station_daily_station ON station_daily (station_id);
CREATE INDEX station_daily_trips ON station_daily (trips);

DO $$
BEGIN
    EXECUTE format('ALTER DATABASE %I SET random_page_cost = 1.5', current_database());
    EXECUTE format('ALTER DATABASE %I SET effective_cache_size = ''1GB''', current_database());
    EXECUTE format('ALTER DATABASE %I SET enable_partitionwise_aggregate = on', current_database());
    EXECUTE format('ALTER DATABASE %I SET enable_partitionwise_join = on', current_database());
END
$$;
"#;

pub use super::FINISH;

/// Correlated equality on `customers (country, city)`: the MCV list and functional dependency of
/// `customers_geo` estimate Bergen's ~600 rows; without them the planner multiplies the two
/// selectivities (~20 rows).
const BERGEN: &str = "SELECT * FROM customers WHERE country = 'NO' AND city = 'Bergen'";
/// The same correlation decides a join: ~1,200 Oslo customers with their trips, or ~35.
const OSLO_TRIPS: &str = "SELECT t.* FROM trips t JOIN customers c ON c.id = t.customer_id \
     WHERE c.country = 'NO' AND c.city = 'Oslo'";
/// `customers_signup_year`, statistics on an expression no index has: seven in ten customers
/// signed up in 2019; without them the predicate is the 0.5 % default.
const SIGNUP_YEAR: &str = "SELECT c.id, count(*) FROM customers c \
     JOIN payments p ON p.customer_id = c.id \
     WHERE date_part('year', c.signup_on) = 2019 GROUP BY c.id";

/// A rider with two trips: an Index Scan per partition, by a hair on the first one.
const RARE_RIDER: &str = "SELECT * FROM trips WHERE customer_id = 50000";
/// A payer with two payments: likewise on the card payments' partition.
const RARE_PAYER: &str = "SELECT * FROM payments WHERE customer_id = 59000";

/// The queries whose plans depend on what the clone carried, by what they probe. All but the
/// few marked otherwise plan differently on a copy without statistics (checked on production by
/// deleting `pg_statistic` in a rolled-back transaction when the set was chosen).
pub const QUERIES: &[&str] = &[
    // Expression indexes: the index's own statistics row (`lower(email)` is nearly unique, but
    // one address in eight is the fleet's, in two spellings).
    "SELECT * FROM customers WHERE lower(email) = 'rider77@mail.example'",
    "SELECT c.id, count(*) FROM customers c JOIN payments p ON p.customer_id = c.id \
     WHERE lower(c.email) = 'fleet@ops.example' GROUP BY c.id",
    "SELECT * FROM trips WHERE attrs ->> 'promo' = 'SPRING3'",
    "SELECT t.id, c.plan FROM trips t JOIN customers c ON c.id = t.customer_id \
     WHERE t.attrs ->> 'promo' = 'SPRING3'",
    // Skew: rare and frequent values of one column.
    "SELECT * FROM customers WHERE plan = 'enterprise'",
    "SELECT * FROM customers WHERE plan = 'free'",
    "SELECT * FROM customers WHERE country IN ('DE', 'FR', 'US')",
    "SELECT * FROM customers WHERE signup_on BETWEEN '2019-01-01' AND '2019-12-31'",
    // GIN on an array: element statistics (`vip` is rare, the others common). The rare one
    // plans alike without statistics.
    "SELECT * FROM customers WHERE tags @> ARRAY['vip']",
    "SELECT * FROM customers WHERE tags @> ARRAY['promo']",
    "SELECT * FROM customers WHERE tags @> ARRAY['newsletter']",
    // GiST on `point` and a predicate on `xml`: types without a distribution, estimated by
    // fixed selectivities on production as on any copy; the clone must not break them.
    "SELECT * FROM customers WHERE home <@ box '((0,0),(10,10))'",
    "SELECT id FROM customers WHERE xpath_exists('/profile[@id=400]', profile)",
    // Extended statistics.
    BERGEN,
    OSLO_TRIPS,
    SIGNUP_YEAR,
    // A group count from n-distinct (the three columns' own and `customers_geo_groups`).
    "SELECT g.*, s.id FROM (SELECT country, city, plan, count(*) n FROM customers \
     GROUP BY 1, 2, 3) g JOIN stations s ON s.name = g.city",
    // The range-partitioned table: BRIN within one partition, the default partition, the
    // partitioned table's own (`inherited`) statistics for a group count, multi-column and
    // partial indexes per partition, `LIMIT` over a merge of partitions.
    "SELECT * FROM trips WHERE started_at >= '2025-02-10' AND started_at < '2025-02-11'",
    "SELECT * FROM trips WHERE started_at >= '2030-01-01'",
    "SELECT customer_id, count(*) FROM trips GROUP BY customer_id",
    RARE_RIDER,
    "SELECT * FROM trips WHERE customer_id = 50000 AND started_at >= '2025-03-01'",
    "SELECT * FROM trips WHERE kind = 'refund' AND station_id = 7",
    "SELECT * FROM trips WHERE kind = 'refund'",
    "SELECT * FROM trips WHERE customer_id = 2 ORDER BY started_at LIMIT 5",
    // The list-partitioned table without a default partition.
    "SELECT * FROM payments WHERE status = 'failed' AND paid_at >= '2025-02-01'",
    RARE_PAYER,
    "SELECT * FROM payments WHERE paid_at >= '2025-04-14'",
    "SELECT c.email, p.amount FROM customers c JOIN payments p ON p.customer_id = c.id \
     WHERE p.paid_at >= '2025-04-14'",
    "SELECT c.plan, sum(p.amount) FROM payments p JOIN customers c ON c.id = p.customer_id \
     WHERE p.method = 'voucher' GROUP BY c.plan",
    // Inheritance: the parent's rows alone (`ONLY`), each child's statistics, and the parent's
    // `inherited = true` row for a semi-join's group count.
    "SELECT * FROM maintenance WHERE vehicle_id = 1",
    "SELECT * FROM maintenance WHERE vehicle_id = 3900",
    "SELECT * FROM ONLY maintenance WHERE vehicle_id = 7",
    "SELECT * FROM maintenance WHERE kind = 'battery-3'",
    "SELECT v.station_id, m.cost FROM vehicles v JOIN maintenance m ON m.vehicle_id = v.id \
     WHERE v.id < 20 ORDER BY m.cost LIMIT 10",
    "SELECT c.email FROM customers c WHERE c.id IN (SELECT vehicle_id FROM maintenance)",
    // A range column under GiST: range histograms.
    "SELECT * FROM reservations WHERE during && tsrange('2025-01-01', '2025-03-01')",
    // The materialized view's statistics.
    "SELECT * FROM station_daily WHERE trips > 50",
    "SELECT s.name, d.trips FROM station_daily d JOIN stations s ON s.id = d.station_id \
     WHERE d.trips > 60",
];

/// The statistics objects whose contents no PostgreSQL 18 tool exports or restores: a clone
/// has the objects (they are schema) but not their data until sandboxd rebuilds it.
pub const STATISTICS_OBJECTS: &[&str] = &[
    "public.customers_geo",
    "public.customers_geo_groups",
    "public.customers_signup_year",
];

/// The queries production plans otherwise without the data of [`STATISTICS_OBJECTS`] (the
/// clone test checks it): what a rebuild of extended statistics must get right.
pub const DECIDED_BY_EXTENDED_STATISTICS: &[&str] = &[BERGEN, OSLO_TRIPS, SIGNUP_YEAR];

/// The queries a keep-values clone plans otherwise than production where extended statistics
/// cannot be rebuilt. Production planning without those objects (dropped in a rolled-back
/// transaction) picks the clone's plan for each. BERGEN left this list when the rebuild landed
/// (the rebuilt `customers_geo` gives its estimate exactly), SIGNUP_YEAR when expression
/// statistics did (`customers_signup_year`).
pub const EXTENDED_STATS_MISSES: &[KnownMiss] = &[];

/// The queries a keep-values clone plans otherwise although the extended statistics that
/// decide them on production were rebuilt, and it estimates otherwise. None since most-common
/// values lists are rebuilt with exact frequencies: OSLO_TRIPS, here while they were sampled,
/// is now an index-height miss.
pub const REBUILT_STATISTICS_MISSES: &[KnownMiss] = &[];

/// The queries a keep-values clone plans otherwise because its B-tree indexes are empty: an
/// index's height is read from its metapage, not from the statistics, and an empty index has
/// height 0 where production's have 1. The descent costs `(height + 1) × 50 ×
/// cpu_operator_cost` (an Index Scan's startup cost is 0.17 on the clone, 0.29 on production),
/// which tips a near-tie between an Index Scan and a Bitmap Heap Scan of one partition, or
/// makes a nested loop over five partitions' Index Scans cheaper than a hash join. The clone
/// estimates the same rows; no statistics import can set a height.
pub const INDEX_HEIGHT_MISSES: &[KnownMiss] = &[
    KnownMiss {
        query: OSLO_TRIPS,
        reason: "index height: the same estimates as production (1,227 Oslo customers, 4,908 \
                 trips), but each partition's empty customer_id index has height 0 (startup \
                 cost 0.17 where production's is 0.29), so a nested loop over them costs less \
                 than production's hash join",
    },
    KnownMiss {
        query: RARE_RIDER,
        reason: "index height: the clone's empty trips_2025_01_customer_id_started_at_idx has \
                 height 0 (production's 1), and the cheaper descent makes its Index Scan a \
                 Bitmap Heap Scan; same row estimates",
    },
    KnownMiss {
        query: RARE_PAYER,
        reason: "index height: the clone's empty payments_card_customer_id_idx has height 0 \
                 (production's 1), and the cheaper descent makes its Index Scan a Bitmap Heap \
                 Scan; same row estimates",
    },
];

/// Every miss a keep-values clone is known to have, and why.
pub const KNOWN_MISSES: &[KnownMiss] = &[
    INDEX_HEIGHT_MISSES[0],
    INDEX_HEIGHT_MISSES[1],
    INDEX_HEIGHT_MISSES[2],
];
